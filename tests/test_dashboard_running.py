"""Running now (dashboard/pages/running.py, analytics/queries/running.py, sql/views/70_running.sql)
on a hand-made database, cluster c1, samples every minute up to 12:00, defaults (idle below 1 %,
idle now after 30 minutes):

  job 10  alice proj-a  RUNNING 2 h, 2 GPUs, billing 200 -> 400 SBU so far, 200 SBU/h;
          GPU-a at 80 % until 11:00 then 0 % (idle 60 min since that sample: idle now), GPU-b at
          90 % -> 100 idle SBU/h
  job 11  bob   proj-b  RUNNING 1 h, 1 GPU, billing 100; its GPU at 0 % for 10 min since its last
          busy sample: not yet
  job 12  alice proj-a  COMPLETED, its GPU idle all along: not running
  job 13  carol proj-a  RUNNING 1 h, 4 cores, billing 4, no samples
"""
from __future__ import annotations

import datetime as dt

import pytest
from conftest import post_callback

from jobsight.analytics.config import parse_config
from jobsight.analytics.queries import running as running_queries
from jobsight.analytics.queries.scope import Scope
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles
from jobsight.dashboard.pages import running

NOON = dt.datetime(2026, 11, 17, 12, 0)
ADMIN, ALICE, BOB = Scope("admin", "root"), Scope("user", "alice"), Scope("user", "bob")
DAVE = Scope("lead", "dave", ("proj-a",))
ROLES = {"admins": ["root"], "leads": {"proj-a": ["dave"]}}


def job(con, jid, user, account, state, hours, billing, ngpus=0, ncpus=4):
    start = NOON - dt.timedelta(hours=hours)
    con.execute("INSERT INTO job (cluster, job_id, job_id_raw, \"user\", account, \"partition\", state, start_time, "
                "end_time, elapsed_s, ncpus, ngpus, billing, source) VALUES ('c1', ?, ?, ?, ?, 'gpu', ?, ?, ?, ?, ?, ?, ?, 'test')",
                [jid, jid, user, account, state, start, None if state == "RUNNING" else NOON, hours * 3600, ncpus,
                 ngpus, billing])


def gpu(con, jid, device, index, utils):
    """Samples a minute apart, the last at noon."""
    for i, u in enumerate(utils):
        t = NOON - dt.timedelta(minutes=len(utils) - 1 - i)
        con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, gpu_index, source) "
                    "VALUES ('c1', ?, 'n1', ?, ?, ?, ?, 'sidecar')", [jid, device, t, u, index])


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("running") / "jobs.duckdb"
    with Database.open(path, parse_config({}), say=None) as d:
        con = d.con
        job(con, "10", "alice", "proj-a", "RUNNING", 2, 200, ngpus=2)
        gpu(con, "10", "GPU-a", 0, [80.0] * 61 + [0.0] * 60)
        gpu(con, "10", "GPU-b", 1, [90.0] * 121)
        job(con, "11", "bob", "proj-b", "RUNNING", 1, 100, ngpus=1)
        gpu(con, "11", "GPU-c", 0, [70.0] * 51 + [0.0] * 10)
        job(con, "12", "alice", "proj-a", "COMPLETED", 1, 100, ngpus=1)
        gpu(con, "12", "GPU-d", 0, [0.0] * 61)
        job(con, "13", "carol", "proj-a", "RUNNING", 1, 4)
    with Database.open(path, parse_config({}), say=None) as d:
        d.refresh(full=True)
    return path


@pytest.fixture
def h(db):
    with Database.open(db, read_only=True) as d:
        yield d


def test_running_jobs_and_idle_gpus(h):
    df, t = running_queries.running_jobs(h, ADMIN)
    assert t["matching"] == 3 and list(df["job_id"]) == ["10", "11", "13"]          # wasting first, then SBU/h
    j10 = df.iloc[0]
    assert (j10["gpus_idle_now"], j10["sbu"], j10["sbu_per_h"], j10["idle_sbu_per_h"]) == (1, 400, 200, 100)
    assert j10["gpu_idle_max_min"] == 60 and j10["gpu_util_now_pct"] == 45
    assert df.iloc[1]["gpus_idle_now"] == 0 and df.iloc[1]["gpu_idle_max_min"] == 10
    assert df.iloc[2]["gpus_sampled"] is None or df.iloc[2]["gpus_idle_now"] == 0
    gpus = running_queries.idle_gpus(h, ADMIN)
    assert list(zip(gpus["job_id"], gpus["device"], gpus["idle_min"])) == [("10", "GPU-a", 60)]
    assert (t["jobs"], t["gpus"], t["gpus_idle_now"], t["wasting_jobs"], t["idle_sbu_per_h"]) == (3, 3, 1, 1, 100)
    assert t["sbu_per_h"] == 200 + 100 + 4 and t["last_sample"] == NOON
    wasting, w = running_queries.running_jobs(h, ADMIN, wasting_only=True)
    assert list(wasting["job_id"]) == ["10"] and (w["matching"], w["jobs"], w["sbu_per_h"]) == (1, 3, 304)
    none, b = running_queries.running_jobs(h, BOB, wasting_only=True)      # no row: the totals still
    assert none.empty and (b["matching"], b["jobs"], b["sbu_per_h"], b["last_sample"]) == (0, 1, 100, NOON)


def test_the_threshold_is_the_setting(db, tmp_path):
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(db.read_bytes())
    with Database.open(copy, parse_config({"flags": {"running_gpu_idle_min": 5}}), say=None) as d:
        assert running_queries.idle_minutes(d) == 5
        assert running_queries.running_jobs(d, ADMIN)[1]["gpus_idle_now"] == 2    # bob's 10 minutes count now


@pytest.mark.parametrize("scope,jobs", [(ALICE, ["10"]), (BOB, ["11"]), (DAVE, ["10", "13"]),
                                        (Scope("user", "mallory"), [])])
def test_each_sees_their_scope(h, scope, jobs):
    df, t = running_queries.running_jobs(h, scope)
    assert list(df["job_id"]) == jobs and t["matching"] == t["jobs"] == len(jobs)
    assert list(running_queries.idle_gpus(h, scope)["job_id"]) == [j for j in jobs if j == "10"]
    # a chosen user outside the scope is nobody
    assert running_queries.running_jobs(h, scope, user="bob")[1]["jobs"] == (1 if scope in (ADMIN, BOB) else 0)


def test_page_rows_link_to_the_job(h):
    jobs, gpus, status = running.content(h, DAVE, None, False, "/job")
    assert [r["job_id"] for r in jobs] == ["10", "13"] and jobs[0]["href"] == "/job?cluster=c1&id=10"
    assert [r["device"] for r in gpus] == ["GPU-a"]
    assert status.startswith("2 running jobs burning 204.0 SBU/h; 1 of 2 GPUs idle now in 1 job, 100.0 SBU/h")


def test_callback_keeps_a_user_to_their_own_jobs(db):
    publish(db)
    reader = SnapshotReader(db)
    try:
        app = create_app(reader, Auth("header", Roles.from_config(ROLES)))
        client = app.server.test_client()
        key = next(k for k in app.callback_map if "run-jobs.rowData" in k)
        spec = app.callback_map[key]
        for user, asked, want in (("alice", "bob", "alice"), ("bob", None, "bob"), ("dave", "bob", None),
                                  ("root", "bob", "bob")):
            r = post_callback(client, key, spec, {"run-user.value": asked, "run-state.value": "running"}.get, user)
            assert r.status_code == 200
            body = r.get_json()["response"]
            users = {row["user"] for row in body["run-jobs"]["rowData"]}
            assert users == ({want} if want else set()), (user, asked, users)
        page = post_callback(client, "page.children", app.callback_map["page.children"],
                             {"url.pathname": "/running", "url.search": ""}.get, "alice")
        assert page.status_code == 200 and "Running now" in page.get_data(as_text=True)
    finally:
        reader.close()


def _kv_rows(node) -> dict:
    """The job page's key/value tables as {key: value}."""
    found = {}
    if isinstance(node, dict):
        props = node.get("props", {})
        if node.get("type") == "Tr":
            th, td = (c["props"]["children"] for c in props["children"])
            found[th] = td
        for child in (props.get("children") if isinstance(props.get("children"), list) else [props.get("children")]):
            found.update(_kv_rows(child))
    elif isinstance(node, list):
        for child in node:
            found.update(_kv_rows(child))
    return found


def test_job_page_marks_a_running_job_with_sbu_so_far_and_no_exit_code(db):
    publish(db)
    reader = SnapshotReader(db)
    try:
        app = create_app(reader, Auth("header", Roles.from_config(ROLES)))
        client = app.server.test_client()
        spec = app.callback_map["job-content.children"]

        def page(job_id):
            r = post_callback(client, "job-content.children", spec,
                              {"job-key.data": {"cluster": "c1", "id": job_id}}.get, "root")
            assert r.status_code == 200
            return _kv_rows(r.get_json()["response"]["job-content"]["children"])
        running_job, ended = page("10"), page("12")
    finally:
        reader.close()
    # job 10: RUNNING 2 h at billing 200 -> 400 SBU so far; no exit code row
    assert running_job["State"] == "RUNNING (still running: figures so far)"
    assert "Exit code" not in running_job and "SBU" not in running_job
    assert running_job["SBU so far"].split()[0] == "400.0"   # one decimal, as every face
    # job 12 ended: State, Exit code and SBU as always
    assert ended["State"] == "COMPLETED" and "Exit code" in ended and "SBU so far" not in ended
    assert ended["SBU"].split()[0] == "100.0"
