"""Billing units burned, wasted and what following the advice would have saved, summed by user,
account, partition, cluster or period (the table macro usage_summary, sql/views/40_usage.sql: usage
split by day as job_day splits it, summed per day in dash_day), and the allocations against their
burn (budget_status, 55_budget.sql)."""
from __future__ import annotations

import datetime as dt

from jobsight.analytics.queries.scope import Filters, Scope

BY = ("user", "account", "partition", "cluster", "day", "week", "month")
PERIODS = ("day", "week", "month")
COLUMNS = ["jobs", "sbu", "wasted_sbu", "wasted_pct", "savings_sbu", "savings_pct", "unpriced_jobs",
           "unpriced_wasted_sbu", "core_hours", "gpu_hours", "core_hours_unknown_jobs", "gpu_hours_unknown_jobs"]
# no period: every day DuckDB can hold (bounds rather than NULLs keep the day filter a range that
# the scan of job_day, stored in day order, prunes with)
EARLIEST, LATEST = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)
BUDGET_COLUMNS = ["cluster", "account", "user", "source", "period", "period_start", "period_end", "as_of",
                  "allocation_sbu", "burned_sbu", "remaining_sbu", "used_pct", "burn_rate_7d", "burn_rate_30d",
                  "run_out_date", "days_to_reset", "remaining_at_reset_sbu", "alert"]


def _scoped(scope: Scope, f: Filters) -> tuple[str | None, str | None]:
    """The user and account the question is limited to: the filter's, narrowed by the scope (a
    user's scope is their own jobs; a lead's, their accounts' unless a user filter names them)."""
    if scope.role == "user":
        return scope.user or "\x00", f.account
    return f.user, f.account


def usage(db, scope: Scope, f: Filters, by: str) -> tuple[list[str], list[tuple]]:
    """Rows of (key, COLUMNS...) by ``by``: periods in time order, the others most burn first."""
    if by not in BY:
        raise ValueError(f"usage by {by!r}: one of {', '.join(BY)}")
    if scope.role == "lead":
        raise ValueError("usage: a lead's scope is asked per account (Filters.account)")
    user, account = _scoped(scope, f)
    order = '"key"' if by in PERIODS else 'sbu DESC NULLS LAST, "key"'
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    return db.fetch(f"""
        SELECT "key" AS "{by}", {cols}
        FROM usage_summary(?, ?, ?, only_user := ?, only_account := ?, only_partition := ?, only_cluster := ?)
        ORDER BY {order}""", [by, f.since_ts or EARLIEST, f.until_ts or LATEST, user, account, f.partition, f.cluster])


def budget_data_until(db) -> dt.datetime:
    """The latest day with accounting data: budgets are as of it by default."""
    return db.value("SELECT budget_data_until()")


def budget_as_of(db, until: dt.datetime | None) -> dt.datetime:
    """When the allocations are reported as of: ``until`` (Filters.until_ts; a date/time moves to the
    end of its day), by default the latest day with accounting data. The command line and the API."""
    until = until or budget_data_until(db)
    if until.time() != dt.time():
        until = dt.datetime.combine(until.date() + dt.timedelta(days=1), dt.time())
    return until


def budget_rows(db, scope: Scope, f: Filters, until: dt.datetime) -> tuple[list[str], list[tuple]]:
    """The allocations of f.account (the account's and its users'), of f.user (the user's own and
    those of the accounts the user ran jobs in) and of f.cluster (its own and every cluster's), as
    of ``until``'s whole day. BUDGET_COLUMNS and alert_shown (the alert in capitals)."""
    user, account = _scoped(scope, f)
    cols = ", ".join(f'"{c}"' for c in BUDGET_COLUMNS)
    return db.fetch(f"""
        SELECT {cols}, upper(alert) AS alert_shown
        FROM budget_status(?)
        WHERE (CAST(? AS VARCHAR) IS NULL OR account = ?)
          AND (CAST(? AS VARCHAR) IS NULL OR "user" = ?
               OR ("user" IS NULL AND account IN (SELECT DISTINCT account FROM dash_day WHERE "user" = ?)))
          AND (CAST(? AS VARCHAR) IS NULL OR cluster IS NULL OR cluster = ?)
        ORDER BY account, "user" NULLS FIRST, cluster NULLS FIRST""",
                    [until, account, account, user, user, user, f.cluster, f.cluster])


def database_summary(db) -> tuple:
    """(jobs, users, SBU, wasted SBU, samples, [(flag code, jobs)]) of the whole database."""
    jobs, users, sbu, wasted = db.execute(
        'SELECT count(*), count(DISTINCT "user"), sum(sbu), sum(wasted_sbu) FROM job_metrics').fetchone()
    samples = db.value("SELECT count(*) FROM samples")
    flags = db.execute("SELECT code, count(*) FROM job_flags GROUP BY code ORDER BY 2 DESC, 1").fetchall()
    return jobs, users, sbu, wasted, samples, flags
