"""Every number the dashboard shows comes from a function here.

Each function takes a ``Database`` (analytics/store/database.py: a read-only cursor on the snapshot),
a ``Scope`` (who is asking) and the page's filters, and returns plain Python or pandas values.
The scope is applied inside the SQL of every query, with bound parameters, so a crafted callback
request cannot reach rows outside it: a job or project outside the scope looks exactly like one
that does not exist (no rows, zero totals, the same "not found" text).

Periods are UTC days, and a day holds what the weekly reports and `jobsight usage` give it: a job's
SBU, wasted SBU and hours are split across the days it ran in proportion to its time in each
(job_day), and a job counts in a period when it ran in it (once, however many of its days it ran;
a flagged job is one of those with a flag). The tables read here are the stored per-job results
(job_metrics, job_flags) and per-day summaries (dash_*, sql/metrics/5N_dash_*.sql) that every
refresh keeps current (analytics/store/results.py), added up with the macros of sql/views/35_dashboard.sql.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from jobsight.analytics.queries.samples import job_rows
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.queries.usage import budget_data_until
from jobsight.analytics.store.database import Database

# The flagged-jobs grid's order, most wasted first: the macro the per-day tops rank each day's jobs by
# (dash_flag_top, sql/metrics/53_dash_flag_top.sql); its flags in that order, one per code.
JOB_ORDER = "dash_flag_rank(wasted_sbu, sbu, cluster, job_id_raw)"
FLAG_ORDER = JOB_ORDER + ", code"
SEVERITY_RANK = "CASE severity WHEN 'alarm' THEN 0 WHEN 'warn' THEN 1 ELSE 2 END"


def _flag_filter(f: Filters) -> tuple[str, list]:
    clauses, params = [], []
    if f.codes:
        clauses.append("list_contains(?::VARCHAR[], code)")
        params.append(list(f.codes))
    if f.severities:
        clauses.append("list_contains(?::VARCHAR[], severity)")
        params.append(list(f.severities))
    return "".join(f" AND {c}" for c in clauses), params


# --- overview -------------------------------------------------------------------------------

def totals(h: Database, scope: Scope, f: Filters) -> dict[str, float]:
    """Totals for the period: SBU, wasted SBU, core/GPU-hours and idle-GPU hours (GPU-hours on
    devices counted idle, job_metrics.idle_gpus), all split by day as the reports split them; jobs
    that ran in the period and how many of them are flagged; what following the advice would have
    saved (savings_sbu) and its share of the SBU whose savings are known (savings_pct, None when none
    are), and the jobs left out of it because their saving is unknown (unpriced_jobs, with their
    unpriced_wasted_sbu), and the jobs left out of core_hours / gpu_hours because they ran on an
    unknown number of cores / GPUs (core_hours_unknown_jobs, gpu_hours_unknown_jobs), as `jobsight
    usage` gives them."""
    w, p = f.where(scope)
    r = h.execute(
        "SELECT COALESCE(sum(sbu), 0), COALESCE(sum(wasted_sbu), 0), COALESCE(sum(core_hours), 0), "
        "COALESCE(sum(gpu_hours), 0), COALESCE(sum(idle_gpu_hours), 0), "
        "COALESCE(dash_jobs_in_period(jobs_first, jobs_running, day, ?), 0), "
        "COALESCE(dash_jobs_in_period(flagged_first, flagged_running, day, ?), 0), "
        "COALESCE(sum(savings_sbu), 0), sum(savings_sbu) * 100.0 / NULLIF(sum(savings_w), 0), "
        "COALESCE(dash_jobs_in_period(unpriced_first, unpriced_running, day, ?), 0), "
        "COALESCE(sum(unpriced_wasted_sbu), 0), "
        "COALESCE(dash_jobs_in_period(core_unknown_first, core_unknown_running, day, ?), 0), "
        "COALESCE(dash_jobs_in_period(gpu_unknown_first, gpu_unknown_running, day, ?), 0) "
        f"FROM dash_day{w}", [f.since_ts] * 5 + p).fetchone()
    return {"sbu": float(r[0]), "wasted_sbu": float(r[1]), "core_hours": float(r[2]), "gpu_hours": float(r[3]),
            "idle_gpu_hours": float(r[4]), "jobs": int(r[5]), "flagged_jobs": int(r[6]),
            "savings_sbu": float(r[7]), "savings_pct": None if r[8] is None else float(r[8]),
            "unpriced_jobs": int(r[9]), "unpriced_wasted_sbu": float(r[10]),
            "core_hours_unknown_jobs": int(r[11]), "gpu_hours_unknown_jobs": int(r[12])}


def usage_over_time(h: Database, scope: Scope, f: Filters, grain: str = "day",
                    stack: str = "account") -> pd.DataFrame:
    """SBU burned and wasted per period and per project (account) or partition, over the whole
    period (period_span): a day, week or month without jobs is there with 0 for every group, so
    that a chart spans the period and shows its quiet days. Columns: period_start, group, sbu,
    wasted_sbu (none when nothing ran in the view)."""
    if grain not in ("day", "week", "month"):
        raise ValueError(f"unknown grain {grain!r}")
    col = {"account": "account", "partition": '"partition"', "user": '"user"'}.get(stack)
    if col is None:
        raise ValueError(f"unknown stack {stack!r}")
    w, p = f.where(scope)
    span = period_span(h, scope, f) or (dt.date.today(), dt.date.today())
    return h.df(f"WITH d AS (SELECT CAST(date_trunc('{grain}', day) AS DATE) AS period_start, "
                f"COALESCE({col}, '(none)') AS \"group\", sum(sbu) AS sbu, COALESCE(sum(wasted_sbu), 0) AS wasted_sbu "
                f"FROM dash_day{w} GROUP BY ALL), "
                f"b AS (SELECT DISTINCT CAST(date_trunc('{grain}', t) AS DATE) AS period_start "
                f"FROM generate_series(CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP), INTERVAL 1 DAY) g(t)) "
                f"SELECT b.period_start, g.\"group\", COALESCE(d.sbu, 0) AS sbu, COALESCE(d.wasted_sbu, 0) AS wasted_sbu "
                f"FROM b CROSS JOIN (SELECT DISTINCT \"group\" FROM d) g LEFT JOIN d USING (period_start, \"group\") "
                f"ORDER BY 1, 2", p + list(span))


def period_span(h: Database, scope: Scope, f: Filters) -> tuple[dt.date, dt.date] | None:
    """The period's first and last day: ``since`` and ``until``, or else the first and last day
    with jobs in the view (None when there are none): what a partial first or last week is one of."""
    w, p = f.where(scope)
    lo, hi = h.execute(f"SELECT min(day), max(day) FROM dash_day{w}", p).fetchone()
    if lo is None:
        return None
    day = lambda v: v.date() if isinstance(v, dt.datetime) else v  # noqa: E731
    return (f.since or day(lo)), (f.until or day(hi))


EFFICIENCY_LABELS = {"cpu": "CPU", "gpu": "GPU", "mem": "Memory", "time": "Time"}


def efficiency_histogram(h: Database, scope: Scope, f: Filters) -> pd.DataFrame:
    """Jobs that ran in the period per 10 % efficiency bin (0-10 ... 90-100, >100 counted in the
    last bin) for each of CPU, GPU, memory and time; bins with no job are left out.
    Columns: metric, bin (0 ... 90), jobs."""
    w, p = f.where(scope)
    # each job once (dash_job_once: on its first day, or on the period's first day when it started
    # before), then counted per bin of each metric
    rows = h.execute(
        "SELECT CASE WHEN grouping(cpu_bin) = 0 THEN 'cpu' WHEN grouping(gpu_bin) = 0 THEN 'gpu' "
        "WHEN grouping(mem_bin) = 0 THEN 'mem' ELSE 'time' END, "
        "COALESCE(cpu_bin, gpu_bin, mem_bin, time_bin), sum(n) "
        "FROM (SELECT cpu_bin, gpu_bin, mem_bin, time_bin, sum(n) AS n "
        f"FROM dash_eff_day{w} AND dash_job_once(is_first, day, ?) GROUP BY ALL) "
        "GROUP BY GROUPING SETS ((cpu_bin), (gpu_bin), (mem_bin), (time_bin))", p + [f.since_ts]).fetchall()
    metrics = list(EFFICIENCY_LABELS)
    recs = sorted((metrics.index(m), int(b) * 10, int(n)) for m, b, n in rows if b is not None and n)
    return pd.DataFrame([(EFFICIENCY_LABELS[metrics[m]], b, n) for m, b, n in recs], columns=["metric", "bin", "jobs"])


def flag_counts(h: Database, scope: Scope, f: Filters) -> pd.DataFrame:
    """Jobs that ran in the period per flag code and severity, and their SBU burned in it.
    Columns: code, severity, jobs, sbu."""
    w, p = f.where(scope)
    fw, fp = _flag_filter(f)
    return h.df("SELECT code, severity, dash_jobs_in_period(jobs_first, jobs_running, day, ?)::BIGINT AS jobs, "
                  f"sum(sbu) AS sbu FROM dash_flag_day{w}{fw} "
                  "GROUP BY ALL ORDER BY jobs DESC, code, severity", [f.since_ts] + p + fp)


# --- users / projects -----------------------------------------------------------------------

def entity_table(h: Database, scope: Scope, f: Filters, by: str = "user") -> pd.DataFrame:
    """One row per user or per account (project): jobs, SBU, wasted SBU, SBU the advice would have
    saved, GPU-hours, core-hours,
    CPU efficiency, GPU utilisation, memory and time efficiency (the reports' allocation-weighted
    means: by core-hours, GPU-hours, GiB-hours and SBU), flagged jobs. Only jobs inside the scope
    count."""
    col = {"user": '"user"', "account": "account"}.get(by)
    if col is None:
        raise ValueError(f"unknown grouping {by!r}")
    w, p = f.where(scope)
    sql = f"""
    SELECT COALESCE({col}, '(none)') AS name,
           dash_jobs_in_period(jobs_first, jobs_running, day, ?)::BIGINT AS jobs,
           round(COALESCE(sum(sbu), 0), 2) AS sbu, round(COALESCE(sum(wasted_sbu), 0), 2) AS wasted_sbu,
           round(COALESCE(sum(savings_sbu), 0), 2) AS savings_sbu,
           round(sum(gpu_hours), 2) AS gpu_hours, round(sum(core_hours), 2) AS core_hours,
           round(sum(cpu_x_w) / NULLIF(sum(cpu_w), 0), 1) AS cpu_eff_pct,
           round(sum(gpu_x_w) / NULLIF(sum(gpu_w), 0), 1) AS gpu_util_pct,
           round(sum(mem_x_w) / NULLIF(sum(mem_w), 0), 1) AS mem_eff_pct,
           round(sum(time_x_w) / NULLIF(sum(time_w), 0), 1) AS time_eff_pct,
           dash_jobs_in_period(flagged_first, flagged_running, day, ?)::BIGINT AS flagged_jobs
    FROM dash_day{w}
    GROUP BY ALL ORDER BY sbu DESC, name"""
    return h.df(sql, [f.since_ts, f.since_ts] + p)


# --- budgets --------------------------------------------------------------------------------

BUDGET_COLUMNS = ["cluster", "account", "user", "source", "period", "period_start", "period_end", "as_of",
                  "allocation_sbu", "burned_sbu", "remaining_sbu", "used_pct", "burn_rate_7d", "burn_rate_30d",
                  "run_out_date", "days_to_reset", "remaining_at_reset_sbu", "alert"]


def budgets(h: Database, scope: Scope, account: str | None = None) -> pd.DataFrame:
    """The allocations in scope as of the latest day with data (budget_current: budget_status as of
    budget_data_until, sql/views/55_budget.sql),
    ``account``'s only when given. An admin sees all; a lead the allocations of the accounts led
    (and their users'); everyone the accounts they ran jobs in (the whole account's burn) and their
    own share within one. Columns: BUDGET_COLUMNS."""
    if scope.role == "admin":
        cond, params = "TRUE", []
    elif not scope.user:
        cond, params = "FALSE", []
    else:
        cond = ('("user" = ? OR ("user" IS NULL AND account IN '
                '(SELECT DISTINCT account FROM dash_day WHERE "user" = ? AND account IS NOT NULL))')
        params = [scope.user, scope.user]
        if scope.role == "lead" and scope.accounts:
            cond += " OR list_contains(?::VARCHAR[], account)"
            params.append(list(scope.accounts))
        cond += ")"
    if account is not None:
        cond += " AND account = ?"
        params.append(account)
    cols = ", ".join(f'"{c}"' for c in BUDGET_COLUMNS)
    # budget_current's day read first: as a macro argument its subquery runs at every use
    return h.df(f'SELECT {cols} FROM budget_status(?) WHERE {cond} '
                'ORDER BY account, "user" NULLS FIRST, cluster NULLS FIRST', [budget_data_until(h), *params])


# --- flagged jobs ---------------------------------------------------------------------------

FLAGGED_COLUMNS = ["cluster", "job_id", "job_id_raw", "job_name", "user", "account", "partition", "state",
                   "start_time", "sbu", "wasted_sbu"]


def keyed(keys: list[tuple]) -> tuple[str, list]:
    """A condition selecting the rows of jobs ``keys`` (start_time, cluster, job_id_raw): their ids,
    within the start times they span (tables stored by start time skip the other row groups; every
    time when one of them never started)."""
    starts = [k[0] for k in keys if k[0] is not None and not pd.isna(k[0])]
    cond = "list_contains(?::VARCHAR[], cluster) AND list_contains(?::VARCHAR[], job_id_raw)"
    params: list = [sorted({k[1] for k in keys}), sorted({k[2] for k in keys})]
    if starts and len(starts) == len(keys):
        cond += " AND start_time BETWEEN ? AND ?"
        params += [min(starts), max(starts)]
    return cond, params


def savings(h: Database, scope: Scope, keys: list[tuple]) -> pd.DataFrame | None:
    """What following the advice would have saved, per job of ``keys`` that has advice (job_savings:
    savings_sbu NULL when unknown, and savings_note why); None when the database has no savings.
    Columns: cluster, job_id_raw, savings_sbu, savings_note."""
    if "job_savings" not in h.tables:
        return None
    if not keys:
        return pd.DataFrame(columns=["cluster", "job_id_raw", "savings_sbu", "savings_note"])
    sc, p = scope.sql()
    cond, kp = keyed(keys)
    return h.df(f"SELECT cluster, job_id_raw, savings_sbu, savings_note FROM job_savings WHERE {sc} AND {cond}", p + kp)


def job_fit(h: Database, scope: Scope, cluster: str, job_id_raw: str) -> dict[str, Any] | None:
    """The request the job's advice adds up to and its price (job_savings), or None when the job
    has no advice, is outside the scope, or the database has no savings."""
    if "job_savings" not in h.tables:
        return None
    sc, p = scope.sql()
    cols = ("fitted_request", "sbu_if_fitted", "savings_sbu", "savings_note", "fitted_partition")
    row = h.execute(f"SELECT {', '.join(cols)} FROM job_savings WHERE {sc} AND cluster = ? AND job_id_raw = ?",
                    p + [cluster, job_id_raw]).fetchone()
    return dict(zip(cols, row)) if row else None


def with_savings(h: Database, scope: Scope, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (rows of jobs: start_time, cluster, job_id_raw) with savings_sbu and savings_note, when
    the database has savings."""
    got = savings(h, scope, list(zip(df["start_time"], df["cluster"], df["job_id_raw"])))
    if got is None:
        return df
    return df.merge(got, how="left", on=["cluster", "job_id_raw"])


def flagged_jobs(h: Database, scope: Scope, f: Filters, limit: int = 500) -> tuple[pd.DataFrame, int]:
    """The flagged jobs in scope that ran in the period, one row per job with its flags (those that
    match the flag and severity filters), most wasted SBU first (at most ``limit``), and how many
    there are in all. Columns: FLAGGED_COLUMNS, severity (the highest), codes, severities,
    messages, advice (lists, the job's leading advice first: job_flags.advice_order), and savings_sbu, savings_note when the database has
    savings."""
    fw, fp = _flag_filter(f)
    job_cols = FLAGGED_COLUMNS
    cols = ", ".join(f'"{c}"' for c in job_cols + ["code", "severity", "message", "advice", "advice_order"])
    if (scope.role == "admin" and limit <= h.value("SELECT dash_flag_top_n()")
            and not (f.user or f.account or f.partition or f.codes or f.severities)):
        # the top jobs of the per-day top jobs, with all their flags: the same rows, without
        # sorting every flag of the cluster (the jobs first, on their keys; then their flags' text)
        w, p = f.where(scope)
        top = (f"SELECT DISTINCT cluster, job_id_raw, wasted_sbu, sbu FROM dash_flag_top{w} "
               f"ORDER BY {JOB_ORDER} LIMIT ?")
        src = f"SELECT DISTINCT {cols} FROM dash_flag_top{w} AND (cluster, job_id_raw) IN (SELECT cluster, job_id_raw FROM ({top}))"
        params = p + p + [int(limit)]
    else:
        # one flag per job and code: the first limit x codes flags hold those of the first limit jobs
        w, p = f.where(scope)
        codes = len(f.codes) or h.value(f"SELECT count(DISTINCT code) FROM dash_flag_day{w}{fw}", p + fp) or 1
        tops, params = [], []
        for part in scope.parts():      # disjoint: the top rows are among each part's top
            w, p = f.where(scope, scope_sql=part, ran=True)
            tops.append(f"(SELECT {cols} FROM job_flags{w}{fw} ORDER BY {FLAG_ORDER} LIMIT ?)")
            params += p + fp + [int(limit) * int(codes)]
        src = " UNION ALL ".join(tops)
    first = ", ".join(f'any_value("{c}") AS "{c}"' for c in job_cols if c not in ("cluster", "job_id_raw"))
    lists = ", ".join(f"list({c} ORDER BY advice_order) AS {name}" for c, name in (
        ("code", "codes"), ("severity", "severities"), ("message", "messages"), ("advice", "advice")))
    df = h.df(f"SELECT * FROM (SELECT cluster, job_id_raw, {first}, "
              f"CASE min({SEVERITY_RANK}) WHEN 0 THEN 'alarm' WHEN 1 THEN 'warn' ELSE 'info' END AS severity, "
              f"{lists} FROM ({src}) GROUP BY cluster, job_id_raw) ORDER BY {JOB_ORDER} LIMIT ?",
              params + [int(limit)])
    df = with_savings(h, scope, df[job_cols + ["severity", "codes", "severities", "messages", "advice"]])
    return df, flagged_count(h, scope, f)


def flagged_count(h: Database, scope: Scope, f: Filters) -> int:
    """How many jobs in scope that ran in the period have a flag matching the filters: the
    overview's count from the per-day summaries when no flag or severity is chosen, or one code
    (a job has a code once, with one severity); else the distinct jobs of the matching flags."""
    fw, fp = _flag_filter(f)
    w, p = f.where(scope)
    if not f.codes and not f.severities:
        n = h.value(f"SELECT dash_jobs_in_period(flagged_first, flagged_running, day, ?) FROM dash_day{w}",
                    [f.since_ts] + p)
    elif len(f.codes) == 1:
        n = h.value(f"SELECT dash_jobs_in_period(jobs_first, jobs_running, day, ?) FROM dash_flag_day{w}{fw}",
                    [f.since_ts] + p + fp)
    else:
        w, p = f.where(scope, ran=True)
        n = h.value(f"SELECT count(*) FROM (SELECT DISTINCT cluster, job_id_raw FROM job_flags{w}{fw})", p + fp)
    return int(n or 0)


def filter_options(h: Database, scope: Scope) -> dict[str, list[str]]:
    """Users, accounts, partitions and flag codes that occur in the scope (for the dropdowns)."""
    sc, p = scope.sql()
    out = {}
    for key, col in (("user", '"user"'), ("account", "account"), ("partition", '"partition"')):
        out[key] = [r[0] for r in h.execute(
            f"SELECT DISTINCT {col} FROM dash_day WHERE {sc} AND {col} IS NOT NULL ORDER BY 1", p).fetchall()]
    out["code"] = [r[0] for r in h.execute(
        f"SELECT DISTINCT code FROM dash_flag_day WHERE {sc} ORDER BY 1", p).fetchall()]
    return out


# --- one job --------------------------------------------------------------------------------

JOB_FIELDS = ["cluster", "job_id", "job_id_raw", "job_name", "user", "account", "partition", "qos", "state",
              "exit_code", "submit_time", "start_time", "end_time", "elapsed_s", "timelimit_s", "ncpus", "nnodes",
              "ngpus", "gpu_type", "node_list", "mem_charged_bytes", "mem_peak_bytes", "mem_peak_source",
              "cpu_eff_pct", "cpu_eff_source", "mem_eff_pct", "time_eff_pct", "gpu_util_pct", "gpu_util_source",
              "gpu_mem_peak_pct", "gpus_idle", "sbu", "sbu_source", "wasted_sbu", "charge_driver",
              "core_hours", "gpu_hours"]


def job(h: Database, scope: Scope, cluster: str | None, job_id: str) -> dict[str, Any] | None:
    """One job's metadata and metrics, or None when it does not exist *or* is outside the scope.
    ``job_id`` is JobIDRaw, or the JobID as printed (123_4) when no raw id matches; ``cluster``
    may be None when the id is unique (an id found in several clusters gives None)."""
    sc, p = scope.sql()
    cols = ", ".join(f'"{c}"' for c in JOB_FIELDS)
    cl = "" if not cluster else " AND cluster = ?"
    # one equality at a time, so that the row-group statistics can skip most of the table
    for col in ("job_id_raw", "job_id"):
        rows = h.execute(f"SELECT {cols} FROM job_metrics WHERE {sc}{cl} AND {col} = ? LIMIT 2",
                             p + ([cluster] if cluster else []) + [job_id]).fetchall()
        if rows:
            return dict(zip(JOB_FIELDS, rows[0])) if len(rows) == 1 else None
    return None


def job_flag_rows(h: Database, scope: Scope, cluster: str, job_id_raw: str,
                  user: str | None = None) -> list[dict[str, Any]]:
    """The job's flags (none outside the scope). ``user``, the job's user when known, only lets the
    snapshot's user-ordered flag table skip row groups."""
    sc, p = scope.sql()
    by_user = ' AND "user" = ?' if user else ""
    cur = h.execute(f"SELECT code, severity, message, advice FROM job_flags "
                        f"WHERE {sc} AND cluster = ? AND job_id_raw = ?{by_user} ORDER BY advice_order",
                        p + [cluster, job_id_raw] + ([user] if user else []))
    return [dict(zip(("code", "severity", "message", "advice"), r)) for r in cur.fetchall()]


MAX_POINTS_PER_SERIES = 2000


def job_samples(h: Database, scope: Scope, cluster: str, job_id_raw: str) -> pd.DataFrame:
    """The job's samples (empty when the job is outside the scope). GPUs from one source, as the
    metric views do: the sidecar's when it has any, else nvidia-smi's. Long series are averaged
    into at most MAX_POINTS_PER_SERIES time buckets per device. A job `jobsight prune` moved
    samples of gets them from the lake ([lake] path, else the one it was pruned to), and
    ``df.attrs["samples_moved"]`` says so (queries/samples.py ``job_rows``; None: not pruned).
    Columns: host, device, gpu_index, time, util_pct, mem_used_bytes, mem_total_bytes."""
    sc, p = scope.sql("j")
    if not h.execute(f"SELECT EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = ? AND j.job_id_raw = ? AND {sc})",
                     [cluster, job_id_raw] + p).fetchone()[0]:
        return _no_samples()
    lake = getattr(getattr(h, "config", None), "lake_path", None)
    source, params, moved = job_rows(h, cluster, job_id_raw, root=lake)
    base = (f"SELECT s.host, s.device, s.gpu_index, s.time, s.util_pct, s.mem_used_bytes, s.mem_total_bytes, s.source "
            f"FROM {source} s")
    df = _job_samples(h, base, params)
    df.attrs["samples_moved"] = moved
    return df


def _no_samples() -> pd.DataFrame:
    df = pd.DataFrame(columns=["host", "device", "gpu_index", "time", "util_pct", "mem_used_bytes", "mem_total_bytes"])
    df.attrs["samples_moved"] = None
    return df


def _job_samples(h: Database, base: str, params: list) -> pd.DataFrame:
    span = h.execute(f"SELECT count(*), max(n) FROM (SELECT count(*) AS n FROM ({base}) GROUP BY host, device)",
                         params).fetchone()
    if not span[0]:
        return _no_samples()
    if span[1] > MAX_POINTS_PER_SERIES:
        sql = (f"WITH b AS ({base}), r AS (SELECT min(time) AS t0, max(time) AS t1 FROM b) "
               f"SELECT host, device, min(gpu_index) AS gpu_index, min(time) AS time, avg(util_pct) AS util_pct, "
               f"max(mem_used_bytes) AS mem_used_bytes, max(mem_total_bytes) AS mem_total_bytes, "
               f"min(source) AS source FROM b, r "
               f"GROUP BY host, device, floor(date_diff('millisecond', t0, time) * ? / GREATEST(date_diff('millisecond', t0, t1) + 1, 1)) "
               f"ORDER BY host, device, time")
        df = h.df(sql, params + [MAX_POINTS_PER_SERIES])
    else:
        df = h.df(f"{base} ORDER BY s.host, s.device, s.time", params)
    gpu = df["device"] != "cpu"
    if (gpu & (df["source"] == "sidecar")).any():
        df = df[~gpu | (df["source"] == "sidecar")]
    return df.drop(columns=["source"]).reset_index(drop=True)
