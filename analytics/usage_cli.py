"""`jobsight usage`: billing units burned and wasted, by user, account, partition or period.

Usage is split by day (usage_daily, sql/views/40_usage.sql), filtered to the whole
days of --since/--until, then summed by the key: a job crossing the window's edge or a week
boundary counts only with the share of its time inside, and a window may start mid-week.
"""
from __future__ import annotations

import argparse

from jobsight.analytics import render
from jobsight.analytics.query_filters import add_db_options, add_scope_options, scope_where
from jobsight.analytics.session import open_db

BY = {"user": '"user"', "account": "account", "partition": '"partition"', "cluster": "cluster",
      "day": "strftime(period_start, '%Y-%m-%d')", "week": "strftime(date_trunc('week', period_start), '%G-W%V')",
      "month": "strftime(period_start, '%Y-%m')"}
COLUMNS = ["jobs", "sbu", "wasted_sbu", "wasted_pct", "core_hours", "gpu_hours"]


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p)
    add_scope_options(p)
    p.add_argument("--by", choices=tuple(BY), default="account")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    con, _cfg = open_db(args.db, args.config)
    where, params = scope_where(args, "period_start")
    key = BY[args.by]
    rows = render.rows_of(con, f"""
        SELECT {key} AS {render.quote_ident(args.by)},
               count(DISTINCT (cluster, job_id_raw)) AS jobs,
               sum(sbu) AS sbu, sum(wasted_sbu) AS wasted_sbu,
               sum(wasted_sbu) * 100.0 / NULLIF(sum(sbu) FILTER (WHERE wasted_sbu IS NOT NULL), 0) AS wasted_pct,
               sum(core_hours) AS core_hours, sum(gpu_hours) AS gpu_hours
        FROM usage_daily{where}
        GROUP BY ALL
        ORDER BY {'1' if args.by in ('day', 'week', 'month') else 'sbu DESC NULLS LAST, 1'}""", params)
    render.emit(rows, args.format, [args.by] + COLUMNS, empty="no usage in this period")
    return 0
