"""One job's samples summarised per node and per GPU, for `jobsight job`, with the portable metric
SQL itself (sql/metrics/NN_lake_*.sql): the formulas are the ones the stored job_gpu_devices and
job_metrics are computed with, run here over this job's samples alone.

- ``per_node``: one CPU and memory line per host (lake_job_cpu_hosts, the rows the job's figures
  sum), for a multi-node job's report.
- ``summary``: the per-node lines, the GPUs (lake_job_gpu_devices) and the utilisation series of a
  job that has samples but no accounting yet: those in ``sample``, which count once the accounting
  arrives, or those held in ``sample_pending`` under the trust model (docs/ingest.md#trust-model),
  which count only when the accounting shows the job is their file owner's.

The views are created as TEMP objects for the query and dropped after it; a refresh, which creates
views of the same names, is never running on the same connection at the time.
"""
from __future__ import annotations

import duckdb

from jobsight.analytics.store import lake, pruned

TABLES = {"sample": "samples", "pending": "sample_pending"}     # counted samples / held ones
# the portable views a summary needs, in file order (each reads only the ones before it)
VIEWS = ("lake_config", "lake_sample_weighted", "lake_job_gpu_devices", "lake_job_cpu_hosts")
_SAMPLES = "_jobsight_job_samples"


def sample_columns(db) -> list[str]:
    """The columns of the `samples` view (sample_pending has them too, and its owner's)."""
    return [d[0] for d in db.execute("SELECT * FROM samples LIMIT 0").description]


def _rows(db, table: str) -> str:
    """The samples of ``table`` as the `samples` view gives them: held ones read util_pct by the
    view's rule too (the macro sample_util_pct: a MIG instance's SM activity)."""
    if table == "samples":
        return table
    cols = ", ".join("sample_util_pct(util_pct, device, sm_active_pct) AS util_pct" if c == "util_pct" else f'"{c}"'
                     for c in sample_columns(db))
    return f"(SELECT {cols} FROM {table})"


def find(db, job: str, cluster: str | None) -> list[tuple[str, str, str]]:
    """(cluster, job_id_raw, which) for every job of that raw id that has samples, counted
    ("sample") or held ("pending")."""
    out = []
    for which, table in TABLES.items():
        sql = f"SELECT DISTINCT cluster, job_id_raw FROM {table} WHERE job_id_raw = ?"
        params = [job]
        if cluster:
            sql += " AND cluster = ?"
            params.append(cluster)
        out += [(c, j, which) for c, j in db.execute(sql + " ORDER BY cluster", params).fetchall()]
    return out


def _create(db, cluster: str, job_id_raw: str, which: str) -> None:
    db.execute(f"CREATE OR REPLACE TEMP TABLE {_SAMPLES} AS SELECT * FROM {_rows(db, TABLES[which])} "
               "WHERE cluster = ? AND job_id_raw = ?", [cluster, job_id_raw])
    db.execute(f"CREATE OR REPLACE TEMP VIEW {lake.INPUT_VIEWS['samples']} AS "
               f"SELECT *, {lake.TIME_MS} AS time_ms FROM {_SAMPLES}")
    db.execute(f"CREATE OR REPLACE TEMP VIEW {lake.INPUT_VIEWS['setting']} AS SELECT c.cluster, s.name, s.value, "
               f"s.text FROM (SELECT DISTINCT cluster FROM {_SAMPLES}) c CROSS JOIN setting s")
    views = dict(lake.lake_views())
    for name in VIEWS:
        db.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {views[name]}")


def _drop(db) -> None:
    for name in reversed(VIEWS):
        db.execute(f"DROP VIEW IF EXISTS temp.{name}")
    for table in ("setting", "samples"):
        db.execute(f"DROP VIEW IF EXISTS temp.{lake.INPUT_VIEWS[table]}")
    db.execute(f"DROP TABLE IF EXISTS temp.{_SAMPLES}")


def _query(db, cluster: str, job_id_raw: str, which: str, queries: dict[str, str]) -> dict:
    _create(db, cluster, job_id_raw, which)
    try:
        return {name: db.rows(sql) for name, sql in queries.items()}
    finally:
        _drop(db)


NODE_QUERY = ("SELECT host, util_pct AS cpu_util_pct, mem_peak_bytes, mem_limit_bytes, n_samples, first_time, "
              "last_time FROM lake_job_cpu_hosts ORDER BY host")
GPU_QUERY = ("SELECT host, device, gpu_index, util_mean_pct, util_max_pct, mem_peak_bytes, mem_total_bytes, "
             "energy_j, n_samples, source FROM lake_job_gpu_devices ORDER BY host, gpu_index, device")


def moved(db, cluster: str, job_id_raw: str) -> dict | None:
    """{"before", "lake"} when `jobsight prune` moved this job's samples before `before` to the
    Parquet lake `lake` (tables pruned_job, pruned_month); None when it did not."""
    # two plain statements: most jobs were not pruned, and one with a subquery takes twice as long to plan
    row = db.execute("SELECT before FROM pruned_job WHERE cluster = ? AND job_id_raw = ?", [cluster, job_id_raw]).fetchone()
    if row is None:
        return None
    return {"before": row[0], "lake": db.value("SELECT max(lake) FROM pruned_month WHERE cluster = ? "
                                               "AND month <= strftime(?, '%Y-%m')", [cluster, row[0]])}


class LakeUnreadable(Exception):
    """The lake holds no files for the months a pruned job's samples were moved from."""


# the columns of a job's samples a time series reads (the `samples` view's and the lake's)
SERIES_COLUMNS = ("cluster, job_id_raw, host, device, gpu_index, time, util_pct, mem_used_bytes, "
                  "mem_total_bytes, source")


def lake_rows(db, cluster: str, job_id_raw: str, before, root: str | None = None) -> tuple[str, list]:
    """(a SELECT of the job's samples before ``before`` in the lake, its parameters): it reads only
    the files of the job's cluster and of the months from its submit or start to the cutoff
    (store/pruned.py), never the whole lake. ``root``: the lake, if not the one recorded."""
    first = db.execute("SELECT strftime(least(submit_time, eligible_time, start_time), '%Y-%m') FROM job "
                       "WHERE cluster = ? AND job_id_raw = ?", [cluster, job_id_raw]).fetchone()
    parts = pruned.partitions(db, cluster, first[0] if first else None, before.strftime("%Y-%m"), root)
    paths = [f for c, m, r in parts for f in pruned.files(r, c, m)]
    if not paths:
        months = ", ".join(m for _c, m, _r in parts) or "none recorded"
        raise LakeUnreadable(f"{root or (parts[0][2] if parts else 'the lake')}: no samples files for cluster "
                             f"{cluster}, months {months}")
    return (f"SELECT {SERIES_COLUMNS} FROM {pruned.read_sql(paths)} WHERE cluster = ? AND job_id_raw = ? "
            "AND time < ?", [cluster, job_id_raw, before])


def job_rows(db, cluster: str, job_id_raw: str, root: str | None = None) -> tuple[str, list, dict | None]:
    """The job's samples for its time series: (a FROM source with SERIES_COLUMNS, its parameters,
    ``samples_moved``). A job `jobsight prune` moved samples of gets those read back from the lake
    (``root``, default the one it was pruned to): ``samples_moved`` is {"before", "lake", "read":
    True}; when the lake cannot be read, the source holds only the samples the database kept and
    "read" is False, with "why". None for a job that was not pruned."""
    kept = (f"(SELECT {SERIES_COLUMNS} FROM samples WHERE cluster = ? AND job_id_raw = ?)", [cluster, job_id_raw])
    info = moved(db, cluster, job_id_raw)
    if info is None:
        return (*kept, None)
    where = root or info["lake"]
    try:
        sql, params = lake_rows(db, cluster, job_id_raw, info["before"], root)
        db.execute(f"SELECT count(*) FROM ({sql})", params).fetchone()     # unreadable: said here, once
    except (LakeUnreadable, duckdb.Error) as exc:
        return (*kept, {**info, "lake": where, "read": False, "why": str(exc).splitlines()[0]})
    return (f"({kept[0][1:-1]} UNION ALL {sql})", kept[1] + params, {**info, "lake": where, "read": True})


def series(db, cluster: str, job_id_raw: str, table: str = "samples",
           source: tuple[str, list] | None = None) -> dict[str, list]:
    """Utilisation in time order per device (the CPU first), for the sparklines: keyed by the
    device, or by "host device" when the job has samples from more than one host.
    ``source``: (FROM source, parameters) of the job's samples (``job_rows``), else ``table``'s."""
    src, params = source or (f"(SELECT * FROM {_rows(db, table)} WHERE cluster = ? AND job_id_raw = ?)",
                             [cluster, job_id_raw])
    rows = db.execute(f"SELECT host, device, list(util_pct ORDER BY time) FROM {src} "
                      "GROUP BY host, device ORDER BY device = 'cpu' DESC, device, host", params).fetchall()
    many = len({host for host, _d, _v in rows}) > 1
    return {f"{host} {dev}" if many else dev: vals for host, dev, vals in rows}


def per_node(db, cluster: str, job_id_raw: str, which: str = "sample") -> list[dict]:
    """One row per host with CPU samples: host, cpu_util_pct, mem_peak_bytes, mem_limit_bytes, ..."""
    return _query(db, cluster, job_id_raw, which, {"nodes": NODE_QUERY})["nodes"]


def stored_per_node(db, cluster: str, job_id_raw: str) -> list[dict]:
    """``per_node`` of a job with accounting: its stored rows (job_cpu_hosts, the same SQL), which
    outlive its samples (`jobsight prune`)."""
    # through the index on job_id_raw alone, the cluster applied to the rows found (queries/job.py of_job)
    names, rows = db.fetch(NODE_QUERY.replace("SELECT ", "SELECT cluster AS _cluster, ", 1)
                           .replace("FROM lake_job_cpu_hosts", "FROM job_cpu_hosts WHERE job_id_raw = ?"), [job_id_raw])
    return [dict(zip(names[1:], r[1:])) for r in rows if r[0] == cluster]


def summary(db, cluster: str, job_id_raw: str, which: str) -> dict:
    """The samples of a job as `jobsight job` shows them: nodes, gpus, series, span and count;
    for held samples (``which="pending"``) also the owners of the files they came from."""
    out = {"nodes": per_node(db, cluster, job_id_raw, which)}
    out["gpus"] = _query(db, cluster, job_id_raw, which, {"gpus": GPU_QUERY})["gpus"]
    table, key = TABLES[which], [cluster, job_id_raw]
    out["n_samples"], out["first_time"], out["last_time"] = db.execute(
        f"SELECT count(*), min(time), max(time) FROM {table} WHERE cluster = ? AND job_id_raw = ?", key).fetchone()
    out["series"] = series(db, cluster, job_id_raw, table)
    if which == "pending":
        out["owners"] = db.rows("SELECT owner_uid, owner_user, count(*) AS n_samples FROM sample_pending "
                                "WHERE cluster = ? AND job_id_raw = ? GROUP BY ALL ORDER BY owner_uid", key)
    return out
