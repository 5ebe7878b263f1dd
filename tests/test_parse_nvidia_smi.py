"""nvidia-smi --query-gpu CSV logs: units, absent-value tokens, time zones, headers, job ids, real logs."""
from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, accounted, jobsight_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import nvidia_smi
from jobsight.analytics.ingest.records import ParseOptions

DIR = FIXTURES / "nvidia_smi"
MIB = 1024 ** 2
A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
NOHEADER_COLS = ["timestamp", "index", "utilization.gpu", "memory.used", "memory.total", "power.draw", "total_energy_consumption"]


def test_units_tokens_dst_and_restarted_header():
    r = nvidia_smi.parse(DIR / "gpu-log-5150.csv", ParseOptions(timezone="Europe/Amsterdam"))
    assert r.rows_in == 6 and len(r.samples) == 4 and accounted(r)
    assert any("1 repeated header" in n for n in r.notes)
    s = r.samples.sort("time", "device")
    first = s.row(0, named=True)
    # 01:59:58.100 CET (UTC+1) -> 00:59:58.100 UTC
    assert first["time"] == dt.datetime(2026, 3, 29, 0, 59, 58, 100000)
    assert (first["device"], first["gpu_index"], first["job_id_raw"]) == (A, 0, "5150")
    assert first["util_pct"] == 99 and first["mem_used_bytes"] == 30994 * MIB and first["mem_total_bytes"] == 32480 * MIB
    assert first["power_w"] == 250.0 and first["temperature_c"] == 61 and first["sm_clock_mhz"] == 1410
    assert (first["host"], first["cluster"], first["source"]) == ("unknown", "default", "nvidia-smi")
    b0 = s.row(1, named=True)
    assert b0["device"] == B and b0["util_pct"] is None and b0["power_w"] is None  # [N/A], [Not Supported]
    # 03:00:01.250 CEST (UTC+2) -> 01:00:01.250 UTC; [Unknown Error] clock -> NULL
    a1 = s.row(2, named=True)
    assert a1["time"] == dt.datetime(2026, 3, 29, 1, 0, 1, 250000) and a1["sm_clock_mhz"] is None
    b1 = s.row(3, named=True)
    assert b1["power_w"] is None and b1["temperature_c"] is None and b1["util_pct"] == 12  # N/A, [Insufficient Permissions]
    reasons = {x.line_no: x.reason for x in r.rejects}
    assert reasons == {
        7: "utilization.gpu: not a number: lots",
        8: "local time does not exist in Europe/Amsterdam (DST gap): 2026/03/29 02:30:00.000",
    }


def test_noheader_nounits_with_columns():
    p = DIR / "nvsmi-noheader-nounits-777_3.log"
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC", columns=NOHEADER_COLS, cluster="c1"))
    assert r.rows_in == 3 and not r.rejects
    row = r.samples.row(0, named=True)
    assert row["time"] == dt.datetime(2026, 11, 21, 10, 0, 0) and row["device"] == "gpu0" and row["gpu_index"] == 0
    assert row["mem_used_bytes"] == 1024 * MIB and row["mem_total_bytes"] == 81920 * MIB
    assert row["power_w"] == 300.10 and row["energy_j"] == pytest.approx(123456.789)  # mJ -> J
    assert (row["job_id_raw"], row["cluster"]) == ("777_3", "c1")
    assert r.samples.row(1, named=True)["device"] == "gpu1"


def test_noheader_without_columns_is_rejected():
    r = nvidia_smi.parse(DIR / "nvsmi-noheader-nounits-777_3.log", ParseOptions(timezone="UTC"))
    assert r.frame_rows() == 0 and len(r.rejects) == 3 and accounted(r)
    assert r.rejects[0].reason == "no header line and no --columns: cannot tell which column is which"


def test_compute_apps_rows_rejected_with_reason():
    p = DIR / "compute-apps-9001.csv"
    assert nvidia_smi.sniff(p.read_text(), p)
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC"))
    assert r.frame_rows() == 0 and [x.line_no for x in r.rejects] == [2]
    assert "query-compute-apps" in r.rejects[0].reason


@pytest.mark.parametrize("name,expected", [
    ("gpu-log-5150.csv", "5150"),
    ("nvsmi-noheader-nounits-777_3.log", "777_3"),
    ("job_123456_gpu.csv", "123456"),
    ("gpu-2026-11-21-98765.csv", "98765"),
    ("jobsight-gpu-20261121T100000Z-4242.log", "4242"),
    ("gpu_usage.csv", None),
    ("gpu-12-34.csv", None),
])
def test_job_id_from_file_name(name, expected):
    assert nvidia_smi.job_id_from_name(Path(name))[0] == expected


def test_no_job_id_rejects_every_row(tmp_path):
    p = tmp_path / "gpu_usage.csv"
    p.write_text("timestamp, utilization.gpu [%]\n2026/01/01 00:00:00.000, 5 %\n2026/01/01 00:00:01.000, 6 %\n")
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC"))
    assert [(x.line_no, x.reason) for x in r.rejects] == [(2, "no job id: pass --job-id"), (3, "no job id: pass --job-id")]
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC", job_id="42"))
    assert len(r.samples) == 2 and r.samples["job_id_raw"].to_list() == ["42", "42"]
    # no index or uuid: one row per poll -> gpu0
    assert r.samples["device"].to_list() == ["gpu0", "gpu0"]


def test_sniff():
    assert nvidia_smi.sniff("timestamp, index, utilization.gpu [%]\n", Path("x"))
    assert nvidia_smi.sniff("2026/11/21 10:00:00.000, 0, 45\n", Path("x"))
    assert not nvidia_smi.sniff("JobID|JobName|State\n", Path("x"))
    assert not nvidia_smi.sniff("index,name,value\n", Path("x"))
    assert not nvidia_smi.sniff("Job ID: 5\nCluster: x\n", Path("x"))


# ---- real logs from other projects -------------------------------------------------------------

def _real(realdata, name):
    return realdata / "nvidia_smi" / name


def test_realdata_all_accounted(realdata):
    files = sorted((realdata / "nvidia_smi").iterdir())
    assert files
    for f in files:
        r = nvidia_smi.parse(f, ParseOptions(timezone="UTC", job_id="1"))
        assert accounted(r), f.name
        assert all(x.line_no and x.reason for x in r.rejects), f.name


def test_realdata_repeated_header_log(realdata):
    r = nvidia_smi.parse(_real(realdata, "AkshayRoyal__gpu-usage__gpu_usage.csv"), ParseOptions(timezone="UTC", job_id="9"))
    assert r.rows_in == 224 and len(r.samples) == 224 and not r.rejects
    row = r.samples.row(0, named=True)
    # 2023/06/22 18:56:56.252, 0, NVIDIA GeForce RTX 2070, 00000000:01:00.0, 22 %, 6 %, 841 MiB, 7140 MiB, 8192 MiB
    assert row["time"] == dt.datetime(2023, 6, 22, 18, 56, 56, 252000)
    assert (row["util_pct"], row["mem_used_bytes"], row["mem_total_bytes"], row["device"]) == (22, 841 * MIB, 8192 * MIB, "gpu0")


def test_realdata_concurrent_writers_log(realdata):
    """Two nvidia-smi -l writers appended to one file: complete records are recovered, fragments rejected."""
    r = nvidia_smi.parse(_real(realdata, "SINGROUP__ters_gen__bash__gpu_usage.csv.log"), ParseOptions(timezone="UTC", job_id="9"))
    assert r.rows_in == 4789 and accounted(r)
    assert len(r.rejects) == 17
    got = r.samples.filter(r.samples["time"] == dt.datetime(2025, 6, 12, 12, 7, 49, 197000)).row(0, named=True)
    # line '2025/06/12 12:05:42.835, NVI2025/06/12 12:07:49.197, NVIDIA A100-SXM4-80GB, 0 %, 0 %, 28'
    assert got["util_pct"] == 0 and got["temperature_c"] == 28
    assert {x.line_no for x in r.rejects} >= {2955, 3087, 3683}


def test_realdata_full_query_capture_with_hostname(realdata):
    name = "utkuozdemir__nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__query-gpu__load.csv"
    f = _real(realdata, name)
    header, data = f.read_text().splitlines()[:2]
    cols = [c.strip() for c in header.split(",")]
    vals = [v.strip() for v in data.split(",")]
    rec = dict(zip(cols, vals))
    r = nvidia_smi.parse(f, ParseOptions(timezone="UTC", job_id="9"))
    row = r.samples.row(0, named=True)
    assert row["device"] == rec["uuid"]
    assert rec["hostname"] == "[N/A]" and row["host"] == "unknown"   # hostname column present but [N/A]
    assert row["mem_used_bytes"] == int(rec["memory.used [MiB]"].split()[0]) * MIB
    assert row["power_w"] == float(rec["power.draw [W]"].split()[0])
    assert row["sm_clock_mhz"] == float(rec["clocks.current.sm [MHz]"].split()[0])


def test_realdata_explained_rejections(realdata):
    r = nvidia_smi.parse(_real(realdata, "Unshapendwarf__SlowFast__gpu_utilization.csv"), ParseOptions(timezone="UTC", job_id="9"))
    assert r.frame_rows() == 0 and all("no timestamp column" in x.reason for x in r.rejects)
    r = nvidia_smi.parse(_real(realdata, "daspronoy__zetascope-codes__gpu_stats.csv"), ParseOptions(timezone="UTC", job_id="9"))
    assert r.frame_rows() == 0 and all("timestamp not in nvidia-smi's" in x.reason for x in r.rejects)
    table = _real(realdata, "theabrusch__semi_active_seizure__gpu_stats.csv.txt")
    assert not nvidia_smi.sniff(table.read_text()[:65536], table)  # default table output, not CSV


_cell = st.sampled_from(["2026/11/21 10:00:00.000", "0", "99 %", "[N/A]", "N/A", "12 MiB", "x", "", "GPU-1", "[Not Supported]", "1,2"])
_row = st.lists(_cell, min_size=0, max_size=6).map(", ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=8), header=st.booleans())
def test_fuzz_never_raises_and_accounts(tmp_path, rows, header):
    p = tmp_path / "log-55.csv"
    head = "timestamp, uuid, utilization.gpu [%], memory.used [MiB]\n" if header else ""
    p.write_text(head + "\n".join(rows) + "\n")
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r)
    assert all(x.line_no and x.reason for x in r.rejects)


def test_end_to_end_ingest(tmp_path):
    db = tmp_path / "t.duckdb"
    run = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(db), "--timezone", "Europe/Amsterdam", "--cluster", "c9",
                          str(DIR / "gpu-log-5150.csv")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT device, time, mem_used_bytes FROM samples WHERE cluster = 'c9' AND job_id_raw = '5150' "
                       "ORDER BY time, device").fetchall()
    assert len(rows) == 4
    assert rows[0] == (A, dt.datetime(2026, 3, 29, 0, 59, 58, 100000), 30994 * MIB)
    assert con.execute("SELECT count(*) FROM rejects WHERE format = 'nvidia-smi'").fetchone()[0] == 2


def test_docs_example_index_first_and_hostname_column(tmp_path):
    # The form in ../shared/docs/sidecar.md: index before timestamp.
    p = tmp_path / "run-31337.csv"
    p.write_text("index, timestamp, utilization.gpu [%], utilization.memory [%], memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
                 "0, 2020/11/12 13:48:11.412, 99 %, 52 %, 32480 MiB, 30994 MiB, 1486 MiB\n")
    r = nvidia_smi.parse(p, ParseOptions(timezone="America/New_York"))
    row = r.samples.row(0, named=True)
    # EST (UTC-5) in November
    assert row["time"] == dt.datetime(2020, 11, 12, 18, 48, 11, 412000)
    assert (row["device"], row["util_pct"], row["mem_used_bytes"], row["job_id_raw"]) == ("gpu0", 99, 30994 * MIB, "31337")
    p2 = tmp_path / "h-7.csv"
    p2.write_text("timestamp, hostname, uuid, utilization.gpu [%]\n2026/01/01 00:00:00.000, node17, GPU-x, 3 %\n")
    assert nvidia_smi.parse(p2, ParseOptions(timezone="UTC")).samples.row(0, named=True)["host"] == "node17"


def test_huge_and_infinite_numbers_rejected_not_raised(tmp_path):
    # found by tests/reliability/test_rel_fuzz_formats.py: a 400-digit memory value became inf and the
    # cast to bytes raised out of the parser
    p = tmp_path / "gpu-log-88.csv"
    p.write_text("timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
                 "2026/11/01 10:00:00.000, 0, 50 %, " + "9" * 400 + " MiB\n"
                 "2026/11/01 10:00:01.000, 0, inf %, 10 MiB\n"
                 "2026/11/01 10:00:02.000, 0, 40 %, 99999999999999 MiB\n"
                 "2026/11/01 10:00:03.000, 0, 30 %, 10 MiB\n")
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r) and len(r.samples) == 1 and r.samples["mem_used_bytes"].to_list() == [10 * MIB]
    reasons = {x.line_no: x.reason.split(":")[0:2] for x in r.rejects}
    assert reasons == {2: ["memory.used", " not a number"], 3: ["utilization.gpu", " not a number"],
                       4: ["memory.used", " out of range"]}


def test_last_line_cut_mid_record_is_dropped(tmp_path):
    head = "timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
    rec = "2024/03/01 10:00:0{s}.000, 0, {u} %, 100 MiB"
    p = tmp_path / "gpu-4242.csv"
    p.write_text(head + rec.format(s=0, u=10) + "\n" + rec.format(s=1, u=20) + "\n" + "2024/03/01 10:00:02.000, 0, 3")
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC"))
    assert (r.rows_in, r.dropped, r.rejects, len(r.samples)) == (3, 1, [], 2) and accounted(r)
    assert r.samples["util_pct"].to_list() == [10.0, 20.0]
    assert any("cut short" in n for n in r.notes)
    # a complete last record without a newline is kept; a short line elsewhere is still rejected
    p.write_text(head + "2024/03/01 10:00:02.000, 0\n" + rec.format(s=1, u=20))
    r = nvidia_smi.parse(p, ParseOptions(timezone="UTC"))
    assert (r.dropped, [x.line_no for x in r.rejects], len(r.samples)) == (0, [2], 1)
