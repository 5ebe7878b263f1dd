"""`jobsight usage`: billing units burned, wasted and what following the advice would have saved,
by user, account, partition or period.

Every number is the table macro usage_summary (sql/views/40_usage.sql): usage split by day (job_day),
the whole days of --since/--until, summed by the key. A job crossing the window's edge or a week
boundary counts only with the share of its time inside, and a window may start mid-week.
"""
from __future__ import annotations

import argparse
import datetime as dt

from jobsight.analytics import render
from jobsight.analytics.query_filters import add_db_options, add_scope_options, scope_values

BY = ("user", "account", "partition", "cluster", "day", "week", "month")
PERIODS = ("day", "week", "month")
COLUMNS = ["jobs", "sbu", "wasted_sbu", "wasted_pct", "savings_sbu", "savings_pct", "core_hours", "gpu_hours"]
# no --since / --until: every day DuckDB can hold (bounds rather than NULLs keep the day filter a
# range that the scan of job_day, stored in day order, prunes with)
EARLIEST, LATEST = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p)
    add_scope_options(p)
    p.add_argument("--by", choices=BY, default="account")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    from jobsight.analytics.database import Database  # duckdb: not to parse options (analytics/cli.py)
    with Database.open(args.db, args.config, must_exist=True) as db:
        return _run(db, args)


def _run(db, args: argparse.Namespace) -> int:
    v = scope_values(args)
    # periods in time order, the others most burn first
    order = '"key"' if args.by in PERIODS else 'sbu DESC NULLS LAST, "key"'
    names, rows = db.fetch(f"""
        SELECT "key" AS {render.quote_ident(args.by)}, {render.select_list(COLUMNS)}
        FROM usage_summary(?, ?, ?, only_user := ?, only_account := ?, only_partition := ?, only_cluster := ?)
        ORDER BY {order}""", [args.by, v["since"] or EARLIEST, v["until"] or LATEST,
                              v["user"], v["account"], v["partition"], v["cluster"]])
    render.emit_rows(names, rows, args.format, [args.by] + COLUMNS, empty="no usage in this period")
    return 0
