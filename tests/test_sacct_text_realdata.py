"""Every real sacct file in ../shared/realdata/sacct ingests with full accounting; hand-checked values.

Headerless files whose column set is only described in SOURCES.md get that list via --columns, as a
user would. Expected rejections are the lines the sources say are broken on purpose."""
from datetime import datetime

import polars as pl
import pytest

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

pytestmark = pytest.mark.realdata
MiB, GiB = 1024 ** 2, 1024 ** 3

COLUMNS = {
    "apel__": "JobID,JobName,User,Group,Start,End,Elapsed,TotalCPU,Partition,NCPUS,NNodes,NodeList,MaxRSS,MaxVMSize,State",
    "hb-jobinfo": "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
                  "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
                  "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
                  "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment",
    "slurm-jobinfo": "JobID,JobName,User,Partition,NodeList,NNodes,ncpus,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
                     "TotalCPU,UserCPU,SystemCPU,ReqMem,MaxRSS,TRESUsageInTot,TRESUsageOutTot,MaxDiskWrite,MaxDiskRead,"
                     "MaxRSSNode,MaxDiskWriteNode,MaxDiskReadNode,Comment",
    "reportseff__tests__conftest": "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU",
    "test_reportseff.py": "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State,Timelimit,TotalCPU",
}
# Files whose lines mix several column sets / delimiters (test-code extracts): only layout rejects allowed.
MIXED_LAYOUT = ("reportseff__tests__conftest", "test_reportseff.py")
# line -> words of the reason, for lines broken on purpose (SOURCES.md)
EXPECTED_REJECTS = {
    "apel__": {5: "'20H'", 6: "before Start", 7: "'-16'"},
    "issues__gl-20": {6: "'100Mcd'", 22: "truncated", 31: "truncated"},
}


def _cols(name):
    for key, cols in COLUMNS.items():
        if key in name:
            return cols.split(",")
    return None


def _files(realdata):
    return sorted((realdata / "sacct").iterdir())


def test_every_file_accounts_for_every_row(realdata, tmp_path):
    con = db.connect(tmp_path / "r.duckdb")
    parsers = ingest.load_parsers()
    for f in _files(realdata):
        opts = ParseOptions(timezone="UTC", columns=_cols(f.name))
        rep = ingest.ingest_file(con, f, opts, parsers, fmt="sacct")
        assert rep.status == "ingested", (f.name, rep.error)
        assert rep.rows_in == rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped, f.name
        rejects = con.execute("SELECT line_no, reason FROM rejects WHERE ingest_id = ? ORDER BY line_no",
                              [rep.ingest_id]).fetchall()
        assert all(ln is not None and ln >= 1 and reason for ln, reason in rejects), f.name
        expected = next((v for k, v in EXPECTED_REJECTS.items() if k in f.name), {})
        if any(k in f.name for k in MIXED_LAYOUT):
            assert all("--columns" in r or "fields where the columns are" in r for _, r in rejects), (f.name, rejects[:3])
            continue
        assert {ln: r for ln, r in rejects}.keys() == expected.keys(), (f.name, rejects)
        for ln, reason in rejects:
            assert expected[ln] in reason, (f.name, ln, reason)
    con.close()


def _parse(realdata, part, tz="UTC"):
    f = next(p for p in _files(realdata) if part in p.name)
    return sacct_text.parse(f, ParseOptions(timezone=tz, columns=_cols(f.name)))


def _job(res, raw):
    rows = res.jobs.filter(pl.col("job_id_raw") == raw).to_dicts()
    assert rows, raw
    return rows[-1]


def test_xdmod_values(realdata):
    res = _parse(realdata, "shredder__slurm__input__accounting-logs.log", tz="America/New_York")
    j = _job(res, "4107166")
    assert (j["state"], j["cancelled_by_uid"]) == ("CANCELLED", 102216)
    assert j["mem_req_bytes"] == 48000 * MiB * 3            # 48000Mn x 3 nodes
    assert j["elapsed_s"] == 2 * 86400 + 22 * 3600 + 3 * 60 + 4
    assert j["ncpus"] == 36 and j["timelimit_s"] == 3 * 86400 and j["billing"] == 36.0
    assert j["start_time"] == datetime(2015, 6, 28, 19, 14, 49)  # 15:14:49 EDT = UTC-4
    assert (j["cluster"], j["user"], j["job_name"]) == ("ub-hpc", "hanx", "100-Floors-of-Frights")
    assert _job(res, "4107219")["mem_req_bytes"] == 3000 * MiB * 48   # 3000Mc x 48 CPUs
    g = _job(res, "5692623")
    assert g["mem_req_bytes"] is None and '"mem_req_bytes": "0n"' in g["null_reasons"]
    assert g["ngpus"] == 2 and g["eligible_time"] is None


def test_xdmod_utf8_name(realdata):
    assert _job(_parse(realdata, "utf8-multibyte"), "4103947")["job_name"] == "aàb"


def test_reportseff_array_task_and_legacy_reqmem(realdata):
    res = _parse(realdata, "reportseff__tests__conftest")
    j = _job(res, "39895850")
    assert (j["job_id"], j["array_job_id"], j["array_task_id"]) == ("39889258_1426", "39889258", "1426")
    assert j["elapsed_s"] == 2 * 3600 + 14 * 60 + 11 and j["cpu_time_s"] == 3 * 3600 + 43 * 60 + 27
    assert j["mem_req_bytes"] == 8 * GiB and j["timelimit_s"] == 2 * 3600 + 55 * 60
    s0 = res.steps.filter((pl.col("job_id_raw") == "39895850") & (pl.col("step_id") == "0")).to_dicts()[0]
    assert s0["max_rss_bytes"] == 3501608 * 1024
    m = _job(res, "6196869")
    assert m["mem_req_bytes"] == 191846 * MiB * 20 and m["timelimit_s"] is None  # 191846Mn x 20 nodes; UNLIMITED
    assert m["cpu_time_s"] == 451 * 86400 + 6 * 3600 + 24


def test_aws_and_torchx_and_princeton(realdata):
    a = _job(_parse(realdata, "SlurmLogParser__sacct-output-v2"), "67108865")
    assert a["state"] == "OUT_OF_MEMORY" and a["exit_code"] == "0:125"
    assert a["mem_req_bytes"] == 100 * MiB and a["cpu_time_s"] == pytest.approx(2 * 60 + 10.584)
    assert a["partition"] == "partition1" and a["elapsed_s"] == 5 * 60 + 16
    t = _parse(realdata, "torchx")
    c = _job(t, "89")
    assert (c["state"], c["cancelled_by_uid"], c["ncpus"]) == ("CANCELLED", 2166, 8)
    h = _job(t, "1853+1")
    assert (h["het_job_id"], h["het_offset"], h["job_name"]) == ("1853", 1, "echo-1")
    p = _job(_parse(realdata, "PrincetonUniversity"), "10920562")
    assert p["start_time"] == datetime(2024, 10, 29, 14, 35, 49) and p["end_time"] is None
    assert p["timelimit_s"] == 1440 * 60 and p["mem_req_bytes"] == 10 * GiB and p["cluster"] == "tiger2"


def test_rug_files(realdata):
    hb = _parse(realdata, "hb-jobinfo")
    j = _job(hb, "4034541")
    assert (j["state"], j["cancelled_by_uid"]) == ("CANCELLED", 10304007)
    assert j["elapsed_s"] == 3 * 3600 + 34 * 60 + 13 and j["timelimit_s"] == 19 * 3600 + 50 * 60
    assert j["mem_req_bytes"] == 199 * GiB and j["mem_alloc_bytes"] == 199 * GiB and j["ncpus"] == 8
    sj = _parse(realdata, "slurm-jobinfo")
    k = _job(sj, "20872560")
    assert k["mem_req_bytes"] == 100 * GiB  # 100Gn x 1 node
    assert k["cpu_time_s"] == 7 * 86400 + 17 * 3600 + 10 * 60 + 15
    s0 = sj.steps.filter((pl.col("job_id_raw") == "20872560") & (pl.col("step_id") == "0")).to_dicts()[0]
    assert s0["mem_usage_tot_bytes"] == 12653376 * 1024


def test_apel_values(realdata):
    res = _parse(realdata, "apel__")
    j = _job(res, "5979785")
    assert j["cpu_time_s"] == pytest.approx(65.753) and j["elapsed_s"] == 3 * 60 + 25
    assert j["start_time"] == datetime(2018, 6, 5, 14, 59, 34)
