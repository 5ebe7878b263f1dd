"""One job's answer (`jobsight job`, the API's /jobs/{cluster}/{id}) read through the indexes on
job_id_raw and job_id equals the answer of plain scans (the reference below: each table filtered
by cluster and id, as before the indexes), for every job of demo data on two clusters, by its
printed and its raw id, with and without a cluster, in every role's scope; and the lookups do use
the indexes (DuckDB drops an index for a scan when another filter sits beside its equality)."""
from __future__ import annotations

import pytest
from demo_db import demo_db

from jobsight.analytics import render
from jobsight.analytics.errors import UserError
from jobsight.analytics.queries import job as job_queries
from jobsight.analytics.queries import samples as job_samples
from jobsight.analytics.queries.scope import Scope
from jobsight.analytics.store.snapshot import SnapshotReader

CLUSTERS = ("demo", "other")


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    # the same ids on two clusters: a cluster filter beside the id
    db, _ = demo_db(tmp_path_factory.mktemp("job-lookup"), jobs=40, days=4, seed=11, clusters=CLUSTERS)
    r = SnapshotReader(db)
    yield r
    r.close()


def reference(db, scope: Scope, job: str, cluster: str | None) -> dict:
    """The answer by plain scans of each table (no index can serve an OR or two filters)."""
    sc, params = scope.sql()
    rows: list[dict] = []
    for column in ("job_id", "job_id_raw"):
        sql = f"SELECT * FROM job_metrics WHERE {sc} AND {column} = ?" + (" AND cluster = ?" if cluster else "")
        found = db.rows(sql + " ORDER BY rowid", params + [job] + ([cluster] if cluster else []))
        seen = {(r["cluster"], r["job_id_raw"]) for r in rows}
        rows += [r for r in found if (r["cluster"], r["job_id_raw"]) not in seen]
    if len({r["cluster"] for r in rows}) > 1:
        raise UserError(f"job {job!r} exists on clusters {', '.join(sorted({r['cluster'] for r in rows}))}: "
                        "pass --cluster")
    if not rows:
        if scope.role != "admin":
            raise job_queries.NoSuchJob(f"no job {job!r}")
        return job_queries.samples_only(db, job, cluster)
    m, key = rows[0], [rows[0]["cluster"], rows[0]["job_id_raw"]]
    m["flags"] = db.rows("SELECT code, severity, message, advice FROM job_flags WHERE cluster = ? AND job_id_raw = ? "
                         "ORDER BY advice_order", key)
    m["gpus"] = db.rows("SELECT host, device, gpu_index, util_mean_pct, util_max_pct, mem_peak_bytes, mem_total_bytes, "
                        "energy_j, n_samples, source FROM job_gpu_devices WHERE cluster = ? AND job_id_raw = ? "
                        "ORDER BY host, gpu_index, device", key)
    m["steps"] = db.rows("SELECT step_id, step_name, state, exit_code, elapsed_s, ncpus, ntasks, cpu_time_s, "
                         "max_rss_bytes, mem_usage_tot_bytes FROM steps WHERE cluster = ? AND job_id_raw = ? "
                         "ORDER BY start_time NULLS LAST, step_id", key)
    m["series"], m["samples_moved"] = job_queries._series(db, key)
    saved = db.rows("SELECT fitted_request, sbu_if_fitted, savings_sbu, savings_note, fitted_partition, fitted_ncpus, "
                    "fitted_ngpus, fitted_mem_bytes, fitted_timelimit_s, fitted_billing FROM job_savings "
                    "WHERE cluster = ? AND job_id_raw = ?", key)
    m["savings"] = saved[0] if saved else None
    nodes = db.rows(job_samples.NODE_QUERY.replace("FROM lake_job_cpu_hosts", "FROM job_cpu_hosts WHERE cluster = ? "
                                                   "AND job_id_raw = ?"), key)
    m["nodes"] = nodes if len(nodes) > 1 or (m.get("nnodes") or 0) > 1 else []
    m["pending"] = db.rows("SELECT owner_uid, owner_user, count(*) AS n_samples FROM sample_pending "
                           "WHERE cluster = ? AND job_id_raw = ? GROUP BY ALL ORDER BY owner_uid", key)
    return m


def answer(fn, db, scope, job, cluster) -> str:
    try:
        return render.to_json(fn(db, scope, job, cluster))
    except UserError as exc:        # NoSuchJob too: the message differs, what matters is that both refuse
        return type(exc).__name__ if isinstance(exc, job_queries.NoSuchJob) else str(exc)


def test_indexed_answer_equals_the_scans(reader):
    with reader.cursor() as h:
        every = h.execute('SELECT job_id, job_id_raw, "user", account FROM job_metrics WHERE cluster = ? '
                          "ORDER BY job_id_raw", ["demo"]).fetchall()
        # array jobs (printed id != raw id), multi-step and GPU jobs among them
        jobs = [j for j in every if j[0] != j[1]][:4] + every[::6]
        assert len(every) >= 30 and any(j != raw for j, raw, _u, _a in jobs)
        assert h.value("SELECT count(*) FROM job_flags") and h.value("SELECT count(*) FROM steps")
        other_user = jobs[0][2]
        compared = found = 0
        for job_id, raw, user, account in jobs:
            scopes = (Scope.admin(), Scope("user", user), Scope("user", other_user), Scope("lead", "nobody", (account,)),
                      Scope("lead", user, ("no-such-account",)))
            for scope in scopes:
                for ask, cluster in ((job_id, "demo"), (raw, "other"), (raw, None), (job_id, "absent")):
                    want = answer(reference, h, scope, ask, cluster)
                    got = answer(job_queries.details, h, scope, ask, cluster)
                    assert got == want, (ask, cluster, scope)
                    compared += 1
                    found += want.startswith("{")
        assert found > compared // 4        # most questions find their job: the comparison is not of refusals


def test_lookups_use_the_indexes(reader):
    """With two clusters and a user's scope beside the id, each lookup is still an index scan."""
    with reader.cursor() as h:
        job_id, raw, user = h.execute('SELECT job_id, job_id_raw, "user" FROM job_metrics WHERE cluster = ? LIMIT 1',
                                      ["demo"]).fetchone()
        sc, params = Scope("user", user).sql()
        for table, column, where, p in (("job_metrics", "job_id", f"{sc} AND cluster = ?", [*params, "demo"]),
                                        ("job_metrics", "job_id_raw", f"{sc} AND cluster = ?", [*params, "demo"]),
                                        ("job_flags", "job_id_raw", "cluster = ?", ["demo"]),
                                        ("steps", "job_id_raw", "cluster = ?", ["demo"]),
                                        ("job_savings", "job_id_raw", "cluster = ?", ["demo"]),
                                        ("job_gpu_devices", "job_id_raw", "cluster = ?", ["demo"]),
                                        ("job_cpu_hosts", "job_id_raw", "cluster = ?", ["demo"])):
            key = job_id if column == "job_id" else raw
            if table != "job_metrics":     # a job with rows in the table
                key = h.value(f"SELECT job_id_raw FROM {table} WHERE cluster = ? LIMIT 1", ["demo"])
            sql = job_queries.by_id(table, column, "*", where=where)
            assert h.execute(sql, [key, *p]).fetchall()
            plan = h.execute("EXPLAIN ANALYZE " + sql, [key, *p]).fetchall()[0][1]
            assert "Index Scan" in plan, (table, column, plan)
            if column == "job_id_raw":       # the plain lookup of a job found (of_job): the id its one filter
                plan = h.execute("EXPLAIN ANALYZE " + job_queries.of_job_sql(table, "*", "1"), [key]).fetchall()[0][1]
                assert "Index Scan" in plan, (table, plan)
            if table == "job_metrics":       # the user's scope beside the id: DuckDB would scan
                plain = h.execute(f"EXPLAIN ANALYZE SELECT * FROM {table} WHERE {column} = ? AND {where}",
                                  [key, *p]).fetchall()[0][1]
                assert "Index Scan" not in plain    # what by_id avoids: the test tells the two apart
