"""Impossible numbers (analytics/ingest/limits.py): non-finite, negative and beyond-physical values are
rejected with file, line and reason; nothing of that row is stored, and the valid rows around it
are stored with their values. In Slurm's formats only a field that places the row rejects it: any
other is stored NULL with the reason (analytics/ingest/slurm_values.py)."""
from __future__ import annotations

import json
import math
from datetime import datetime

import pytest
from conftest import FIXTURES

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import limits
from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector.csv_schema import HEADER

GiB = 1024 ** 3
UTC = ParseOptions(timezone="UTC")


def _ingest(tmp_path, name: str, text: str, opts=UTC, mode: str = "w"):
    """Ingest one file; returns (report, rows of job / step / sample, {line: reason})."""
    f = tmp_path / name
    f.write_text(text, encoding="utf-8") if mode == "w" else f.write_bytes(text)
    con = db.connect(tmp_path / "t.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [f], opts)
        assert rep.status == "ingested", rep.error
        out = {}
        for t in ("job", "step", "sample"):
            cur = con.execute(f"SELECT * FROM {t}")
            names = [d[0] for d in cur.description]
            out[t] = [dict(zip(names, r)) for r in cur.fetchall()]
        rejects = con.execute("SELECT source_file, line_no, reason FROM reject").fetchall()
    finally:
        con.close()
    assert all(r[0] == str(f) for r in rejects)
    assert rep.rows_in == rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped
    return rep, out, {r[1]: r[2] for r in rejects}


def _finite_everywhere(rows: list[dict]) -> None:
    for r in rows:
        for k, v in r.items():
            assert not (isinstance(v, float) and (math.isnan(v) or math.isinf(v))), (k, v)


SACCT_HEAD = "JobID|JobIDRaw|State|Start|End|Elapsed|NCPUS|NNodes|ReqMem|AllocTRES|TotalCPU|MaxRSS|TRESUsageInTot|UID|JobName"
T = "2026-11-01T10:00:00|2026-11-01T11:00:00|01:00:00"
# (line, None when stored as is; (column, words of its null_reasons) when stored with that column
# NULL; "reject: words" when rejected: only a field that places the row rejects it)
SACCT = [
    (f"1|1|COMPLETED|{T}|4|1|4G|billing=4,cpu=4,mem=4G,node=1|01:00:00|1G||1000|ok", None),
    (f"2|2|COMPLETED|{T}|4|1|4G|billing=1e999,cpu=4,mem=4G,node=1|01:00:00|1G||1000|inf",
     ("billing", None)),
    (f"3|3|COMPLETED|{T}|4|1|4G|billing=nan,cpu=4,mem=4G,node=1|01:00:00|1G||1000|nan", ("billing", None)),
    (f"4|4|COMPLETED|{T}|4|1|4G|billing=-5,cpu=4,mem=4G,node=1|01:00:00|1G||1000|neg", ("billing", None)),
    (f"5|5|COMPLETED|{T}|4|1|99999999999999999999P|billing=4|01:00:00|1G||1000|reqmem",
     ("mem_req_bytes", "impossible: mem_req_bytes: ")),
    (f"6|6|COMPLETED|{T}|999999999|1|4G|billing=4|01:00:00|1G||1000|cpus",
     ("ncpus", "impossible: ncpus: 999999999 is above the limit")),
    ("7|7|COMPLETED|1969-12-31T10:00:00|2026-11-01T11:00:00|01:00:00|4|1|4G|billing=4|01:00:00|1G||1000|old",
     "reject: start_time: 1969-12-31 10:00:00 is before 1970-01-01"),
    (f"8|8|COMPLETED|{T}|4|1|4G|billing=4,cpu=-4|01:00:00|1G||1000|tres", None),
    (f"9|9|COMPLETED|{T}|4|1|4G|billing=4,gres/gpu=inf|01:00:00|1G||1000|gpu", ("ngpus", None)),
    (f"9.0|9.0|COMPLETED|{T}|4|1||cpu=4|01:00:00|1G|cpu=01:00:00,gres/gpuutil=-50,mem=1G|1000|util", ("gpu_util_tres", None)),
    (f"10|10|COMPLETED|{T}|4|1|4G|billing=4|99999999999999:00:00|1G||1000|cpu",
     ("cpu_time_s", "impossible: cpu_time_s: 3.599999999999964e+17 is above")),
    (f"12|12|COMPLETED|{T}|4|1|{'9' * 400}M|billing=4|01:00:00|1G||1000|huge", ("mem_req_bytes", "column reqmem: '99999")),
    (f"13|13|COMPLETED|{T}|4|1|4G|billing=4|01:00:00|{'9' * 400}K||1000|huge", ("max_rss_bytes", "column maxrss: '99999")),
    (f"11|11|COMPLETED|{T}|4|1|16Gn|billing=4,cpu=4,mem=4G,node=1|01:00:00|1G||1000|ok", None),
    (f"11.0|11.0|COMPLETED|{T}|4|1||cpu=4|01:00:00|1G|cpu=01:00:00,gres/gpuutil=50,mem=1G|1000|ok", None),
]


@pytest.mark.parametrize("fast", [True, False])
def test_sacct_text_both_readers(tmp_path, fast):
    p = tmp_path / "d.txt"
    p.write_text("\n".join([SACCT_HEAD] + [ln for ln, _ in SACCT]) + "\n", encoding="utf-8")
    r = sacct_text.parse(p, UTC, fast_path=fast)
    assert {x.line_no: x.reason for x in r.rejects} == {8: "start_time: 1969-12-31 10:00:00 is before 1970-01-01"}
    rows = {x["job_id"] + ("." + x["step_id"] if x.get("step_id") else ""): x
            for x in r.jobs.iter_rows(named=True)} | {x["job_id"] + "." + x["step_id"]: x for x in r.steps.iter_rows(named=True)}
    assert len(rows) == len(SACCT) - 1
    for line, want in SACCT:
        if isinstance(want, str):
            continue
        row = rows[line.split("|")[0]]
        if want is None:
            assert row["null_reasons"] is None or "impossible" not in row["null_reasons"], line
            continue
        col, words = want
        assert row.get(col) is None, (line, col)     # max_rss_bytes is a step column
        why = json.loads(row["null_reasons"] or "{}").get(col, "")
        assert words is None or words in why, (line, why)
    assert rows["8"]["alloc_tres"] == "billing=4" and rows["4"]["alloc_tres"] == "cpu=4,mem=4G,node=1"
    assert rows["6"]["billing"] == 4.0 and rows["2"]["ncpus"] == 4 and rows["2"]["mem_alloc_bytes"] == 4 * GiB
    assert rows["9.0"]["mem_usage_tot_bytes"] == GiB
    assert r.jobs["job_id"].to_list() == ["1", "2", "3", "4", "5", "6", "8", "9", "10", "12", "13", "11"]


def test_sacct_text_ingest_stores_only_the_valid_rows(tmp_path):
    rep, out, rejects = _ingest(tmp_path, "d.txt", "\n".join([SACCT_HEAD] + [ln for ln, _ in SACCT]) + "\n")
    assert rep.rejected == 1 and set(rejects) == {8}
    jobs = {j["job_id_raw"]: j for j in out["job"]}
    assert "7" not in jobs and len(jobs) == 12 and sorted(s["job_id_raw"] for s in out["step"]) == ["11", "9"]
    assert (jobs["1"]["billing"], jobs["1"]["mem_req_bytes"], jobs["1"]["ncpus"]) == (4.0, 4 * GiB, 4)
    assert (jobs["11"]["mem_req_bytes"], jobs["11"]["gpu_util_tres"]) == (16 * GiB, 50.0)
    assert any("d.txt: TRES billing: an impossible value in 2 row(s)" in n for n in rep.notes), rep.notes   # inf, nan
    _finite_everywhere(out["job"] + out["step"])


def _json_job(i, *, billing=4, start=1700000000, cpus=4, steps=None, mem_mib=1024):
    return {"job_id": i, "state": {"current": ["COMPLETED"]}, "user": "u", "account": "a",
            "time": {"submission": 1699999000, "start": start, "end": 1700003600, "elapsed": 3600, "limit": 120},
            "tres": {"allocated": [{"type": "cpu", "count": cpus}, {"type": "billing", "count": billing},
                                   {"type": "mem", "count": mem_mib}, {"type": "energy", "count": -2}]},
            "steps": steps or []}


def _json_step(sid, util=50):
    return {"step": {"id": sid}, "state": "COMPLETED", "time": {"start": 1700000000, "end": 1700003600, "elapsed": 3600},
            "tres": {"requested": {"total": [{"type": "gres", "name": "gpuutil", "count": util}]}}}


def test_sacct_json(tmp_path):
    """Only a field that places the row (a time) rejects it; an impossible TRES count, billing or
    memory is stored NULL with the reason, and a marker's sum (cpu -4, gpuutil -50) is unknown."""
    jobs = [_json_job(1), _json_job(2, billing=1e999), _json_job(3, billing=float("nan")), _json_job(4, billing=-5),
            _json_job(5, start=-100), _json_job(6, cpus=-4), _json_job(7, billing=2e12), _json_job(8, mem_mib=2 ** 50),
            _json_job(9, steps=[_json_step("9.batch", util=-50), _json_step("9.0")]), _json_job(10)]
    text = json.dumps({"jobs": jobs}).replace("Infinity", "1e999")   # what a JSON writer gives for inf
    rep, out, rejects = _ingest(tmp_path, "s.json", text)
    assert rejects == {5: "job 5: time.start -100 is before 1970-01-01"}
    by_id = {j["job_id_raw"]: j for j in out["job"]}
    assert sorted(by_id) == ["1", "10", "2", "3", "4", "6", "7", "8", "9"]
    assert [by_id[i]["billing"] for i in "2347"] == [None] * 4
    assert [by_id[i]["ncpus"] for i in "2347"] == [4] * 4     # the rest of each row is kept
    assert by_id["6"]["ncpus"] is None and by_id["6"]["billing"] == 4.0
    assert by_id["8"]["mem_alloc_bytes"] is None
    assert "impossible: billing: 2000000000000.0 is above the limit" in json.loads(by_id["7"]["null_reasons"])["billing"]
    assert "mem_alloc_bytes" in json.loads(by_id["8"]["null_reasons"])
    assert sorted((s["job_id_raw"], s["step_id"], s["gpu_util_tres"]) for s in out["step"]) == \
        [("9", "0", 50.0), ("9", "batch", None)]
    notes = " | ".join(rep.notes)
    assert "s.json: TRES billing: an impossible value in 2 row(s)" in notes        # inf, nan
    assert "s.json: TRES billing: Slurm's 'not set' marker (or a sum of it) in 1 row(s)" in notes   # -5
    assert "s.json: billing: an impossible value in 1 row(s)" in notes            # 2e12
    one = by_id["1"]
    assert (one["billing"], one["ncpus"], one["mem_alloc_bytes"], one["start_time"]) == \
        (4.0, 4, GiB, datetime(2023, 11, 14, 22, 13, 20))


SEFF = """Job ID: {id}
Cluster: c
User/Group: u/g
State: COMPLETED (exit code 0)
Cores: {cores}
CPU Utilized: {cpu}
CPU Efficiency: 50.00% of 02:00:00 core-walltime
Job Wall-clock time: 01:00:00
Memory Utilized: {mem}
Memory Efficiency: 50.00% of 2.00 GB (2.00 GB/node)
"""


def test_seff(tmp_path):
    reports = [dict(id=1, cores=2, cpu="01:00:00", mem="1.00 GB"), dict(id=2, cores=-2, cpu="01:00:00", mem="1.00 GB"),
               dict(id=3, cores=2, cpu="inf", mem="1.00 GB"), dict(id=4, cores=2, cpu="01:00:00", mem="99999999999 TB"),
               dict(id=5, cores=2, cpu="01:00:00", mem="1.00 GB")]
    text = "".join(SEFF.format(**r) for r in reports)
    rep, out, rejects = _ingest(tmp_path, "seff.txt", text)
    # Cores -2 is Slurm's NO_VAL: unknown; a peak above 1 EiB: NULL with the reason; 'inf' is no duration
    assert rejects == {21: "seff report: not a duration: 'inf'"}
    jobs = {j["job_id_raw"]: j for j in out["job"]}
    assert set(jobs) == {"1", "2", "4", "5"}
    assert (jobs["1"]["ncpus"], jobs["1"]["cpu_time_s"], jobs["1"]["mem_peak_bytes"]) == (2, 3600, GiB)
    assert jobs["2"]["ncpus"] is None and json.loads(jobs["2"]["null_reasons"])["ncpus"] == "Slurm NO_VAL: not set"
    assert jobs["4"]["mem_peak_bytes"] is None and jobs["4"]["cpu_time_s"] == 3600
    assert f"{99999999999 * 2 ** 40} is above the limit" in json.loads(jobs["4"]["null_reasons"])["mem_peak_bytes"]


PBS_E = ("03/01/2024 11:00:05;E;{id}.srv01;user=alice group=g1 account=proj_a jobname=sim queue=batch ctime=1709283600 "
         "qtime=1709283600 etime=1709283600 start=1709283605 end=1709287205 exec_host=n01/0-3 Resource_List.ncpus=4 "
         "Resource_List.mem={mem} Resource_List.walltime=02:00:00 Exit_status=0 resources_used.cput={cput} "
         "resources_used.mem=4194304kb resources_used.walltime={wall} resources_used.ncpus={ncpus} run_count=1")


def test_pbs(tmp_path):
    ok = dict(mem="8gb", cput="03:00:00", wall="01:00:00", ncpus=4)
    lines = [PBS_E.format(id=100, **ok), PBS_E.format(id=101, **{**ok, "ncpus": -4}),
             PBS_E.format(id=102, **{**ok, "wall": "inf"}), PBS_E.format(id=103, **{**ok, "mem": "9999999999999tb"}),
             PBS_E.format(id=104, **{**ok, "cput": "99999999999999:00:00"}),
             PBS_E.format(id=106, **{**ok, "mem": "9" * 400 + "kb"}), PBS_E.format(id=105, **ok)]
    rep, out, rejects = _ingest(tmp_path, "20240301", "\n".join(lines) + "\n", ParseOptions(timezone="UTC"))
    assert rejects == {2: "PBS E record 101.srv01: ncpus: -4 is negative",
                       3: "PBS E record 102.srv01: resources_used.walltime='inf' is not a duration",
                       4: f"PBS E record 103.srv01: mem_req_bytes: {9999999999999 * 2 ** 40} is above the limit of "
                          f"{2 ** 60} bytes (1 EiB)",
                       5: "PBS E record 104.srv01: cpu_time_s: 3.599999999999964e+17 is above the limit of "
                          "315576000000000000 core-seconds",
                       6: f"PBS E record 106.srv01: Resource_List.mem: '{'9' * 40}' is above the limit of {2 ** 60} bytes (1 EiB)"}
    jobs = {j["job_id_raw"]: j for j in out["job"]}
    assert set(jobs) == {"100", "105"}
    assert (jobs["100"]["ncpus"], jobs["100"]["mem_req_bytes"], jobs["100"]["elapsed_s"]) == (4, 8 * GiB, 3600)


def _lsf_records() -> tuple[str, str]:
    lines = (FIXTURES / "lsf" / "lsb.acct").read_text().splitlines()
    five = next(ln for ln in lines if ln.startswith('"JOB_FINISH" "10.108" 1709296200 5002 '))
    return lines[0], five


def test_lsf(tmp_path):
    comment, rec = _lsf_records()
    def job(i, old="", new=""):
        out = rec.replace(" 5002 ", f" {i} ", 1)
        return out.replace(old, new, 1) if old else out
    records = [job(6001), job(6002, " 7 1048576 0 ", " 7 -5 0 "), job(6003, "1500.500000", "nan"),
               job(6004, "1709296200", "-100"), job(6005, " 7 1048576 0 ", " 7 99999999999999999 0 "), job(6006)]
    rep, out, rejects = _ingest(tmp_path, "lsb.acct", "\n".join([comment] + records) + "\n", ParseOptions(cluster="l"))
    assert rejects == {3: "JOB_FINISH: maxRMem='-5' is negative", 4: "JOB_FINISH: ru_utime='nan' is not a finite number",
                       5: "JOB_FINISH: eventTime='-100' is negative",
                       6: f"JOB_FINISH: mem_peak_bytes: {int(99999999999999999.0) * 1024} is above the limit of {2 ** 60} bytes (1 EiB)"}
    jobs = {j["job_id_raw"]: j for j in out["job"]}
    assert set(jobs) == {"6001[7]", "6006[7]"} and jobs["6001[7]"]["mem_peak_bytes"] == 1048576 * 1024
    assert jobs["6001[7]"]["cpu_time_s"] == 1600.0


SMI_HEAD = "timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu"


def test_nvidia_smi(tmp_path):
    rows = ["2026/11/22 00:16:01.250, 0, 50 %, 100 MiB, 81920 MiB, 100.00 W, 40",
            "2026/11/22 00:16:02.250, 0, 150 %, 100 MiB, 81920 MiB, 100.00 W, 40",
            "2026/11/22 00:16:03.250, 0, -50 %, 100 MiB, 81920 MiB, 100.00 W, 40",
            "2026/11/22 00:16:04.250, 0, inf %, 100 MiB, 81920 MiB, 100.00 W, 40",
            "2026/11/22 00:16:05.250, 0, 50 %, -100 MiB, 81920 MiB, 100.00 W, 40",
            "2026/11/22 00:16:06.250, 0, 50 %, 100 MiB, 81920 MiB, 1e6 W, 40",
            "2026/11/22 00:16:07.250, 0, 50 %, 100 MiB, 81920 MiB, 100 W, 4000",
            "1969/11/22 00:16:07.250, 0, 50 %, 100 MiB, 81920 MiB, 100 W, 40",
            "2026/11/22 00:16:08.250, 0, 60 %, 100 MiB, 81920 MiB, 100.00 W, 40"]
    rep, out, rejects = _ingest(tmp_path, "gpu-77.csv", "\n".join([SMI_HEAD] + rows) + "\n")
    assert rejects == {3: "util_pct: 150.0 is above 100 (a GPU's utilisation)", 4: "util_pct: -50.0 is negative",
                       5: "utilization.gpu: not a number: inf %", 6: "mem_used_bytes: -104857600 is negative",
                       7: "power_w: 1000000.0 is above the limit of 10000 W",
                       8: "temperature_c: 4000.0 is above the limit of 250 °C",
                       9: "time: 1969-11-22 00:16:07.250000 is before 1970-01-01"}
    assert [(s["util_pct"], s["power_w"]) for s in sorted(out["sample"], key=lambda s: s["time"])] == [(50.0, 100.0), (60.0, 100.0)]


SIDECAR_HEAD = HEADER
GPU = "GPU-aaaa"


def _sc(t, device=GPU, util="50", power="100"):
    extra = f"0,{power},10,1400,40,0.5" if device != "cpu" else ",,,,,"
    return f"2026-11-22T00:16:{t:02d}.000Z,55,c,h,{device},{util},1000,2000,{extra}"


@pytest.mark.parametrize("bulk", [True, False])
def test_sidecar_both_roads(tmp_path, monkeypatch, bulk):
    from jobsight.analytics.ingest.parsers import sidecar_csv
    if not bulk:
        monkeypatch.delattr(sidecar_csv, "bulk_read")
    # a CPU row above 100 % is fine: more cores busy than allocated
    rows = [_sc(1, "cpu", util="95.5"), _sc(1), _sc(2, util="nan"), _sc(3, util="inf"), _sc(4, util="-50"),
            _sc(5, util="150"), _sc(5, "cpu", util="150"), _sc(6, power="-1"), _sc(7, power="1e9"), _sc(8, util="60")]
    rep, out, rejects = _ingest(tmp_path, "jobsight-c-55-h-20261122T001601Z-1.csv", "\n".join([SIDECAR_HEAD] + rows) + "\n")
    assert rejects == {4: "util_pct: NaN is not a finite number", 5: "util_pct: inf is not a finite number",
                       6: "util_pct: -50.0 is negative", 7: "util_pct: 150.0 is above 100 (a GPU's utilisation)",
                       9: "power_w: -1.0 is negative", 10: "power_w: 1000000000.0 is above the limit of 10000 W"}
    got = sorted((s["time"].second, s["device"], s["util_pct"]) for s in out["sample"])
    assert got == [(1, GPU, 50.0), (1, "cpu", 95.5), (5, "cpu", 150.0), (8, GPU, 60.0)]


def test_limits_in_one_place_agree():
    """The per-record check, the polars expressions and the SQL bulk filter draw the same lines."""
    import duckdb
    import polars as pl
    vals = {"util_pct": [50.0, 100.0, 100.5, -0.1, float("nan"), float("inf"), 800.0, None],
            "device": ["g", "g", "g", "g", "g", "g", "cpu", "g"]}
    df = pl.DataFrame(vals)
    conds = limits.sample_reasons({"util_pct": pl.col("util_pct")}, gpu=pl.col("device") != "cpu")
    polars_bad = df.select(pl.any_horizontal([c for c, _ in conds])).to_series().to_list()
    cols = ", ".join(f"NULL AS {c}" for c in limits.SAMPLE if c not in ("util_pct", "time"))
    sql_ok = duckdb.execute(f"SELECT {limits.sample_sql_ok()} FROM (SELECT unnest(?::DOUBLE[]) AS util_pct, "
                            f"unnest(?::VARCHAR[]) AS device, {cols}, TIMESTAMP '2026-01-01' AS time)",
                            [vals["util_pct"], vals["device"]]).fetchall()
    assert polars_bad == [not ok for (ok,) in sql_ok] == [False, False, True, True, True, True, False, False]
    with pytest.raises(ValueError, match="billing: -1.0 is negative"):
        limits.check({"billing": -1.0})
