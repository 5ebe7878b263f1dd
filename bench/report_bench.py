"""Benchmark: weekly reports for 1,000 users on a generated database. Target: <= 60 s in total
for the `--for all-users --format html` run. Prints figures; asserts nothing about time.

    .venv/bin/python bench/report_bench.py [--users 1000] [--weeks 5] [--jobs-per-week 8] [--keep DIR] [--json]

The database is synthetic, inserted with SQL: every user runs jobs-per-week jobs a week for
`weeks` weeks ending in 2026-W47, in 100 accounts; one job in five is a 1-2 GPU job with sidecar
samples (2 GPUs x 12 samples), the rest CPU jobs with TotalCPU (one in 17 without, so unrated).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import peak_rss_mb  # noqa: E402

from jobsight.analytics.cli import main  # noqa: E402
from jobsight.analytics.config import parse_config  # noqa: E402
from jobsight.analytics.store.database import Database  # noqa: E402

JOBS_SQL = """
INSERT INTO job (cluster, job_id, job_id_raw, job_name, "user", account, "partition", state, exit_code,
                 start_time, end_time, elapsed_s, timelimit_s, ncpus, ngpus, gpu_type, billing, cpu_time_s,
                 mem_alloc_bytes, mem_peak_bytes, source)
WITH g AS (
    SELECT i, i % $users AS u, i % 5 = 0 AS gpu,
           TIMESTAMP '2026-11-23' - INTERVAL ($weeks * 7) DAY + to_seconds(CAST(hash(i, 1) % ($weeks * 7 * 86400) AS BIGINT)) AS start_time,
           600 + CAST(hash(i, 2) % 36000 AS BIGINT) AS elapsed_s,
           1 + CAST(hash(i, 3) % 32 AS BIGINT) AS ncpus,
           1 + CAST(hash(i, 4) % 2 AS BIGINT) AS ngpus,
           (hash(i, 5) % 100) / 100.0 AS eff
    FROM range($n) t(i)
)
SELECT 'bench', CAST(i AS VARCHAR), CAST(i AS VARCHAR), 'job-' || (i % 50),
       'user' || lpad(CAST(u AS VARCHAR), 4, '0'), 'proj-' || lpad(CAST(u % 100 AS VARCHAR), 3, '0'),
       CASE WHEN gpu THEN 'gpu' ELSE 'cpu' END,
       CASE WHEN i % 23 = 0 THEN 'FAILED' WHEN i % 29 = 0 THEN 'TIMEOUT' ELSE 'COMPLETED' END,
       CASE WHEN i % 23 = 0 THEN '1:0' ELSE '0:0' END,
       start_time, start_time + to_seconds(elapsed_s), elapsed_s, elapsed_s * (1 + hash(i, 6) % 10),
       ncpus, CASE WHEN gpu THEN ngpus ELSE 0 END, CASE WHEN gpu THEN 'a100' END,
       CASE WHEN gpu THEN 128 * ngpus ELSE ncpus END,
       CASE WHEN i % 17 = 0 THEN NULL ELSE elapsed_s * ncpus * eff END,
       ncpus * 4 * 1073741824, CAST(ncpus * 4 * 1073741824 * (hash(i, 7) % 100) / 100.0 AS BIGINT), 'bench'
FROM g
"""

SAMPLES_SQL = """
INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, mem_total_bytes, source)
SELECT j.cluster, j.job_id_raw, 'n1', 'GPU-' || d, j.start_time + to_seconds(s * j.elapsed_s // 12),
       CASE WHEN d = 1 AND hash(j.job_id_raw) % 3 = 0 THEN 0 ELSE (hash(j.job_id_raw, d, s) % 100) END,
       (hash(j.job_id_raw, d) % 40) * 1e9, 40e9, 'sidecar'
FROM job j, range(2) t1(d), range(12) t2(s)
WHERE j.ngpus > 0
"""


def run(argv: list[str]) -> tuple[float, str]:
    err = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc != 0:
        raise SystemExit(f"jobsight {' '.join(argv)} failed: {err.getvalue()}")
    return time.perf_counter() - t, err.getvalue().strip()


def dir_stats(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


TARGET_S = 60


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--weeks", type=int, default=5)
    ap.add_argument("--jobs-per-week", type=int, default=8)
    ap.add_argument("--keep", help="write the database and reports here and keep them")
    ap.add_argument("--db", help="report on this existing database (e.g. `jobsight demo --db ...`) instead of generating one")
    ap.add_argument("--week", default="2026-W47")
    ap.add_argument("--workdir", help="where the temporary database and reports go (default: the system temp dir)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = ap.parse_args()
    figs = bench(args)
    if args.json:
        print(json.dumps(figs))


def bench(args) -> dict:
    """Generate (unless --db), then time the three report runs. Returns the figures."""
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="jobsight-report-bench-", dir=args.workdir))
    work.mkdir(parents=True, exist_ok=True)
    db = Path(args.db) if args.db else work / "bench.duckdb"
    if not args.db and db.exists():
        db.unlink()
    n = args.users * args.weeks * args.jobs_per_week
    figs: dict = {}
    try:
        if not args.db:
            figs["generate"] = generate(db, args, n)
        figs["phases"] = phases(db, args.week)
        base = ["report", "--db", str(db), "--week", args.week]
        out = work / "reports"
        secs, msg = run(base + ["--for", "all-users", "--format", "html", "--out", str(out / "html")])
        files, size = dir_stats(out / "html")
        figs["html"] = {"seconds": secs, "files": files, "bytes": size, "target_s": TARGET_S}
        print(f"all-users, html:                {secs:6.1f} s  ({files:,} files, {size / 1e9:.2f} GB)")
        print(f"  per report:                   {secs / max(files, 1) * 1000:6.1f} ms")
        target = "MET" if secs <= TARGET_S else "MISSED"
        print(f"  target <= {TARGET_S} s for 1,000 users: {target} ({files:,} users here)")
        if not args.keep:
            shutil.rmtree(out / "html")
        secs, msg = run(base + ["--for", "all-users", "--for", "all-accounts", "--for", "admin",
                                "--format", "md,csv", "--out", str(out / "text")])
        files, size = dir_stats(out / "text")
        figs["md_csv"] = {"seconds": secs, "files": files, "bytes": size}
        print(f"all users+accounts+admin, md,csv: {secs:6.1f} s  ({files:,} files, {size / 1e6:.1f} MB)")
        secs, msg = run(base + ["--for", "all-users", "--for", "all-accounts", "--for", "admin", "--email",
                                "--eml-dir", str(out / "eml"), "--config", str(_mail_config(work))])
        files, size = dir_stats(out / "eml")
        figs["eml"] = {"seconds": secs, "files": files, "bytes": size}
        print(f"e-mail as .eml (all):           {secs:6.1f} s  ({files:,} messages, {size / 1e6:.1f} MB)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    figs["maxrss_mb"] = peak_rss_mb()
    return figs


def generate(db: Path, args, n: int) -> dict:
    t = time.perf_counter()
    con = Database.open(db, parse_config({}))
    sql = JOBS_SQL.replace("$users", str(args.users)).replace("$weeks", str(args.weeks)).replace("$n", str(n))
    con.execute(sql)
    con.execute(SAMPLES_SQL)
    jobs, samples = con.execute("SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM sample)").fetchone()
    users = con.execute("SELECT count(DISTINCT \"user\") FROM job WHERE start_time >= '2026-11-16'").fetchone()[0]
    con.close()
    print(f"generated {jobs:,} jobs, {samples:,} samples, {users:,} users active in 2026-W47 "
          f"in {time.perf_counter() - t:.1f} s")
    return {"jobs": jobs, "samples": samples, "users": users, "seconds": time.perf_counter() - t}


def phases(db: Path, week: str) -> dict:
    """Where the time goes: the SQL (once per run) and building + rendering one report per user."""
    from jobsight.analytics.reports.data import gather
    from jobsight.analytics.reports.html import render_html_chunks
    from jobsight.analytics.reports.period import resolve
    from jobsight.analytics.reports.settings import from_config
    con = Database.open(db, parse_config({}))
    cfg = con.config
    t = time.perf_counter()
    ds = gather(con, resolve(week, None, None), from_config(cfg))
    con.close()
    t_sql = time.perf_counter() - t
    t = time.perf_counter()
    reports = [ds.build("user", u) for u in ds.subjects("user")]
    t_build = time.perf_counter() - t
    t = time.perf_counter()
    for rep in reports:
        render_html_chunks(rep)
    t_html = time.perf_counter() - t
    print(f"phases: SQL (report macros, once) {t_sql:.1f} s; build {len(reports):,} user reports {t_build:.2f} s; "
          f"render HTML in memory {t_html:.2f} s")
    return {"sql_s": t_sql, "build_s": t_build, "render_s": t_html, "reports": len(reports)}


def _mail_config(work: Path) -> Path:
    p = work / "jobsight.toml"
    p.write_text('[email]\nfrom = "jobsight@example.org"\nuser_address = "{user}@example.org"\n'
                 'admins = ["ops@example.org"]\n', encoding="utf-8")
    return p


if __name__ == "__main__":
    main_bench()
