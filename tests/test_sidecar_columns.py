"""Sidecar CSVs read by their header's names: the required columns in any order, any subset of the
GPU extras (missing ones NULL), unknown columns ignored with a note; a missing required column
refuses the file, naming file and column. Every stored value is checked, on DuckDB's bulk road and
the polars road (both_roads asserts they store the same)."""
from __future__ import annotations

import random
from datetime import datetime

import pytest
from test_ingest_bulk import both_roads

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import sidecar_csv
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector.csv_schema import COLUMNS, REQUIRED

UUID = "GPU-11111111-2222-3333-4444-555555555555"
# the stored sample columns of test_ingest_bulk.ingest_into, after the key
VALUE_COLUMNS = ("util_pct", "mem_used_bytes", "mem_total_bytes", "gpu_index", "power_w", "energy_j",
                 "sm_clock_mhz", "temperature_c", "sm_active_pct")


def rows() -> list[dict]:
    """Three samples of a cpu and a GPU row; every extra has a distinct value, so a column read
    under the wrong name shows."""
    out = []
    for i in range(3):
        t = f"2026-11-21T10:00:{i * 10:02d}.000Z"
        base = {"time": t, "job_id": "77", "cluster": "clu", "host": "n1"}
        out.append({**base, "device": "cpu", "util_pct": f"{50 + i}.5", "mem_used_bytes": str(1000 + i),
                    "mem_total_bytes": "8589934592"})
        out.append({**base, "device": UUID, "util_pct": f"{90 + i}.0", "mem_used_bytes": str(2000 + i),
                    "mem_total_bytes": "85899345920", "gpu_index": "0", "power_w": f"{250 + i}.5",
                    "energy_j": f"{1000 + i}.25", "sm_clock_mhz": str(1410 + i), "temperature_c": str(60 + i),
                    "sm_active_pct": f"0.{i + 1}"})
    return out


def csv_of(header: list[str], unknown: dict[str, str] | None = None) -> bytes:
    unknown = unknown or {}
    lines = [",".join(header)]
    for r in rows():
        lines.append(",".join(unknown.get(c, r.get(c.strip().lower(), "")) for c in header))
    return ("\n".join(lines) + "\n").encode()


def expected(header: list[str]) -> list[tuple]:
    """The rows test_ingest_bulk.ingest_into reads back: a column not in the header is NULL."""
    conv = {"util_pct": float, "power_w": float, "energy_j": float, "sm_clock_mhz": float, "temperature_c": float,
            "sm_active_pct": float, "mem_used_bytes": int, "mem_total_bytes": int, "gpu_index": int}
    out = []
    for r in rows():
        vals = tuple(conv[c](r[c]) if c in header and r.get(c, "") != "" else None for c in VALUE_COLUMNS)
        out.append(("clu", "77", "n1", r["device"], datetime.fromisoformat(r["time"].rstrip("Z")), *vals, "sidecar"))
    return sorted(out, key=lambda x: tuple((v is None, v if not isinstance(v, datetime) else v.timestamp())
                                           for v in x))


def shuffled(cols, seed: int) -> list[str]:
    cols = list(cols)
    random.Random(seed).shuffle(cols)
    return cols


HEADERS = {
    "required and two extras (schema order)": list(REQUIRED) + ["gpu_index", "power_w"],
    "required only, shuffled": shuffled(REQUIRED, 1),
    "required shuffled, extras interleaved": shuffled(list(REQUIRED) + ["energy_j", "sm_active_pct", "temperature_c"], 2),
    "every column, reversed": list(reversed(COLUMNS)),
    "every column, shuffled, unknown ones": shuffled(list(COLUMNS) + ["fan_pct", "pcie_tx_bytes"], 3),
    "upper case and padded names": [f" {c.upper()} " for c in REQUIRED] + ["Power_W"],
}


@pytest.mark.parametrize("name", list(HEADERS))
def test_any_order_any_subset_every_value_stored(tmp_path, monkeypatch, name):
    header = HEADERS[name]
    names = [h.strip().lower() for h in header]
    data = csv_of(header, unknown={"fan_pct": "33", "pcie_tx_bytes": "not-a-number"})
    assert sidecar_csv.sniff(data.decode(), tmp_path / "x.csv")
    kept, st = both_roads(tmp_path, monkeypatch, [data])
    assert kept == [True]                       # DuckDB's bulk road took it
    assert st["rejects"] == [] and st["counts"] == [(6, 6, 0, 0, 0, 0)]
    got = sorted(st["samples"], key=lambda x: tuple((v is None, v if not isinstance(v, datetime) else v.timestamp())
                                                   for v in x))
    assert got == expected(names)


def test_unknown_columns_are_named_in_a_note(tmp_path):
    f = tmp_path / "s.csv"
    f.write_bytes(csv_of(HEADERS["every column, shuffled, unknown ones"], unknown={"fan_pct": "1", "pcie_tx_bytes": "x"}))
    r = sidecar_csv.parse(f, ParseOptions())
    assert len(r.samples) == 6 and r.rejects == []
    assert any("ignored" in n and "'fan_pct'" in n and "'pcie_tx_bytes'" in n for n in r.notes)
    bulk = sidecar_csv.bulk_read(f, ParseOptions())
    assert bulk is not None and any("'fan_pct'" in n for n in bulk.result.notes)
    con = db.connect(tmp_path / "db.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [f], ParseOptions())
    finally:
        con.close()
    assert rep.status == "ingested" and any("'fan_pct'" in n for n in rep.notes)


def test_format_sidecar_takes_a_subset_and_rejects_short_lines_by_its_header(tmp_path):
    header = list(REQUIRED) + ["gpu_index", "power_w"]
    data = csv_of(header).decode().splitlines()
    data.insert(3, "2026-11-21T10:05:00.000Z,77,clu,n1,cpu,1,1")   # 7 fields
    f = tmp_path / "s.csv"
    f.write_text("\n".join(data) + "\n")
    con = db.connect(tmp_path / "db.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [f], ParseOptions(), fmt="sidecar")
        rejects = con.execute("SELECT line_no, reason FROM rejects").fetchall()
        n = con.execute("SELECT count(*), count(power_w), count(energy_j) FROM samples").fetchall()[0]
    finally:
        con.close()
    assert (rep.status, rep.stored, rep.rejected) == ("ingested", 6, 1)
    assert rejects == [(4, "7 fields, the header has 10")]
    assert n == (6, 3, 0)


@pytest.mark.parametrize("fmt", [None, "sidecar"])
def test_missing_required_column_refuses_the_file_naming_it(tmp_path, fmt):
    header = [c for c in COLUMNS if c != "mem_total_bytes"]
    f = tmp_path / "no-total.csv"
    f.write_bytes(csv_of(header))
    reason = "the header has no mem_total_bytes column (sidecar schema v1 requires time, job_id, "
    r = sidecar_csv.parse(f, ParseOptions())          # every line rejected with the reason
    assert r.rows_in == 6 and not r.samples and [x.line_no for x in r.rejects] == list(range(2, 8))
    assert all(x.reason.startswith(reason) for x in r.rejects)
    assert r.notes == [f"{f}: not read: {r.rejects[0].reason}"]
    assert sidecar_csv.bulk_read(f, ParseOptions()) is None
    con = db.connect(tmp_path / "db.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [f], ParseOptions(), fmt=fmt)
        stored = con.execute("SELECT count(*) FROM samples").fetchall()[0][0]
        reasons = {x[0] for x in con.execute("SELECT reason FROM rejects").fetchall()}
    finally:
        con.close()
    assert (rep.format, rep.stored, rep.rejected, stored) == ("sidecar", 0, 6, 0)
    assert any("no-total.csv: not read: " + reason in n for n in rep.notes)
    assert len(reasons) == 1 and reasons.pop().startswith(reason)


def test_repeated_column_refuses_the_file(tmp_path):
    f = tmp_path / "twice.csv"
    f.write_bytes(csv_of(list(REQUIRED) + ["power_w", "power_w"]))
    r = sidecar_csv.parse(f, ParseOptions())
    assert len(r.rejects) == 6 and r.rejects[0].reason == "the header names power_w more than once"


def test_no_header_at_all(tmp_path):
    f = tmp_path / "empty.csv"
    f.write_bytes(b"")
    r = sidecar_csv.parse(f, ParseOptions())
    assert (r.rows_in, r.rejects) == (0, [])
    assert "the header has no columns time, job_id" in r.notes[0]


def test_sniff_needs_the_required_columns():
    assert sidecar_csv.sniff(",".join(shuffled(REQUIRED, 5)) + "\n", None)
    assert not sidecar_csv.sniff("time,value\n", None)
    assert not sidecar_csv.sniff("timestamp, index, utilization.gpu [%]\n", None)


def test_a_growing_file_read_on_from_an_offset_keeps_its_header_layout(tmp_path):
    """The part of a growing file added since the last ingest is read with the header's layout."""
    header = HEADERS["required shuffled, extras interleaved"]
    data = csv_of(header)
    f = tmp_path / "s.csv"
    f.write_bytes(data)
    lines = data.split(b"\n")
    start = len(b"\n".join(lines[:4])) + 1       # header and three data lines read before
    (piece,) = sidecar_csv.iter_parse(f, ParseOptions(), start=start, first_line=5)
    assert piece.rejects == [] and len(piece.samples) == 3
    assert piece.samples["_line"].to_list() == [5, 6, 7]
    whole = sidecar_csv.parse(f, ParseOptions()).samples
    assert piece.samples.drop("_line").equals(whole.drop("_line").tail(3))
