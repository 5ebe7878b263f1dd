"""`jobsight usage`: billing units burned, wasted and what following the advice would have saved,
by user, account, partition or period.

Every number is the table macro usage_summary (sql/views/40_usage.sql): usage split by day (job_day),
the whole days of --since/--until, summed by the key. A job crossing the window's edge or a week
boundary counts only with the share of its time inside, and a window may start mid-week.

`--budget` prints the allocations instead, each against its burn as of --until's last day (default:
the latest day with accounting data): the table macro budget_status (sql/views/55_budget.sql).
"""
from __future__ import annotations

import argparse
import datetime as dt

from jobsight.analytics import render
from jobsight.analytics.commands.options import add_db_options, add_scope_options, filters_from, scope_of
from jobsight.analytics.errors import UserError
from jobsight.analytics.queries.data_age import DataAge, data_age
from jobsight.analytics.queries.scope import Scope
from jobsight.analytics.queries.usage import BUDGET_COLUMNS, BY, COLUMNS, budget_as_of, budget_rows, usage

DATES = ("period_start", "period_end", "as_of", "run_out_date")    # DATE columns of the allocations
# the text table: numbers with their unit in the header, the alert in capitals (OVER stands out)
BUDGET_TABLE = [("account", "account"), ("user", "user"), ("period_start", "period from"),
                ("allocation_sbu", "allocation SBU"), ("burned_sbu", "burned SBU"), ("remaining_sbu", "remaining SBU"),
                ("used_pct", "used %"), ("burn_rate_7d", "7-day SBU/day"), ("burn_rate_30d", "30-day SBU/day"),
                ("run_out_date", "runs out"), ("period_end", "resets"), ("remaining_at_reset_sbu", "left at reset SBU"),
                ("alert_shown", "alert")]


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p, server=True)
    add_scope_options(p)
    p.add_argument("--by", choices=BY, default="account")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--budget", action="store_true",
                   help="the allocations ([budgets], sacctmgr) against their burn as of --until: remaining SBU, "
                        "burn rates, run-out date, alert (OVER: over budget)")


def run(args: argparse.Namespace) -> int:
    if args.budget and (args.since or args.partition):
        raise UserError("--budget: an allocation period has its own start and covers every partition; "
                        "give --until (the day the figures are as of), --account, --user or --cluster")
    from jobsight.analytics import client
    server = client.server_of(args)
    if server is not None:      # the server's rows, in the server's scope of the asking user
        params = [(k, getattr(args, k)) for k in ("since", "until", "user", "account", "partition", "cluster")]
        if args.budget:
            answer = client.get(server, ["usage", "budgets"], params)
            names = BUDGET_COLUMNS + ["alert_shown"]
            rows = [tuple(dt.date.fromisoformat(r[c]) if c in DATES and r.get(c) else r.get(c) for c in names)
                    for r in answer["budgets"]]
            return show_budgets(names, rows, _age(client, answer), args)
        answer = client.get(server, ["usage"], params + [("by", args.by)])
        names = [args.by] + COLUMNS
        return show(names, [tuple(r.get(c) for c in names) for r in answer["usage"]], _age(client, answer), args)
    from jobsight.analytics.store.database import Database  # duckdb: not to parse options (analytics/cli.py)
    with Database.read(args.db, args.config) as db:
        return _run(db, args)


def _run(db, args: argparse.Namespace) -> int:
    f = filters_from(args)
    scope = scope_of(db.config)
    if scope.role == "lead":   # a lead asks for one of their accounts, or their own jobs
        if f.account not in scope.accounts and f.user != scope.user:
            raise UserError(f"--account: one of the accounts you lead ({', '.join(scope.accounts)}), or --user {scope.user}")
        scope = Scope.admin(scope.user)
    if args.budget:
        return _budget(db, args, f, scope)
    names, rows = usage(db, scope, f, args.by)
    return show(names, rows, data_age(db), args)


def _age(client, answer: dict) -> DataAge:
    age = answer["data_age"]
    return DataAge(client.revive(age["newest"], "newest_time") if age else None, bool(age and age["old"]))


def show(names: list[str], rows: list[tuple], age: DataAge, args: argparse.Namespace) -> int:
    """Print the usage rows (the one renderer of the local and the client command)."""
    render.emit_rows(names, rows, args.format, [args.by] + COLUMNS, empty="no usage in this period")
    if args.format == "table":      # how old the figures are; JSON and CSV stay rows only
        render.print_text(age.line())
    return 0


def _budget(db, args: argparse.Namespace, f, scope: Scope) -> int:
    """The allocations of --account, --user and --cluster (queries/usage.py), as of --until."""
    names, rows = budget_rows(db, scope, f, budget_as_of(db, f.until_ts))
    return show_budgets(names, rows, data_age(db), args)


def show_budgets(names: list[str], rows: list[tuple], age: DataAge, args: argparse.Namespace) -> int:
    """Print the allocations (the one renderer of the local and the client command)."""
    if args.format != "table":
        render.emit_rows(names, rows, args.format, BUDGET_COLUMNS)
    elif not rows:
        render.print_text("no budgets: set them in [budgets] of jobsight.toml, or with sacctmgr "
                          "(GrpTRESMins=billing=N) and ingest --from-sacct")
    else:
        first = rows[0][names.index("as_of")]
        render.print_text(f"budgets as of {first:%Y-%m-%d} (SBU; rates in SBU per day; OVER: over budget)\n"
                          + render.table_of(names, rows, [c for c, _ in BUDGET_TABLE], [h for _, h in BUDGET_TABLE])
                          + "\n" + age.line())
    return 0
