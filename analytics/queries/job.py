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


def find(db, scope: Scope, job: str, cluster: str | None) -> dict | None:
    """The job's job_metrics row; None when no accounting names it or it is outside the scope."""
    sc, params = scope.sql()
    rows: list[dict] = []
    # the printed id's rows first, then the raw id's: two scans of one column each, several times
    # faster at 1M jobs than one scan with `job_id = ? OR job_id_raw = ?`
    for column in ("job_id", "job_id_raw"):
        sql = f"SELECT * FROM job_metrics WHERE {sc} AND {column} = ?" + (" AND cluster = ?" if cluster else "")
        found = db.rows(sql, params + [job] + ([cluster] if cluster else []))
        seen = {(r["cluster"], r["job_id_raw"]) for r in rows}
        rows += [r for r in found if (r["cluster"], r["job_id_raw"]) not in seen]
    _one_cluster(job, {r["cluster"] for r in rows})
    return rows[0] if rows else None


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
    m["flags"] = db.rows("SELECT code, severity, message, advice FROM job_flags "
                                     "WHERE cluster = ? AND job_id_raw = ? ORDER BY advice_order", key)
    m["gpus"] = db.rows("SELECT host, device, gpu_index, util_mean_pct, util_max_pct, mem_peak_bytes, "
                                    "mem_total_bytes, energy_j, n_samples, source FROM job_gpu_devices "
                                    "WHERE cluster = ? AND job_id_raw = ? ORDER BY host, gpu_index, device", key)
    m["steps"] = db.rows("SELECT step_id, step_name, state, exit_code, elapsed_s, ncpus, ntasks, cpu_time_s, "
                                     "max_rss_bytes, mem_usage_tot_bytes FROM steps WHERE cluster = ? AND job_id_raw = ? "
                                     "ORDER BY start_time NULLS LAST, step_id", key)
    m["series"], m["samples_moved"] = _series(db, key)
    saved = db.rows("SELECT fitted_request, sbu_if_fitted, savings_sbu, savings_note, fitted_partition, fitted_ncpus, "
                    "fitted_ngpus, fitted_mem_bytes, fitted_timelimit_s, fitted_billing FROM job_savings "
                    "WHERE cluster = ? AND job_id_raw = ?", key)
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
