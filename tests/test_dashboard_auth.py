"""Who sees what, over plain HTTP against the running app (Flask test client and a real waitress server).

For every callback the app registers, requests crafted as user alice with another user's (bob's)
name, project, partition or job id must answer exactly as they do for a name that does not exist:
no rows, no totals, no error text that tells them apart. The same requests sent as bob himself
do differ, which shows the comparison can fail. The projects have budgets: alice sees her
project's, never bob's.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import threading
import urllib.error
import urllib.request

import pytest
from conftest import post_callback, require_service
from test_dashboard_queries import build_db

from jobsight.analytics.config import parse_config
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard import common
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, AuthError, Roles, hash_password, load_users_file, parse_coordinators, verify_password

ROLES = {"admins": ["root"], "leads": {"proj-a": ["dave"]}}

# bob's values, and stand-ins that exist nowhere; answers must not tell them apart
B = {"user": "bob", "account": "proj-b", "partition": "gpu", "job": "2"}
GHOST = {"user": "ghost-user", "account": "ghost-proj", "partition": "ghost-part", "job": "ghost-job"}
B_DATA_MARKERS = ["onerror", "GPU-0000", "GPU utilisation 10.0%", "idle GPUs", "proj-b", "500.0"]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    db = build_db(tmp_path_factory.mktemp("auth") / "jobs.duckdb")
    Database.open(db, parse_config({"budgets": {"proj-a": 100, "proj-b": 200, "proj-b/bob": 50}})).close()
    publish(db)
    reader = SnapshotReader(db)
    a = create_app(reader, Auth("header", Roles.from_config(ROLES)))
    yield a
    reader.close()


def values_for(prop: str, v: dict, partition_too: bool = True):
    """A crafted value for an input or state, aimed at the values in ``v``."""
    cid, _, name = prop.partition(".")
    if cid == "url" and name == "pathname":
        return None  # filled per scenario
    if cid == "url" and name == "search":
        return "?" + "&".join([f"cluster=c1&id={v['job']}", f"name={v['user']}", f"user={v['user']}",
                               f"account={v['account']}"])
    if name == "start_date" or name == "end_date":
        return None
    if cid.endswith("-user"):
        return v["user"]
    if cid.endswith("-account"):
        return v["account"]
    if cid.endswith("-partition"):
        return v["partition"] if partition_too else None
    if cid.endswith("-grain"):
        return "day"
    if cid.endswith("-stack"):
        return "account"
    if cid.endswith(("-code", "-severity", "-state")) or name in ("n_clicks", "n_submit"):
        return None
    if cid == "jobs-page":
        return 0
    if cid == "search-box":
        return v["job"]
    if cid == "job-key":
        return {"cluster": "c1", "id": v["job"]}
    if cid in ("us-name", "ov-name"):
        return v["user"]
    if cid == "pj-name":
        return v["account"]
    raise AssertionError(f"no crafted value for {prop}")


def call(client, key: str, spec: dict, v: dict, user: str, pathname: str | None = None, partition_too=True):
    def value_of(prop):
        return pathname if prop in ("url.pathname", "moved.data") else values_for(prop, v, partition_too)
    r = post_callback(client, key, spec, value_of, user)
    assert r.status_code in (200, 204), (key, r.status_code, r.data[:300])
    return r.data.decode()


def normalise(text: str) -> str:
    for k in ("user", "account", "partition", "job"):
        text = text.replace(GHOST[k], B[k])
    return text


def server_callbacks(app) -> dict:
    """The callbacks the server runs (a clientside one runs in the browser: no request reaches it)."""
    return {k: spec for k, spec in app.callback_map.items() if "callback" in spec}


def scenarios(app):
    for key, spec in server_callbacks(app).items():
        paths = ["/job", "/user", "/project", "/flagged", "/users", "/projects", "/jobs", "/running", "/"] \
            if any(i["id"] == "url" and i["property"] == "pathname" for i in spec["inputs"]) else [None]
        for path in paths:
            for partition_too in (True, False):
                yield key, spec, path, partition_too


def test_every_callback_is_covered(app):
    # router 1 + overview 3 x 1 + users/projects 2 x 2 + flagged 2 + my jobs 2 + job 1 + search 1
    # + running now 2 + the shell's "data up to" 1 + jobs to fix 3 (overview, project, My jobs)
    assert len(server_callbacks(app)) == 20
    # in the browser: the 9 grids' CSV downloads (2 of budgets, the project's members; the jobs to
    # fix tables download through a data: link), closing the search results, the overview's 3
    # addresses (the controls' values as the query string), a move to another page
    assert len(app.callback_map) - 20 == 14


def test_crafted_requests_for_another_users_data_reveal_nothing(app):
    client = app.server.test_client()
    differ_for_bob = 0
    for key, spec, path, partition_too in scenarios(app):
        as_alice = call(client, key, spec, B, "alice", path, partition_too)
        ghost = call(client, key, spec, GHOST, "alice", path, partition_too)
        assert as_alice == normalise(ghost), f"{key} {path}: alice's answer for bob's data differs from a ghost's"
        # url.search / url.href callbacks only turn the request's own inputs into a URL (an echo)
        for marker in ([] if key.startswith("url.") else B_DATA_MARKERS):
            assert marker not in as_alice, f"{key} {path}: {marker!r} leaked"
        assert "Traceback" not in as_alice
        if as_alice != call(client, key, spec, B, "bob", path, partition_too):
            differ_for_bob += 1
    # bob himself sees his data in the content callbacks (so the comparison above can fail)
    assert differ_for_bob >= 8


def test_lead_sees_own_project_not_others(app):
    client = app.server.test_client()
    spec = app.callback_map["job-content.children"]
    assert "prep" in call(client, "job-content.children", spec, dict(B, job="1"), "dave")    # proj-a
    assert "No such job" in call(client, "job-content.children", spec, B, "dave")             # proj-b
    assert "onerror" in call(client, "job-content.children", spec, B, "root")                 # admin


def test_job_name_is_text_never_html(app):
    client = app.server.test_client()
    out = call(client, "job-content.children", app.callback_map["job-content.children"], B, "bob")
    doc = json.loads(out)
    names = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "Td" and "onerror" in str(node["props"].get("children")):
                names.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(doc)
    assert names and names[0]["props"]["children"] == '<img src=x onerror="alert(1)">'   # a plain string child
    assert "dangerously_allow_html" not in out and "Markdown" not in out


def test_header_from_untrusted_address_is_refused(app):
    client = app.server.test_client()
    r = client.get("/", headers={"X-Forwarded-User": "root"}, environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert r.status_code == 403
    r = client.post("/_dash-update-component", data="{}", content_type="application/json",
                    headers={"X-Forwarded-User": "root"}, environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert r.status_code == 403
    assert client.get("/", headers={"X-Forwarded-User": "<script>"}).status_code == 403
    assert client.get("/").status_code == 403                              # no user at all


def test_callback_errors_are_plain_messages(app, monkeypatch):
    client = app.server.test_client()

    def boom(*a, **k):
        raise RuntimeError("secret detail /etc/passwd")
    monkeypatch.setattr("jobsight.analytics.queries.summaries.totals", boom)
    out = call(client, "ov-content.children", app.callback_map["ov-content.children"], B, "root")
    assert common.ERROR_TEXT in out and "secret detail" not in out and "Traceback" not in out


def test_start_refusals():
    roles = Roles.from_config(ROLES)
    with pytest.raises(AuthError, match="only allowed on 127.0.0.1"):
        Auth("none", roles, host="0.0.0.0")
    with pytest.raises(AuthError, match="needs --trusted-proxy"):
        Auth("header", roles, host="0.0.0.0")
    Auth("header", roles, host="0.0.0.0", trusted_proxies=["10.0.0.5"])
    with pytest.raises(AuthError, match="needs --users-file"):
        Auth("basic", roles)
    with pytest.raises(AuthError, match="unknown key roles.lead"):
        Roles.from_config({"lead": {}})


def test_roles_from_config_and_sacctmgr():
    r = Roles.from_config(ROLES)
    assert r.scope_for("root").role == "admin"
    assert r.scope_for("dave").accounts == ("proj-a",) and r.scope_for("dave").role == "lead"
    assert r.scope_for("alice").role == "user"
    coord = parse_coordinators("proj-b|erin\nproj-c|erin\n\nbad line\n")
    assert coord == {"erin": {"proj-b", "proj-c"}}
    r2 = Roles(coordinators=lambda: coord)
    assert r2.scope_for("erin").accounts == ("proj-b", "proj-c")


def test_password_hashes_and_users_file(tmp_path):
    h = hash_password("correct horse")
    assert h.startswith("scrypt$") and verify_password("correct horse", h) and not verify_password("wrong", h)
    # pbkdf2 entries (e.g. from another tool) work too: sha256, 1000 iterations, salt 'salt'
    import hashlib
    dk = base64.b64encode(hashlib.pbkdf2_hmac("sha256", b"pw123456", b"salt", 1000)).decode()
    assert verify_password("pw123456", f"pbkdf2_sha256$1000${base64.b64encode(b'salt').decode()}${dk}")
    f = tmp_path / "users"
    f.write_text(f"# users\nalice:{h}\n\nbob:nonsense\n")
    with pytest.raises(AuthError, match=r"users:4: expected"):
        load_users_file(f)


def test_basic_auth_over_a_real_server(tmp_path):
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    import waitress.server as waitress
    db = build_db(tmp_path / "jobs.duckdb")
    users = {"alice": hash_password("alice-pass"), "bob": hash_password("bob-pass")}
    reader = SnapshotReader(db)          # no snapshot published: the database itself, read-only
    app = create_app(reader, Auth("basic", Roles.from_config(ROLES), users=users))
    server = waitress.create_server(app.server, host="127.0.0.1", port=0, threads=2)
    port = server.effective_port
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    try:
        def post(user, password, key, spec_values):
            spec = app.callback_map[key]
            body = {"output": key, "outputs": {"id": key.split(".")[0], "property": key.split(".")[1]},
                    "inputs": [{"id": i["id"], "property": i["property"], "value": spec_values} for i in spec["inputs"]],
                    "state": [], "changedPropIds": []}
            req = urllib.request.Request(f"http://127.0.0.1:{port}/_dash-update-component",
                                         data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            if user:
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                req.add_header("Authorization", f"Basic {token}")
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, ""
        key = "job-content.children"
        assert post(None, None, key, {"cluster": "c1", "id": "2"})[0] == 401
        assert post("alice", "bob-pass", key, {"cluster": "c1", "id": "2"})[0] == 401
        status, body = post("alice", "alice-pass", key, {"cluster": "c1", "id": "2"})
        assert status == 200 and "No such job" in body and "onerror" not in body
        status, body = post("bob", "bob-pass", key, {"cluster": "c1", "id": "2"})
        assert status == 200 and "onerror" in body
    finally:
        server.close()
        reader.close()


def test_proxy_secret_is_required_when_configured():
    auth = Auth("header", Roles.from_config(ROLES), proxy_secret="s3cret-s3cret-s3cret")
    env = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_USER": "root"}
    assert auth.identify(env).status == 403                       # a local process without the secret
    assert auth.identify({**env, "HTTP_X_JOBSIGHT_PROXY_SECRET": "wrong"}).status == 403
    assert auth.identify({**env, "HTTP_X_JOBSIGHT_PROXY_SECRET": "s3cret-s3cret-s3cret"}) == "root"
    with pytest.raises(AuthError, match="only used with --auth header"):
        Auth("none", Roles(), proxy_secret="s3cret-s3cret-s3cret")
