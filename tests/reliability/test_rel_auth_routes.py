"""Authorization over real HTTP, parts 2 to 4 (setup in authsweep.py; part 1 in test_rel_auth_callbacks.py).

2. Every route of the app's URL map is classified; every file-serving one gets path traversal
   (../, %2e%2e%2f, ..%5c, double encoding, overlong UTF-8, absolute paths, NUL bytes, symlinks
   planted in the assets folder): no planted secret, config, source or system file is served.
3. `--auth header` reached around the trusted proxy (another source address, no or a wrong proxy
   secret) with tampered, duplicated, oddly cased, empty, lookalike and admin user headers;
   `--auth basic` with wrong, missing and malformed credentials.
4. The admin-wide views (users and projects tables, flagged jobs, filter options) as a plain user,
   a project lead and the admin: exactly the rows of their scope (sets worked out by hand below).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT

# authsweep holds asserts (Checks.expect, the env fixture): rewritten like a test module's, which
# needs registering before its import (pytest_plugins below would come too late and warn)
pytest.register_assert_rewrite("authsweep")

from authsweep import (  # noqa: E402
    ALICE,
    BOB,
    CAROL,
    DAVE,
    NOT_PROXY,
    PAGES,
    PASSWORDS,
    PEOPLE,
    PROXY,
    ROOT_,
    Checks,
    Reply,
    body_for,
    forbidden,
    http,
    post,
)

pytest_plugins = ["authsweep"]   # the env and deps fixtures: one pair of servers for both test files


# --- 2. every route, and path traversal on every file-serving one ---------------------------------

# Every rule of the app's URL map, by what it returns. A new route fails the test until it is
# listed here (and, when it serves files, swept below).
FILE_ROUTES = {"/assets/<path:filename>", "/static/<path:filename>", "/_favicon.ico",
               "/_dash-component-suites/<string:package_name>/<path:fingerprinted_path>"}
PAGE_ROUTES = {"/", "/<path:path>"}                       # the index page, for any path
DATA_ROUTES = {"/_dash-layout", "/_dash-dependencies", "/_dash-update-component", "/_reload-hash", "/metrics"}
# the JSON API (dashboard/api.py), swept route by route in test_rel_auth_api.py
API_ROUTES = {"/api/v1/jobs/<cluster>/<job_id>", "/api/v1/jobs", "/api/v1/flags", "/api/v1/usage", "/api/v1/budgets",
              "/api/v1/report", "/api/v1/usage/budgets", "/api/v1/openapi.json", "/api/v1/<path:_rest>"}
# components that hand out files or links to them; none today (no dcc.Download, no CSV export)
# The grids' "Download CSV": the browser writes the rows the grid already holds (AG Grid's CSV export,
# no request to the server), so what it can hold is what the grid's callback sends: swept above.
# The plain tables' "Download CSV" (the jobs to fix, a page of budgets) is a data: link holding the
# rows the table shows, written into the page's own response (page.children, which the callback
# sweep reads for other users' values): no request to the server either.
CSV_LINK = "link data:text/csv (the table's own rows)"
EXPORTS: frozenset[str] = frozenset({"AgGrid#ut-table", "AgGrid#pt-table", "AgGrid#fl-table", "AgGrid#jobs-table",
                                     "AgGrid#run-jobs", "AgGrid#run-gpus", CSV_LINK})


def url_rules(env) -> set[str]:
    """The routes of the app exactly as `jobsight dashboard` builds it for the header server."""
    import jobsight.analytics.commands.dashboard as dashboard_cli
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
    unknown = rules - FILE_ROUTES - PAGE_ROUTES - DATA_ROUTES - API_ROUTES
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
        from jobsight.analytics.store.snapshot import SnapshotReader
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
            if (c["type"] in ("Download", "Upload") or props.get("export_format") not in (None, "none")
                    or props.get("csvExportParams") is not None):
                found.add(f"{c['type']}#{props.get('id')}")
            href = props.get("href")
            if isinstance(href, str) and href.startswith("data:text/csv;charset=utf-8,"):
                found.add(CSV_LINK)
            elif isinstance(href, str) and href.split("?")[0] not in PAGES:
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
            ("GET", suite, b""), ("GET", "/_favicon.ico", b""), ("GET", "/_reload-hash", b""), ("GET", "/metrics", b"")]


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
                "/_dash-layout", "/_dash-update-component", "/assets/style.css", "/metrics")]:
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
    return {row["name"] for row in callback_data(env, deps, user, f"..{prefix}-table.rowData")[f"{prefix}-table"]["rowData"]}


def flagged_job_ids(env, deps, user: str) -> set[str]:
    return {row["job_id"] for row in callback_data(env, deps, user, "..fl-table.rowData")["fl-table"]["rowData"]}


def my_job_ids(env, deps, user: str, values: dict) -> set[str]:
    return {row["job_id"] for row in callback_data(env, deps, user, "..jobs-table.rowData", values)["jobs-table"]["rowData"]}


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
    own = {printed for p in PEOPLE if p.user == who for printed, *_ in p.jobs}
    # My jobs: the user's own; with the user filter cleared (a lead's or admin's "all") every job in scope
    Checks.expect(my_job_ids(env, deps, who, {"jobs-user.value": who}) == own, f"{who}: my jobs")
    Checks.expect(my_job_ids(env, deps, who, {}) == (own if who in (ALICE.user, BOB.user, DAVE.user) else jobs),
                  f"{who}: all jobs of the scope")
    Checks.expect(options(env, deps, who, "/flagged", "fl-user") == users, f"{who}: user filter options")
    Checks.expect(options(env, deps, who, "/flagged", "fl-account") == accounts, f"{who}: project filter options")
    Checks.expect(options(env, deps, who, "/", "ov-partition") == partitions, f"{who}: partition filter options")
    cards = {c["props"]["id"]: c["props"]["children"] for c in walk(callback_data(env, deps, who, "ov-content"))
             if str(c["props"].get("id", "")).startswith("total-")}
    Checks.expect(cards.get("total-jobs") == str(len(jobs)), f"{who}: overview counts {cards.get('total-jobs')} jobs")


# the last test of the sweep: with the folder run in order it follows test_rel_auth_callbacks.py too,
# and the servers (session-wide) have logged every request of both files
def test_no_crafted_request_made_a_callback_fail(env):
    """Every crafted value above (wrong types included) was answered without an error on the server:
    a callback that fails on a crafted input is a bug even when the page shows a plain message.
    (Runs last: it reads the servers' logs of everything above.)"""
    for log in env.logs:
        text = log.read_text(encoding="utf-8")
        Checks.expect("Traceback" not in text and " ERROR " not in text, f"{log.name}:\n{text[-3000:]}")
