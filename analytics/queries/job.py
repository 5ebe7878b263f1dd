"""One job, as `jobsight job` (and the API) show it: its stored figures, flags, GPUs, steps,
series, savings and per-node lines, within the asker's scope. A job no accounting names yet is
summarised from its samples (queries/samples.py)."""
from __future__ import annotations

from jobsight.analytics.errors import UserError
from jobsight.analytics.queries import samples as job_samples
from jobsight.analytics.queries.scope import Scope


class NoSuchJob(UserError):
    """No such job in the asker's scope: one that does not exist and one outside it look the same."""


def _one_cluster(job: str, clusters: set[str]) -> None:
    if len(clusters) > 1:
        raise UserError(f"job {job!r} exists on clusters {', '.join(sorted(clusters))}: pass --cluster")


def by_id(table: str, column: str, columns: str, select: str = "*", where: str = "TRUE", order: str = "") -> str:
    """SQL of ``columns`` of the rows of ``table`` whose ``column`` (an indexed one) equals the
    first parameter, then ``select`` of them filtered by ``where`` (its parameters after it) and
    ordered by ``order``. DuckDB answers an equality from an index only when it is the scan's one
    filter (the cluster or the asker's scope beside it would make it a scan of every row group),
    so the rest is applied to the rows the index found (a MATERIALIZED CTE: no filter is pushed
    into it). ``columns`` must hold every column ``where`` and ``order`` name: a scope's "user"
    missing there would be read as DuckDB's current user, not refused."""
    return (f"WITH k AS MATERIALIZED (SELECT {columns} FROM {table} WHERE {column} = ?) SELECT {select} FROM k "
            f"WHERE {where}" + (f" ORDER BY {order}" if order else ""))


def of_job_sql(table: str, columns: str, order: str = "") -> str:
    """SQL of the cluster (as _cluster) and ``columns`` of the rows of ``table`` whose job_id_raw
    equals the one parameter, ordered by ``order``: the equality alone, answered from the table's
    index on job_id_raw, and a third of by_id's planning time (no CTE)."""
    return (f"SELECT cluster AS _cluster, {columns} FROM {table} WHERE job_id_raw = ?"
            + (f" ORDER BY {order}" if order else ""))


def of_job(db, table: str, columns: str, cluster: str, job_id_raw: str, order: str = "") -> list[dict]:
    """``columns`` of the rows of ``table`` of one job, ordered by ``order`` (of_job_sql): the
    rows of the job's raw id on every cluster are read, those of its cluster kept here. Only for a
    job already found in the asker's scope (find): no scope applies."""
    names, rows = db.fetch(of_job_sql(table, columns, order), [job_id_raw])
    return [dict(zip(names[1:], r[1:])) for r in rows if r[0] == cluster]


def find(db, scope: Scope, job: str, cluster: str | None) -> dict | None:
    """The job's job_metrics row; None when no accounting names it or it is outside the scope."""
    sc, params = scope.sql()
    if cluster:
        sc, params = f"{sc} AND cluster = ?", [*params, cluster]
    # the printed id's rows first, then the raw id's, each in stored order (rowid): two lookups in
    # job_metrics' indexes (an OR of the two columns would scan every row), keys only; then the row
    cols = 'cluster, job_id_raw, "user", account, rowid AS pos'
    keys = db.execute(f"SELECT * FROM ({by_id('job_metrics', 'job_id', cols, 'cluster, job_id_raw, 0 AS by_raw, pos', sc)}) "
                      f"UNION ALL SELECT * FROM ({by_id('job_metrics', 'job_id_raw', cols, 'cluster, job_id_raw, 1, pos', sc)}) "
                      "ORDER BY by_raw, pos", [job, *params, job, *params]).fetchall()
    _one_cluster(job, {c for c, _j, _b, _p in keys})
    if not keys:
        return None
    return of_job(db, "job_metrics", "*", keys[0][0], keys[0][1])[0]


def details(db, scope: Scope, job: str, cluster: str | None) -> dict:
    """Everything `jobsight job` shows of one job: its job_metrics row with its flags, GPUs, steps,
    utilisation series, savings, per-node lines and held samples; a job no accounting names yet,
    from its samples (admins only: nothing says whose samples they are)."""
    m = find(db, scope, job, cluster)
    if m is None:
        if scope.role != "admin":
            raise NoSuchJob(f"no job {job!r} in the database" + (f" on cluster {cluster!r}" if cluster else ""))
        return samples_only(db, job, cluster)
    key = [m["cluster"], m["job_id_raw"]]
    # each table through its index on job_id_raw (of_job); the samples (series) by their zone maps
    m["flags"] = of_job(db, "job_flags", "code, severity, message, advice", *key, "advice_order")
    m["gpus"] = of_job(db, "job_gpu_devices", "host, device, gpu_index, util_mean_pct, util_max_pct, mem_peak_bytes, "
                       "mem_total_bytes, energy_j, n_samples, source", *key, "host, gpu_index, device")
    m["steps"] = of_job(db, "steps", "step_id, step_name, state, exit_code, elapsed_s, ncpus, ntasks, cpu_time_s, "
                        "max_rss_bytes, mem_usage_tot_bytes", *key, "start_time NULLS LAST, step_id")
    m["series"], m["samples_moved"] = _series(db, key)
    saved = of_job(db, "job_savings", "fitted_request, sbu_if_fitted, savings_sbu, savings_note, fitted_partition, "
                   "fitted_ncpus, fitted_ngpus, fitted_mem_bytes, fitted_timelimit_s, fitted_billing", *key)
    m["savings"] = saved[0] if saved else None
    # the stored per-host rows the job's figures sum: also for a job whose samples were pruned
    nodes = job_samples.stored_per_node(db, *key)
    m["nodes"] = nodes if len(nodes) > 1 or (m.get("nnodes") or 0) > 1 else []
    m["pending"] = db.rows("SELECT owner_uid, owner_user, count(*) AS n_samples FROM sample_pending "
                           "WHERE cluster = ? AND job_id_raw = ? GROUP BY ALL ORDER BY owner_uid", key)
    return m


def _series(db, key: list) -> tuple[dict, dict | None]:
    """The job's series, and where its pruned samples went (None: not pruned): read back from the
    lake ([lake] path, else the one it was pruned to; "read": true), or, when that cannot be read,
    only the samples the database kept ("read": false, "why")."""
    lake = getattr(getattr(db, "config", None), "lake_path", None)
    source, params, moved = job_samples.job_rows(db, *key, root=lake)
    return job_samples.series(db, *key, source=(source, params)), moved


def samples_only(db, job: str, cluster: str | None) -> dict:
    """A job no accounting names yet, from its samples: those that will count when it arrives and
    those held under the trust model. UserError when there are none either."""
    found = job_samples.find(db, job, cluster)
    if not found:
        raise NoSuchJob(f"no job {job!r} in the database" + (f" on cluster {cluster!r}" if cluster else "")
                        + ": no accounting and no samples")
    _one_cluster(job, {c for c, _j, _w in found})
    c, raw = found[0][0], found[0][1]
    out = {"cluster": c, "job_id_raw": raw, "accounting": None}
    for which in ("sample", "pending"):
        out[{"sample": "samples", "pending": "pending_samples"}[which]] = (
            job_samples.summary(db, c, raw, which) if any(w == which for _c, _j, w in found) else None)
    return out
