"""Bad bytes inside otherwise good files (found by bench/fuzz_parsers.py): the bad line is
rejected with its line number and a reason; the good lines around it are stored."""
from __future__ import annotations

import json
from pathlib import Path

from relhelp import open_ro, run_ingest

HEADER = ("time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes,gpu_index,power_w,energy_j,"
          "sm_clock_mhz,temperature_c,sm_active_pct\n").encode()


def _row(sec: int, host: bytes = b"gpu01") -> bytes:
    return b"2026-11-21T10:00:%02d.000Z,4242,testclu,%s,cpu,87.5,1073741824,4294967296,,,,,,\n" % (sec, host)


def _ingest_one(f: Path, db: Path, *queries: str) -> tuple[dict, list[list[tuple]]]:
    """`jobsight ingest --json` of one file into a new database: its file report, and the rows of
    each query run on the database afterwards."""
    proc = run_ingest(db, f, extra=("--json",))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    con = open_ro(db)
    try:
        return json.loads(proc.stdout)["files"][0], [con.execute(q).fetchall() for q in queries]
    finally:
        con.close()


def test_invalid_utf8_in_a_sidecar_line_rejects_that_line(tmp_path):
    f = tmp_path / "jobsight-testclu-4242-gpu01-20261121T100000Z-1.csv"
    f.write_bytes(HEADER + _row(0) + _row(10, b"gpu\xff01") + _row(20))
    rep, (rejects,) = _ingest_one(f, tmp_path / "u.duckdb", "SELECT line_no FROM rejects")
    assert (rep["rows_in"], rep["stored"], rep["rejected"]) == (3, 2, 1)
    assert rejects == [(3,)]


def test_invalid_utf8_in_an_nvidia_smi_line_rejects_that_line(tmp_path):
    """The same damage in an nvidia-smi log: handled (the line is rejected, the other stored)."""
    f = tmp_path / "gpu-log-77.csv"
    f.write_bytes(b"timestamp, index, utilization.gpu [%]\n2026/11/21 10:00:00.000, 0, 4\xff5 %\n"
                  b"2026/11/21 10:00:01.000, 0, 45 %\n")
    rep, (rejects,) = _ingest_one(f, tmp_path / "n.duckdb", "SELECT line_no FROM rejects")
    assert (rep["rows_in"], rep["stored"], rep["rejected"]) == (2, 1, 1)
    assert rejects == [(2,)]


# Regression (fixed): sidecar_csv stores a middle line with 13 of 14 fields, its values shifted into the wrong
# columns (util_pct 1073741824, device 'cpu87.5'): a line whose field count differs from the header must be
# rejected ('13 fields where the header has 14'), as sacct text does; util_pct outside 0..100 too


def test_sidecar_line_missing_a_field_is_rejected_not_shifted(tmp_path):
    f = tmp_path / "jobsight-testclu-4242-gpu01-20261121T100000Z-3.csv"
    short = b"2026-11-21T10:00:10.000Z,4242,testclu,gpu01,cpu87.5,1073741824,4294967296,,,,,,\n"   # 13 fields
    assert short.count(b",") == HEADER.count(b",") - 1
    f.write_bytes(HEADER + _row(0) + short + _row(20))
    rep, (device_rows, rejects) = _ingest_one(f, tmp_path / "s.duckdb", "SELECT device FROM samples",
                                              "SELECT line_no FROM rejects")
    assert {r[0] for r in device_rows} == {"cpu"}
    assert (rep["stored"], rep["rejected"], rejects) == (2, 1, [(3,)])


def test_fuzz_crash_sidecar_ragged_lines():
    from jobsight.analytics.ingest.parsers import sidecar_csv
    from jobsight.analytics.ingest.records import ParseOptions
    data = (Path(__file__).parent / "fuzz_crashes" / "sidecar-ragged-dc3a5886.bin").read_bytes()[1:]
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "jobsight-testclu-4242-gpu01-20261121T100000Z-1.csv"
        p.write_bytes(data)
        res = sidecar_csv.parse(p, ParseOptions(cluster="fuzz"))
    assert res.rows_in == res.frame_rows() + len(res.rejects) + res.dropped
    assert res.rejects and all(r.line_no and r.reason for r in res.rejects)
