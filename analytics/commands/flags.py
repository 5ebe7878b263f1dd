"""`jobsight flags`: the jobs worth talking about, with the request that would have fit and what
following the advice would have saved (savings_sbu: the job's, on each of its flags).

A week of a large cluster holds 10^5 flags, so by default the most wasted 100 jobs are printed (as
jobstats and reportseff users expect) and a line on stderr says how many more there are; `--limit 0`
prints them all. The table has one line per job, its flags joined, so that its SBU column adds up;
CSV and JSON one row per flag, with the view's columns. Rows are fetched as tuples and written
column by column (analytics/render.py).
"""
from __future__ import annotations

import argparse
import shutil
import sys

from jobsight.analytics import render
from jobsight.analytics.commands.options import add_db_options, add_scope_options, filters_from, scope_of
from jobsight.analytics.queries.flags import COLUMNS, SORTS, flag_codes, flag_rows

# the table's columns: a job's own, and its flags' codes, messages and advice joined (flag_summary's
# names, sql/views/50_report.sql)
JOB_COLUMNS = ["job_id", "user", "account", "partition", "state", "sbu", "wasted_sbu", "savings_sbu"]
JOINED = {"code": ("flag_codes", ", "), "message": ("flag_messages", "; "), "advice": ("advice", "; ")}
TABLE_COLUMNS = JOB_COLUMNS + [name for name, _ in JOINED.values()]
DEFAULT_LIMIT = 100
# The table fits the terminal (COLUMNS; TABLE_WIDTH when it is not one), long text cut with an
# ellipsis; --wide shows every table column whole.
TABLE_WIDTH = 100
NARROW_DROP = ("account", "partition", "state", "flag_messages")      # left out of the table without --wide
# the columns the SQL writes from its own words, numbers and jobsight.toml, never from what a user
# wrote: in CSV, advice starting with an option (--mem=27G) is not prefixed with ' (analytics/render.py)
OWN_TEXT = ("advice",)


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p, server=True)
    add_scope_options(p)
    p.add_argument("--flag", action="append", metavar="CODE", choices=flag_codes(),
                   help="only this flag code (repeatable): " + ", ".join(flag_codes()))
    p.add_argument("--sort", choices=tuple(SORTS), default="wasted_sbu",
                   help="most wasted SBU first (default), most SBU first, most SBU the advice would have "
                        "saved first, or the latest end time first")
    p.add_argument("--limit", type=_limit, default=DEFAULT_LIMIT, metavar="N",
                   help=f"print the flags of the first N jobs (default {DEFAULT_LIMIT}); 0 prints every job")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--wide", action="store_true",
                   help=f"table: every column, text uncut (default: fit the terminal, {TABLE_WIDTH} columns "
                        "when it is none)")


def _limit(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("0 (every flag) or more")
    return n


def run(args: argparse.Namespace) -> int:
    from jobsight.analytics import client
    server = client.server_of(args)
    if server is not None:
        params = [(k, getattr(args, k)) for k in ("since", "until", "user", "account", "partition", "cluster")]
        params += [("flag", code) for code in args.flag or ()] + [("sort", args.sort), ("limit", args.limit)]
        answer = client.get(server, ["flags"], params)
        rows = [tuple(r.get(c) for c in COLUMNS) for r in answer["flags"]]
        return show(COLUMNS, rows, answer["more"], args)
    from jobsight.analytics.store.database import Database  # duckdb: not to parse options (analytics/cli.py)
    with Database.read(args.db, args.config) as db:
        return _run(db, args)


def _run(db, args: argparse.Namespace) -> int:
    f = filters_from(args, codes=tuple(args.flag or ()))
    names, rows, more = flag_rows(db, scope_of(db.config), f, args.sort, args.limit)
    return show(names, rows, more, args)


def show(names: list[str], rows: list[tuple], more: int, args: argparse.Namespace) -> int:
    """Print the flags (the one renderer of the local and the client command)."""
    table = TABLE_COLUMNS if args.wide else [c for c in TABLE_COLUMNS if c not in NARROW_DROP]
    if args.format == "table":
        names, rows = per_job(names, rows)
    width = None if args.wide else shutil.get_terminal_size((TABLE_WIDTH, 24)).columns
    render.emit_rows(names, rows, args.format, COLUMNS, table, empty="no flagged jobs",
                     width=width, options=OWN_TEXT, cut_first=("flag_messages",))
    if more:
        sys.stdout.flush()      # the note comes after the rows, also when both go to a terminal
        print(f"jobsight flags: {more:,} more jobs; --limit 0 for all", file=sys.stderr)
    return 0


def per_job(names: list[str], rows: list[tuple]) -> tuple[list[str], list[tuple]]:
    """One row per job (its flags are consecutive rows): JOB_COLUMNS, then each flag's code,
    message and advice joined, in the rows' order."""
    at = {c: names.index(c) for c in [*JOB_COLUMNS, *JOINED, "cluster", "job_id_raw"]}
    out: list[tuple] = []
    last = None
    for r in rows:
        key = (r[at["cluster"]], r[at["job_id_raw"]])
        if key != last:
            out.append(tuple(r[at[c]] for c in JOB_COLUMNS) + tuple([] for _ in JOINED))
            last = key
        for k, c in enumerate(JOINED):
            if r[at[c]]:
                out[-1][len(JOB_COLUMNS) + k].append(r[at[c]])
    joined = [sep for _, sep in JOINED.values()]
    return TABLE_COLUMNS, [row[:len(JOB_COLUMNS)] + tuple(sep.join(parts) for sep, parts in
                                                         zip(joined, row[len(JOB_COLUMNS):])) for row in out]
