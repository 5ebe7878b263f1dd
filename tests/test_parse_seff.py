"""seff report parser: wording variants, arrays, units (powers of 1024), concatenated reports, real docs."""
from __future__ import annotations

import datetime as dt
import json
import subprocess

import duckdb
from conftest import FIXTURES, accounted, jobsight_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import seff
from jobsight.analytics.ingest.records import ParseOptions

MIXED = FIXTURES / "seff" / "seff-mixed.txt"
KIB, MIB, GIB, TIB = 1024, 1024 ** 2, 1024 ** 3, 1024 ** 4


def job(r, raw):
    return r.jobs.filter(r.jobs["job_id_raw"] == raw).row(0, named=True)


def test_mixed_reports():
    r = seff.parse(MIXED, ParseOptions())
    assert r.rows_in == 6 and len(r.jobs) == 5 and accounted(r)
    assert [(x.line_no, x.reason) for x in r.rejects] == [(61, "seff report: not a job id: 'not-a-job'")]
    j = job(r, "5001")
    assert (j["cluster"], j["user"], j["group"], j["state"], j["source"]) == ("hpc1", "carol", "lab", "COMPLETED", "slurm-seff")
    # 2-16:00:00 core-walltime / 02:00:00 wall-clock = 32 cores (2 nodes x 16)
    assert (j["ncpus"], j["nnodes"], j["elapsed_s"], j["cpu_time_s"]) == (32, 2, 7200, 86400 + 2 * 3600 + 3 * 60 + 4)
    assert j["mem_peak_bytes"] == round(12.5 * GIB) and j["mem_alloc_bytes"] == 64 * GIB
    assert json.loads(j["null_reasons"]) == {"exit_code": "exit code 0 (seff omits the signal)"}
    a = job(r, "5102")
    assert (a["job_id"], a["array_job_id"], a["array_task_id"], a["state"]) == ("5100_2", "5100", "2", "FAILED")
    assert (a["ncpus"], a["mem_peak_bytes"], a["mem_alloc_bytes"]) == (1, 712 * KIB, GIB)
    run = job(r, "5200")
    assert (run["state"], run["ncpus"], run["null_reasons"]) == ("RUNNING", 8, None)
    assert run["mem_peak_bytes"] == round(1.5 * TIB)   # '(estimated maximum)' ignored
    pend = job(r, "5300")
    assert (pend["state"], pend["ncpus"], pend["cpu_time_s"], pend["elapsed_s"]) == ("PENDING", 1, None, None)
    c = job(r, "5400")
    # decimal comma in the efficiency; '0.00 MB' allocation = no memory TRES -> NULL with reason
    assert (c["state"], c["ncpus"], c["mem_peak_bytes"], c["mem_alloc_bytes"]) == ("CANCELLED", 4, 0, None)
    assert json.loads(c["null_reasons"])["mem_alloc_bytes"] == "0.00 MB"


def test_sniff():
    assert seff.sniff(MIXED.read_text(), MIXED)
    assert not seff.sniff("JobID|JobName\n1|x\n", MIXED)
    assert not seff.sniff("Job ID: 5\n", MIXED)


def test_realdata_docs(realdata):
    f = realdata / "seff" / "docs_collection__seff_outputs_from_HPC_user_docs.txt"
    assert seff.sniff(f.read_text()[:65536], f)
    r = seff.parse(f, ParseOptions())
    assert r.rows_in == 14 and len(r.jobs) == 14 and not r.rejects
    d = job(r, "12696175")
    # Dardel: 160 cores, 00:17:46 wall, 1-23:22:40 core-walltime, 4.35 GB used of 137.19 GB
    assert (d["cluster"], d["ncpus"], d["elapsed_s"], d["cpu_time_s"]) == ("dardel", 160, 1066, 3.0)
    assert d["mem_peak_bytes"] == round(4.35 * GIB) and d["mem_alloc_bytes"] == round(137.19 * GIB)
    o = job(r, "3765959")
    # Odyssey 'Cores: 1' variant without a Nodes line
    assert (o["ncpus"], o["nnodes"], o["mem_peak_bytes"]) == (1, 1, round(24.04 * GIB))
    s = r.jobs.filter(r.jobs["cluster"] == "stanage.alces.network").row(0, named=True)
    assert (s["nnodes"], s["ncpus"], s["mem_peak_bytes"]) == (2, 2, round(137.64 * MIB))


def test_realdata_thesis_blocks(realdata):
    f = realdata / "seff" / "villena-francis__master_thesis__data__cluster_bmk__hpc_data__draft__v1_bmk_raw.md.txt"
    r = seff.parse(f, ParseOptions())
    assert r.rows_in == 64 and len(r.jobs) == 64 and not r.rejects
    j = r.jobs.row(0, named=True)
    # Job 3431290: CPU Utilized 28-17:52:34, wall 14:56:18, 52 cores, 150.25 GB of 355.47 GB
    assert j["job_id_raw"] == "3431290"
    assert (j["cpu_time_s"], j["elapsed_s"], j["ncpus"]) == (28 * 86400 + 17 * 3600 + 52 * 60 + 34, 14 * 3600 + 56 * 60 + 18, 52)
    assert (j["mem_peak_bytes"], j["mem_alloc_bytes"]) == (round(150.25 * GIB), round(355.47 * GIB))


def test_realdata_jobinfo_report(realdata):
    f = realdata / "other" / "rug-cit-hpc__hb-jobinfo__test__data__expected_output__7425304_67.txt"
    r = seff.parse(f, ParseOptions(timezone="Europe/Amsterdam", cluster="habrok"))
    j = r.jobs.row(0, named=True)
    assert (j["job_id"], j["array_job_id"], j["array_task_id"], j["job_name"], j["cluster"]) == \
        ("7425304_67", "7425304", "67", "EJR", "habrok")
    # Start 2024-03-04T10:16:29 CET (UTC+1) -> 09:16:29 UTC
    assert j["start_time"] == dt.datetime(2024, 3, 4, 9, 16, 29)
    assert (j["elapsed_s"], j["timelimit_s"], j["ncpus"], j["node_list"]) == (
        4 * 86400 + 8 * 3600 + 19 * 60 + 3, 6 * 86400 + 23 * 3600 + 59 * 60, 6, "node26")
    assert (j["mem_req_bytes"], j["mem_peak_bytes"]) == (18 * GIB, round(258.34 * MIB))
    assert j["cpu_time_s"] == 4 * 86400 + 7 * 3600 + 27 * 60 + 36


_lines = st.sampled_from([
    "Job ID: 12", "Job ID: x", "Array Job ID: 12_3", "Array Job ID: 12", "State: COMPLETED (exit code 0)", "State: ???",
    "Cores: 2", "Cores: x", "Nodes: 0", "Cores per node: 4", "CPU Utilized: 1-00:00:00", "CPU Utilized: xx",
    "CPU Efficiency: 5.00% of 00:00:00 core-walltime", "CPU Efficiency: junk", "Job Wall-clock time: 00:00:00",
    "Memory Utilized: 1.00 GB", "Memory Utilized: lots", "Memory Efficiency: 1% of 2.00 GB (1.00 GB/core)",
    "Used walltime : 1:00", "Start : 2024-13-01T00:00:00", "", "garbage"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_lines, max_size=14))
def test_fuzz_never_raises_and_accounts(tmp_path, lines):
    p = tmp_path / "s.txt"
    p.write_text("\n".join(lines) + "\n")
    r = seff.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r)
    assert all(x.line_no and x.reason for x in r.rejects)


def test_end_to_end_ingest(tmp_path):
    db = tmp_path / "t.duckdb"
    run = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(db), str(MIXED)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT job_id, ncpus, mem_alloc_bytes, source FROM jobs WHERE job_id_raw = '5102'").fetchone() == \
        ("5100_2", 1, GIB, "slurm-seff")
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 5
    assert con.execute("SELECT line_no FROM rejects").fetchall() == [(61,)]


HB_GPU = """Job ID                         : 8100001
Name                           : train
User                           : user46
Partition                      : gpu
Nodes                          : a100gpu3
Number of Nodes                : 1
Cores                          : 16
Number of Tasks                : 1
State                          : CANCELLED by user
Submit                         : 2024-03-04T10:00:00
Start                          : 2024-03-04T10:16:29
End                            : 2024-03-04T12:16:29
Reserved walltime              : 1-00:00:00
Used walltime                  : 02:00:00
Used CPU time                  : 01:00:00 (Efficiency:  3.12%)
Total memory reserved          : 64G
Maximum memory used            : 3.50G
Requested GPUs                 : 2
Allocated GPUs                 : a100=2
Max GPU utilization            : 0%
Max GPU memory used            : 1.25G
"""

USC = """Job ID               : 1234567
Job name             : test.job
User                 : ttrojan
Account              : ttrojan_123
Cluster              : discovery
Partition            : main
State                : COMPLETED
Exit code            : 0:0
Nodes                : 1
CPUs                 : 8
Nodelist             : d11-43
Submit time          : 2021-11-04T09:44:01
Start time           : 2021-11-04T09:44:03
End time             : 2021-11-04T09:54:24
Reserved walltime    : 01:00:00
Used walltime        : 00:10:21
Used CPU time        : 01:12:28
Reserved memory      : 16G
Max memory used      : 2.03G
"""


def test_hb_jobinfo_gpu_lines_and_cancelled_by_user(tmp_path):
    p = tmp_path / "hb.txt"
    p.write_text(HB_GPU)
    r = seff.parse(p, ParseOptions(timezone="UTC", cluster="habrok"))
    assert r.rejects == []
    j = r.jobs.row(0, named=True)
    assert (j["state"], j["cancelled_by_uid"]) == ("CANCELLED", None)
    assert json.loads(j["null_reasons"])["cancelled_by_uid"] == "by user"
    assert (j["ngpus"], j["gpu_type"], j["gpu_util_tres"], j["gpu_mem_tres_bytes"]) == (2, "a100", 0.0, round(1.25 * GIB))
    assert (j["ncpus"], j["nnodes"], j["node_list"], j["mem_req_bytes"]) == (16, 1, "a100gpu3", 64 * GIB)


def test_hb_jobinfo_gpu_job_is_an_idle_gpu_job(tmp_path):
    """The job-level GPU figures reach the metrics as Slurm's gres/gpuutil does: a GPU job at 0 %."""
    from jobsight.analytics.config import parse_config
    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.store import results as store
    from jobsight.analytics.store.database import Database
    p = tmp_path / "hb.txt"
    p.write_text(HB_GPU)
    con = Database.open(tmp_path / "m.duckdb", parse_config({}))
    try:
        (rep,) = ingest.ingest_paths(con.con, [p], ParseOptions(timezone="UTC", cluster="habrok"))
        assert rep.stored == 1
        store.refresh(con.con)
        m = con.con.execute("SELECT gpu_util_pct, gpu_util_source FROM job_metrics WHERE job_id_raw = '8100001'").fetchone()
    finally:
        con.close()
    assert m == (0.0, "slurm-tres")


def test_usc_jobinfo(tmp_path):
    p = tmp_path / "usc.txt"
    p.write_text(USC)
    r = seff.parse(p, ParseOptions(timezone="America/Los_Angeles"))
    assert r.rejects == []
    j = r.jobs.row(0, named=True)
    assert (j["nnodes"], j["node_list"], j["ncpus"], j["account"], j["cluster"]) == (1, "d11-43", 8, "ttrojan_123", "discovery")
    assert (j["exit_code"], j["job_name"], j["state"]) == ("0:0", "test.job", "COMPLETED")
    # PDT (UTC-7) on 2021-11-04
    assert (j["submit_time"], j["start_time"], j["end_time"]) == (
        dt.datetime(2021, 11, 4, 16, 44, 1), dt.datetime(2021, 11, 4, 16, 44, 3), dt.datetime(2021, 11, 4, 16, 54, 24))
    assert (j["mem_req_bytes"], j["mem_peak_bytes"]) == (16 * GIB, round(2.03 * GIB))
    assert (j["elapsed_s"], j["cpu_time_s"]) == (621, 4348)


def test_usc_jobinfo_node_count_that_is_not_a_count_is_refused(tmp_path):
    p = tmp_path / "usc.txt"
    p.write_text(USC.replace("Nodes                : 1", "Nodes                : d11-43"))
    r = seff.parse(p, ParseOptions(timezone="UTC"))
    assert [x.reason for x in r.rejects] == ["seff report: Nodes 'd11-43' is not a count"] and r.jobs is None
