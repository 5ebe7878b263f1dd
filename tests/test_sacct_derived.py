"""sacct text with other --format sets: cores, CPU time, elapsed and GPUs derived from the columns
present (fixtures/sacct/derived-*.txt), each with where it came from; both readers agree."""
from __future__ import annotations

import json

import pytest
from conftest import FIXTURES
from polars.testing import assert_frame_equal

from jobsight.analytics.config import parse_config
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

SACCT = FIXTURES / "sacct"
UTC = ParseOptions(timezone="UTC")


def _parse(name, fast=True):
    return sacct_text.parse(SACCT / name, UTC, fast_path=fast)


def _rows(frame, key="job_id_raw"):
    return {r[key] if key == "job_id_raw" else (r["job_id_raw"], r["step_id"]): r for r in frame.to_dicts()}


def _derived(row):
    return json.loads(row["derived"]) if row["derived"] else {}


@pytest.mark.parametrize("name", ["derived-cores-cputime.txt", "derived-elapsed.txt", "derived-gres-pre1905.txt",
                                  "mixed-jobs.txt"])
def test_both_readers_derive_the_same(name):
    fast, slow = _parse(name, True), _parse(name, False)
    assert fast.rejects == slow.rejects == []
    assert_frame_equal(fast.jobs, slow.jobs)
    assert_frame_equal(fast.steps, slow.steps)


@pytest.mark.parametrize("fast", [True, False])
def test_cores_and_cpu_time_without_ncpus_and_totalcpu(fast):
    res = _parse("derived-cores-cputime.txt", fast)
    jobs, steps = _rows(res.jobs), _rows(res.steps, "step")
    # AllocTRES cpu=16; UserCPU 11:06:33 + SystemCPU 22:53.824
    assert jobs["5001"]["ncpus"] == 16
    assert jobs["5001"]["cpu_time_s"] == pytest.approx(11 * 3600 + 6 * 60 + 33 + 22 * 60 + 53.824)
    assert _derived(jobs["5001"]) == {"ncpus": "AllocTRES cpu", "cpu_time_s": "UserCPU + SystemCPU"}
    assert steps[("5001", "batch")]["ncpus"] == 16
    # no AllocTRES value: ReqTRES cpu=8; neither: ReqCPUS 4
    assert (jobs["5002"]["ncpus"], _derived(jobs["5002"])["ncpus"]) == (8, "ReqTRES cpu")
    assert jobs["5002"]["cpu_time_s"] == pytest.approx(6 * 3600 + 30.0)
    assert (jobs["5003"]["ncpus"], _derived(jobs["5003"])["ncpus"]) == (4, "ReqCPUS")
    # ReqCPUS is Slurm's NO_VAL and nothing else names the cores: unknown, nothing derived
    assert jobs["5004"]["ncpus"] is None and jobs["5004"]["cpu_time_s"] is None
    assert "ncpus" not in _derived(jobs["5004"])
    # Elapsed was printed: read, not derived
    assert jobs["5001"]["elapsed_s"] == 10800 and "elapsed_s" not in _derived(jobs["5001"])


@pytest.mark.parametrize("fast", [True, False])
def test_elapsed_from_end_minus_start(fast):
    res = _parse("derived-elapsed.txt", fast)
    jobs, steps = _rows(res.jobs), _rows(res.steps, "step")
    assert jobs["6001"]["elapsed_s"] == 2 * 3600 + 30 * 60 + 15
    assert _derived(jobs["6001"]) == {"elapsed_s": "End - Start"}
    assert steps[("6001", "0")]["elapsed_s"] == 2 * 3600 + 29 * 60 + 55
    # a running job has no End: its elapsed stays unknown
    assert jobs["6002"]["elapsed_s"] is None and jobs["6002"]["derived"] is None
    # NCPUS and TotalCPU were printed
    assert (jobs["6001"]["ncpus"], jobs["6001"]["cpu_time_s"]) == (4, 8 * 3600.0)


@pytest.mark.parametrize("fast", [True, False])
def test_gpus_from_gres_before_slurm_19_05(fast):
    jobs = _rows(_parse("derived-gres-pre1905.txt", fast).jobs)
    assert (jobs["7001"]["ngpus"], jobs["7001"]["gpu_type"], _derived(jobs["7001"])) == (2, None, {"ngpus": "AllocGRES gpu"})
    assert (jobs["7002"]["ngpus"], jobs["7002"]["gpu_type"]) == (2, "k80")
    assert (jobs["7003"]["ngpus"], _derived(jobs["7003"])) == (1, {"ngpus": "ReqGRES gpu"})
    assert jobs["7004"]["ngpus"] is None and jobs["7004"]["derived"] is None


def test_printed_columns_are_never_marked_derived():
    res = sacct_text.parse(SACCT / "mixed-jobs.txt", ParseOptions(timezone="Europe/Amsterdam"))
    assert res.jobs["derived"].null_count() == res.jobs.height
    assert res.steps["derived"].null_count() == res.steps.height


@pytest.mark.parametrize("fast", [True, False])
def test_an_unreadable_gres_is_rejected_with_its_reason(tmp_path, fast):
    p = tmp_path / "gres.txt"
    p.write_text("JobID|State|NCPUS|AllocGRES\n1|COMPLETED|2|gpu:a:b:2\n2|COMPLETED|2|gpu:2\n")
    res = sacct_text.parse(p, UTC, fast_path=fast)
    assert [r.line_no for r in res.rejects] == [2]
    assert "allocgres" in res.rejects[0].reason and "gpu:a:b:2" in res.rejects[0].reason
    assert res.jobs["ngpus"].to_list() == [2]


def test_stored_with_their_source_and_counted_in_the_metrics(tmp_path):
    db = Database.open(tmp_path / "d.duckdb", parse_config({}))
    try:
        (rep,) = ingest.ingest_paths(db.con, [SACCT / "derived-cores-cputime.txt"], UTC)
        assert rep.status == "ingested" and rep.rejected == 0
        store.refresh(db.con)
        derived = dict(db.execute("SELECT job_id_raw, derived FROM jobs").fetchall())
        m = {r[0]: r[1:] for r in db.execute(
            "SELECT job_id_raw, core_hours, cpu_eff_pct FROM job_metrics").fetchall()}
    finally:
        db.close()
    assert json.loads(derived["5001"]) == {"ncpus": "AllocTRES cpu", "cpu_time_s": "UserCPU + SystemCPU"}
    assert m["5001"][0] == pytest.approx(16 * 3.0)
    assert m["5001"][1] == pytest.approx(100 * 41366.824 / (16 * 10800))
    assert m["5003"][0] == pytest.approx(4 * 0.5)


def test_a_printed_value_wins_over_a_derived_one_and_its_source_goes(tmp_path):
    # the same job first from a dump without NCPUS, then from one with it
    a = tmp_path / "a.txt"
    a.write_text("JobID|State|Start|End|ReqCPUS\n1|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|4\n")
    b = tmp_path / "b.txt"
    b.write_text("JobID|State|Start|End|Elapsed|NCPUS\n1|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|01:00:00|8\n")
    db = Database.open(tmp_path / "d.duckdb", parse_config({}))
    try:
        ingest.ingest_paths(db.con, [a], UTC)
        first = db.execute("SELECT ncpus, derived FROM jobs").fetchone()
        ingest.ingest_paths(db.con, [b], UTC)
        second = db.execute("SELECT ncpus, elapsed_s, derived FROM jobs").fetchone()
    finally:
        db.close()
    assert (first[0], json.loads(first[1])) == (4, {"ncpus": "ReqCPUS", "elapsed_s": "End - Start"})
    assert second == (8, 3600, None)

