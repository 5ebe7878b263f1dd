"""The shared setup of the authorization tests (test_rel_auth_callbacks.py, test_rel_auth_routes.py):
`jobsight dashboard` served by waitress on 127.0.0.1 (free ports), requests written byte by byte on
sockets (so duplicated, oddly cased or NUL-carrying headers and paths reach the server as sent), and
a database seeded with a distinctive marker per user.

The test files load this module as a plugin (`pytest_plugins = ["authsweep"]`), so the `env` and
`deps` fixtures are one session-wide pair of servers for both files.

Every request with its expectation counts as one check; the `env` fixture prints the total.
"""
from __future__ import annotations

import datetime as dt
import json
import secrets
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import jobsight_cmd
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
               (("9990001_4", "9990005", "g-jobname-x0", "-"),))


def forbidden(viewer: str) -> set[str]:
    seen = set().union(*(p.markers for p in VISIBLE[viewer]))
    return set().union(*(p.markers for p in PEOPLE if p not in VISIBLE[viewer])) - seen


def seed(db: Path) -> None:
    from jobsight.analytics.config import parse_config
    from jobsight.analytics.store.database import Database
    con = Database.open(db, parse_config({}))
    for p in PEOPLE:
        start = dt.datetime.fromisoformat(p.day) + dt.timedelta(hours=10)
        for i, (printed, raw, name, nodes) in enumerate(p.jobs):
            account = p.accounts[-1] if p is CAROL and i == 1 else p.accounts[0]
            kw = dict(job_id_raw=raw, user=p.user, account=account, partition=p.partition, start_time=start,
                      job_name=name, node_list=nodes, elapsed_s=3600, timelimit_s=7200, ncpus=4, billing=4,
                      cpu_time_s=1800, mem_alloc_bytes=8 * GiB, mem_peak_bytes=GiB)   # CPU 12.5 %: flagged
            if "_" in printed:
                kw.update(array_job_id=printed.split("_")[0], array_task_id=printed.split("_")[1])
            if p is BOB and i == 0:   # still running: Running now has a job of bob's to show (or leak)
                kw.update(ngpus=1, billing=100, cpu_time_s=4 * 3600, state="RUNNING")
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


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    from jobsight.analytics.store.snapshot import publish
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


# --- calling the app's callbacks (all sections) ---------------------------------------------------

PAGES = ["/", "/user", "/project", "/users", "/projects", "/flagged", "/jobs", "/running", "/job", "/no-such-page"]


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


@pytest.fixture(scope="session")
def all_deps(env):
    r = http(env.header_port, "/_dash-dependencies", headers=env.as_user(ALICE.user))
    Checks.expect(r.status == 200, r.status)
    return json.loads(r.body)


@pytest.fixture(scope="session")
def deps(all_deps):
    """The callbacks the server runs (a clientside one runs in the browser: its requests are 400)."""
    return [d for d in all_deps if not d.get("clientside_function")]


def post(env, user: str, dep: dict, values: dict) -> tuple[bytes, Reply]:
    body = body_for(dep, values)
    return body, http(env.header_port, "/_dash-update-component", "POST", env.as_user(user), body)
