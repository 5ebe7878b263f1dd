"""`jobsight lake`: export the database to a Hive-partitioned Parquet lake and query it in place.

    jobsight lake export --db DB --out DIR [--month YYYY-MM | --since YYYY-MM --until YYYY-MM]
    jobsight lake metrics DIR [--cluster C] [--month YYYY-MM] [--format table|csv|json]
    jobsight lake query DIR "<a query over lake_job_metrics ...>" [--format table|csv|json]

Layout, partition keys and why: analytics/store/lake.py. The metric views over the lake are the portable
SQL of sql/metrics/ (NN_lake_*.sql), which Spark SQL runs unchanged and the database's stored
job_metrics is computed with (docs/lake.md).
"""
from __future__ import annotations

import argparse
import time

import duckdb

from jobsight.analytics import render
from jobsight.analytics.commands.options import add_db_options
from jobsight.analytics.errors import UserError
from jobsight.analytics.store import lake
from jobsight.analytics.store.database import Database

# What `lake metrics` prints of lake_job_metrics (every column of job_metrics; `lake query` reads them all):
# CSV and JSON get OUTPUT_COLUMNS, the table the shorter METRIC_COLUMNS.
OUTPUT_COLUMNS = ["cluster", "job_id_raw", "job_id", "account", "partition", "state", "elapsed_s", "ncpus", "ngpus",
                  "gpu_util_pct", "gpu_util_source", "gpus_sampled", "gpus_idle", "gpu_util_min_device_pct",
                  "charged_cores", "charged_gpus", "sbu", "sbu_source", "core_hours", "gpu_hours"]
METRIC_COLUMNS = ["cluster", "job_id", "account", "partition", "state", "ngpus", "gpu_util_pct",
                  "gpu_util_source", "sbu", "sbu_source", "core_hours", "gpu_hours"]


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="lake_command", metavar="ACTION", required=True)
    ex = sub.add_parser("export", help="write samples and jobs as Parquet partitioned by cluster and month")
    add_db_options(ex)
    ex.add_argument("--out", required=True, metavar="DIR", help="the lake's root folder (created if missing)")
    ex.add_argument("--month", help="only this month (YYYY-MM): its partitions are replaced")
    ex.add_argument("--since", help="from this month (YYYY-MM), inclusive")
    ex.add_argument("--until", help="up to this month (YYYY-MM), inclusive")
    me = sub.add_parser("metrics", help="per-job GPU utilisation and SBU computed on the lake (lake_job_metrics)")
    me.add_argument("lake", metavar="DIR")
    me.add_argument("--cluster", help="only this cluster's jobs")
    me.add_argument("--month", help="only jobs submitted in this month (YYYY-MM)")
    me.add_argument("--format", choices=("table", "csv", "json"), default="table")
    qu = sub.add_parser("query", help="run SQL over the views lake_samples, lake_jobs, lake_job_metrics, ...")
    qu.add_argument("lake", metavar="DIR")
    qu.add_argument("sql", metavar="SQL")
    qu.add_argument("--format", choices=("table", "csv", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    return {"export": run_export, "metrics": run_metrics, "query": run_query}[args.lake_command](args)


def run_export(args: argparse.Namespace) -> int:
    if args.month and (args.since or args.until):
        raise UserError("give either --month or --since/--until, not both")
    if args.month:
        since = until = lake.parse_month(args.month, "--month")
    else:
        since = lake.parse_month(args.since, "--since") if args.since else None
        until = lake.parse_month(args.until, "--until") if args.until else None
    t0 = time.monotonic()
    with Database.read(args.db, args.config) as db:
        summary = lake.export(db.con, args.out, since, until)
    for table in lake.PARTITIONED:
        s = summary[table]
        months = sorted({m for _, m in s["partitions"]})
        span = f"{months[0]}..{months[-1]}" if months else "none"
        print(f"{table}: {s['rows']} rows in {len(s['partitions'])} partitions (months {span})")
    for cluster, job, months in summary["moved_jobs"]:
        print(f"warning: job {job} of {cluster} is in months {', '.join(months)}: its submit time changed "
              f"since an earlier export; re-export --since {months[0]} --until {months[-1]} to keep one copy")
    if not any(summary[t]["partitions"] for t in lake.PARTITIONED):
        print(f"lake: {args.out} unchanged: the database holds no rows in that range")
    else:
        print(f"lake: {args.out} written in {time.monotonic() - t0:.1f} s")
    return 0


def _lake(path: str) -> Database:
    """The Parquet lake's views in an in-memory database."""
    con = duckdb.connect()
    try:
        lake.attach(con, path)
    except duckdb.Error as exc:
        con.close()
        raise UserError(f"{path}: cannot read the lake: {exc}") from None
    return Database.of(con)


def run_metrics(args: argparse.Namespace) -> int:
    month = lake.parse_month(args.month, "--month") if args.month else None
    with _lake(args.lake) as db:
        rows = lake.job_metrics(db, OUTPUT_COLUMNS, args.cluster, month)
    render.emit(rows, args.format, OUTPUT_COLUMNS, METRIC_COLUMNS, empty="no jobs")
    return 0


def run_query(args: argparse.Namespace) -> int:
    with _lake(args.lake) as db:
        try:
            rows = db.rows(args.sql)
        except duckdb.Error as exc:
            raise UserError(f"query failed: {exc}") from None
    render.emit(rows, args.format, list(rows[0]) if rows else [])
    return 0
