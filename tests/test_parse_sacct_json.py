"""sacct --json parser across dbv0.0.37/38 and data_parser v0.0.39-v0.0.44: jobs, steps, rejects."""
from __future__ import annotations

import datetime as dt
import json
import subprocess

import duckdb
import pytest
from conftest import FIXTURES, accounted, jobsight_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import sacct_json
from jobsight.analytics.ingest.records import ParseOptions

DIR = FIXTURES / "sacct_json"
MIB, GIB = 1024 ** 2, 1024 ** 3
START = dt.datetime(2023, 11, 14, 22, 14, 20)    # epoch 1700000060
SUBMIT = dt.datetime(2023, 11, 14, 22, 13, 20)   # epoch 1700000000


def job(r, job_id_raw):
    return r.jobs.filter(r.jobs["job_id_raw"] == job_id_raw).row(0, named=True)


def step(r, job_id_raw, step_id):
    s = r.steps
    return s.filter((s["job_id_raw"] == job_id_raw) & (s["step_id"] == step_id)).row(0, named=True)


def test_dbv0038_jobs_steps_and_reject():
    r = sacct_json.parse(DIR / "sacct-dbv0.0.38-slurm22.05.json", ParseOptions())
    assert r.rows_in == 8 and len(r.jobs) == 3 and len(r.steps) == 3 and accounted(r)
    assert [(x.line_no, x.reason) for x in r.rejects] == [
        (4, "job 4: not a number: 'abc'"), (4, "job 4: step of a rejected job")]
    j = job(r, "1001")
    assert (j["cluster"], j["job_id"], j["state"], j["exit_code"]) == ("clu38", "1001", "COMPLETED", "0:0")
    assert (j["submit_time"], j["start_time"], j["end_time"]) == (SUBMIT, START, START + dt.timedelta(hours=1))
    assert (j["elapsed_s"], j["timelimit_s"], j["ncpus"], j["nnodes"]) == (3600, 120 * 60, 8, 1)
    assert (j["ngpus"], j["gpu_type"], j["billing"]) == (2, "a100", 16.0)
    assert j["mem_alloc_bytes"] == 32768 * MIB == j["mem_req_bytes"]
    # cpu time = sum of steps: batch 1800.5 + extern 0 + step 0 20000
    assert j["cpu_time_s"] == pytest.approx(21800.5)
    # peak = largest step TRESUsageInTot mem (step 0: 4 GiB)
    assert j["mem_peak_bytes"] == 4 * GIB
    assert (j["gpu_util_tres"], j["gpu_mem_tres_bytes"]) == (85.0, 40000000000)
    assert j["alloc_tres"] == "cpu=8,mem=32768M,node=1,billing=16,gres/gpu:a100=2"   # energy=-2 dropped
    b = step(r, "1001", "batch")
    assert (b["cpu_time_s"], b["user_cpu_s"], b["system_cpu_s"]) == (1800.5, 1700.25, 100.25)
    assert (b["max_rss_bytes"], b["max_vmsize_bytes"], b["mem_usage_tot_bytes"]) == (GIB, 3 * GIB, GIB)
    s0 = step(r, "1001", "0")
    assert (s0["step_name"], s0["ntasks"], s0["elapsed_s"], s0["start_time"]) == ("python", 4, 3580, START + dt.timedelta(seconds=10))
    assert step(r, "1001", "extern")["state"] == "COMPLETED"
    arr = job(r, "1003")
    assert (arr["job_id"], arr["array_job_id"], arr["array_task_id"]) == ("1002_1", "1002", "1")
    assert (arr["state"], arr["exit_code"], arr["timelimit_s"]) == ("FAILED", "2:0", None)
    # no steps and a job CPU total of 0 (as sacct -X --json gives): not measured, not 0 % efficiency
    assert json.loads(arr["null_reasons"]) == {"timelimit_s": "UNLIMITED",
                                               "cpu_time_s": "0 without steps (sacct -X): not measured"}
    assert arr["cpu_time_s"] is None
    het = job(r, "1010")
    assert (het["job_id"], het["het_job_id"], het["het_offset"], het["exit_code"]) == ("1010+0", "1010", 0, "0:15")


def test_v0039_state_string_and_struct_numbers():
    r = sacct_json.parse(DIR / "sacct-v0.0.39-slurm23.02.json", ParseOptions())
    assert r.rows_in == 4 and not r.rejects
    j = job(r, "2001")
    assert (j["state"], j["timelimit_s"], j["elapsed_s"], j["cpu_time_s"]) == ("TIMEOUT", 3600, 3660, 3500.0)
    assert j["mem_peak_bytes"] == 512 * MIB and j["mem_alloc_bytes"] == 4 * GIB
    b = step(r, "2001", "batch")
    assert (b["state"], b["exit_code"], b["end_time"]) == ("CANCELLED", "0:15", START + dt.timedelta(seconds=3661))
    assert b["max_vmsize_bytes"] == 900 * MIB
    assert json.loads(job(r, "2002")["null_reasons"]) == {"timelimit_s": "UNLIMITED",
                                                          "cpu_time_s": "0 without steps (sacct -X): not measured"}


def test_v0040_state_list_and_pending_array():
    r = sacct_json.parse(DIR / "sacct-v0.0.40-slurm23.11.json", ParseOptions())
    assert r.rows_in == 4 and not r.rejects
    j = job(r, "3001")
    assert (j["state"], j["cpu_time_s"], j["mem_peak_bytes"], j["timelimit_s"]) == ("COMPLETED", 28010.0, 2800 * MIB, 180 * 60)
    assert step(r, "3001", "0")["mem_usage_tot_bytes"] == 2800 * MIB
    p = job(r, "3006")
    assert (p["job_id"], p["array_task_id"], p["state"], p["start_time"], p["ncpus"]) == ("3005_[1-10%2]", "[1-10%2]", "PENDING", None, 4)
    assert p["mem_alloc_bytes"] is None and p["mem_req_bytes"] == 4 * GIB


def test_step_id_forms():
    assert sacct_json._step_id({"step": {"id": "123.batch"}}, "123") == "batch"
    assert sacct_json._step_id({"step": {"id": "17+0.0"}}, "17") == "0"
    assert sacct_json._step_id({"step": {"job_id": 5, "id": "extern"}}, "5") == "extern"
    assert sacct_json._step_id({"step": {"id": {"job_id": 5, "step_id": "interactive"}}}, "5") == "interactive"
    assert sacct_json._step_id({"step": {"id": {"job_id": 5, "step_id": 4294967291}}}, "5") == "batch"
    assert sacct_json._step_id({"step": {"id": 3}}, "5") == "3"


def test_invalid_json_and_wrong_shape(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"jobs": [\n {"job_id": 1,\n')
    r = sacct_json.parse(p, ParseOptions())
    assert r.rows_in == 1 and r.rejects[0].line_no == 3 and r.rejects[0].reason.startswith("not valid JSON")
    p.write_text('{"meta": {}, "jobs": {}}')
    r = sacct_json.parse(p, ParseOptions())
    assert r.rows_in == 1 and "no 'jobs' list" in r.rejects[0].reason


def test_sniff():
    p = DIR / "sacct-v0.0.40-slurm23.11.json"
    assert sacct_json.sniff(p.read_text()[:65536], p)
    assert not sacct_json.sniff('{"nodes": []}', p)
    assert not sacct_json.sniff("JobID|State\n", p)


def test_real_harness_slurm_2205_against_sacct_text():
    """Real `sacct --json` from this project's Slurm 22.05.8 harness; expected values are what
    `sacct -P` printed for the same jobs (fixtures/sacct_json/README.md)."""
    r = sacct_json.parse(DIR / "real-harness-slurm-22.05.8.json", ParseOptions())
    assert r.rows_in == 10 + 23 and not r.rejects and accounted(r)
    j1 = job(r, "1")
    assert (j1["state"], j1["exit_code"], j1["elapsed_s"], j1["ncpus"], j1["mem_alloc_bytes"]) == ("COMPLETED", "0:0", 2, 1, 200 * MIB)
    assert (j1["start_time"], j1["end_time"]) == (dt.datetime(2026, 11, 22, 0, 0, 40), dt.datetime(2026, 11, 22, 0, 0, 42))
    assert j1["timelimit_s"] is None and json.loads(j1["null_reasons"])["timelimit_s"] == "UNLIMITED"
    assert round(j1["cpu_time_s"], 3) == 0.019                      # TotalCPU 00:00.019
    j2 = job(r, "2")
    assert (j2["state"], j2["exit_code"], j2["mem_peak_bytes"]) == ("FAILED", "0:9", 316732 * 1024)
    assert step(r, "2", "batch")["max_rss_bytes"] == 316732 * 1024
    j4 = job(r, "4")
    assert (j4["ngpus"], j4["gpu_type"], j4["billing"]) == (1, "a100", 33.0)
    j5 = job(r, "5")
    assert (j5["state"], j5["elapsed_s"], j5["timelimit_s"]) == ("TIMEOUT", 88, 60)
    assert (step(r, "5", "batch")["state"], step(r, "5", "batch")["exit_code"]) == ("CANCELLED", "0:15")
    j10 = job(r, "10")
    assert j10["state"] == "FAILED" and j10["exit_code"] is None   # sacct text: 3:0; the JSON lost it
    assert "return code lost" in json.loads(j10["null_reasons"])["exit_code"]
    assert (job(r, "12")["job_id"], job(r, "17")["job_id"]) == ("12_4", "12_1")
    assert (step(r, "13", "0")["step_name"], step(r, "13", "1")["state"]) == ("sleep", "FAILED")
    s13 = step(r, "13", "1")                                          # sacct text: FAILED 2:0
    assert s13["exit_code"] is None and "return code lost" in json.loads(s13["null_reasons"])["exit_code"]
    assert job(r, "15")["job_name"] == "pipe|name"
    j21 = job(r, "21")
    assert j21["state"] == "CANCELLED" and step(r, "21", "batch")["exit_code"] == "0:15"


# ---- real Slurm JSON from other projects -------------------------------------------------------

def test_realdata_all_accounted(realdata):
    files = sorted((realdata / "sacct_json").glob("*.json"))
    assert len(files) >= 30
    for f in files:
        assert sacct_json.sniff(f.read_text()[:65536], f), f.name
        r = sacct_json.parse(f, ParseOptions())
        assert accounted(r) and not r.rejects, f.name


def test_realdata_dbv0037_array_gpu(realdata):
    r = sacct_json.parse(realdata / "sacct_json" / "mila-iqia__clockwork__slurm_state_test__files__sacct_1.json", ParseOptions())
    j = job(r, "10")
    # array {job_id 1, task_id 7}, state NODE_FAIL, limit 1440 min, gres gpu=1, mem 40960 MiB, start 1680193504
    assert (j["job_id"], j["state"], j["timelimit_s"], j["ngpus"], j["ncpus"]) == ("1_7", "NODE_FAIL", 86400, 1, 4)
    assert j["mem_alloc_bytes"] == 40960 * MIB and j["cluster"] == "cedar"
    assert j["start_time"] == dt.datetime(2023, 3, 30, 16, 25, 4) and j["end_time"] is None


def test_realdata_v0041_completed(realdata):
    f = realdata / "sacct_json" / "rackslab__Slurm-web__tests__assets__slurmrestd__24.05__0.0.41__slurmdb-job-completed.json"
    r = sacct_json.parse(f, ParseOptions())
    j = job(r, "649718")
    # time.start 1747754469 = 2025-05-20T15:21:09Z; limit {number: 1} minute; cpu=1, mem=512
    assert (j["state"], j["elapsed_s"], j["ncpus"], j["ngpus"], j["timelimit_s"]) == ("COMPLETED", 1, 1, None, 60)
    assert (j["start_time"], j["end_time"]) == (dt.datetime(2025, 5, 20, 15, 21, 9), dt.datetime(2025, 5, 20, 15, 21, 10))
    assert j["mem_alloc_bytes"] == 512 * MIB and j["user"] == "tpearson"
    b = step(r, "649718", "batch")
    assert (b["state"], b["cpu_time_s"], b["node_list"]) == ("COMPLETED", 0.0, "admin.emulator")


def test_realdata_v0044_timeout(realdata):
    f = realdata / "sacct_json" / "rackslab__Slurm-web__tests__assets__slurmrestd__25.11__0.0.44__slurmdb-job-timeout.json"
    r = sacct_json.parse(f, ParseOptions())
    j = job(r, "5737")
    assert (j["state"], j["elapsed_s"], j["timelimit_s"]) == ("TIMEOUT", 82, 60)
    b = step(r, "5737", "batch")
    assert (b["state"], b["exit_code"]) == ("CANCELLED", "0:15")


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 2 ** 33), st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False))
_json = st.recursive(_leaf, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(
    st.sampled_from(["job_id", "time", "steps", "tres", "state", "step", "id", "count", "type", "set", "number",
                     "infinite", "array", "het", "task_id", "job_offset", "exit_code", "start", "limit", "allocated",
                     "requested", "total", "seconds", "return_code", "signal", "current", "name"]), c, max_size=5)), max_leaves=25)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(_json, max_size=4))
def test_fuzz_never_raises_and_accounts(tmp_path, jobs):
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"meta": {}, "jobs": jobs}))
    r = sacct_json.parse(p, ParseOptions())
    assert accounted(r)
    assert all(x.line_no and x.reason for x in r.rejects)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 3000))
def test_fuzz_truncated_file(tmp_path, cut):
    text = (DIR / "sacct-v0.0.39-slurm23.02.json").read_text()
    p = tmp_path / "t.json"
    p.write_text(text[:cut])
    r = sacct_json.parse(p, ParseOptions())
    assert accounted(r) and all(x.line_no and x.reason for x in r.rejects)


def test_end_to_end_ingest(tmp_path):
    db = tmp_path / "t.duckdb"
    run = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(db), str(DIR / "sacct-dbv0.0.38-slurm22.05.json")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT job_id, ngpus, gpu_type, cpu_time_s, start_time FROM jobs WHERE job_id_raw = '1001'").fetchone() == \
        ("1001", 2, "a100", 21800.5, START)
    assert con.execute("SELECT count(*) FROM steps WHERE job_id_raw = '1001'").fetchone()[0] == 3
    assert con.execute("SELECT line_no, reason FROM rejects ORDER BY reason").fetchall() == [
        (4, "job 4: not a number: 'abc'"), (4, "job 4: step of a rejected job")]


def test_squeue_json_is_not_accounting(tmp_path):
    p = tmp_path / "squeue.json"
    p.write_text(json.dumps({"meta": {"plugin": {"type": "openapi/slurmctld", "data_parser": "data_parser/v0.0.40"}},
                             "jobs": [{"job_id": 5, "job_state": ["RUNNING"]}]}))
    r = sacct_json.parse(p, ParseOptions())
    assert r.rows_in == 1 and r.frame_rows() == 0 and "squeue/scontrol" in r.rejects[0].reason
    p.write_text(json.dumps({"jobs": [{"job_id": 5, "job_state": "RUNNING"}]}))
    r = sacct_json.parse(p, ParseOptions())
    assert [(x.line_no, "not a sacct job record" in x.reason) for x in r.rejects] == [(1, True)]
