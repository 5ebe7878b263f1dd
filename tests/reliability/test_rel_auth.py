"""Authorization over real HTTP: `jobsight dashboard` served by waitress on 127.0.0.1 (free ports),
requests written byte by byte on sockets (so duplicated, oddly cased or NUL-carrying headers and
paths reach the server as sent), and a database seeded with a distinctive marker per user.

1. Every Dash callback, read from the app's own `/_dash-dependencies` (a new callback is swept
   without editing this file; an input the sweep cannot classify fails it): each input or state
   that can carry a user, project, partition, job id or date gets another user's value, an admin's
   value and "widening" values (wildcards, SQL, wrong types), as a plain user and as a project
   lead. The answer must hold none of the other users' markers that the request did not itself
   carry, and must equal, string for string, the answer for names that exist nowhere.
2. Every route of the app's URL map is classified; every file-serving one gets path traversal
   (../, %2e%2e%2f, ..%5c, double encoding, overlong UTF-8, absolute paths, NUL bytes, symlinks
   planted in the assets folder): no planted secret, config, source or system file is served.
3. `--auth header` reached around the trusted proxy (another source address, no or a wrong proxy
   secret) with tampered, duplicated, oddly cased, empty, lookalike and admin user headers;
   `--auth basic` with wrong, missing and malformed credentials.
4. The admin-wide views (users and projects tables, flagged jobs, filter options) as a plain user,
   a project lead and the admin: exactly the rows of their scope (sets worked out by hand below).

Every request with its expectation counts as one check; the module prints the total.
"""
from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import re
import secrets
import socket
import subprocess
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, jobsight_cmd
from test_dashboard_queries import add_job, add_samples

GiB = 2**30
DAY0 = dt.datetime(2026, 11, 16, 10, 0, 0)
PROXY = "127.0.0.2"          # the trusted proxy's source address (any 127/8 address is local on Linux)
NOT_PROXY = "127.0.0.1"


# --- the seeded cluster: every name is a marker that occurs nowhere else ----------------------

@dataclass(frozen=True)
class Person:
    user: str
    accounts: tuple[str, ...]       # the first is the one crafted requests use
    partition: str
    day: str                        # the only day this person's jobs ran (UTC)
    jobs: tuple[tuple[str, str, str, str], ...]   # (job_id as printed, job_id_raw, job name, node list)
    extra: tuple[str, ...] = ()     # other strings only this person's data carries (GPU UUIDs)

    @property
    def markers(self) -> set[str]:
        out = {self.user, *self.accounts, self.partition, *self.extra}
        for printed, raw, name, nodes in self.jobs:
            out |= {printed, raw, name, nodes}
        return out


ALICE = Person("u-alice-a3", ("acct-alice-a3",), "part-alice-a3", "2026-11-16",
               (("7100011", "7100011", "jn-alice-a3", "nd-alice-a3"),))
BOB = Person("u-bob-q7", ("acct-bob-q7",), "part-bob-q7", "2026-11-18",
             (("7200021", "7200021", "jn-bob-q7-gpu", "nd-bob-q7-01"),
              ("7200031_4", "7200035", "jn-bob-q7-arr", "nd-bob-q7-02")), extra=("GPU-bobq7-uuid",))
# carol leads acct-lead-k2 (dave's project too) and also runs jobs in a project of her own
CAROL = Person("u-carol-k2", ("acct-carol-k2", "acct-lead-k2"), "part-carol-k2", "2026-11-17",
               (("7300041", "7300041", "jn-carol-k2-own", "nd-carol-k2-01"),
                ("7300042", "7300042", "jn-carol-k2-lead", "nd-carol-k2-02")))
DAVE = Person("u-dave-m4", ("acct-lead-k2",), "part-dave-m4", "2026-11-17",
              (("7400051", "7400051", "jn-dave-m4", "nd-dave-m4"),))
ROOT_ = Person("u-root-z9", ("acct-root-z9",), "part-root-z9", "2026-11-19",
               (("7500061", "7500061", "jn-root-z9", "nd-root-z9"),))
PEOPLE = (ALICE, BOB, CAROL, DAVE, ROOT_)
ROLES_TOML = f"""
[roles]
admins = ["{ROOT_.user}"]
leads = {{ "acct-lead-k2" = ["{CAROL.user}"] }}
"""
# who sees whom (docs/dashboard.md, "Who sees what"): a lead sees its own jobs and all jobs of the accounts it leads
VISIBLE = {ALICE.user: {ALICE}, BOB.user: {BOB}, DAVE.user: {DAVE}, CAROL.user: {CAROL, DAVE},
           ROOT_.user: set(PEOPLE)}
# a stand-in that exists nowhere; answers to it and to a real outsider must not differ
GHOST = Person("g-user-x0", ("g-acct-x0",), "g-part-x0", "2031-03-05",
               (("9990001_4", "9990005", "-", "-"),))


def forbidden(viewer: str) -> set[str]:
    seen = set().union(*(p.markers for p in VISIBLE[viewer]))
    return set().union(*(p.markers for p in PEOPLE if p not in VISIBLE[viewer])) - seen


def seed(db: Path) -> None:
    from jobsight.analytics.config import parse_config
    from jobsight.analytics.session import open_db
    con, _ = open_db(db, parse_config({}))
    for p in PEOPLE:
        start = dt.datetime.fromisoformat(p.day) + dt.timedelta(hours=10)
        for i, (printed, raw, name, nodes) in enumerate(p.jobs):
            account = p.accounts[-1] if p is CAROL and i == 1 else p.accounts[0]
            kw = dict(job_id_raw=raw, user=p.user, account=account, partition=p.partition, start_time=start,
                      job_name=name, node_list=nodes, elapsed_s=3600, timelimit_s=7200, ncpus=4, billing=4,
                      cpu_time_s=1800, mem_alloc_bytes=8 * GiB, mem_peak_bytes=GiB)   # CPU 12.5 %: flagged
            if "_" in printed:
                kw.update(array_job_id=printed.split("_")[0], array_task_id=printed.split("_")[1])
            if p is BOB and i == 0:
                kw.update(ngpus=1, billing=100, cpu_time_s=4 * 3600)
            add_job(con, printed, **kw)
            if p is BOB and i == 0:
                add_samples(con, raw, "GPU-bobq7-uuid", [10, 10], [30e9, 30e9], 40e9, start=start, gpu_index=0)
                add_samples(con, raw, "cpu", [50, 70], [GiB, GiB], 8 * GiB, start=start)
    con.close()


# --- raw HTTP ---------------------------------------------------------------------------------

class Checks:
    """Counts expectations (each about one request's answer) and requests; ``expect`` asserts with
    the request in the message."""
    n = failed = requests = 0
    lock = threading.Lock()

    @classmethod
    def expect(cls, ok: bool, what: str) -> None:
        cls.n += 1
        cls.failed += not ok
        assert ok, what


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str


def http(port: int, target: str | bytes, method: str = "GET", headers=(), body: bytes = b"",
         source: str = PROXY) -> Reply:
    """One HTTP/1.0 request from ``source``, sent exactly as given (headers as (name, value) pairs)."""
    with Checks.lock:
        Checks.requests += 1
    tgt = target if isinstance(target, bytes) else target.encode("utf-8")
    lines = [method.encode() + b" " + tgt + b" HTTP/1.0", b"Host: 127.0.0.1"]
    for k, v in headers:
        lines.append(k.encode("latin-1") + b": " + (v if isinstance(v, bytes) else v.encode("utf-8")))
    if body:
        lines += [b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
    with socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0)) as s:
        s.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, payload = raw.partition(b"\r\n\r\n")
    status_line, *hdr_lines = head.decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in hdr_lines)}
    return Reply(int(status_line.split(" ", 2)[1]), hdrs, payload.decode("utf-8", "replace"))


# --- the servers --------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PASSWORDS = {ALICE.user: "alice-pass-a3", CAROL.user: "pa:ss:wo:rd-k2", ROOT_.user: "root-pass-z9"}


@dataclass
class Env:
    dir: Path
    db: Path
    config: Path
    secret: str
    header_port: int
    basic_port: int
    file_markers: dict[str, str]     # marker -> file it comes from (must never be served)
    planted: Path

    logs: list[Path]

    def as_user(self, user: str) -> list[tuple[str, str]]:
        """Headers of a request the trusted proxy forwards for ``user``."""
        return [("X-Forwarded-User", user), ("X-Jobsight-Proxy-Secret", self.secret)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from jobsight.analytics.snapshot import publish
    from jobsight.dashboard.auth import hash_password
    d = tmp_path_factory.mktemp("relauth")
    db = d / "jobs.duckdb"
    seed(db)
    publish(db)
    tag = secrets.token_hex(6)
    config = d / "jobsight.toml"
    config.write_text(f"# CONFIG-MARKER-{tag}\n{ROLES_TOML}", encoding="utf-8")
    planted = d / "secret.txt"
    planted.write_text(f"PLANTED-SECRET-{tag}\n", encoding="utf-8")
    secret = f"PROXY-SECRET-{tag}-{secrets.token_hex(8)}"
    (d / "proxy-secret").write_text(secret + "\n", encoding="utf-8")
    users = d / "users.txt"
    users.write_text("".join(f"{u}:{hash_password(pw)}\n" for u, pw in PASSWORDS.items()), encoding="utf-8")
    header_port, basic_port = _free_port(), _free_port()
    common = [*jobsight_cmd(), "dashboard", "--db", str(db), "--config", str(config), "--host", "127.0.0.1",
              "--threads", "4"]
    logs = [d / "header-server.log", d / "basic-server.log"]
    outs = [log.open("w") for log in logs]
    procs = [subprocess.Popen(common + opts, cwd=d, stdout=subprocess.DEVNULL, stderr=out)
             for opts, out in zip([["--port", str(header_port), "--auth", "header", "--trusted-proxy", PROXY,
                                    "--proxy-secret-file", str(d / "proxy-secret")],
                                   ["--port", str(basic_port), "--auth", "basic", "--users-file", str(users)]], outs)]
    try:
        for port, proc, log in zip((header_port, basic_port), procs, logs):
            deadline = time.monotonic() + 60
            while True:
                try:
                    http(port, "/_alive", source=NOT_PROXY)
                    break
                except OSError:
                    assert proc.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, "dashboard did not start"
                    time.sleep(0.2)
        markers = {f"PLANTED-SECRET-{tag}": str(planted), f"CONFIG-MARKER-{tag}": str(config),
                   secret: "proxy secret file", "scrypt$": str(users), "root:x:0:0": "/etc/passwd",
                   "def verify_password": "dashboard/auth.py", "[tool.pytest.ini_options]": "pyproject.toml",
                   "class Dash(": "dash/dash.py"}
        yield Env(d, db, config, secret, header_port, basic_port, markers, planted, logs)
    finally:
        for proc in procs:
            proc.terminate()
        for proc, out in zip(procs, outs):
            proc.wait(timeout=30)
            out.close()
        print(f"\nauthorization: {Checks.n} checks over {Checks.requests} HTTP requests, {Checks.failed} failed")


# --- 1. every callback ----------------------------------------------------------------------------

# What each input or state of a callback can carry, by "id.property". An input nobody classified
# fails the sweep: a new kind of input needs a line here (and crafted values below).
KINDS = [
    (r"^url\.pathname$", "path"), (r"^url\.search$", "search"),
    (r"-period\.(start|end)_date$", "date"),
    (r"-user\.value$", "user"), (r"-account\.value$", "account"), (r"-partition\.value$", "partition"),
    (r"-name\.data$", "name"), (r"^job-key\.data$", "job"),
    (r"-table\.derived_viewport_data$", "rows"),
    # these carry no identity: which row was clicked, chart grain and stacking, flag codes and severities
    (r"-table\.active_cell$", "cell"), (r"-(grain|stack)\.value$", None), (r"-(code|severity)\.value$", None),
]
# callbacks none of whose inputs can name a user, project, partition, job or date (none today)
NO_IDENTIFYING_INPUT: frozenset[str] = frozenset()
PAGES = ["/", "/user", "/project", "/users", "/projects", "/flagged", "/job", "/no-such-page"]


def kind_of(prop: str) -> str | None:
    for pattern, kind in KINDS:
        if re.search(pattern, prop):
            return kind
    Checks.expect(False, f"input {prop!r} is not classified for the authorization sweep: add it to KINDS")


def crafted(kind: str, p: Person) -> list:
    """Values aimed at person ``p``'s data for an input of ``kind``."""
    printed, raw = p.jobs[0][:2]
    arr = p.jobs[-1][0]
    return {
        "date": [p.day],
        "user": [p.user], "account": [p.accounts[0]], "partition": [p.partition],
        "name": [p.user, p.accounts[0]],
        "job": [{"cluster": "c1", "id": raw}, {"cluster": None, "id": arr}],
        "rows": [[{"name": p.user, "cluster": "c1", "job_id_raw": raw, "job_id": printed}],
                 [{"name": p.accounts[0], "cluster": "c1", "job_id_raw": raw}]],
        "search": ["?" + urllib.parse.urlencode(q) for q in (
            {"user": p.user, "account": p.accounts[0], "partition": p.partition, "since": p.day, "until": p.day},
            {"name": p.user}, {"name": p.accounts[0]}, {"cluster": "c1", "id": raw}, {"id": arr})],
    }[kind]


WILD = ["%", "*", "' OR '1'='1' --", "", [BOB.user, ALICE.user, BOB.accounts[0]], {"user": BOB.user}, 1]


def widened(kind: str, w) -> object:
    if kind in ("user", "account", "partition", "name", "date"):
        return w
    if kind == "job":
        return {"cluster": w, "id": w}
    if kind == "rows":
        return [{"name": w, "cluster": w, "job_id_raw": w}]
    if kind == "search":
        return "?" + urllib.parse.urlencode({k: w for k in ("user", "account", "partition", "name", "id", "cluster",
                                                            "since")}, doseq=True)
    raise AssertionError(kind)


NEUTRAL = {"cell": {"row": 0, "column": 0, "column_id": "name"}}


def outputs_of(key: str):
    parts = key[2:-2].split("...") if key.startswith("..") else [key]
    outs = [{"id": o.partition(".")[0], "property": o.partition(".")[2]} for o in parts]
    return outs if key.startswith("..") else outs[0]


def body_for(dep: dict, values: dict[str, object]) -> bytes:
    def item(d):
        prop = f"{d['id']}.{d['property']}"
        return {"id": d["id"], "property": d["property"], "value": values.get(prop)}
    return json.dumps({"output": dep["output"], "outputs": outputs_of(dep["output"]),
                       "inputs": [item(i) for i in dep["inputs"]], "state": [item(s) for s in dep["state"]],
                       "changedPropIds": [f"{i['id']}.{i['property']}" for i in dep["inputs"][:1]]}).encode()


def requests_for(dep: dict, victim: Person):
    """(label, values aimed at ``victim``, the same aimed at GHOST) for one callback: each identifying
    input alone, then all of them together; every page when the callback reads the path."""
    props = [f"{d['id']}.{d['property']}" for d in dep["inputs"] + dep["state"]]
    kinds = {p: kind_of(p) for p in props}
    base = {p: NEUTRAL.get(k) for p, k in kinds.items()}
    ident = [p for p, k in kinds.items() if k not in (None, "cell", "path")]
    if not ident:
        Checks.expect(dep["output"] in NO_IDENTIFYING_INPUT, f"callback {dep['output']} has no identifying input: "
                      "list it in NO_IDENTIFYING_INPUT or classify its inputs")
    paths = [p for p, k in kinds.items() if k == "path"]
    for page in (PAGES if paths else [None]):
        page_vals = {paths[0]: page} if paths else {}
        for prop in ident:
            for i, (v, g) in enumerate(zip(crafted(kinds[prop], victim), crafted(kinds[prop], GHOST))):
                yield f"{prop}#{i} page={page}", {**base, **page_vals, prop: v}, {**base, **page_vals, prop: g}
        if len(ident) > 1:
            yield (f"all page={page}", {**base, **page_vals, **{p: crafted(kinds[p], victim)[0] for p in ident}},
                   {**base, **page_vals, **{p: crafted(kinds[p], GHOST)[0] for p in ident}})


def ghost_to(victim: Person, text: str) -> str:
    pairs = [(GHOST.user, victim.user), (GHOST.accounts[0], victim.accounts[0]), (GHOST.partition, victim.partition),
             (GHOST.day, victim.day), (GHOST.jobs[0][1], victim.jobs[0][1]), (GHOST.jobs[0][0], victim.jobs[-1][0])]
    for g, v in pairs:
        text = text.replace(g, v)
    return text


@pytest.fixture(scope="module")
def deps(env):
    r = http(env.header_port, "/_dash-dependencies", headers=env.as_user(ALICE.user))
    Checks.expect(r.status == 200, r.status)
    return json.loads(r.body)


def post(env, user: str, dep: dict, values: dict) -> tuple[bytes, Reply]:
    body = body_for(dep, values)
    return body, http(env.header_port, "/_dash-update-component", "POST", env.as_user(user), body)


def leaks(viewer: str, request: bytes, reply: Reply) -> set[str]:
    """Markers of data outside ``viewer``'s scope in the reply that the request did not carry."""
    sent = request.decode()
    return {m for m in forbidden(viewer) if m in reply.body and m not in sent}


@pytest.mark.parametrize("viewer,victims", [(ALICE, (BOB, CAROL, ROOT_)), (CAROL, (BOB, ROOT_))],
                         ids=["user", "lead"])
def test_every_callback_with_another_users_values(env, deps, viewer, victims):
    assert deps, "the app lists no callbacks"
    jobs = [(dep, victim, label, v, g) for dep in deps for victim in victims
            for label, v, g in requests_for(dep, victim)]

    def run(job):
        dep, victim, label, v, g = job
        (bv, rv), (bg, rg) = post(env, viewer.user, dep, v), post(env, viewer.user, dep, g)
        return dep, victim, label, (bv, rv), (bg, rg)

    with ThreadPoolExecutor(4) as pool:
        for dep, victim, label, (bv, rv), (bg, rg) in pool.map(run, jobs):
            where = f"{viewer.user} -> {victim.user}: {dep['output']} {label}"
            Checks.expect(rv.status in (200, 204) and rg.status in (200, 204), f"{where}: HTTP {rv.status}/{rg.status}")
            Checks.expect(not leaks(viewer.user, bv, rv), f"{where}: leaked {leaks(viewer.user, bv, rv)}")
            Checks.expect(not leaks(viewer.user, bg, rg), f"{where} (ghost): leaked {leaks(viewer.user, bg, rg)}")
            Checks.expect(rv.body == ghost_to(victim, rg.body),
                          f"{where}: the answer differs from the one for a name that does not exist\n"
                          f"{rv.body[:400]}\n{ghost_to(victim, rg.body)[:400]}")
            Checks.expect("Traceback" not in rv.body, where)


def test_every_callback_with_widening_values(env, deps):
    for viewer in (ALICE, CAROL):
        for dep in deps:
            props = [f"{d['id']}.{d['property']}" for d in dep["inputs"] + dep["state"]]
            kinds = {p: kind_of(p) for p in props}
            for w in WILD:
                for page in (PAGES if "path" in kinds.values() else [None]):
                    values = {p: (page if k == "path" else NEUTRAL.get(k) if k in (None, "cell") else widened(k, w))
                              for p, k in kinds.items()}
                    body, r = post(env, viewer.user, dep, values)
                    where = f"{viewer.user}: {dep['output']} = {w!r} page={page}"
                    Checks.expect(r.status in (200, 204), f"{where}: HTTP {r.status} {r.body[:200]}")
                    Checks.expect(not leaks(viewer.user, body, r), f"{where}: leaked {leaks(viewer.user, body, r)}")


def test_malformed_callback_requests_are_refused(env, deps):
    """Bodies that match no registered callback are a 400 (Dash alone answers them with a 500 and a
    traceback in the log), and carry nothing of anyone's data."""
    job = next(d for d in deps if d["output"] == "job-content.children")
    good = json.loads(body_for(job, {"job-key.data": {"cluster": "c1", "id": BOB.jobs[0][1]}}))
    multi = next(d for d in deps if d["output"].startswith(".."))
    bad = [b"{", b"", b"[]", b"null", b'"x"', json.dumps({**good, "output": "nope.children"}).encode(),
           json.dumps({**good, "output": ["job-content.children"]}).encode(),
           json.dumps({k: v for k, v in good.items() if k != "inputs"}).encode(),
           json.dumps({**good, "inputs": good["inputs"] * 3}).encode(), json.dumps({**good, "inputs": "x"}).encode(),
           json.dumps({**good, "inputs": [1]}).encode(), json.dumps({**good, "state": [{"id": "x"}]}).encode(),
           json.dumps({**good, "outputs": "x"}).encode(), json.dumps({**good, "changedPropIds": "x"}).encode(),
           json.dumps({**json.loads(body_for(multi, {})), "outputs": []}).encode(),
           json.dumps({**good, "output": multi["output"]}).encode()]
    for body in bad:
        r = http(env.header_port, "/_dash-update-component", "POST", env.as_user(ALICE.user), body)
        shown = [m for m in forbidden(ALICE.user) if m in r.body]
        Checks.expect(r.status == 400 and not shown, f"{body[:120]!r}: HTTP {r.status} {shown}")


def test_the_sweep_can_see_a_leak(env, deps):
    """The same crafted requests sent by the admin get answers that differ from the ghost's (bob's
    data is there) for every callback that returns data (not only a URL): a plain user's answer
    carrying bob's data would have failed the comparison above."""
    for dep in deps:
        outs = outputs_of(dep["output"])
        if all(o["id"] == "url" for o in (outs if isinstance(outs, list) else [outs])):
            continue
        shown = 0
        for _label, v, g in requests_for(dep, BOB):
            (_bv, rv), (_bg, rg) = post(env, ROOT_.user, dep, v), post(env, ROOT_.user, dep, g)
            shown += rv.body != ghost_to(BOB, rg.body)
        Checks.expect(shown > 0, f"{dep['output']}: the admin's answers never show bob's data: the sweep is blind there")


# --- 2. every route, and path traversal on every file-serving one ---------------------------------

# Every rule of the app's URL map, by what it returns. A new route fails the test until it is
# listed here (and, when it serves files, swept below).
FILE_ROUTES = {"/assets/<path:filename>", "/static/<path:filename>", "/_favicon.ico",
               "/_dash-component-suites/<string:package_name>/<path:fingerprinted_path>"}
PAGE_ROUTES = {"/", "/<path:path>"}                       # the index page, for any path
DATA_ROUTES = {"/_dash-layout", "/_dash-dependencies", "/_dash-update-component", "/_reload-hash"}
# components that hand out files or links to them; none today (no dcc.Download, no CSV export)
EXPORTS: frozenset[str] = frozenset()


def url_rules(env) -> set[str]:
    """The routes of the app exactly as `jobsight dashboard` builds it for the header server."""
    from jobsight.analytics import dashboard_cli
    from jobsight.dashboard import common
    p = argparse.ArgumentParser()
    dashboard_cli.configure(p)
    app = dashboard_cli.build(p.parse_args(["--db", str(env.db), "--config", str(env.config), "--auth", "header",
                                            "--trusted-proxy", PROXY]))
    try:
        return {r.rule for r in app.server.url_map.iter_rules()}
    finally:
        app.server.config[common.READER_KEY].close()


def traversal_targets(env) -> list[str]:
    up = "../" * 16
    return [up + str(env.planted).lstrip("/"), up + str(env.config).lstrip("/"), up + "etc/passwd",
            up + str(env.dir / "proxy-secret").lstrip("/"), "../auth.py", "../../pyproject.toml",
            "../../dashboard/auth.py", str(env.planted)]


def encodings(path: str) -> list[bytes]:
    q = urllib.parse.quote
    out = [path, path.replace("..", "%2e%2e"), q(path, safe="").replace(".", "%2e"),
           q(q(path, safe="").replace(".", "%2e"), safe=""),                 # double-encoded
           path.replace("../", "..%5c"), path.replace("../", "..\\"), path.replace("/", "%5c"),
           path.replace("../", "%c0%ae%c0%ae%c0%af"),                        # overlong UTF-8
           path.replace("../", "....//"), path.replace("../", "..;/"), path.replace("../", ".%2e/"),
           "style.css%00" + path, path + "%00.css", "/" + path, "%2f" + q(path, safe="")]
    return [e.encode() for e in out] + [b"style.css\x00" + path.encode()]


def route_prefixes(rules: set[str]) -> list[str]:
    """Where a payload goes for each file-serving or page route."""
    out = []
    for rule in sorted(FILE_ROUTES | PAGE_ROUTES):
        if rule not in rules:
            continue
        stem = rule.split("<", 1)[0]
        out.append(stem if stem.endswith("/") else stem + "/")
        if "package_name" in rule:
            out += [stem + "dash/", stem + "dashboard/", stem + "dash/../"]
    return out


def app_shell(body: str) -> str:
    """The index page without its per-request random id."""
    return re.sub(r'"end_id":"[^"]*"', "", body)


def test_every_route_is_classified(env):
    rules = url_rules(env)
    unknown = rules - FILE_ROUTES - PAGE_ROUTES - DATA_ROUTES
    Checks.expect(not unknown, f"routes the authorization test does not know: {sorted(unknown)}")
    Checks.expect(FILE_ROUTES & rules, "no file route found: is the URL map read from the right app?")


def test_path_traversal_on_every_file_route(env):
    rules = url_rules(env)
    headers = env.as_user(ALICE.user)
    # controls: the routes do serve their own files
    css = http(env.header_port, "/assets/style.css", headers=headers)
    Checks.expect(css.status == 200 and "{" in css.body, f"/assets/style.css: {css.status}")
    index = http(env.header_port, "/", headers=headers)
    suite = re.search(r'src="(/_dash-component-suites/[^"]+)"', index.body)
    Checks.expect(suite is not None and http(env.header_port, suite.group(1), headers=headers).status == 200,
                  "a component suite script of the index page is not served")
    payloads = [pre.encode() + enc for pre in route_prefixes(rules)
                for target in traversal_targets(env) for enc in encodings(target)]
    # files that exist outside the allowed folders, named directly
    payloads += [b"/_dash-component-suites/dashboard/auth.py", b"/_dash-component-suites/analytics/config.py",
                 b"/_dash-component-suites/dash/dash.py", b"/_dash-component-suites/dash/../../../etc/passwd",
                 b"/static/../dashboard/auth.py", b"/_favicon.ico/../../etc/passwd"]

    def probe(target: bytes):
        return target, http(env.header_port, target, headers=headers)

    with ThreadPoolExecutor(4) as pool:
        for target, r in pool.map(probe, payloads):
            served = [m for m in env.file_markers if m in r.body]
            Checks.expect(not served, f"{target!r}: served {[env.file_markers[m] for m in served]}")
            # a path no file route takes falls through to the index page (the app shell): not a file
            Checks.expect(r.status in (400, 404) or (r.status == 200 and app_shell(r.body) == app_shell(index.body)),
                          f"{target!r}: HTTP {r.status}, expected 404, 400 or the index page: {r.body[:200]}")


def test_symlinks_in_the_assets_folder_are_not_followed_out_of_it(env):
    """A link in the assets folder to a file or folder outside it (planted here for the test) is not
    served through /assets/."""
    assets = ROOT / "dashboard" / "assets"
    links = {assets / f".relauth-{os.getpid()}-file": env.planted, assets / f".relauth-{os.getpid()}-dir": env.dir}
    try:
        for link, target in links.items():
            link.symlink_to(target)
        for target in [f"/assets/{n.name}" for n in links] + [f"/assets/.relauth-{os.getpid()}-dir/secret.txt",
                                                              f"/assets/.relauth-{os.getpid()}-dir/jobsight.toml"]:
            r = http(env.header_port, target, headers=env.as_user(ALICE.user))
            served = [m for m in env.file_markers if m in r.body]
            Checks.expect(not served and r.status == 404, f"{target}: HTTP {r.status}, served {served}")
        # the same under a URL prefix (Dash names the assets route after it)
        from jobsight.analytics.snapshot import SnapshotReader
        from jobsight.dashboard.app import create_app
        from jobsight.dashboard.auth import Auth, Roles
        reader = SnapshotReader(env.db)
        try:
            client = create_app(reader, Auth("none", Roles()), url_prefix="/jobsight/").server.test_client()
            ok = client.get("/jobsight/assets/style.css")
            Checks.expect(ok.status_code == 200, f"/jobsight/assets/style.css: HTTP {ok.status_code}")
            for link in links:
                r = client.get(f"/jobsight/assets/{link.name}")
                Checks.expect(r.status_code == 404 and b"PLANTED" not in r.data, f"/jobsight/assets/{link.name}")
        finally:
            reader.close()
    finally:
        for link in links:
            link.unlink(missing_ok=True)


def walk(node):
    """Every component (dict with "type" and "props") in a Dash JSON tree."""
    if isinstance(node, dict):
        if "type" in node and "props" in node:
            yield node
        for v in node.values():
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def page_layout(env, deps, user: str, page: str, search: str = "") -> dict:
    dep = next(d for d in deps if d["output"] == "page.children")
    _body, r = post(env, user, dep, {"url.pathname": page, "url.search": search})
    Checks.expect(r.status == 200, f"{page}: HTTP {r.status}")
    return json.loads(r.body)


def test_no_page_hands_out_files(env, deps):
    """Downloads, uploads, table exports and links to anything but the app's own pages would need a
    place in the sweep above: there are none (EXPORTS lists the ones there are)."""
    found = set()
    shell = json.loads(http(env.header_port, "/_dash-layout", headers=env.as_user(ROOT_.user)).body)
    for tree in [shell] + [page_layout(env, deps, ROOT_.user, p, f"?name={BOB.user}") for p in PAGES]:
        for c in walk(tree):
            props = c["props"]
            if c["type"] in ("Download", "Upload") or props.get("export_format") not in (None, "none"):
                found.add(f"{c['type']}#{props.get('id')}")
            href = props.get("href")
            if isinstance(href, str) and href.split("?")[0] not in PAGES:
                found.add(f"link {href}")
    Checks.expect(found == set(EXPORTS), f"file exports or links not covered by the sweep: {sorted(found - EXPORTS)}")


# --- 3. tampered identity -----------------------------------------------------------------------

def _layout_user(reply: Reply) -> str:
    """The "who" text of the top bar: 'name (role ...)'."""
    spans = [c for c in walk(json.loads(reply.body)) if c["props"].get("className") == "who"]
    return spans[0]["props"]["children"]


def _denial_targets(env, deps, user_for_body: str = BOB.user):
    job = next(d for d in deps if d["output"] == "job-content.children")
    body = body_for(job, {"job-key.data": {"cluster": "c1", "id": BOB.jobs[0][1]}})
    index = http(env.header_port, "/", headers=env.as_user(ALICE.user)).body
    suite = re.search(r'src="(/_dash-component-suites/[^"]+)"', index).group(1)
    return [("GET", "/", b""), ("GET", f"/users?user={user_for_body}", b""), ("GET", "/_dash-layout", b""),
            ("GET", "/_dash-dependencies", b""), ("POST", "/_dash-update-component", body),
            ("OPTIONS", "/_dash-update-component", b""), ("HEAD", "/", b""), ("GET", "/assets/style.css", b""),
            ("GET", suite, b""), ("GET", "/_favicon.ico", b""), ("GET", "/_reload-hash", b"")]


def test_header_mode_refuses_requests_not_from_the_proxy(env, deps):
    """The trusted proxy is 127.0.0.2 and sends the proxy secret. From 127.0.0.1 nothing is served,
    whatever the headers say, even with the secret; from the proxy without the right secret neither."""
    root, alice, s = ROOT_.user, ALICE.user, env.secret
    around_the_proxy = [                                   # from 127.0.0.1, carrying the secret
        [("X-Forwarded-User", root)], [("x-forwarded-user", root)], [("X-FORWARDED-USER", root)],
        [("X-Forwarded-User", alice)], [("X-Forwarded-User", alice), ("X-Forwarded-User", root)],
        [("X-Forwarded-For", PROXY), ("X-Forwarded-User", root)], [("Forwarded", f"for={PROXY}"), ("X-Forwarded-User", root)],
        [("X-Real-IP", PROXY), ("X-Forwarded-User", root)], [("Remote-User", root)], [("X_Forwarded_User", root)], []]
    cases = [(NOT_PROXY, h + [("X-Jobsight-Proxy-Secret", s)]) for h in around_the_proxy]
    for secret_headers in ([], [("X-Jobsight-Proxy-Secret", "wrong")], [("X-Jobsight-Proxy-Secret", s.upper())],
                           [("X-Jobsight-Proxy-Secret", s + "x")], [("X-Jobsight-Proxy-Secret", s[:-1])],
                           [("X-Jobsight-Proxy-Secret", s), ("X-Jobsight-Proxy-Secret", s)],
                           [("X_Jobsight_Proxy_Secret", s)], [("X-Jobsight-Proxy-Secret", "")]):
        cases.append((PROXY, [("X-Forwarded-User", root)] + secret_headers))
    for source, headers in cases:
        for method, target, body in _denial_targets(env, deps):
            r = http(env.header_port, target, method, headers, body, source=source)
            shown = [m for m in forbidden(alice) | set(env.file_markers) if m in r.body]
            Checks.expect(r.status == 403 and not shown, f"{source} {headers} {method} {target}: HTTP {r.status} {shown}")
    r = http(env.header_port, f"/?X-Jobsight-Proxy-Secret={s}", headers=[("X-Forwarded-User", root)], source=PROXY)
    Checks.expect(r.status == 403, f"secret in the query string: HTTP {r.status}")


BAD_USERS = ["", "   ", "u-r\u043e\u043et-z9",               # Cyrillic o: looks like u-root-z9
             "\uff55-root-z9", "u-root-z9\u00a0", "u-root-z9\x00", f"{ROOT_.user},{ALICE.user}",
             f"{ROOT_.user} {ALICE.user}", f"../{ROOT_.user}", "*", "%", "-root", "a" * 65, f"{ROOT_.user};x",
             f"{ROOT_.user}/.."]


def test_header_mode_refuses_bad_user_names_from_the_proxy(env, deps):
    ok = [("X-Jobsight-Proxy-Secret", env.secret)]
    cases = [[("X-Forwarded-User", u)] for u in BAD_USERS]
    cases += [[("X-Forwarded-User", ALICE.user), ("X-Forwarded-User", ROOT_.user)],   # duplicated: ambiguous
              [("X_Forwarded_User", ROOT_.user)], [("Remote-User", ROOT_.user)], []]
    for headers in cases:
        for method, target, body in _denial_targets(env, deps):
            r = http(env.header_port, target, method, headers + ok, body)
            shown = [m for m in forbidden(ALICE.user) if m in r.body]
            # 400: waitress itself refuses a NUL byte in a header
            Checks.expect(r.status in (400, 403) and not shown, f"{headers} {method} {target}: HTTP {r.status} {shown}")


def test_header_mode_takes_only_the_proxys_user_header(env, deps):
    """Other headers naming the admin do not override the user the proxy names; a user name that
    differs from the admin's only in case is another (unprivileged) user."""
    ok = [("X-Jobsight-Proxy-Secret", env.secret)]
    for extra in ([("Remote-User", ROOT_.user)], [("X_Forwarded_User", ROOT_.user)], [("X-Remote-User", ROOT_.user)],
                  [("X-Forwarded-For", "10.0.0.1")], [("Authorization", "Basic " + base64.b64encode(
                      f"{ROOT_.user}:{PASSWORDS[ROOT_.user]}".encode()).decode())]):
        for order in (extra + [("X-Forwarded-User", ALICE.user)], [("X-Forwarded-User", ALICE.user)] + extra):
            r = http(env.header_port, "/_dash-layout", headers=order + ok)
            Checks.expect(r.status == 200 and _layout_user(r) == f"{ALICE.user} (user)", f"{order}: {r.status} {r.body[:200]}")
    for name in (ROOT_.user.upper(), ROOT_.user.capitalize()):
        r = http(env.header_port, "/_dash-layout", headers=[("X-Forwarded-User", name)] + ok)
        Checks.expect(r.status == 200 and _layout_user(r) == f"{name} (user)", f"{name}: {r.body[:200]}")
        Checks.expect(table_names(env, deps, name, "ut") == set(), f"{name} sees rows of the users table")


def basic(env, target: str, auth: bytes | None, method="GET", body=b"", extra=()) -> Reply:
    headers = list(extra) + ([("Authorization", auth)] if auth is not None else [])
    return http(env.basic_port, target, method, headers, body, source=NOT_PROXY)


def b64(text: str | bytes) -> bytes:
    return base64.b64encode(text if isinstance(text, bytes) else text.encode())


def test_basic_mode_refuses_bad_credentials(env, deps):
    a, c, r_ = ALICE.user, CAROL.user, ROOT_.user
    bad = [None, b"", b"Basic", b"Basic ", b"Basic !!!notbase64", b"Basic " + b64(f"{a}:{PASSWORDS[a]}")[:-2],
           b"Basic " + b64(a), b"Basic " + b64(f"{a}:wrong-password"), b"Basic " + b64(f"{a}:{PASSWORDS[r_]}"),
           b"Basic " + b64(f"{r_}:"), b"Basic " + b64(":"), b"Basic " + b64(f":{PASSWORDS[r_]}"),
           b"Basic " + b64(f"{a} :{PASSWORDS[a]}"), b"Basic " + b64(f"{a.upper()}:{PASSWORDS[a]}"),
           b"Basic " + b64(b"\xff\xfe:\xff"), b"Basic " + b64(f"u-r\u043e\u043et-z9:{PASSWORDS[r_]}"),
           b"Basic " + b64(f"{c}:pa"), b"Basic " + b64(f"{c}:pa:ss"), b"Basic " + b64(f"{c}:pa:ss:wo:rd-k2:"),
           b"Bearer " + b64(f"{a}:{PASSWORDS[a]}"), b"Digest username=" + r_.encode(),
           b"Basic " + b64(f"{a}:{PASSWORDS[a]}") + b", Basic " + b64(f"{r_}:{PASSWORDS[r_]}"),
           b"Basic " + b64(f"{a}:{PASSWORDS[a]}") + b"\x00"]
    for auth in bad:
        for method, target, body in [t for t in _denial_targets(env, deps) if t[1] in (
                "/_dash-layout", "/_dash-update-component", "/assets/style.css")]:
            r = basic(env, target, auth, method, body, extra=[("X-Forwarded-User", r_)])
            shown = [m for m in forbidden(a) if m in r.body]
            Checks.expect(r.status in (400, 401) and not shown, f"{auth!r} {method} {target}: HTTP {r.status} {shown}")
    # two Authorization headers (waitress joins them): refused
    r = http(env.basic_port, "/_dash-layout", headers=[("Authorization", b"Basic " + b64(f"{a}:{PASSWORDS[a]}")),
                                                       ("Authorization", b"Basic " + b64(f"{r_}:{PASSWORDS[r_]}"))],
             source=NOT_PROXY)
    Checks.expect(r.status == 401, f"two Authorization headers: HTTP {r.status}")
    Checks.expect(basic(env, "/", None).headers.get("www-authenticate", "").startswith("Basic"), "no Basic challenge")


def test_basic_mode_passwords_with_colons_and_no_header_override(env):
    c, a, r_ = CAROL.user, ALICE.user, ROOT_.user
    r = basic(env, "/_dash-layout", b"Basic " + b64(f"{c}:{PASSWORDS[c]}"))
    Checks.expect(r.status == 200 and _layout_user(r) == f"{c} (lead of acct-lead-k2)", f"{r.status} {r.body[:200]}")
    r = basic(env, "/_dash-layout", b"basic " + b64(f"{a}:{PASSWORDS[a]}"),    # the scheme is case-insensitive
              extra=[("X-Forwarded-User", r_), ("Remote-User", r_), ("X-Jobsight-Proxy-Secret", env.secret)])
    Checks.expect(r.status == 200 and _layout_user(r) == f"{a} (user)", f"{r.status} {r.body[:200]}")


# --- 4. the admin-wide views --------------------------------------------------------------------

def callback_data(env, deps, user: str, output_prefix: str, values: dict | None = None) -> dict:
    dep = next(d for d in deps if d["output"].startswith(output_prefix))
    _body, r = post(env, user, dep, values or {})
    Checks.expect(r.status == 200, f"{output_prefix} as {user}: HTTP {r.status}")
    return json.loads(r.body)["response"]


def table_names(env, deps, user: str, prefix: str) -> set[str]:
    return {row["name"] for row in callback_data(env, deps, user, f"..{prefix}-table.data")[f"{prefix}-table"]["data"]}


def flagged_job_ids(env, deps, user: str) -> set[str]:
    return {row["job_id"] for row in callback_data(env, deps, user, "..fl-table.data")["fl-table"]["data"]}


def options(env, deps, user: str, page: str, cid: str) -> set[str]:
    tree = page_layout(env, deps, user, page)
    return {o["value"] for c in walk(tree) if c["props"].get("id") == cid for o in c["props"]["options"]}


# by hand from the seed: carol leads acct-lead-k2 (her job 7300042 and dave's 7400051) and has her
# own job 7300041 in acct-carol-k2; every job is flagged (CPU 12.5 %, bob's GPU job at 10 %)
EXPECTED = {
    ALICE.user: ({ALICE.user}, {"acct-alice-a3"}, {"7100011"}, {"part-alice-a3"}),
    BOB.user: ({BOB.user}, {"acct-bob-q7"}, {"7200021", "7200031_4"}, {"part-bob-q7"}),
    DAVE.user: ({DAVE.user}, {"acct-lead-k2"}, {"7400051"}, {"part-dave-m4"}),
    CAROL.user: ({CAROL.user, DAVE.user}, {"acct-carol-k2", "acct-lead-k2"}, {"7300041", "7300042", "7400051"},
                 {"part-carol-k2", "part-dave-m4"}),
    ROOT_.user: ({p.user for p in PEOPLE}, {"acct-alice-a3", "acct-bob-q7", "acct-carol-k2", "acct-lead-k2",
                                            "acct-root-z9"},
                 {"7100011", "7200021", "7200031_4", "7300041", "7300042", "7400051", "7500061"},
                 {p.partition for p in PEOPLE}),
}


@pytest.mark.parametrize("who", list(EXPECTED))
def test_admin_wide_views_are_scoped(env, deps, who):
    users, accounts, jobs, partitions = EXPECTED[who]
    Checks.expect(table_names(env, deps, who, "ut") == users, f"{who}: users table")
    Checks.expect(table_names(env, deps, who, "pt") == accounts, f"{who}: projects table")
    Checks.expect(flagged_job_ids(env, deps, who) == jobs, f"{who}: flagged jobs")
    Checks.expect(options(env, deps, who, "/flagged", "fl-user") == users, f"{who}: user filter options")
    Checks.expect(options(env, deps, who, "/flagged", "fl-account") == accounts, f"{who}: project filter options")
    Checks.expect(options(env, deps, who, "/", "ov-partition") == partitions, f"{who}: partition filter options")
    cards = {c["props"]["id"]: c["props"]["children"] for c in walk(callback_data(env, deps, who, "ov-content"))
             if str(c["props"].get("id", "")).startswith("total-")}
    Checks.expect(cards.get("total-jobs") == str(len(jobs)), f"{who}: overview counts {cards.get('total-jobs')} jobs")


def test_no_crafted_request_made_a_callback_fail(env):
    """Every crafted value above (wrong types included) was answered without an error on the server:
    a callback that fails on a crafted input is a bug even when the page shows a plain message.
    (Runs last: it reads the servers' logs of everything above.)"""
    for log in env.logs:
        text = log.read_text(encoding="utf-8")
        Checks.expect("Traceback" not in text and " ERROR " not in text, f"{log.name}:\n{text[-3000:]}")
