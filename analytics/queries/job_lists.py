"""The data layer of the job lists: My jobs (a page of jobs, newest first) and the header's search.

As in analytics/queries/summaries.py, the scope is a condition of every query, with bound parameters: a job
outside it looks exactly like one that does not exist.

A page of jobs is read in two steps, so that a page costs about the same at 10^3 or 10^6 jobs:
the page's keys (start time, cluster, raw id: three narrow columns, sorted with LIMIT/OFFSET), then
those rows' columns, from the start times the keys span (job_metrics is stored by start time, so
the row groups outside are skipped), and the flags of those jobs.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.queries.summaries import SEVERITY_RANK, keyed, with_savings
from jobsight.analytics.queries.usage import EARLIEST, LATEST
from jobsight.analytics.store.database import Database

ORDER = "start_time DESC NULLS LAST, cluster, job_id_raw"
LIST_COLUMNS = ["cluster", "job_id", "job_id_raw", "job_name", "user", "account", "partition", "state",
                "start_time", "elapsed_s", "ncpus", "ngpus", "sbu", "wasted_sbu", "cpu_eff_pct", "gpu_util_pct",
                "mem_eff_pct", "time_eff_pct"]
MAX_TEXT = 200


@dataclass(frozen=True)
class JobFilter:
    """My jobs' filters: whose jobs (None: every job in the scope), state, partition, flag code."""
    user: str | None = None
    state: str | None = None
    partition: str | None = None
    code: str | None = None

    def where(self, scope: Scope) -> tuple[str, list]:
        sc, params = scope.sql()
        clauses, params = [sc], list(params)
        for value, col in ((self.user, '"user"'), (self.state, "state"), (self.partition, '"partition"'),
                           (self.code, "code")):
            if value:
                clauses.append(f"{col} = ?")
                params.append(value)
        return " WHERE " + " AND ".join(clauses), params


def job_list(h: Database, scope: Scope, jf: JobFilter, offset: int = 0, limit: int = 100) -> tuple[pd.DataFrame, int]:
    """The jobs in scope matching ``jf``, newest first (jobs that never started last), rows
    ``offset`` to ``offset + limit``, and how many match in all. Columns: LIST_COLUMNS, codes (the
    job's flags, alarms first), and savings_sbu, savings_note when the database has savings."""
    table = "job_flags" if jf.code else "job_metrics"     # one flag row per job and code
    w, p = jf.where(scope)
    total = int(h.value(f"SELECT count(*) FROM {table}{w}", p) or 0)
    cols = LIST_COLUMNS
    if not total or offset >= total:
        return with_savings(h, scope, pd.DataFrame(columns=cols + ["codes"])), total
    keys = h.execute(f"SELECT start_time, cluster, job_id_raw FROM {table}{w} ORDER BY {ORDER} LIMIT ? OFFSET ?",
                     p + [int(limit), int(offset)]).fetchall()
    cond, kp = keyed(keys)
    sc, sp = scope.sql()
    select = ", ".join(f'"{c}"' for c in cols)
    df = h.df(f"SELECT {select} FROM job_metrics WHERE {sc} AND {cond}", sp + kp)
    flags = h.df(f"SELECT cluster, job_id_raw, list(code ORDER BY {SEVERITY_RANK}, code) AS codes "
                 f"FROM job_flags WHERE {sc} AND {cond} GROUP BY ALL", sp + kp)
    order = pd.DataFrame([(c, j, i) for i, (_t, c, j) in enumerate(keys)], columns=["cluster", "job_id_raw", "_pos"])
    df = order.merge(df, on=["cluster", "job_id_raw"]).merge(flags, how="left", on=["cluster", "job_id_raw"])
    df["codes"] = [[str(c) for c in v] if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else [] for v in df["codes"]]
    return with_savings(h, scope, df.sort_values("_pos")[cols + ["codes"]].reset_index(drop=True)), total


def job_states(h: Database, scope: Scope) -> list[str]:
    """The job states that occur in the scope (for the dropdown)."""
    w, p = JobFilter().where(scope)
    return [r[0] for r in h.execute(f"SELECT DISTINCT state FROM job_metrics{w} AND state IS NOT NULL ORDER BY 1",
                                    p).fetchall()]


def has_jobs(h: Database, scope: Scope, user: str) -> bool:
    w, p = JobFilter(user=user).where(scope)
    return h.value(f"SELECT count(*) FROM (SELECT 1 FROM job_metrics{w} LIMIT 1)", p) == 1


SEARCH_COLUMNS = ["cluster", "job_id", "job_id_raw", "job_name", "user", "state", "start_time"]


def find_jobs(h: Database, scope: Scope, text: str, limit: int = 20) -> tuple[pd.DataFrame, bool]:
    """Jobs in scope whose JobIDRaw or printed JobID (123_4) is ``text``; when none, those whose
    name contains it (ignoring case), newest first, at most ``limit``. Also: whether they matched
    by id."""
    text = text.strip()[:MAX_TEXT]
    cols = ", ".join(f'"{c}"' for c in SEARCH_COLUMNS)
    if not text:
        return pd.DataFrame(columns=SEARCH_COLUMNS), False
    sc, p = scope.sql()
    for col in ("job_id_raw", "job_id"):        # one equality at a time: row-group statistics skip the rest
        df = h.df(f"SELECT {cols} FROM job_metrics WHERE {sc} AND {col} = ? ORDER BY {ORDER} LIMIT ?",
                  p + [text, int(limit)])
        if len(df):
            return df, True
    df = h.df(f"SELECT {cols} FROM job_metrics WHERE {sc} AND contains(lower(job_name), lower(?)) "
              f"ORDER BY {ORDER} LIMIT ?", p + [text, int(limit)])
    return df, False


# --- the API's job list: pages that follow one another by key ----------------------------------

def job_page(h: Database, scope: Scope, f: Filters, after: tuple | None = None,
             limit: int = 100) -> tuple[list[str], list[tuple], tuple | None]:
    """The jobs in scope matching ``f`` (user, account, partition, cluster, state, flag codes, and the
    period: jobs that ran in it, by job_day), in ORDER, the ``limit`` after the key ``after``
    (start_time, cluster, job_id_raw of the last row of the previous page). Keys, not offsets: a
    page stays where it was when jobs arrive. Returns (names, rows, the next page's key or None).
    Columns: LIST_COLUMNS and codes (the job's flags)."""
    if f.since and not f.codes:
        return _period_page(h, scope, f, after, limit)
    sc, params = scope.sql("m")
    clauses, params = [sc], list(params)
    for value, col in ((f.user, '"user"'), (f.account, "account"), (f.partition, '"partition"'),
                       (f.cluster, "cluster"), (f.state, "state")):
        if value:
            clauses.append(f"m.{col} = ?")
            params.append(value)
    if f.codes:
        clauses.append("EXISTS (SELECT 1 FROM job_flags g WHERE g.cluster = m.cluster AND g.job_id_raw = m.job_id_raw "
                       "AND list_contains(?::VARCHAR[], g.code))")
        params.append(list(f.codes))
    if f.since or f.until:      # the period rule (queries/scope.py): a job is in every period it ran in
        clauses.append("(m.cluster, m.job_id_raw) IN (SELECT cluster, job_id_raw FROM job_day WHERE day >= ? AND day < ?)")
        params += [f.since_ts or EARLIEST, f.until_ts or LATEST]
        if f.until:     # implied (job_day's first day is the start's): the newer row groups are skipped
            clauses.append("m.start_time < ?")
            params.append(f.until_ts)
    if after is not None:
        cond, p = _after(after, "m.")
        clauses.append(cond)
        params += p
    select = ", ".join(f'm."{c}"' for c in LIST_COLUMNS)
    # the page first (a top-N sort of job_metrics), then the flags of its jobs alone: a correlated
    # subquery for the codes joined every job's flags before the LIMIT (seconds at 10^6 jobs)
    names, rows = h.fetch(f"""
        SELECT {select} FROM job_metrics m WHERE {' AND '.join(clauses)}
        ORDER BY m.{ORDER.replace(', ', ', m.')} LIMIT ?""", params + [int(limit) + 1])
    return _paged(h, names, rows, limit)


def _after(after: tuple, a: str = "") -> tuple[str, list]:
    """The condition of the rows after the key ``after`` (start_time, cluster, job_id_raw) in ORDER."""
    start, cluster, raw = after
    tail = f"({a}cluster > ? OR ({a}cluster = ? AND {a}job_id_raw > ?))"
    if start is None:
        return f"{a}start_time IS NULL AND {tail}", [cluster, cluster, raw]
    return (f"({a}start_time < ? OR {a}start_time IS NULL OR ({a}start_time = ? AND {tail}))",
            [start, start, cluster, cluster, raw])


def _period_page(h: Database, scope: Scope, f: Filters, after: tuple | None,
                 limit: int) -> tuple[list[str], list[tuple], tuple | None]:
    """job_page of a period with a first day: the page's keys from the period's job_day rows (stored
    by day: the row groups of other days are skipped; a job's rows carry its owner, partition, state
    and start time), then those jobs' rows of job_metrics (stored by start time: the span of the
    page's starts), rather than every job_metrics row probed against the period's jobs."""
    where, params = f.where(scope)
    if after is not None:
        cond, p = _after(after)
        where += f" AND {cond}"
        params += p
    keys = h.execute(f"SELECT DISTINCT start_time, cluster, job_id_raw FROM job_day{where} "
                     f"ORDER BY {ORDER} LIMIT ?", params + [int(limit) + 1]).fetchall()
    if not keys:
        return LIST_COLUMNS + ["codes"], [], None
    cond, kp = keyed(keys)
    sc, sp = scope.sql()
    names, found = h.fetch(f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in LIST_COLUMNS)} FROM job_metrics "
                           f"WHERE {sc} AND {cond}", sp + kp)
    at = {(r[names.index("cluster")], r[names.index("job_id_raw")]): r for r in found}
    return _paged(h, names, [at[(c, j)] for _t, c, j in keys if (c, j) in at], limit)


def _paged(h: Database, names: list[str], rows: list[tuple], limit: int) -> tuple[list[str], list[tuple], tuple | None]:
    """The page (``limit`` of ``rows``, one more telling that another page follows) with each job's
    flag codes, and the next page's key."""
    codes = page_codes(h, [(r[names.index("cluster")], r[names.index("job_id_raw")]) for r in rows])
    rows = [r + (codes.get((r[names.index("cluster")], r[names.index("job_id_raw")]), []),) for r in rows]
    names = names + ["codes"]
    if len(rows) <= limit:
        return names, rows, None
    last = rows[limit - 1]
    return names, rows[:limit], (last[names.index("start_time")], last[names.index("cluster")],
                                 last[names.index("job_id_raw")])


def page_codes(h: Database, keys: list[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """The flag codes of the jobs ``keys`` (cluster, job_id_raw), in code order: job_flags is stored
    in key order, so the span of the page's ids skips the other row groups."""
    if not keys:
        return {}
    raws = sorted({k[1] for k in keys})
    rows = h.execute("SELECT cluster, job_id_raw, list(code ORDER BY code) FROM job_flags "
                     "WHERE job_id_raw BETWEEN ? AND ? AND list_contains(?::VARCHAR[], job_id_raw) "
                     "AND list_contains(?::VARCHAR[], cluster) GROUP BY ALL",
                     [raws[0], raws[-1], raws, sorted({k[0] for k in keys})]).fetchall()
    return {(c, j): list(v) for c, j, v in rows}
