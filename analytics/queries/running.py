"""The data layer of Running now (/running): the running jobs in scope with their utilisation at
their latest samples, and the GPUs wasting now (under flags.gpu_idle_pct for at least
flags.running_gpu_idle_min minutes), with the SBU per hour they burn.

The numbers are the views of sql/views/70_running.sql (running_jobs, running_gpus), over the
snapshot's latest accounting and samples. As in analytics/queries/summaries.py, the scope is a condition of
every query, with bound parameters: a job outside it looks exactly like one that does not exist.
"""
from __future__ import annotations

import pandas as pd

from jobsight.analytics.queries.scope import Scope
from jobsight.analytics.store.database import Database

# wasting first (the SBU per hour of idle GPUs), then the biggest burners
ORDER = "idle_sbu_per_h DESC NULLS LAST, gpus_idle_now DESC, sbu_per_h DESC NULLS LAST, cluster, job_id_raw"
JOB_COLUMNS = ["cluster", "job_id", "job_id_raw", "job_name", "user", "account", "partition", "start_time",
               "elapsed_s", "ncpus", "ngpus", "sbu", "sbu_per_h", "cpu_util_now_pct", "gpu_util_now_pct",
               "gpus_sampled", "gpus_idle_now", "gpu_idle_max_min", "idle_sbu_per_h", "last_sample"]
GPU_COLUMNS = ["cluster", "job_id", "job_id_raw", "user", "account", "host", "device", "gpu_index", "util_pct",
               "idle_min", "last_time"]


def _where(scope: Scope, user: str | None, alias: str = "") -> tuple[str, list]:
    """' WHERE ' the scope, and the chosen user (None: everyone in the scope), and its parameters."""
    sc, p = scope.sql(alias)
    if not user:
        return f" WHERE {sc}", p
    return f' WHERE {sc} AND {alias + "." if alias else ""}"user" = ?', p + [user]


def users(h: Database, scope: Scope) -> list[str]:
    """The users with running jobs in the scope (the choice of a lead or admin)."""
    sc, p = scope.sql()
    return [r[0] for r in h.execute(f'SELECT DISTINCT "user" FROM job_metrics WHERE state = \'RUNNING\' AND {sc} '
                                    'AND "user" IS NOT NULL ORDER BY 1', p).fetchall()]


def idle_minutes(h: Database) -> float:
    """The setting flags.running_gpu_idle_min: how long a GPU is idle before it counts as wasting now."""
    return float(h.value("SELECT value FROM setting WHERE name = 'flags.running_gpu_idle_min'") or 0)


TOTALS = {   # name: an aggregate over every running job in the view, and its Python type
    "jobs": ("count(*)", int), "matching": ("count(*) FILTER (WHERE ? OR gpus_idle_now > 0)", int),
    "gpus": ("sum(ngpus)", int), "gpus_idle_now": ("sum(gpus_idle_now)", int),
    "sbu_per_h": ("sum(sbu_per_h)", float), "idle_sbu_per_h": ("sum(idle_sbu_per_h)", float),
    "wasting_jobs": ("count(*) FILTER (WHERE gpus_idle_now > 0)", int), "last_sample": ("max(last_sample)", None),
}


def _total(value, kind):
    """A total as Python: a sum over no value is 0; no latest sample is None."""
    if value is None or pd.isna(value):
        return kind(0) if kind else None
    return kind(value) if kind else value


def running_jobs(h: Database, scope: Scope, user: str | None = None, wasting_only: bool = False,
                 limit: int = 500) -> tuple[pd.DataFrame, dict]:
    """The running jobs in scope (of ``user`` when given; with ``wasting_only``, those with a GPU idle
    now), wasting first, at most ``limit`` (columns: JOB_COLUMNS), and the totals over every running
    job in scope (of ``user``): jobs, how many match (``matching``), their GPUs, the GPUs idle now,
    the SBU per hour they burn and the part of it paying for GPUs idle now, the jobs with a GPU idle
    now, the latest sample. One pass over the samples: the totals are window aggregates of the rows."""
    where, p = _where(scope, user)
    cols = ", ".join(f'"{c}"' for c in JOB_COLUMNS)
    totals = ", ".join(f"{agg} OVER () AS _t_{name}" for name, (agg, _) in TOTALS.items())
    df = h.df(f"SELECT {cols}, {totals} FROM running_jobs{where} QUALIFY ? OR gpus_idle_now > 0 "
              f"ORDER BY {ORDER} LIMIT ?", [not wasting_only] + p + [not wasting_only, int(limit)])
    if len(df):
        values = [df.iloc[0][f"_t_{name}"] for name in TOTALS]
    else:   # no row matches: the totals of the view (with wasting_only, its running jobs that do not waste)
        values = h.execute(f"SELECT {', '.join(agg for agg, _ in TOTALS.values())} FROM running_jobs{where}",
                           [not wasting_only] + p).fetchone()
    t = {name: _total(v, kind) for (name, (_, kind)), v in zip(TOTALS.items(), values)}
    return df[JOB_COLUMNS], t


def idle_gpus(h: Database, scope: Scope, user: str | None = None, limit: int = 500) -> pd.DataFrame:
    """The GPUs idle now of the running jobs in scope (of ``user`` when given), longest idle first.
    Columns: GPU_COLUMNS."""
    w, p = _where(scope, user, "m")
    cols = ", ".join(f'm."{c}"' if c in ("job_id", "user", "account") else f'g."{c}"' for c in GPU_COLUMNS)
    return h.df(f"SELECT {cols} FROM running_gpus g JOIN job_metrics m USING (cluster, job_id_raw) "
                f"{w} AND g.idle_now ORDER BY g.idle_min DESC, g.cluster, g.job_id_raw, g.host, g.device LIMIT ?",
                p + [int(limit)])
