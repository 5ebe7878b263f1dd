"""Time the metric and flag views themselves (sql/views), each query in a fresh process with its peak RSS.

    .venv/bin/python bench/views_bench.py --db /tmp/jobsight-bench-1000000.duckdb [--json]
    .venv/bin/python bench/views_bench.py --jobs 20000          # generates the database first (dashboard_bench)

The database is one made by bench/dashboard_bench.py (job ids 0..N-1 in cluster 'bench', users
u0..u499, every fifth job a GPU job). Full evaluations aggregate every row of a view, so that DuckDB
must compute all of it (nothing is pruned); the lookups are what a CLI user or the dashboard
without a snapshot would ask. Baseline for each: the same rows straight from the tables, with no
formulas: one GROUP BY of the samples per job (what any per-job metric has to read at least).
No targets (the issue asks for the time); the dashboard reads the snapshot's dash_* tables instead.
This prints figures; it asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import peak_rss_mb, run_json  # noqa: E402

# what the samples baseline reads: each job with the mean of its samples
_BASE = ('SELECT j.cluster, j.job_id_raw, j."user", count(s.util_pct) AS n, avg(s.util_pct) AS u FROM job j '
         'LEFT JOIN sample s USING (cluster, job_id_raw) {where} GROUP BY ALL')
BASE_ALL = f"SELECT count(*), sum(n), sum(u) FROM ({_BASE.format(where='')})"


def queries(job_id: str, user: str) -> list[tuple[str, str, str]]:
    """(label, view query, baseline query)."""
    one_job = f"WHERE j.cluster = 'bench' AND j.job_id_raw = '{job_id}'"
    one_user = f"WHERE j.\"user\" = '{user}'"
    return [
        ("job_metrics, all jobs", "SELECT count(*), sum(sbu), sum(wasted_sbu), avg(cpu_eff_pct), avg(gpu_util_pct) "
                                  "FROM job_metrics", BASE_ALL),
        ("job_flags, all jobs", "SELECT count(*), count(DISTINCT code), sum(sbu), max(length(message)) FROM job_flags",
         BASE_ALL),
        ("usage_weekly, all jobs", "SELECT count(*), sum(sbu), sum(wasted_sbu) FROM usage_weekly", BASE_ALL),
        ("job_metrics, one job", f"SELECT * FROM job_metrics WHERE cluster = 'bench' AND job_id_raw = '{job_id}'",
         f"SELECT * FROM ({_BASE.format(where=one_job)})"),
        ("job_flags, one job", f"SELECT * FROM job_flags WHERE cluster = 'bench' AND job_id_raw = '{job_id}'",
         f"SELECT * FROM ({_BASE.format(where=one_job)})"),
        (f"job_metrics, one user ({user})", f"SELECT count(*), sum(sbu), sum(wasted_sbu) FROM job_metrics "
                                           f"WHERE \"user\" = '{user}'",
         f"SELECT count(*), sum(n), sum(u) FROM ({_BASE.format(where=one_user)})"),
    ]


def child(db: str, sql: str) -> None:
    """One query in this fresh process: open read-only (views checked current), run, fetch all."""
    from jobsight.analytics.session import open_db
    con, _ = open_db(db, None, read_only=True)
    t = time.perf_counter()
    rows = con.execute(sql).fetchall()
    secs = time.perf_counter() - t
    con.close()
    print(json.dumps({"seconds": secs, "maxrss_mb": peak_rss_mb(), "rows": len(rows)}))


def measure(db: Path, sql: str) -> dict:
    return run_json([__file__, "--child", str(db), sql], prefix="    ")


def run(db: Path) -> dict:
    """Figures for every query: {label: {"view": {...}, "baseline": {...}}}."""
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    jobs, = con.execute("SELECT count(*) FROM job").fetchone()
    samples, = con.execute("SELECT count(*) FROM sample").fetchone()
    # a GPU job in the middle (dashboard_bench: every fifth job has GPUs), and a user with jobs
    job_id, = con.execute("SELECT job_id_raw FROM job WHERE ngpus > 0 ORDER BY CAST(job_id_raw AS BIGINT) "
                          "LIMIT 1 OFFSET (SELECT count(*) // 10 FROM job)").fetchone()
    user, = con.execute('SELECT min("user") FROM job').fetchone()
    con.close()
    out: dict = {"jobs": jobs, "samples": samples, "queries": {}}
    baselines: dict[str, dict] = {}
    for label, sql, base in queries(job_id, user):
        print(f"  {label} ...", file=sys.stderr, flush=True)
        view = measure(db, sql)
        if base not in baselines:          # the three full views share one baseline: run it once
            baselines[base] = measure(db, base)
        out["queries"][label] = {"view": view, "baseline": baselines[base]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", help="a database made by bench/dashboard_bench.py (generated when missing)")
    ap.add_argument("--jobs", type=int, default=20_000, help="jobs to generate when --db is missing")
    ap.add_argument("--samples-per-device", type=int, default=33)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    ap.add_argument("--child", nargs=2, metavar=("DB", "SQL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    db = Path(args.db or f"/tmp/jobsight-bench-{args.jobs}.duckdb")
    if not db.exists():
        import dashboard_bench
        dashboard_bench.generate(db, args.jobs, args.samples_per_device)
    figs = run(db)
    if args.json:
        print(json.dumps(figs))
        return 0
    print(f"\n{figs['jobs']:,} jobs, {figs['samples']:,} samples")
    print(f"{'query':34} {'view s':>8} {'RSS MB':>7} | {'tables s':>8} {'RSS MB':>7} | {'ratio':>7}")
    for label, q in figs["queries"].items():
        v, b = q["view"], q["baseline"]
        print(f"{label:34} {v['seconds']:>8.2f} {v['maxrss_mb']:>7.0f} | {b['seconds']:>8.2f} {b['maxrss_mb']:>7.0f} | "
              f"{v['seconds'] / max(b['seconds'], 1e-9):>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
