"""Sidecar CSV v1 parser: values, truncated last line, bad middle lines, metadata, fuzz."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, accounted, jobsight_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import sidecar_csv
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.collector.csv_schema import HEADER

DIR = FIXTURES / "sidecar"
GOOD = DIR / "jobsight-testclu-4242-gpu01-20261121T100000Z-999.csv"
TRUNC = DIR / "jobsight-testclu-4243-gpu01-20261121T110000Z-1000.csv"
BAD = DIR / "jobsight-testclu-4244-gpu01-20261121T120000Z-1001.csv"
UUID = "GPU-1a2b3c4d-0000-1111-2222-333344445555"


def test_sniff_by_header():
    assert sidecar_csv.sniff(GOOD.read_text(), GOOD)
    assert not sidecar_csv.sniff("timestamp, index, utilization.gpu [%]\n", Path("x.csv"))
    assert sidecar_csv.sniff(HEADER + ",extra\n", Path("x.csv"))   # a newer sidecar's file


def test_values_and_types():
    r = sidecar_csv.parse(GOOD, ParseOptions())
    assert (r.rows_in, r.dropped, r.rejects) == (4, 0, [])
    s = r.samples
    assert len(s) == 4
    gpu = s.filter(s["device"] == UUID).sort("time").row(0, named=True)
    assert gpu["time"] == dt.datetime(2026, 11, 21, 10, 0, 0)
    assert gpu["util_pct"] == 99.0 and gpu["mem_used_bytes"] == 32499564544
    assert gpu["mem_total_bytes"] == 85899345920 and gpu["gpu_index"] == 0
    assert gpu["power_w"] == 250.5 and gpu["energy_j"] == 123456.789
    assert gpu["sm_clock_mhz"] == 1410 and gpu["temperature_c"] == 61 and gpu["sm_active_pct"] == 0.82
    assert (gpu["cluster"], gpu["job_id_raw"], gpu["host"], gpu["source"]) == ("testclu", "4242", "gpu01", "sidecar")
    cpu2 = s.filter((s["device"] == "cpu") & (s["time"] == dt.datetime(2026, 11, 21, 10, 0, 10))).row(0, named=True)
    assert cpu2["util_pct"] == 50 and cpu2["mem_used_bytes"] == 2147483648 and cpu2["gpu_index"] is None
    # empty cells are NULL, not 0
    gpu2 = s.filter((s["device"] == UUID) & (s["time"] == dt.datetime(2026, 11, 21, 10, 0, 10))).row(0, named=True)
    assert gpu2["util_pct"] is None and gpu2["power_w"] is None and gpu2["mem_used_bytes"] == 32505856000
    assert str(s.schema["time"]) == "Datetime(time_unit='us', time_zone=None)"


def test_metadata_row():
    r = sidecar_csv.parse(GOOD, ParseOptions())
    run = r.sidecar_runs.row(0, named=True)
    assert (run["cluster"], run["job_id_raw"], run["host"]) == ("testclu", "4242", "gpu01")
    assert run["started_at"] == dt.datetime(2026, 11, 21, 10, 0, 0)
    assert run["interval_s"] == 10.0 and run["alloc_cores"] == 4 and run["cpu_method"] == "cgroup-v2"
    assert json.loads(run["gpus"])[0]["uuid"] == UUID
    assert json.loads(run["metadata"])["driver_version"] == "550.54.15"


def test_truncated_last_line_is_dropped_not_rejected():
    r = sidecar_csv.parse(TRUNC, ParseOptions())
    assert (r.rows_in, len(r.samples), r.dropped, r.rejects) == (2, 1, 1, [])
    assert r.sidecar_runs is None          # no .meta.json beside it: the CSV alone is enough
    assert accounted(r)


def test_malformed_middle_lines_rejected_with_line_numbers():
    r = sidecar_csv.parse(BAD, ParseOptions())
    assert r.rows_in == 5 and len(r.samples) == 2 and accounted(r)
    got = [(x.line_no, x.reason) for x in r.rejects]
    assert got == [
        (3, "util_pct is not a number: ninety"),
        (4, "3 fields, the header has 14"),
        (6, "bad or missing time (want ISO-8601 UTC ...Z): not-a-time"),
    ]


def test_cluster_and_job_fallbacks(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text(HEADER + "\n2026-11-21T10:00:00.5Z,77,,,cpu,1,,,,,,,,\n2026-11-21T10:00:01Z,,,,cpu,2,,,,,,,,\n")
    r = sidecar_csv.parse(p, ParseOptions(cluster="mycl"))
    row = r.samples.row(0, named=True)
    assert (row["cluster"], row["host"], row["time"]) == ("mycl", "unknown", dt.datetime(2026, 11, 21, 10, 0, 0, 500000))
    assert [(x.line_no, x.reason) for x in r.rejects] == [(3, "empty job_id and no metadata job_id")]
    assert accounted(r)


def test_header_only_and_empty(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text(HEADER + "\n")
    r = sidecar_csv.parse(p, ParseOptions())
    assert r.rows_in == 0 and r.frame_rows() == 0 and accounted(r)


_line = st.lists(st.sampled_from(["2026-11-21T10:00:00Z", "1", "", "x", "gpu01", "cpu", "-3.5", "1e3", "\"", "9" * 30]),
                 min_size=0, max_size=16).map(",".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_line, max_size=8), trailing_nl=st.booleans())
def test_fuzz_never_raises_and_accounts(tmp_path, lines, trailing_nl):
    p = tmp_path / "f.csv"
    p.write_text(HEADER + "\n" + "\n".join(lines) + ("\n" if trailing_nl else ""))
    r = sidecar_csv.parse(p, ParseOptions())
    assert accounted(r)
    assert all(x.line_no and x.line_no >= 2 and x.reason for x in r.rejects)


def test_end_to_end_ingest(tmp_path):
    d = tmp_path / "side"
    d.mkdir()
    for f in (GOOD, GOOD.with_suffix(".meta.json"), TRUNC):
        shutil.copy(f, d / f.name)
    db = tmp_path / "t.duckdb"
    run = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(db), str(d / GOOD.name), str(d / TRUNC.name)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM samples WHERE job_id_raw = '4242'").fetchone()[0] == 4
    assert con.execute("SELECT power_w FROM samples WHERE device = ? AND time = TIMESTAMP '2026-11-21 10:00:00'",
                       [UUID]).fetchone()[0] == 250.5
    assert con.execute("SELECT dropped FROM ingests WHERE file LIKE '%4243%'").fetchone()[0] == 1
    assert con.execute("SELECT interval_s FROM sidecar_run WHERE job_id_raw = '4242'").fetchone()[0] == 10.0


@pytest.mark.parametrize("path", [GOOD, TRUNC, BAD])
@pytest.mark.parametrize("chunk", [10, 100, 1 << 20])
def test_iter_parse_pieces_add_up_to_parse(path, chunk):
    import polars as pl
    whole = sidecar_csv.parse(path, ParseOptions())
    parts = list(sidecar_csv.iter_parse(path, ParseOptions(), chunk_bytes=chunk))
    assert sum(p.rows_in for p in parts) == whole.rows_in
    assert sum(p.dropped for p in parts) == whole.dropped
    assert [(r.line_no, r.reason) for p in parts for r in p.rejects] == [(r.line_no, r.reason) for r in whole.rejects]
    assert pl.concat([p.samples for p in parts]).equals(whole.samples)
    assert (parts[0].sidecar_runs is None) == (whole.sidecar_runs is None)


@pytest.mark.parametrize("bad_line", [False, True])
def test_time_offsets_same_on_fast_and_line_paths(tmp_path, bad_line):
    p = tmp_path / "o.csv"
    lines = ["2026-11-21T10:00:00.250Z,1,c,h,cpu,1,,,,,,,,", "2026-11-21T12:00:00+02:00,1,c,h,gpu,2,,,,,,,,"]
    if bad_line:
        lines.append("2026-11-21 10:00:00,1,c,h,cpu,3,,,,,,,,")   # no T, no zone: rejected
    p.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    r = sidecar_csv.parse(p, ParseOptions())
    assert r.samples["time"].to_list() == [dt.datetime(2026, 11, 21, 10, 0, 0, 250000), dt.datetime(2026, 11, 21, 10, 0, 0)]
    assert [x.line_no for x in r.rejects] == ([4] if bad_line else [])
