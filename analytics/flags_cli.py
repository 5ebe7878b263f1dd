"""`jobsight flags`: the jobs worth talking about, with the request that would have fit."""
from __future__ import annotations

import argparse

from jobsight.analytics import render
from jobsight.analytics.query_filters import add_db_options, add_scope_options, scope_where
from jobsight.analytics.session import open_db

COLUMNS = ["cluster", "job_id", "job_id_raw", "user", "account", "partition", "state", "end_time",
           "sbu", "wasted_sbu", "code", "severity", "message", "advice"]
TABLE_COLUMNS = ["job_id", "user", "account", "partition", "sbu", "wasted_sbu", "severity", "code", "message", "advice"]


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p)
    add_scope_options(p)
    p.add_argument("--flag", action="append", metavar="CODE", help="only this flag code (repeatable)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    con, _cfg = open_db(args.db, args.config)
    where, params = scope_where(args, "COALESCE(end_time, start_time)")
    if args.flag:
        where += (" AND " if where else " WHERE ") + f"code IN ({', '.join('?' for _ in args.flag)})"
        params += args.flag
    rows = render.rows_of(con, f"SELECT {render.select_list(COLUMNS)} FROM job_flags{where} "
                               "ORDER BY wasted_sbu DESC NULLS LAST, sbu DESC NULLS LAST, job_id_raw, code", params)
    render.emit(rows, args.format, COLUMNS, TABLE_COLUMNS, empty="no flagged jobs")
    return 0
