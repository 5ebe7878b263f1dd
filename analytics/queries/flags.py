"""The flagged jobs a question is about, one row per flag with what following the advice would
have saved (job_flags_savings), in the asker's scope and by the period rule (queries/scope.py): a
job counts in every period it ran in, as on the dashboard and in the reports. A limit counts jobs:
a job's flags come together, never cut apart."""
from __future__ import annotations

import functools
import re
from pathlib import Path

from jobsight.analytics.queries.scope import Filters, Scope

COLUMNS = ["cluster", "job_id", "job_id_raw", "user", "account", "partition", "state", "end_time",
           "sbu", "wasted_sbu", "savings_sbu", "code", "severity", "message", "advice"]
# sort key -> ORDER BY; ties go to the job id and flag code, so a limit always cuts the same rows
SORTS = {
    "wasted_sbu": "wasted_sbu DESC NULLS LAST, sbu DESC NULLS LAST",
    "sbu": "sbu DESC NULLS LAST, wasted_sbu DESC NULLS LAST",
    "savings": "savings_sbu DESC NULLS LAST, sbu DESC NULLS LAST",
    "end_time": "COALESCE(end_time, start_time) DESC NULLS LAST",
}
JOB_ORDER = "cluster, job_id_raw"      # ties between jobs; a job's flags leading advice first
TIE_BREAK = f"{JOB_ORDER}, advice_order"
FLAGS_SQL = Path(__file__).resolve().parents[2] / "sql" / "metrics" / "40_job_flags.sql"


@functools.lru_cache(maxsize=1)
def flag_codes() -> tuple[str, ...]:
    """The flag codes, in the order sql/metrics/40_job_flags.sql defines them (each branch of its
    UNION ALL starts `SELECT m.*, 'code'`): the SQL is the one list."""
    codes = re.findall(r"SELECT\s+m\.\*,\s*'([a-z0-9_]+)'", FLAGS_SQL.read_text(encoding="utf-8"))
    return tuple(dict.fromkeys(codes))


def _where(scope: Scope, f: Filters, part: tuple[str, list] | None = None) -> tuple[str, list]:
    where, params = f.where(scope, scope_sql=part, ran=f.since is not None or f.until is not None)
    if f.codes:
        where += " AND list_contains(?::VARCHAR[], code)"
        params.append(list(f.codes))
    if f.severities:
        where += " AND list_contains(?::VARCHAR[], severity)"
        params.append(list(f.severities))
    return where, params


def _first_jobs(names: list[str], rows: list[tuple], limit: int) -> tuple[list[tuple], list[tuple[str, str]]]:
    """The rows of the first ``limit`` jobs of ``rows`` (a job's rows consecutive) and those jobs."""
    i, j = names.index("cluster"), names.index("job_id_raw")
    jobs = list(dict.fromkeys((r[i], r[j]) for r in rows))[:limit]
    wanted = set(jobs)
    return [r for r in rows if (r[i], r[j]) in wanted], jobs


def flag_rows(db, scope: Scope, f: Filters, sort: str = "wasted_sbu", limit: int = 0) -> tuple[list[str], list[tuple], int]:
    """(column names, the flags of the first ``limit`` jobs (0: every job), how many more jobs
    there are); a job's flags are consecutive rows. Read from whichever stored table holds them
    together: a researcher's or a project's in job_flags_by_owner, the admin's first jobs by
    waste in the per-day top jobs (dash_flag_top), else job_flags in its key order."""
    if limit and scope.role == "admin" and sort == "wasted_sbu":
        got = _from_daily_top(db, scope, f, int(limit))
        if got is not None:
            return got
    if "job_flags_by_owner" in db.tables and (scope.role != "admin" or f.user or f.account):
        return _by_owner(db, scope, f, sort, int(limit))
    where, params = _where(scope, f)
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    if limit:
        # the first ``limit`` jobs, by a top-N sort of the narrow sort and key columns (a job has at
        # most one row per flag code, so they are among the first limit x codes rows; the savings
        # are joined in only when they are the sort key); then the rows of those jobs alone, found
        # by the first sort key's bound (no sort or rank of every flag row, no join of every job)
        first = SORTS[sort].split(" DESC")[0]
        table = "job_flags_savings" if sort == "savings" else "job_flags"
        _, top = db.fetch(f"SELECT cluster, job_id_raw, {first} FROM {table}{where} "
                          f"ORDER BY {SORTS[sort]}, {JOB_ORDER} LIMIT ?", params + [int(limit) * len(flag_codes())])
        jobs = list(dict.fromkeys((c, j) for c, j, _k in top))[:int(limit)]
        bound = [k for c, j, k in top if (c, j) == jobs[-1]][0] if jobs else None
        if bound is not None:
            where += f" AND {first} >= ?"
            params = params + [bound]
        raws = sorted({j for _c, j in jobs}) or [""]
        where += " AND list_contains(?::VARCHAR[], job_id_raw) AND list_contains(?::VARCHAR[], cluster)"
        params = params + [raws, sorted({c for c, _j in jobs})]
    names, rows = db.fetch(f"SELECT {cols} FROM job_flags_savings{where} ORDER BY {SORTS[sort]}, {TIE_BREAK}",
                           params)
    more = 0
    if limit:
        rows, jobs = _first_jobs(names, rows, int(limit))
        if len(jobs) == limit:
            more = flagged_job_count(db, scope, f) - len(jobs)
    return names, rows, more


def _by_owner(db, scope: Scope, f: Filters, sort: str, limit: int) -> tuple[list[str], list[tuple], int]:
    """flag_rows from job_flags_by_owner: one top-N sort per disjoint part of the scope (a lead's
    projects, the lead's own other jobs), each an equality or IN list the row groups' zone maps of
    account and user answer; the first limit x codes rows hold every flag of the first ``limit`` jobs."""
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    order = f"{SORTS[sort]}, {TIE_BREAK}"
    cap = " LIMIT ?" if limit else ""
    parts, params = [], []
    for part in scope.parts():
        where, p = _where(scope, f, part)
        parts.append(f"(SELECT {cols}, start_time, advice_order FROM job_flags_by_owner{where} ORDER BY {order}{cap})")
        params += p + ([limit * len(flag_codes())] if limit else [])
    names, rows = db.fetch(f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY {order}", params)
    if not limit:
        return names, rows, 0
    rows, jobs = _first_jobs(names, rows, limit)
    more = 0
    if len(jobs) == limit:
        more = flagged_job_count(db, scope, f, "job_flags_by_owner") - len(jobs)
    return names, rows, more


def _from_daily_top(db, scope: Scope, f: Filters, limit: int) -> tuple[list[str], list[tuple], int] | None:
    """flag_rows by waste for the admin from dash_flag_top (every flag of each day's most wasteful
    jobs), or None when it cannot give the answer exactly. A job among the first ``limit`` of a
    period is among the first of each day it ran in (the jobs ahead of it that day are ahead of it
    in the period), so the period's first jobs are the first of the union of its days' lists,
    when the list holds ``limit`` jobs that all wasted something: among those, the days' ranking
    (dash_flag_rank) and SORTS["wasted_sbu"] agree."""
    if (f.user or f.account or f.partition or f.state or f.codes or f.severities
            or "dash_flag_top" not in db.tables or limit > int(db.value("SELECT dash_flag_top_n()"))):
        return None
    where, params = f.where(scope)         # the days of the period (all of them: every day)
    order = f"{SORTS['wasted_sbu']}, {JOB_ORDER}"
    _, top = db.fetch(f"SELECT DISTINCT cluster, job_id_raw, wasted_sbu, sbu FROM dash_flag_top{where} "
                      f"ORDER BY {order} LIMIT ?", params + [limit])
    if len(top) < limit or not (top[-1][2] or 0) > 0:
        return None
    # the jobs' flags (each is there once for every day the job ran: DISTINCT), then their savings
    # looked up by job_id_raw in a list of constants (a semi join or a join scans job_savings: 3-4x)
    raws = sorted({r[1] for r in top})
    at = COLUMNS.index("savings_sbu")
    cols = ", ".join(f'"{c}"' for c in COLUMNS[:at] + COLUMNS[at + 1:])
    _, flags = db.fetch(f"SELECT DISTINCT {cols}, advice_order FROM dash_flag_top{where} AND wasted_sbu >= ? "
                        f"AND list_contains(?::VARCHAR[], job_id_raw) ORDER BY {SORTS['wasted_sbu']}, {TIE_BREAK}",
                        params + [top[-1][2], raws])
    _, saved = db.fetch(f"SELECT cluster, job_id_raw, savings_sbu FROM job_savings "
                        f"WHERE job_id_raw IN ({', '.join('?' for _ in raws)})", raws)
    savings = {(c, j): v for c, j, v in saved}
    names = list(COLUMNS)
    rows = [r[:at] + (savings.get((r[0], r[2])),) + r[at:-1] for r in flags]
    rows, jobs = _first_jobs(names, rows, limit)
    return names, rows, flagged_job_count(db, scope, f) - len(jobs)


def flagged_job_count(db, scope: Scope, f: Filters, table: str = "job_flags") -> int:
    """How many distinct jobs have a flag matching ``f`` (the dashboard's count, by the same rule),
    counted in ``table`` (job_flags or job_flags_by_owner: the same rows), per disjoint part of the
    scope."""
    total = 0
    for part in scope.parts():
        where, params = _where(scope, f, part)
        if not f.codes and not f.severities:
            # every filter but these is of the job, whose flags have one leading advice (advice_order 1):
            # a count of those rows, not a DISTINCT of every flag row
            total += int(db.value(f"SELECT count(*) FROM {table}{where} AND advice_order = 1", params) or 0)
        else:
            total += int(db.value(f"SELECT count(*) FROM (SELECT DISTINCT cluster, job_id_raw FROM {table}{where})",
                                  params) or 0)
    return total
