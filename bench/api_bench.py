"""The JSON API and `jobsight job --server` on a real-size database, side by side with the local command.

    .venv/bin/python bench/api_bench.py --db COPY.duckdb [--rounds 20] [--json]

COPY is a copy of a bench database (bench/dashboard_bench.py makes one; /work/bench-data/m1.duckdb
holds 1M jobs): run `jobsight settings --db COPY` first when its metric views are from another
jobsight version (the script says so). Two measurements:

1. End to end, as a researcher types it: `jobsight job --server URL ID` against a real `jobsight
   dashboard --munge --auth none` on loopback (a fresh MUNGE credential per request from this host's
   munged, decoded by the server's unmunge), and as the baseline, in alternation with it, the local
   `jobsight job --db COPY ID`; and a bare interpreter start (`python -c pass`), the floor of both.
   Wall time of each process, random job ids. Run as root, the admin of the server's config.
   Target: <= 0.5 s.
2. Server side, per API call: every /api/v1 route through the app in-process (Flask's test client,
   no network), timed around the request: as the admin with a MUNGE credential (unmunge included),
   and as a project lead and a plain user with the trusted proxy's header, wall time and the
   process's CPU time (one request at a time: what a loaded machine inflates least). Target: p95
   <= 100 ms.

The machine may be shared: compare the figures side by side (the ratio to the local command), not
to another day's.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the console script a researcher runs (next to this interpreter), else the module
_SCRIPT = Path(sys.executable).with_name("jobsight")
JOBSIGHT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]
CLUSTER = "bench"
TARGET_CLI_S, TARGET_API_MS = 0.5, 100.0
ROLES = {"admins": ["root"], "leads": {"p7": ["lead7"]}}


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": statistics.median(values), "p95": pct(values, 0.95), "max": max(values)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_ids(db: Path, n: int, seed: int) -> list[str]:
    from jobsight.analytics.store.snapshot import SnapshotReader
    reader = SnapshotReader(db)
    with reader.cursor() as h:
        total = h.con.execute("SELECT count(*) FROM job").fetchone()[0]
        rng = random.Random(seed)
        offsets = [rng.randrange(total) for _ in range(n)]
        ids = [h.con.execute("SELECT job_id_raw FROM job LIMIT 1 OFFSET ?", [o]).fetchone()[0] for o in offsets]
    reader.close()
    return ids


def timed_run(argv: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    secs = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:300]}")
    return secs


def start_server(db: Path, work: Path) -> tuple[subprocess.Popen, str]:
    config = work / "jobsight.toml"
    config.write_text('[roles]\nadmins = ["root"]\n', encoding="utf-8")
    port = free_port()
    log = (work / "server.log").open("w")
    proc = subprocess.Popen([*JOBSIGHT, "dashboard", "--db", str(db), "--config", str(config), "--port", str(port),
                             "--munge", "--auth", "none", "--threads", "4"], stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(url + "/api/v1/openapi.json", timeout=5)
            break
        except urllib.error.HTTPError:
            break       # 401: up, and asking for a credential
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"the dashboard did not start:\n{(work / 'server.log').read_text()[-2000:]}") from None
            time.sleep(0.3)
    return proc, url


def end_to_end(db: Path, rounds: int, seed: int) -> dict:
    ids = job_ids(db, rounds + 2, seed)
    with tempfile.TemporaryDirectory(prefix="jobsight-api-bench-") as work:
        proc, url = start_server(db, Path(work))
        try:
            remote, local, bare = [], [], []
            for jid in ids[:2]:         # warm-up: the OS's file cache, the server's first ATTACH
                timed_run([*JOBSIGHT, "job", "--server", url, jid])
                timed_run([*JOBSIGHT, "job", "--db", str(db), jid])
            for i, jid in enumerate(ids[2:]):
                pair = [("remote", [*JOBSIGHT, "job", "--server", url, jid]), ("local", [*JOBSIGHT, "job", "--db", str(db), jid])]
                for name, argv in (pair if i % 2 == 0 else pair[::-1]):
                    (remote if name == "remote" else local).append(timed_run(argv))
                bare.append(timed_run([sys.executable, "-c", "pass"]))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"remote": summary(remote), "local": summary(local), "python": summary(bare)}


def routes(jid: str, rng: random.Random) -> list[tuple[str, str]]:
    """(label, target) of every route, with varied parameters."""
    day = f"2026-{rng.randrange(8, 11):02d}-{rng.randrange(1, 28):02d}"
    week = f"2026-W{rng.randrange(32, 44)}"
    return [("jobs/{cluster}/{id}", f"/api/v1/jobs/{CLUSTER}/{jid}"),
            ("jobs", "/api/v1/jobs"), ("jobs?since&until", f"/api/v1/jobs?since={day}&until={day}"),
            ("flags", "/api/v1/flags"), ("flags?since&until", f"/api/v1/flags?since={day}&until={day}&sort=sbu"),
            ("usage?by=account", "/api/v1/usage?by=account&since=2026-09-01&until=2026-09-30"),
            ("usage?by=day", "/api/v1/usage?by=day"),
            ("budgets", "/api/v1/budgets"), ("report?week", f"/api/v1/report?week={week}"),
            ("openapi.json", "/api/v1/openapi.json")]


def server_side(db: Path, rounds: int, seed: int, only: tuple[str, ...] = ()) -> dict:
    from jobsight.analytics.store.snapshot import SnapshotReader
    from jobsight.dashboard.app import create_app
    from jobsight.dashboard.auth import Auth, Roles
    from jobsight.dashboard.munge_auth import MungeDecoder
    reader = SnapshotReader(db)
    app = create_app(reader, Auth("header", Roles.from_config(ROLES), munge=MungeDecoder()))
    client = app.server.test_client()
    rng = random.Random(seed)
    ids = job_ids(db, rounds + 1, seed + 1)
    who = {"admin (MUNGE)": "root", "lead (header)": "lead7", "user (header)": "u7"}
    times: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}     # the process's CPU time: one request at a time
    user_jobs = [r[0] for r in reader_rows(reader, "SELECT job_id_raw FROM job WHERE \"user\" = 'u7' LIMIT 200")]
    lead_jobs = [r[0] for r in reader_rows(reader, "SELECT job_id_raw FROM job WHERE account = 'p7' LIMIT 200")]
    own = {"root": ids, "lead7": lead_jobs, "u7": user_jobs}
    for rnd in range(rounds + 1):            # round 0 warms up
        for role, user in who.items():
            for label, target in routes(rng.choice(own[user]), rng):
                if only and not label.startswith(only):
                    continue
                if user != "u7" and label.startswith("report"):
                    continue        # the report is the asker's own: admin and lead have no job in the bench data
                if user == "lead7" and label.startswith("usage"):
                    target += "&account=p7"
                if user == "root":
                    cred = subprocess.run(["munge", "-s", f"GET {target}"], capture_output=True, text=True,
                                          check=True).stdout.strip()
                    headers = {"Authorization": f"MUNGE {cred}"}
                else:
                    headers = {"X-Forwarded-User": user}
                t, c = time.perf_counter(), time.process_time()
                r = client.get(target, headers=headers)
                ms, cpu_ms = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
                if r.status_code != 200:
                    raise SystemExit(f"{target} as {user}: HTTP {r.status_code} {r.data[:300]!r}")
                if rnd:
                    times.setdefault((label, role), []).append(ms)
                    cpu.setdefault((label, role), []).append(cpu_ms)
    reader.close()
    return {f"{label} | {role}": {**summary(ts), "cpu": summary(cpu[(label, role)])} for (label, role), ts in times.items()}


def reader_rows(reader, sql: str) -> list[tuple]:
    with reader.cursor() as h:
        return h.con.execute(sql).fetchall()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="a copy of a bench database, its snapshot published")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--phase", choices=("all", "cli", "api"), default="all")
    ap.add_argument("--routes", nargs="+", default=[], metavar="LABEL",
                    help="server side: only the routes whose label starts with one of these (jobs, flags, usage ...)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = ap.parse_args()
    db = Path(args.db)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dashboard_bench import views_current
    snap = db.with_name(db.name + ".snapshot")
    if not snap.exists() or not views_current(snap):
        raise SystemExit(f"{snap}: missing or its metric views are from another jobsight version: "
                         f"run `jobsight settings --db {db}` first")
    if os.geteuid() != 0:
        print("not root: the server's [roles] admins names root; the end-to-end run asks as you", file=sys.stderr)
    figs: dict = {}
    if args.phase in ("all", "cli"):
        figs["cli_s"] = end_to_end(db, args.rounds, args.seed)
        c = figs["cli_s"]
        print(f"\n{'jobsight job, wall time':34} {'n':>4} {'p50 s':>7} {'p95 s':>7} {'max s':>7}")
        for name, label in (("remote", "--server URL (MUNGE, loopback)"), ("local", "--db COPY (baseline)"),
                            ("python", "python -c pass (floor)")):
            s = c[name]
            print(f"{label:34} {s['n']:>4} {s['p50']:>7.3f} {s['p95']:>7.3f} {s['max']:>7.3f}")
        print(f"ratio --server / --db (p50): {c['remote']['p50'] / c['local']['p50']:.2f}; target {TARGET_CLI_S} s")
    if args.phase in ("all", "api"):
        figs["api_ms"] = server_side(db, args.rounds, args.seed, tuple(args.routes))
        print(f"\n{'route | asker':44} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'cpu p50':>8} {'cpu p95':>8}")
        for label, s in figs["api_ms"].items():
            print(f"{label:44} {s['n']:>4} {s['p50']:>8.1f} {s['p95']:>8.1f} {s['max']:>8.1f} "
                  f"{s['cpu']['p50']:>8.1f} {s['cpu']['p95']:>8.1f}")
        worst = max(figs["api_ms"].items(), key=lambda kv: kv[1]["p95"])
        print(f"worst p95: {worst[1]['p95']:.1f} ms ({worst[0]}); target {TARGET_API_MS:.0f} ms")
    if args.json:
        print(json.dumps(figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
