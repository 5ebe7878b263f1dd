"""What a weekly report reads: the report macros of sql/views/50_report.sql run once for a window,
over the whole cluster or over some users' and accounts' jobs, and the allocations. The totals,
the days, the trend and the flag counts add up the per-day summaries (dash_day, dash_flag_day);
the jobs that wasted the most are ranked over job_day's rows of the window.
``members`` gives a project page the Members table of the project's report, by the same macro."""
from __future__ import annotations

import concurrent.futures
import datetime as dt

from jobsight.analytics.queries.data_age import data_age
from jobsight.analytics.queries.scope import Filters, Scope

# a period left open reaches the first or last day a filter may name
OPEN_SINCE, OPEN_UNTIL = dt.datetime(1970, 1, 1), dt.datetime(2200, 1, 1)
MEMBER_ROWS = "members_rows"        # the temporary tables of a scope's rows (per connection),
MEMBER_SUMS = "members_sums"        # and of their per-day sums


def most_wasted(r: dict):
    """The order of the reports' Members and leaderboard tables: most wasted SBU first, then most
    SBU, then the name."""
    return (-(r.get("wasted_sbu") or 0.0), -(r.get("sbu") or 0.0), str(r.get("user")))


def members(db, scope: Scope, f: Filters) -> list[dict]:
    """The members of the project ``f.account`` in the period and filters, most wasted first: the
    member rows of report_totals, which the project's weekly report shows as its Members table (the
    same figures for the same days), over the rows of the asker's scope (a researcher sees their
    own). Each: user, account, jobs, sbu, wasted_sbu, wasted_pct, savings_sbu, savings_pct,
    savings_unknown_sbu, core_hours, gpu_hours, idle_gpu_hours and the efficiencies."""
    if not f.account:
        return []
    since, until = f.since_ts or OPEN_SINCE, f.until_ts or OPEN_UNTIL
    where, params = f.where(scope)
    # the rows of the page's filters (the state too, which dash_day has no column for) summed per day
    # as dash_day is; no flag count is read from them
    db.execute(f"CREATE OR REPLACE TEMP TABLE {MEMBER_ROWS} AS SELECT *, NULL::BOOLEAN AS flagged "
               f"FROM report_job_day{where}", params)
    db.execute(f"CREATE OR REPLACE TEMP TABLE {MEMBER_SUMS} AS SELECT * FROM dash_day_sums('{MEMBER_ROWS}')")
    try:
        rows = db.rows(f"SELECT * FROM report_totals('{MEMBER_SUMS}', ?, ?, scopes := ['member']) WHERE account = ?",
                       [since, until, f.account])
    finally:
        db.execute(f"DROP TABLE IF EXISTS {MEMBER_ROWS}")
        db.execute(f"DROP TABLE IF EXISTS {MEMBER_SUMS}")
    return sorted(rows, key=most_wasted)


def report_rows(db, since: dt.datetime, until: dt.datetime,
                names: tuple, trend_weeks: int, top_jobs: int) -> dict:
    """totals, daily, trend, flag_counts, top (each job ranked within its user, account and the
    cluster) and budgets (with alert_shown) of [since, until), the trend over it and the
    ``trend_weeks`` windows of its length before it;
    ``names``: (users, accounts) the rows are limited to, or (None, None). And data_age: how old
    the whole database's data is now, one DataAge for every report of the run.
    With ``names``, only the scopes their reports show are grouped (the users', the accounts' and
    their members'), not the partitions' and the cluster's of those rows."""
    if names == (None, None):
        by, kinds = "", []
    else:
        by, kinds = ", scopes := ?", [k for k, n in (("user", names[0]), ("account", names[1])) if n] or ["user"]
    scoped = [kinds] if kinds else []
    # three cursors side by side: the top jobs (the longest) on this one, the totals and the days on
    # a second, the trend, flag counts, allocations and data age on a third
    with db.beside() as sums_db, db.beside() as summary_db, concurrent.futures.ThreadPoolExecutor(2) as pool:
        summaries = pool.submit(_summary_rows, summary_db, since, until, names, trend_weeks, by, scoped)
        sums = pool.submit(_window_sums, sums_db, since, until, names, by, [[*kinds, "member"]] if kinds else [], scoped)
        top = db.rows("SELECT * FROM report_top_jobs('job_day', 'job_flags', ?, ?, ?, users := ?, accounts := ?)",
                      [since, until, top_jobs, *names])
        return {"top": top, **sums.result(), **summaries.result()}


def _window_sums(db, since, until, names: tuple, by: str, total_scopes: list, day_scopes: list) -> dict:
    """totals and daily: the window's per-day sums."""
    return {
        "totals": db.rows(f"SELECT * FROM report_totals('dash_day', ?, ?, users := ?, accounts := ?{by})",
                          [since, until, *names, *total_scopes]),
        "daily": db.rows(f"SELECT * FROM report_daily('dash_day', ?, ?, users := ?, accounts := ?{by})",
                         [since, until, *names, *day_scopes]),
    }


def _summary_rows(db, since, until, names: tuple, trend_weeks: int, by: str, scoped: list) -> dict:
    """trend, flag_counts, budgets and data_age: from the per-day summaries and the allocations."""
    return {
        "trend": db.rows(f"SELECT * FROM report_trend(?, ?, ?, users := ?, accounts := ?{by})",
                         [since, until, trend_weeks, *names, *scoped]),
        "flag_counts": db.rows(f"SELECT * FROM report_flag_counts(?, ?, users := ?, accounts := ?{by})",
                               [since, until, *names, *scoped]),
        # every allocation (there are few): a user's report shows those of the accounts the user ran in;
        # none without a budget row (budget_status alone takes DuckDB ~15 ms to plan)
        "budgets": [{**b, "alert_shown": b["alert"].upper()} for b in db.rows(
            'SELECT * FROM budget_status(?) ORDER BY account, "user" NULLS FIRST, cluster NULLS FIRST', [until])]
        if db.value("SELECT EXISTS (SELECT 1 FROM budget)") else [],
        "data_age": data_age(db),
    }
