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


def _where(scope: Scope, f: Filters) -> tuple[str, list]:
    where, params = f.where(scope, ran=f.since is not None or f.until is not None)
    if f.codes:
        where += " AND list_contains(?::VARCHAR[], code)"
        params.append(list(f.codes))
    if f.severities:
        where += " AND list_contains(?::VARCHAR[], severity)"
        params.append(list(f.severities))
    return where, params


def flag_rows(db, scope: Scope, f: Filters, sort: str = "wasted_sbu", limit: int = 0) -> tuple[list[str], list[tuple], int]:
    """(column names, the flags of the first ``limit`` jobs (0: every job), how many more jobs
    there are); a job's flags are consecutive rows."""
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
        i, j, wanted = names.index("cluster"), names.index("job_id_raw"), set(jobs)
        rows = [r for r in rows if (r[i], r[j]) in wanted]
        if len(jobs) == limit:
            more = flagged_job_count(db, scope, f) - len(jobs)
    return names, rows, more


def flagged_job_count(db, scope: Scope, f: Filters) -> int:
    """How many distinct jobs have a flag matching ``f`` (the dashboard's count, by the same rule)."""
    where, params = _where(scope, f)
    if not f.codes and not f.severities:
        # every filter but these is of the job, whose flags have one leading advice (advice_order 1):
        # a count of those rows, not a DISTINCT of every flag row
        return int(db.value(f"SELECT count(*) FROM job_flags{where} AND advice_order = 1", params) or 0)
    return int(db.value(f"SELECT count(*) FROM (SELECT DISTINCT cluster, job_id_raw FROM job_flags{where})",
                        params) or 0)
