"""job_metrics on real sacct files from ../shared/realdata, hand-checked from the raw lines.

Habrok (rug-cit-hpc/hb-jobinfo, Slurm >= 21.08: AllocTRES with billing, TRESUsageInTot per step) and
Peregrine (rug-cit-hpc/slurm-jobinfo, 2021: no AllocTRES, so no billing: SBU falls back to core-hours).
Both files are headerless and ☃-delimited; their column lists come from SOURCES.md (as a user would
pass them with --columns). Every expected number below is worked out from the lines quoted above it.
"""
from __future__ import annotations

import pytest

from jobsight.analytics.config import parse_config
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.analytics.store.database import Database

pytestmark = pytest.mark.realdata
KiB, GiB = 1024, 1024 ** 3

HABROK = ("rug-cit-hpc__hb-jobinfo__test__data__sacct.txt",
          "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
          "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
          "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
          "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment")
PEREGRINE = ("rug-cit-hpc__slurm-jobinfo__test__data__sacct.txt",
             "JobID,JobName,User,Partition,NodeList,NNodes,ncpus,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
             "TotalCPU,UserCPU,SystemCPU,ReqMem,MaxRSS,TRESUsageInTot,TRESUsageOutTot,MaxDiskWrite,MaxDiskRead,"
             "MaxRSSNode,MaxDiskWriteNode,MaxDiskReadNode,Comment")


@pytest.fixture(scope="module")
def metrics(realdata, tmp_path_factory):
    path = tmp_path_factory.mktemp("real") / "real.duckdb"
    con = db.connect(path)
    parsers = ingest.load_parsers()
    for name, columns in (HABROK, PEREGRINE):
        rep = ingest.ingest_file(con, realdata / "sacct" / name,
                                 ParseOptions(timezone="UTC", columns=columns.split(",")), parsers, fmt="sacct")
        assert rep.status == "ingested", (name, rep.error)
    con.close()
    con = Database.open(path, parse_config({}))
    cur = con.execute("SELECT * FROM job_metrics")
    names = [d[0] for d in cur.description]
    rows = {r[names.index("job_id")]: dict(zip(names, r)) for r in cur.fetchall()}
    con.close()
    return rows


def check(m, cpu, mem, time_, sbu, sbu_source):
    assert m["cpu_eff_pct"] == pytest.approx(cpu, rel=1e-9) and m["cpu_eff_source"] == "sacct"
    assert m["mem_eff_pct"] == pytest.approx(mem, rel=1e-9) and m["mem_peak_source"] == "sacct"
    assert m["time_eff_pct"] == pytest.approx(time_, rel=1e-9)
    assert m["sbu"] == pytest.approx(sbu, rel=1e-9) and m["sbu_source"] == sbu_source


def test_habrok_gpu_job_7946767(metrics):
    # 7946767|...|NNodes 1|NCPUs 8|COMPLETED|Timelimit 1-00:00:00|Elapsed 11:23:23|TotalCPU 21:50:44|ReqMem 8G|
    #   AllocTRES billing=8,cpu=8,gres/gpu:v100=1,gres/gpu=1,mem=8G,node=1
    # .batch TRESUsageInTot ...,gres/gpuutil=54,mem=3092356K,...   .extern mem=76K
    # elapsed 11 h 23 min 23 s = 39600 + 1380 + 23 = 41003 s; TotalCPU = 75600 + 3000 + 44 = 78644 s
    # cpu  = 78644 / (41003 x 8) = 78644 / 328024 = 23.975 %
    # mem  = 3092356 KiB / 8 GiB (8388608 KiB) = 36.864 %
    # time = 41003 / 86400 = 47.457 %
    # sbu  = billing 8 x 41003 / 3600 = 91.118
    m = metrics["7946767"]
    check(m, 100 * 78644 / 328024, 100 * 3092356 / 8388608, 100 * 41003 / 86400, 8 * 41003 / 3600, "billing")
    assert m["ngpus"] == 1 and m["gpu_util_pct"] == pytest.approx(54.0) and m["gpu_util_source"] == "slurm-tres"


def test_habrok_serial_job_7920721(metrics):
    # 7920721|...|1|1|COMPLETED|05:00:00|01:00:37|01:00:00|2000M|billing=1,cpu=1,mem=2000M,node=1
    # .batch mem=161200K; .extern mem=80K
    # cpu  = 3600 / (3637 x 1) = 98.983 %
    # mem  = 161200 KiB / 2000 MiB (2048000 KiB) = 7.871 %
    # time = 3637 / 18000 = 20.206 %
    # sbu  = 1 x 3637 / 3600 = 1.0103
    check(metrics["7920721"], 100 * 3600 / 3637, 100 * 161200 / 2048000, 100 * 3637 / 18000, 3637 / 3600, "billing")


def test_habrok_two_node_mpi_job_7818766(metrics):
    # 7818766|...|NNodes 2|NCPUs 128|COMPLETED|5-00:00:00|1-06:46:42|163-00:18:41|32G|billing=128,cpu=128,mem=32G,node=2
    # .batch mem=39156K; .extern mem=0; .0 (128 tasks) MaxRSS 53592K, TRESUsageInTot mem=6241716K
    # elapsed = 86400 + 21600 + 2760 + 42 = 110802 s; TotalCPU = 163 x 86400 + 1080 + 41 = 14084321 s
    # cpu  = 14084321 / (110802 x 128 = 14182656) = 99.307 %
    # mem  = the largest step's TRESUsageInTot: 6241716 KiB / 32 GiB (33554432 KiB) = 18.602 %
    #        (MaxRSS x NTasks would be 53592 x 128 = 6859776 KiB = 20.44 %: the seff/reportseff estimate)
    # time = 110802 / 432000 = 25.649 %
    # sbu  = 128 x 110802 / 3600 = 3939.63
    check(metrics["7818766"], 100 * 14084321 / 14182656, 100 * 6241716 / 33554432, 100 * 110802 / 432000,
          128 * 110802 / 3600, "billing")


def test_habrok_timeout_job_6708912(metrics):
    # 6708912|...|2|256|TIMEOUT|3-00:00:00|3-00:00:25|762-08:12:51|200G|billing=256,cpu=256,mem=200G,node=2
    # .0 TRESUsageInTot mem=11535616K (the largest step); .batch mem=5896K
    # elapsed = 259200 + 25 = 259225 s; TotalCPU = 762 x 86400 + 28800 + 720 + 51 = 65866371 s
    # cpu  = 65866371 / (259225 x 256 = 66361600) = 99.254 %
    # mem  = 11535616 KiB / 200 GiB (209715200 KiB) = 5.501 %
    # time = 259225 / 259200 = 100.0096 % (Slurm lets a job run past its limit until the next check)
    # sbu  = 256 x 259225 / 3600 = 18433.78
    m = metrics["6708912"]
    check(m, 100 * 65866371 / 66361600, 100 * 11535616 / 209715200, 100 * 259225 / 259200, 256 * 259225 / 3600, "billing")
    assert m["state"] == "TIMEOUT"


def test_habrok_short_failed_job_6742864(metrics):
    # 6742864|...|1|2|FAILED|00:10:00|00:00:11|00:07.597|10G|billing=2,cpu=2,mem=10G,node=1
    # .batch mem=0; .extern mem=0; .0 mem=54868K
    # cpu  = 7.597 / (11 x 2) = 34.532 %   (TotalCPU keeps its milliseconds)
    # mem  = 54868 KiB / 10 GiB (10485760 KiB) = 0.5233 %
    # time = 11 / 600 = 1.833 %
    # sbu  = 2 x 11 / 3600 = 0.006111
    check(metrics["6742864"], 100 * 7.597 / 22, 100 * 54868 / 10485760, 100 * 11 / 600, 2 * 11 / 3600, "billing")


def test_peregrine_per_cpu_memory_no_billing_20957017(metrics):
    # 20957017|...|1|12||COMPLETED|3-00:00:00|2-21:18:05|34-15:26:01|512Mc
    # .batch MaxRSS 4M, TRESUsageInTot mem=4M; .0 (12 tasks) MaxRSS 55168K, TRESUsageInTot mem=586344K
    # elapsed = 172800 + 75600 + 1080 + 5 = 249485 s; TotalCPU = 34 x 86400 + 54000 + 1560 + 1 = 2993161 s
    # cpu  = 2993161 / (249485 x 12 = 2993820) = 99.978 %
    # mem  = 586344 KiB / (512 MiB per CPU x 12 = 6144 MiB = 6291456 KiB) = 9.320 %
    # time = 249485 / 259200 = 96.252 %
    # sbu  = no AllocTRES, no billing: core-hours = 249485 x 12 / 3600 = 831.617
    check(metrics["20957017"], 100 * 2993161 / 2993820, 100 * 586344 / 6291456, 100 * 249485 / 259200,
          249485 * 12 / 3600, "core-hours")


def test_peregrine_per_node_memory_no_billing_20953257(metrics):
    # 20953257|...|1|4||COMPLETED|03:59:00|00:29:41|01:55:46|16Gn ; .batch mem=3653804K
    # cpu  = 6946 / (1781 x 4 = 7124) = 97.501 %
    # mem  = 3653804 KiB / (16 GiB per node x 1 = 16777216 KiB) = 21.778 %
    # time = 1781 / 14340 = 12.420 %
    # sbu  = core-hours = 1781 x 4 / 3600 = 1.97889
    check(metrics["20953257"], 100 * 6946 / 7124, 100 * 3653804 / 16777216, 100 * 1781 / 14340,
          1781 * 4 / 3600, "core-hours")
