"""PBS Pro / OpenPBS / Torque accounting parser: record types, units, cores, GPUs, exit codes,
real samples (apel, pbstools, XDMoD with its expected parse as an oracle), fuzz, end to end."""
from __future__ import annotations

import datetime as dt
import json
import subprocess

import duckdb
import pytest
from conftest import FIXTURES, accounted, jobsight_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import pbs
from jobsight.analytics.ingest.records import ParseOptions

LOG = FIXTURES / "pbs" / "20240301"
KIB, MIB, GIB = 1024, 1024 ** 2, 1024 ** 3
PBS_DIR = "pbs"
APEL = "apel__apel__test__test_pbs.py.extracted.txt"
PBSTOOLS = "tabaer__pbstools__src__python__pbsacct____init__.py.extracted.txt"
XDMOD = "ubccr__xdmod__tests__artifacts__xdmod__unit__shredder__pbs__input__accounting-logs.log"


def rows(r, raw, cluster=None):
    f = r.jobs.filter(r.jobs["job_id_raw"] == raw)
    if cluster:
        f = f.filter(f["cluster"] == cluster)
    return f.rows(named=True)


def utc(*a):
    return dt.datetime(*a)


def test_fixture_record_types_and_values():
    r = pbs.parse(LOG, ParseOptions(timezone="Europe/Copenhagen"))
    # 10 lines: comment (dropped), Q S E (job 100), E (101[3]), Q D A (102; A dropped), E (103), broken E
    assert (r.rows_in, r.frame_rows(), len(r.rejects), r.dropped) == (10, 7, 1, 2) and accounted(r)
    assert r.rejects[0].line_no == 10 and "job id" in r.rejects[0].reason
    assert [x["state"] for x in rows(r, "100")] == ["PENDING", "RUNNING", "COMPLETED"]
    j = rows(r, "100")[-1]
    assert j["cluster"] == "srv01" and j["account"] == "proj_a" and j["partition"] == "batch"
    assert j["submit_time"] == utc(2024, 3, 1, 9, 0, 0) and j["start_time"] == utc(2024, 3, 1, 9, 0, 5)
    assert j["end_time"] == utc(2024, 3, 1, 10, 0, 5) and j["elapsed_s"] == 3600 and j["timelimit_s"] == 7200
    assert (j["ncpus"], j["nnodes"], j["cpu_time_s"], j["exit_code"]) == (4, 1, 3 * 3600, "0:0")
    assert j["mem_req_bytes"] == 8 * GIB and j["mem_peak_bytes"] == 4194304 * KIB and j["restarts"] == 0
    # array task, quoted account with a space, PBS Pro exec_host 'g01/0*8', killed by SIGTERM at its limit
    a = rows(r, "101[3]")[0]
    assert (a["array_job_id"], a["array_task_id"], a["account"]) == ("101", "3", "proj b")
    assert (a["state"], a["exit_code"], a["ncpus"], a["ngpus"], a["restarts"]) == ("TIMEOUT", "0:15", 8, 2, 1)
    assert a["mem_peak_bytes"] == GIB and a["cpu_time_s"] == 100 and a["elapsed_s"] == 1800
    # deleted while queued: D record (local 12:05 = 11:05 UTC) keeps the Q record's queue and account
    d = rows(r, "102")[-1]
    assert (d["state"], d["partition"], d["account"]) == ("CANCELLED", "batch", "proj_a")
    assert d["submit_time"] == utc(2024, 3, 1, 10, 50) and d["end_time"] == utc(2024, 3, 1, 11, 5)
    # Torque: nodes=2:ppn=2:gpus=1 -> 2 GPUs; exec_host 4 slots on 2 hosts; times in plain seconds
    t = rows(r, "103")[0]
    assert (t["ncpus"], t["nnodes"], t["ngpus"], t["node_list"]) == (4, 2, 2, "n02,n03")
    assert (t["state"], t["exit_code"], t["elapsed_s"], t["cpu_time_s"]) == ("FAILED", "2:0", 1800, 3600)
    assert t["mem_peak_bytes"] == 2048 * MIB
    assert any("A (aborted" in n for n in r.notes) and any("comment" in n for n in r.notes)


def test_timezone_of_record_time():
    """Only the record's own time is local; the epochs are UTC whatever --timezone says."""
    r = pbs.parse(LOG, ParseOptions(timezone="America/New_York"))
    assert rows(r, "102")[-1]["end_time"] == utc(2024, 3, 1, 17, 5)
    assert rows(r, "100")[-1]["end_time"] == utc(2024, 3, 1, 10, 0, 5)


def test_default_zone_is_this_machines(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Copenhagen")
    r = pbs.parse(LOG, ParseOptions())
    assert rows(r, "102")[-1]["end_time"] == utc(2024, 3, 1, 11, 5)


def test_split_pairs_values_with_spaces():
    f = pbs.split_pairs('user=u Resource_Request_2.0=-L tasks=1:lprocs=1:memory=4GB -L tasks=1:lprocs=1 session=9 a="x y"')
    assert f["Resource_Request_2.0"] == "-L tasks=1:lprocs=1:memory=4GB -L tasks=1:lprocs=1"
    assert f["session"] == "9" and f["a"] == "x y" and "tasks" not in f


@pytest.mark.parametrize("status,state,code", [(0, "COMPLETED", "0:0"), (1, "FAILED", "1:0"), (271, "CANCELLED", "0:15"),
                                               (265, "CANCELLED", "0:9"), (10009, "CANCELLED", "0:9"), (-11, "FAILED", "-11:0")])
def test_exit_status(status, state, code):
    assert pbs._exit(status, 10, 100) == (state, code)


def test_units_and_slots():
    assert pbs.pbs_mem("2031040kb") == 2031040 * KIB and pbs.pbs_mem("2031040") == 2031040 * KIB
    assert pbs.pbs_mem("4000mb") == 4000 * MIB and pbs.pbs_mem("15gb") == 15 * GIB
    with pytest.raises(ValueError):
        pbs.pbs_mem("12.27M")
    assert pbs.exec_host_slots("b372/4+b372/5+b372/6") == (3, ["b372"])
    assert pbs.exec_host_slots("c1/0-3+c2/0-7") == (12, ["c1", "c2"])
    assert pbs.exec_host_slots("c1/0*13+c2/0*13") == (26, ["c1", "c2"])


def test_xdmod_gpu_oracle(realdata):
    cases = json.loads(next((realdata / "other").glob("*pbs-resource-parser*gpu-count.json")).read_text())
    assert len(cases) == 19
    for nodes, gpus in cases:
        assert pbs.nodes_spec(nodes)[2] == gpus, nodes


def test_realdata_apel(realdata):
    r = pbs.parse(realdata / PBS_DIR / APEL, ParseOptions(timezone="UTC"))
    assert accounted(r) and r.rows_in == 15 and r.dropped == 5 and r.frame_rows() == 8
    # SOURCES.md: the invalid-data test has 'etime=...start=' run together; the value-errors test has end < start
    assert [(x.line_no, x.reason.split(": ", 1)[1]) for x in r.rejects] == [
        (11, "etime='1317509574start=1317509945' is not an epoch time"), (13, "end (1448914025) before start (1448926792)")]
    j = rows(r, "21048463")[0]   # truncated walltime '19:23:4' read as 19:23:04
    assert (j["elapsed_s"], j["cpu_time_s"], j["ncpus"]) == (19 * 3600 + 23 * 60 + 4, 18 * 3600 + 15 * 60 + 24, 1)
    assert j["mem_peak_bytes"] == 2031040 * KIB and j["mem_req_bytes"] == 4000 * MIB   # pmem x 1 core
    assert j["cluster"] == "lcgbatch01" and j["partition"] == "grid4000M"
    assert rows(r, "21430205")[0]["ncpus"] == 4        # 'YYYYMMDD:' grep prefix, exec_host b391/0-3
    e1, e2 = rows(r, "24940336")                       # the same job ended twice: 271 then 0 (plain seconds)
    assert (e1["state"], e1["exit_code"]) == ("CANCELLED", "0:15")
    assert (e2["state"], e2["elapsed_s"], e2["cpu_time_s"]) == ("COMPLETED", 12767, 12722)


def test_realdata_pbstools(realdata):
    r = pbs.parse(realdata / PBS_DIR / PBSTOOLS, ParseOptions(timezone="America/New_York"))
    assert accounted(r) and not r.rejects and r.dropped == 6
    s, e = rows(r, "13512")
    assert s["state"] == "RUNNING" and e["state"] == "COMPLETED"
    assert (e["ncpus"], e["elapsed_s"], e["cpu_time_s"], e["mem_peak_bytes"]) == (80, 33, 253, 15448300 * KIB)
    k = rows(r, "16057")[-1]
    assert (k["state"], k["exit_code"], k["ncpus"], k["nnodes"], k["elapsed_s"]) == ("CANCELLED", "0:15", 2, 2, 84)
    f = rows(r, "123456")[0]    # alphabetised keys, lowercase exit_status
    assert (f["state"], f["ncpus"], f["mem_req_bytes"], f["elapsed_s"]) == ("COMPLETED", 2, GIB, 1)


def test_realdata_xdmod_against_oracle(realdata):
    r = pbs.parse(realdata / PBS_DIR / XDMOD, ParseOptions(timezone="UTC"))
    assert accounted(r) and not r.rejects and r.frame_rows() == 9
    oracle = list(json.loads(next((realdata / "other").glob("*shredder__pbs__output*")).read_text()).values())
    got = r.jobs.rows(named=True)
    for o, j in zip(oracle, got, strict=True):
        assert j["job_id_raw"] == o["job_id"] and j["user"] == o["user"] and j["partition"] == o["queue"]
        assert j["start_time"] == dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(o["start"]))
        assert j["elapsed_s"] == o["resources_used_walltime"]
        for col, key in (("mem_peak_bytes", "resources_used_mem"), ("cpu_time_s", "resources_used_cput"),
                         ("mem_req_bytes", "resource_list_mem")):
            if key in o:
                assert j[col] == o[key], (o["job_id"], col)
        if o["job_id"] != "3073070":   # XDMoD counts exec_vnode chunks (2); resources_used.ncpus=48 is the truth
            assert j["ncpus"] == o.get("resources_used_cpus", j["ncpus"]), o["job_id"]
        assert j["ngpus"] in (int(o["resources_used_gpus"]), None if o["resources_used_gpus"] == 0 else -1)
    g = rows(r, "3073070")[0]
    assert (g["ncpus"], g["ngpus"], g["state"], g["exit_code"]) == (48, 4, "TIMEOUT", "0:15")   # 10:01:06 > 10:00:00
    assert rows(r, "7904")[0]["elapsed_s"] == 1485459831 - 1485451424 and rows(r, "7904")[0]["ncpus"] == 28
    assert json.loads(rows(r, "10711")[0]["null_reasons"]) == {"mem_peak_bytes": "12.27M"}
    assert rows(r, "6464684")[0]["ncpus"] == 4 and rows(r, "2994")[0]["ncpus"] == 65


def test_sniff(realdata):
    assert pbs.sniff(LOG.read_text(), LOG)
    for f in (realdata / PBS_DIR).iterdir():
        assert pbs.sniff(f.read_text(), f), f.name
    assert not pbs.sniff("JobID|State\n1|COMPLETED\n", LOG)


_part = st.sampled_from([
    "user=u", "queue=q", "account=a", 'account="a b', "ctime=1", "start=100", "end=50", "end=200", "start=x",
    "exec_host=h/0-3", "exec_host=h/x", "exec_host=h/0*2+g/1", "Resource_List.nodes=2:ppn=x:gpus=1",
    "Resource_List.ncpus=q", "Resource_List.ngpus=2", "resources_used.mem=12kb", "resources_used.mem=1.5Q",
    "resources_used.walltime=1:2:3", "resources_used.walltime=-5", "resources_used.cput=9", "Exit_status=271",
    "Exit_status=x", "run_count=0", "Resource_Request_2.0=-L", "tasks=1", "-L", "garbage", '"', "=", ""])
_line = st.builds(lambda t, j, parts: f"03/01/2024 10:00:00;{t};{j};" + " ".join(parts),
                  st.sampled_from(["E", "S", "Q", "D", "A", "R", "x"]),
                  st.sampled_from(["1.s", "2[3].s", "4", "", "x.y", "5-6.s"]), st.lists(_part, max_size=8))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(_line, st.text(max_size=30)), max_size=10))
def test_fuzz_never_raises_and_accounts(tmp_path, lines):
    p = tmp_path / "acct"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="replace")
    r = pbs.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r)
    assert all(x.line_no and x.reason for x in r.rejects)


def test_end_to_end_ingest_with_table_charging(tmp_path):
    cfg = tmp_path / "jobsight.toml"
    cfg.write_text('[charging]\npolicy = "table"\n\n[[charging.rates]]\npartition = "batch"\nper_core_h = 1.5\n\n'
                   '[[charging.rates]]\npartition = "gpu"\nper_core_h = 0.5\nper_gpu_h = 10.0\n')
    db = tmp_path / "t.duckdb"
    run = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(db), "--config", str(cfg), "--timezone", "Europe/Copenhagen",
                          str(LOG)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    con = duckdb.connect(str(db), read_only=True)
    got = dict(con.execute("SELECT job_id_raw, round(sbu, 6) FROM job_metrics WHERE source = 'pbs'").fetchall())
    # 100: 1 h x 4 cores x 1.5; 103: 0.5 h x 4 x 1.5; 101[3]: 0.5 h x (8 x 0.5 + 2 x 10); 102 never ran
    assert got == {"100": 6.0, "103": 3.0, "101[3]": 12.0, "102": None}
    assert con.execute("SELECT count(*) FROM job_metrics WHERE sbu_source = 'table'").fetchone()[0] == 4
    assert con.execute("SELECT line_no FROM rejects").fetchall() == [(10,)]


def test_blocks_cut_anywhere_give_the_same_rows(monkeypatch, tmp_path):
    """Blocks of a few lines (a D record in another block than the job's Q record) read as one block."""
    text = LOG.read_text() + "03/01/2024 14:00:00;D;103.srv01;requestor=root\n03/01/2024 14:00:01;D;104.srv01;requestor=x\n"
    p = tmp_path / "acct"
    p.write_text(text)
    whole = pbs.parse(p, ParseOptions(timezone="UTC"))
    real = pbs.iter_blocks
    monkeypatch.setattr(pbs, "iter_blocks", lambda path: real(path, 150))
    cut = pbs.parse(p, ParseOptions(timezone="UTC"))
    assert cut.jobs.equals(whole.jobs) and cut.rejects == whole.rejects and cut.notes == whole.notes
    d = rows(cut, "103")[-1]   # carries the E record's values, ends at the D record's time
    assert (d["state"], d["exit_code"], d["ncpus"], d["end_time"]) == ("CANCELLED", None, 4, utc(2024, 3, 1, 14))
    assert rows(cut, "104")[0]["state"] == "CANCELLED" and rows(cut, "104")[0]["user"] is None


QDEL = FIXTURES / "pbs" / "20240302-qdel"


def test_qdel_then_end_is_cancelled_by_the_requestor(tmp_path):
    r = pbs.parse(QDEL, ParseOptions(timezone="UTC"))
    assert (r.rows_in, len(r.rejects), r.dropped) == (10, 0, 2) and accounted(r)
    last = {x["job_id"]: x for x in r.jobs.rows(named=True)}   # rows are in file order: the E record last
    # owner's qdel, then the E record with the shell's 128 + SIGTERM: CANCELLED, not FAILED, by alice
    assert (last["200"]["state"], last["200"]["exit_code"]) == ("CANCELLED", "143:0")
    assert json.loads(last["200"]["null_reasons"]) == {"cancelled_by_uid": "alice@login01"}
    # an operator's qdel, killed by signal 15 (271)
    assert (last["202"]["state"], json.loads(last["202"]["null_reasons"])) == ("CANCELLED", {"cancelled_by_uid": "root@pbsserver"})
    # the same exit status without a qdel stays FAILED; a job that still ended COMPLETED stays so
    assert (last["201"]["state"], last["201"]["null_reasons"]) == ("FAILED", None)
    assert (last["203"]["state"], last["203"]["null_reasons"]) == ("COMPLETED", None)
    assert any(n.startswith("1 L (licence) records skipped: they are the licence server's counts") for n in r.notes)
    assert not any("L (licence)" in n and "E record" in n for n in r.notes)
    # stored: the E record wins over the D record, and keeps who cancelled
    db = tmp_path / "q.duckdb"
    subprocess.run(jobsight_cmd() + ["ingest", "--db", str(db), "--timezone", "UTC", str(QDEL)], check=True,
                   capture_output=True)
    con = duckdb.connect(str(db), read_only=True)
    stored = {j: (s, c, json.loads(n) if n else None) for j, s, c, n in con.execute(
        "SELECT job_id, state, exit_code, null_reasons FROM jobs ORDER BY job_id").fetchall()}
    con.close()
    assert stored == {"200": ("CANCELLED", "143:0", {"cancelled_by_uid": "alice@login01"}),
                      "201": ("FAILED", "143:0", None),
                      "202": ("CANCELLED", "0:15", {"cancelled_by_uid": "root@pbsserver"}),
                      "203": ("COMPLETED", "0:0", None)}


def test_counts_too_large_for_a_column_are_rejected_not_raised(tmp_path):
    """A '*N' slot count beyond an integer column rejects its record with the reason; an exec_vnode
    ngpus that large leaves the GPUs unknown (exec_vnode is only the last place GPUs are read from)."""
    head = "03/01/2024 10:00:00;E;{}.s;user=u queue=q Exit_status=0 "
    p = tmp_path / "acct"
    p.write_text("\n".join([head.format(1) + "exec_host=cn1/0*99999999999999999999",
                            head.format(2) + "exec_vnode=(cn1:ngpus=99999999999999999999)",
                            head.format(3) + "exec_host=cn1/0*4 exec_vnode=(cn1:ngpus=2)+(cn2:ngpus=1)"]) + "\n")
    r = pbs.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r) and [x.line_no for x in r.rejects] == [1]
    assert "a number too large" in r.rejects[0].reason
    assert r.jobs.select("job_id", "ncpus", "ngpus").sort("job_id").rows() == [("2", None, None), ("3", 4, 3)]
