"""Server time per dashboard callback over a scripted session, on a generated database.

    .venv/bin/python bench/dashboard_bench.py [--jobs 100000] [--samples-per-device 33] [--db PATH] [--rounds 5]
        [--phase all|generate|publish|callbacks] [--json]

Generates (unless --db exists already) a database of N jobs (20 % GPU jobs with 1-4 GPUs, 500
users in 60 projects, 90 days) and, per job, K samples per device (the cpu device plus each GPU):
about N x 1.5 x K sample rows, stored in job order as ingest writes them. Then publishes the
snapshot (timed), starts the app (auth header, so each request carries its user) and replays
page loads and filter changes as an admin, a project lead and a user through the Flask test client,
timing each /_dash-update-component request on the server side. Prints p50/p95/max per callback.

--phase runs one step only (bench/scale.py runs each in a fresh process, for its own peak RSS);
--json prints the figures as one JSON line at the end.

Targets (issue 6): p95 <= 300 ms per callback; job page <= 200 ms, at 1M jobs / 50M samples
(--jobs 1000000 --samples-per-device 33).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import peak_rss_mb  # noqa: E402

from jobsight.analytics.config import parse_config  # noqa: E402
from jobsight.analytics.store.database import Database  # noqa: E402
from jobsight.analytics.store.snapshot import SnapshotReader, publish  # noqa: E402
from jobsight.dashboard.app import create_app  # noqa: E402
from jobsight.dashboard.auth import Auth, Roles  # noqa: E402

USERS, PROJECTS = 500, 60


def generate(path: Path, jobs: int, k: int) -> dict:
    t0 = time.perf_counter()
    con = Database.open(path, parse_config({}))
    t = time.perf_counter()
    # deterministic pseudo-random numbers from the job index: hash(i) spread over ranges
    con.execute(f"""
    INSERT INTO job (cluster, job_id, job_id_raw, job_name, "user", account, "partition", state, exit_code,
                     submit_time, start_time, end_time, elapsed_s, timelimit_s, ncpus, nnodes, ngpus, gpu_type,
                     mem_req_bytes, mem_alloc_bytes, mem_peak_bytes, cpu_time_s, billing, source)
    WITH b AS (
        SELECT i, hash(i) AS h, i % {USERS} AS u,
               CASE WHEN i % 5 = 0 THEN 1 + (hash(i) // 7) % 4 ELSE 0 END AS ngpus,
               1 + (hash(i) // 11) % 32 AS ncpus,
               60 + (hash(i) // 13) % 86400 AS elapsed_s,
               TIMESTAMP '2026-08-01' + to_seconds(CAST(i * (90 * 86400.0 / {jobs}) AS BIGINT)) AS start_time
        FROM range({jobs}) r(i)
    )
    SELECT 'bench', CAST(i AS VARCHAR), CAST(i AS VARCHAR), 'job-' || (h % 1000), 'u' || u, 'p' || (u % {PROJECTS}),
           CASE WHEN ngpus > 0 THEN 'gpu' ELSE 'cpu' END,
           CASE WHEN h % 20 = 0 THEN 'FAILED' WHEN h % 20 = 1 THEN 'TIMEOUT' ELSE 'COMPLETED' END, '0:0',
           start_time - INTERVAL 10 MINUTE, start_time, start_time + to_seconds(elapsed_s), elapsed_s,
           elapsed_s * (1 + (h // 17) % 6) + 3600, ncpus, 1, ngpus, CASE WHEN ngpus > 0 THEN 'a100' END,
           ncpus * 4 * 1073741824, ncpus * 4 * 1073741824, CAST(ncpus * 4 * 1073741824 * ((h // 19) % 100) / 100.0 AS BIGINT),
           elapsed_s * ncpus * ((h // 23) % 100) / 100.0, ncpus + ngpus * 32, 'bench'
    FROM b""")
    print(f"  jobs: {jobs:,} in {time.perf_counter() - t:.1f} s", flush=True)
    t = time.perf_counter()
    con.execute(f"""
    INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, mem_total_bytes,
                        gpu_index, source)
    SELECT 'bench', j.job_id_raw, 'node' || (hash(j.job_id_raw) % 200),
           CASE WHEN d.k = 0 THEN 'cpu' ELSE 'GPU-' || j.job_id_raw || '-' || d.k END,
           j.start_time + to_seconds(CAST(s.t * j.elapsed_s / {k} AS BIGINT)),
           (hash(j.job_id_raw, d.k, s.t) % 1000) / 10.0,
           CASE WHEN d.k = 0 THEN j.mem_peak_bytes ELSE 40000000000 * ((hash(j.job_id_raw, d.k) % 100) / 100.0) END,
           CASE WHEN d.k = 0 THEN j.mem_alloc_bytes ELSE 40000000000 END,
           CASE WHEN d.k = 0 THEN NULL ELSE d.k - 1 END, 'sidecar'
    FROM job j, range(j.ngpus + 1) d(k), range({k}) s(t)
    ORDER BY CAST(j.job_id_raw AS BIGINT), d.k, s.t""")
    n = con.execute("SELECT count(*) FROM sample").fetchone()[0]
    print(f"  samples: {n:,} in {time.perf_counter() - t:.1f} s", flush=True)
    con.close()
    return {"jobs": jobs, "samples": n, "seconds": time.perf_counter() - t0, "db_gb": path.stat().st_size / 1e9}


def session(app, rounds: int, seed: int = 1) -> dict[str, list[float]]:
    rng = random.Random(seed)
    client = app.server.test_client()
    times: dict[str, list[float]] = defaultdict(list)
    lead_project = "p7"
    lead_users = [f"u{u}" for u in range(USERS) if u % PROJECTS == 7]
    roles_cycle = [("root", "admin"), ("lead7", "lead"), (lead_users[0], "user")]

    def post(user, key, values, label, changed=()):
        spec = app.callback_map[key]
        outs = key.strip(".").split("...") if key.startswith("..") else [key]
        outputs = [{"id": o.split(".", 1)[0], "property": o.split(".", 1)[1]} for o in outs]
        body = {"output": key, "outputs": outputs if len(outputs) > 1 else outputs[0],
                "inputs": [{**i, "value": values.get(f"{i['id']}.{i['property']}")} for i in spec["inputs"]],
                "state": [{**s, "value": values.get(f"{s['id']}.{s['property']}")} for s in spec.get("state", [])],
                "changedPropIds": list(changed)}
        data = json.dumps(body)
        t = time.perf_counter()
        r = client.post("/_dash-update-component", data=data, content_type="application/json",
                        headers={"X-Forwarded-User": user})
        times[label].append((time.perf_counter() - t) * 1000)
        if r.status_code != 200 or b"Something went wrong" in r.data:
            raise SystemExit(f"{label} failed for {user}: {r.status_code} {r.data[:300]!r}")
        return r.data

    job_ids = [str(rng.randrange(0, app.bench_jobs)) for _ in range(rounds * 3)]
    for rnd in range(rounds):
        for user, _role in roles_cycle:
            for path in ("/", "/jobs", "/users", "/projects", "/flagged", "/job"):
                post(user, "page.children", {"url.pathname": path, "url.search": ""}, "route (page layout)")
            base = {"ov-grain.value": "day", "ov-stack.value": "account"}
            post(user, "ov-content.children", base, "overview")
            post(user, "ov-content.children", {**base, "ov-grain.value": "week", "ov-stack.value": "partition"},
                 "overview")
            post(user, "ov-content.children", {**base, "ov-account.value": lead_project}, "overview")
            post(user, "ov-content.children", {**base, "ov-period.start_date": "2026-09-01",
                                               "ov-period.end_date": "2026-09-30"}, "overview")
            # the jobs to fix, its own callback beside each page's: all the data, a month, a project, My jobs
            post(user, "ov-fix.children", {}, "jobs to fix")
            post(user, "ov-fix.children", {"ov-period.start_date": "2026-09-01", "ov-period.end_date": "2026-09-30"},
                 "jobs to fix")
            post(user, "pj-fix.children", {"pj-name.data": lead_project}, "jobs to fix")
            post(user, "jobs-fix.children", {"jobs-user.value": user}, "jobs to fix")
            post(user, "us-content.children", {"us-grain.value": "day", "us-stack.value": "account",
                                               "us-name.data": lead_users[rnd % len(lead_users)]}, "user page")
            post(user, "pj-content.children", {"pj-grain.value": "week", "pj-stack.value": "partition",
                                               "pj-name.data": lead_project}, "project page")
            post(user, "..ut-table.rowData...ut-status.children..", {}, "users table")
            post(user, "..ut-table.rowData...ut-status.children..", {"ut-partition.value": "gpu"}, "users table")
            post(user, "..pt-table.rowData...pt-status.children..", {}, "projects table")
            post(user, "..fl-table.rowData...fl-status.children..", {}, "flagged grid")
            post(user, "..fl-table.rowData...fl-status.children..", {"fl-code.value": ["gpu_low_util"],
                                                                  "fl-severity.value": ["alarm"]}, "flagged grid")
            post(user, "..fl-table.rowData...fl-status.children..", {"fl-account.value": lead_project,
                                                                  "fl-period.start_date": "2026-10-01"}, "flagged grid")
            jobs_key = "..jobs-table.rowData...jobs-status.children...jobs-page.data...jobs-newer.disabled...jobs-older.disabled.."
            me = {"jobs-user.value": user}
            post(user, jobs_key, me, "my jobs")
            post(user, jobs_key, {**me, "jobs-state.value": "FAILED"}, "my jobs")
            post(user, jobs_key, {**me, "jobs-code.value": "cpu_low_eff"}, "my jobs")
            post(user, jobs_key, {**me, "jobs-page.data": 3}, "my jobs", ["jobs-older.n_clicks"])   # page 5
            post(user, jobs_key, {"jobs-partition.value": "gpu"}, "my jobs")      # a lead's or admin's all jobs
            search_key = next(k for k, v in app.callback_map.items() if k.startswith("..search-results") and "callback" in v)
            for text in (job_ids[rnd * 3], "job-12", "no-such-job"):
                post(user, search_key, {"search-box.value": text, "search-box.n_submit": 1}, "search")
            for jid in job_ids[rnd * 3:(rnd + 1) * 3]:
                post(user, "job-content.children", {"job-key.data": {"cluster": "bench", "id": jid}}, "job page")
    return times


TARGET_MS = 300
TARGET_MS_BY_CALLBACK = {"job page": 200}


def refresh_views(db: Path) -> None:
    """Re-create the metric views when sql/views changed since the database was made."""
    if not views_current(db):
        print("metric views changed since the database was made: refreshing them", flush=True)
        Database.open(db, parse_config({})).close()


def views_current(path: Path) -> bool:
    """Whether the database (or snapshot) at ``path`` has this version's metric views."""
    import duckdb

    from jobsight.analytics.store.database import stored_views_checksum, views_checksum
    con = duckdb.connect(str(path), read_only=True)
    try:
        return stored_views_checksum(con) == views_checksum()
    finally:
        con.close()


def publish_timed(db: Path) -> dict:
    """Publish the snapshot (copy + fsync)."""
    refresh_views(db)
    t = time.perf_counter()
    publish(db)
    secs = time.perf_counter() - t
    snap = db.with_name(db.name + ".snapshot")
    print(f"publish (copy + fsync): {secs:.1f} s", flush=True)
    return {"seconds": secs, "snapshot_gb": snap.stat().st_size / 1e9}


def callbacks(db: Path, rounds: int) -> dict:
    """Replay the scripted session on the published snapshot; p50/p95/max per callback, in ms."""
    snap = db.with_name(db.name + ".snapshot")
    reader = SnapshotReader(db)
    with reader.cursor() as h:
        n_jobs, n_samples = (h.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("job", "sample"))
    print(f"database: {n_jobs:,} jobs, {n_samples:,} samples; db {db.stat().st_size / 1e9:.2f} GB, "
          f"snapshot {snap.stat().st_size / 1e9:.2f} GB", flush=True)
    roles = Roles.from_config({"admins": ["root"], "leads": {"p7": ["lead7"]}})
    app = create_app(reader, Auth("header", roles))
    app.bench_jobs = n_jobs
    session(app, 1)                                   # warm-up: first ATTACH, imports, caches
    times = session(app, rounds, seed=2)
    reader.close()
    out = {}
    for label, ts in sorted(times.items()):
        ts = sorted(ts)
        out[label] = {"n": len(ts), "p50_ms": statistics.median(ts),
                      "p95_ms": ts[min(len(ts) - 1, int(round(0.95 * (len(ts) - 1))))], "max_ms": ts[-1],
                      "target_ms": TARGET_MS_BY_CALLBACK.get(label, TARGET_MS)}
    return {"jobs": n_jobs, "samples": n_samples, "callbacks": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--samples-per-device", type=int, default=33)
    ap.add_argument("--db", default=None, help="database path (generated when missing); default /tmp/jobsight-bench-<jobs>.duckdb")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--phase", choices=("all", "generate", "publish", "callbacks"), default="all")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = ap.parse_args()
    db = Path(args.db or f"/tmp/jobsight-bench-{args.jobs}.duckdb")
    figs: dict = {}
    if args.phase in ("all", "generate") and not db.exists():
        print(f"generating {db}", flush=True)
        figs["generate"] = generate(db, args.jobs, args.samples_per_device)
    if args.phase in ("all", "publish"):
        snap = db.with_name(db.name + ".snapshot")
        if (args.phase == "publish" or not snap.exists() or snap.stat().st_mtime < db.stat().st_mtime
                or not views_current(snap)):
            figs["publish"] = publish_timed(db)
    if args.phase in ("all", "callbacks"):
        figs["callbacks"] = callbacks(db, args.rounds)
    figs["maxrss_mb"] = peak_rss_mb()
    if args.json:
        print(json.dumps(figs))
        return 0
    if "callbacks" in figs:
        print(f"\n{'callback':24} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        for label, c in figs["callbacks"]["callbacks"].items():
            print(f"{label:24} {c['n']:>4} {c['p50_ms']:>8.1f} {c['p95_ms']:>8.1f} {c['max_ms']:>8.1f}")
        worst = max(c["p95_ms"] for c in figs["callbacks"]["callbacks"].values())
        print(f"\nworst p95: {worst:.1f} ms (target {TARGET_MS}; job page target {TARGET_MS_BY_CALLBACK['job page']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
