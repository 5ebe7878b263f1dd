"""Parquet lake vs the DuckDB file: export time, bytes per sample row, per-job metric query time.

    .venv/bin/python bench/lake_bench.py [--jobs 100000] [--samples-per-device 33] [--db PATH] [--out DIR] [--spark]

Builds (unless --db exists) the generated database of bench/dashboard_bench.py: N jobs, 20 % with
1-4 GPUs, K samples per device (about N x 1.5 x K sample rows; 100k jobs x 33 = 4.9M). Its GPU
utilisation is a hash, so it compresses worse than real, smooth utilisation: the byte figures are
an upper bound. Then `jobsight lake export` into --out (timed), the on-disk sizes and the samples'
compressed bytes per column, and the per-job metrics (GPU utilisation and SBU for every job) three
ways: job_metrics on the DuckDB file, lake_job_metrics (the portable sql/metrics files) by DuckDB over the Parquet files,
and the same for one month only (partition pruning); with --spark also by Spark local[2] (pyspark).
Prints figures only; no assertions.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import duckdb  # noqa: E402
from dashboard_bench import generate  # noqa: E402

from jobsight.analytics.config import parse_config  # noqa: E402
from jobsight.analytics.store import lake  # noqa: E402
from jobsight.analytics.store.database import Database  # noqa: E402

METRIC_QUERY = "SELECT count(*), sum(sbu), avg(gpu_util_pct) FROM {view}"


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def best_of_3(fn):
    """The result of fn and its best time of 3 runs (the result is taken from the runs, not a 4th)."""
    runs = [timed(fn) for _ in range(3)]
    return runs[0][0], min(t for _, t in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--samples-per-device", type=int, default=33)
    ap.add_argument("--db", type=Path, help="reuse or create this database (default: a temporary one)")
    ap.add_argument("--out", type=Path, help="lake folder (default: a temporary one, removed after)")
    ap.add_argument("--spark", action="store_true", help="also run lake_job_metrics on Spark local[2]")
    args = ap.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lake-bench-{os.getpid()}"
    db = args.db or tmp / "bench.duckdb"
    out = args.out or tmp / "lake"
    db.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not db.exists():
            print(f"generating {args.jobs:,} jobs x {args.samples_per_device} samples per device into {db}", flush=True)
            generate(db, args.jobs, args.samples_per_device)
        con = Database.open(db, parse_config({}))
        n_samples = con.execute("SELECT count(*) FROM sample").fetchone()[0]
        n_jobs = con.execute("SELECT count(*) FROM job").fetchone()[0]
        con.execute("CHECKPOINT")
        summary, t_export = timed(lambda: lake.export(con, out))
        con.close()

        size_db, size_samples, size_jobs = du(db), du(out / "samples"), du(out / "jobs")
        print(f"\ndata: {n_jobs:,} jobs, {n_samples:,} sample rows")
        print(f"export: {t_export:.1f} s ({n_samples / t_export / 1e6:.2f} M sample rows/s), "
              f"{sum(len(summary[t]['partitions']) for t in lake.PARTITIONED)} partitions")
        print(f"{'':<24}{'bytes':>14}{'bytes/sample row':>18}")
        print(f"{'DuckDB file (all)':<24}{size_db:>14,}{size_db / n_samples:>18.2f}")
        print(f"{'lake samples/':<24}{size_samples:>14,}{size_samples / n_samples:>18.2f}")
        print(f"{'lake jobs/':<24}{size_jobs:>14,}{'':>18}")
        print(f"{'lake total':<24}{du(out):>14,}{du(out) / n_samples:>18.2f}")

        probe = duckdb.connect()
        cols = probe.execute(
            f"SELECT path_in_schema, sum(total_compressed_size), count(DISTINCT row_group_id) "
            f"FROM parquet_metadata('{out}/samples/**/*.parquet') GROUP BY 1 ORDER BY 2 DESC").fetchall()
        groups = probe.execute(f"SELECT count(*) FROM (SELECT DISTINCT file_name, row_group_id "
                               f"FROM parquet_metadata('{out}/samples/**/*.parquet'))").fetchone()[0]
        print(f"\nsamples: {groups} row groups of up to {lake.ROW_GROUP_SIZE:,} rows; compressed bytes per row by column:")
        for name, size, _ in cols:
            print(f"  {name:<18}{size / n_samples:>8.2f}")
        probe.close()

        print("\nper-job metrics (every job's GPU utilisation and SBU), best of 3:")
        con = Database.open(db, parse_config({}), read_only=True)
        r_db, best_db = best_of_3(lambda: con.execute(METRIC_QUERY.format(view="job_metrics")).fetchone())
        con.close()
        lk = duckdb.connect()
        lake.attach(lk, out)
        r_lake, best_lake = best_of_3(lambda: lk.execute(METRIC_QUERY.format(view="lake_job_metrics")).fetchone())
        month = max(m for _, m in summary["samples"]["partitions"])
        one_month = ("SELECT count(*), sum(util_pct) FROM lake_samples WHERE month = ?", [month])
        best_month = best_of_3(lambda: lk.execute(*one_month).fetchall())[1]
        lk.close()
        print(f"  {'DuckDB file, job_metrics':<42}{best_db:>8.2f} s   jobs {r_db[0]:,}, SBU {r_db[1]:,.1f}")
        print(f"  {'DuckDB over lake, lake_job_metrics':<42}{best_lake:>8.2f} s   jobs {r_lake[0]:,}, SBU {r_lake[1]:,.1f}")
        print(f"  {'DuckDB over lake, one month of samples':<42}{best_month:>8.2f} s   (month={month})")
        if args.spark:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            from pyspark.sql import SparkSession
            spark, t_start = timed(lambda: (
                SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "4g")
                .config("spark.sql.session.timeZone", "UTC").getOrCreate()))
            spark.sparkContext.setLogLevel("ERROR")
            lake.attach_spark(spark, out)
            q = METRIC_QUERY.format(view="lake_job_metrics")
            r_sp, t_first = timed(lambda: spark.sql(q).collect()[0])
            t_second = timed(lambda: spark.sql(q).collect())[1]
            spark.stop()
            print(f"  {'Spark local[2] over lake (first, second)':<42}{t_first:>8.2f} s, {t_second:.2f} s   "
                  f"jobs {r_sp[0]:,}, SBU {r_sp[1]:,.1f} (session start {t_start:.1f} s)")
        print(f"\nload average: {os.getloadavg()[0]:.1f} (2-core machine)")
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
        if not args.db:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
