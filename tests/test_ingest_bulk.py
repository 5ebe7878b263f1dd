"""A sidecar CSV read by DuckDB itself (sidecar_csv.bulk_read + ingest_routes.BulkInsert) must store exactly
what the polars readers store for the same file: the same samples, rejects, counts and metadata row.
Each case is ingested twice, with and without the bulk road, and compared; the road each took is
asserted too, so a case meant to exercise a refusal cannot silently pass through DuckDB."""
from __future__ import annotations

import json
from datetime import datetime

import pytest
from conftest import record_instances

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import routes as ingest_routes
from jobsight.analytics.ingest.parsers import sidecar_csv
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector.csv_schema import HEADER

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def line(t: int, device: str = "cpu", job: str = "77", util: str = "50.0", mem: str = "1048576",
         time_text: str | None = None, host: str = "n1", gpu_index: str = "", power: str = "") -> str:
    stamp = time_text or f"2026-11-21T10:{t // 60:02d}:{t % 60:02d}.000Z"
    return f"{stamp},{job},clu,{host},{device},{util},{mem},8589934592,{gpu_index},{power},,,,"


def clean(n: int = 4) -> list[str]:
    return [ln for t in range(0, 10 * n, 10) for ln in (line(t), line(t, UUID, gpu_index="0", power="250.5"))]


def mid(extra: list[str]) -> list[str]:
    """clean() with `extra` in the middle: a last line bulk_read would reject keeps DuckDB from trying."""
    rows = clean()
    return rows[:3] + extra + rows[3:]


def text(lines: list[str], newline: str = "\n", end: str = "\n") -> str:
    return newline.join([HEADER] + lines) + end


def kept(made: list) -> list[bool]:
    """Per BulkInsert made, once the ingest is over: did its rows stand (a refused or rolled-back one has ok False)."""
    return [b.ok for b in made]


def ingest_into(dbfile, files, opts=None):
    opts = opts or ParseOptions()
    con = db.connect(dbfile)
    try:
        reports = [ingest.ingest_paths(con, [f], opts)[0] for f in files]
        state = {
            "samples": con.execute("SELECT cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                                   "mem_total_bytes, gpu_index, power_w, energy_j, sm_clock_mhz, temperature_c, "
                                   "sm_active_pct, source FROM samples ORDER BY ALL").fetchall(),
            "rejects": con.execute("SELECT line_no, reason, raw FROM rejects ORDER BY ALL").fetchall(),
            "counts": con.execute("SELECT rows_in, stored, updated, unchanged, rejected, dropped FROM ingests "
                                  "ORDER BY ingest_id").fetchall(),
            "runs": con.execute("SELECT cluster, job_id_raw, host, started_at, interval_s, metadata FROM sidecar_run "
                                "ORDER BY ALL").fetchall(),
        }
    finally:
        con.close()
    return reports, state


def both_roads(tmp_path, monkeypatch, contents: list[bytes], meta: dict | None = None):
    """Ingest the files (in order) with the bulk road and without; returns (bulk decisions, state)."""
    files = []
    for i, data in enumerate(contents):
        f = tmp_path / f"jobsight-clu-77-n1-2026112{i}T100000Z-{i}.csv"
        f.write_bytes(data)
        if meta is not None:
            f.with_name(f.name[:-4] + ".meta.json").write_text(json.dumps(meta), encoding="utf-8")
        files.append(f)
    made = record_instances(monkeypatch, ingest_routes, "BulkInsert")
    _, with_bulk = ingest_into(tmp_path / "bulk.duckdb", files)
    with monkeypatch.context() as m:
        m.delattr(sidecar_csv, "bulk_read")
        _, without = ingest_into(tmp_path / "polars.duckdb", files)
    assert with_bulk == without
    return kept(made), with_bulk


def test_clean_file_is_read_by_duckdb_with_the_same_values(tmp_path, monkeypatch):
    kept, st = both_roads(tmp_path, monkeypatch, [text(clean()).encode()])
    assert kept == [True]
    assert st["counts"] == [(8, 8, 0, 0, 0, 0)] and st["rejects"] == []
    gpu = [r for r in st["samples"] if r[3] == UUID][0]
    assert gpu == ("clu", "77", "n1", UUID, datetime(2026, 11, 21, 10, 0), 50.0, 1048576, 8589934592, 0, 250.5,
                   None, None, None, None, "sidecar")


NOT_TRIED = "bulk_read declines: no DuckDB read"
CASES = {
    # name: (file bytes, does DuckDB's read stand? None: either way)
    "crlf": (text(clean(), newline="\r\n", end="\r\n").encode(), None),
    "bom": (b"\xef\xbb\xbf" + text(clean()).encode(), None),
    "numbers DuckDB and polars both read": (text(clean() + [line(99, mem="+5", util=" 7", power="1e3")]).encode(), True),
    "numbers only DuckDB reads": (text(clean() + [line(99, mem="1e3"), line(98, UUID, mem="2.0", gpu_index="0x1",
                                                                              power="1_000.5")]).encode(), True),
    "padded values": (text(clean() + [line(99, util="5.5 ", time_text="2026-11-21T11:00:00.000Z ")]).encode(), True),
    "blank line": (text(clean()[:3] + [""] + clean()[3:]).encode(), False),
    "trailing comma": (text(mid([line(99) + ","])).encode(), False),
    "too few fields": (text(mid([line(99).rsplit(",", 1)[0]])).encode(), False),
    "bad time": (text(mid([line(99, time_text="yesterday")])).encode(), False),
    "time forms only polars reads": (text(mid([line(99, time_text="2026-11-21T11:00:00Z"),
                                                     line(98, time_text="2026-11-21T11:00:01.1234567Z")])).encode(), False),
    "not a number": (text(mid([line(99, mem="lots")])).encode(), False),
    "gpu index beyond INTEGER": (text(mid([line(99, UUID, gpu_index="3000000000")])).encode(), False),
    "empty device": (text(mid([line(99, device="")])).encode(), False),
    "empty job id, no metadata": (text(mid([line(99, job="")])).encode(), False),
    "invalid UTF-8": (text(mid(["2026-11-21T11:00:00.000Z,77,clu,n1,cpu,1,1,1,,,,,,"])).encode()
                      .replace(b"n1,cpu,1,", b"n\xff1,cpu,1,"), False),
    "NUL in a field": (text(clean() + [line(99, host="n\x001")]).encode(), None),
    "quote characters are text": (text(clean() + [line(99, host='n"1')]).encode(), None),
    "beyond the limits: NaN, inf, negative, a GPU above 100 %": (text(mid([
        line(99, util="nan"), line(98, util="inf"), line(97, mem="-1"), line(96, UUID, util="100.5", gpu_index="0"),
        line(95, UUID, power="1e9", gpu_index="0"), line(94, time_text="1969-12-31T23:59:59.000Z")])).encode(), False),
    "a CPU above 100 % is within the limits": (text(clean() + [line(99, util="250.0")]).encode(), True),
    "clock stepped back: a repeated (device, time)": (text(mid([line(0, util="99.0")])).encode(), False),
    "two jobs in one file": (text(clean()[:3] + [line(99, job="78")] + clean()[3:]).encode(), False),
    "two jobs, told by the last line": (text(clean() + [line(99, job="78")]).encode(), NOT_TRIED),
    "last line cut short": (text(clean(), end="").encode(), NOT_TRIED),
    "header only": (text([]).encode(), NOT_TRIED),
}


@pytest.mark.parametrize("name", list(CASES))
def test_both_roads_store_the_same(tmp_path, monkeypatch, name):
    data, stands = CASES[name]
    kept, st = both_roads(tmp_path, monkeypatch, [data])
    if stands is not None:
        assert kept == ([] if stands == NOT_TRIED else [stands])
    (rows_in, stored, updated, unchanged, rejected, dropped), = st["counts"]
    assert rows_in == stored + updated + unchanged + rejected + dropped


def test_values_only_duckdb_reads_are_numbers_by_hand(tmp_path, monkeypatch):
    _, st = both_roads(tmp_path, monkeypatch, [CASES["numbers only DuckDB reads"][0]])
    extra = {r[4]: r for r in st["samples"] if r[4] >= datetime(2026, 11, 21, 10, 1, 38)}
    assert extra[datetime(2026, 11, 21, 10, 1, 39)][6] == 1000                    # mem 1e3
    gpu = extra[datetime(2026, 11, 21, 10, 1, 38)]
    assert (gpu[6], gpu[8], gpu[9]) == (2, 1, 1000.5)                          # 2.0, 0x1, 1_000.5


def test_refused_reads_leave_line_numbered_rejects(tmp_path, monkeypatch):
    _, st = both_roads(tmp_path, monkeypatch, [CASES["blank line"][0]])
    assert st["rejects"] == [(5, "empty line", "")]
    (tmp_path / "b").mkdir()
    _, st = both_roads(tmp_path / "b", monkeypatch, [CASES["trailing comma"][0]])
    assert st["rejects"] == [(5, "15 fields, the header has 14", line(99) + ",")]


def test_repeated_time_counts_as_unchanged(tmp_path, monkeypatch):
    _, st = both_roads(tmp_path, monkeypatch, [CASES["clock stepped back: a repeated (device, time)"][0]])
    assert st["counts"] == [(9, 8, 0, 1, 0, 0)]
    cpu0 = [r for r in st["samples"] if r[3] == "cpu" and r[4] == datetime(2026, 11, 21, 10, 0)]
    assert [r[5] for r in cpu0] == [50.0]                                       # the first of the two is kept


def test_empty_job_id_filled_from_metadata(tmp_path, monkeypatch):
    meta = {"job_id": "77", "cluster": "clu", "host": "n1", "started_at": "2026-11-21T10:00:00.000Z", "interval_s": 10}
    data = text([line(t, job="") for t in range(0, 40, 10)]).encode()
    kept, st = both_roads(tmp_path, monkeypatch, [data], meta=meta)
    assert kept == [True] and st["counts"] == [(4, 4, 0, 0, 0, 0)]
    assert {r[1] for r in st["samples"]} == {"77"}
    assert [r[:5] for r in st["runs"]] == [("clu", "77", "n1", datetime(2026, 11, 21, 10, 0), 10.0)]


def test_a_grown_file_again_stores_only_the_new_rows(tmp_path, monkeypatch):
    """The second file repeats the first one's rows (a sidecar CSV ingested while its job ran, then at
    the end): DuckDB's plain insert cannot stand, the per-row check counts them as unchanged."""
    first = text(clean(2)).encode()
    grown = text(clean(4)).encode()
    kept, st = both_roads(tmp_path, monkeypatch, [first, grown])
    assert kept == [True, False]
    assert st["counts"] == [(4, 4, 0, 0, 0, 0), (8, 4, 0, 4, 0, 0)]


def test_big_file_order_is_the_file_order(tmp_path, monkeypatch):
    """A file DuckDB reads with both threads (~34 MB, several buffers): a time that steps back far into
    it is still seen (the rising check reads the table in file order), and a clean one stands."""
    rows = [line(t, time_text=f"2026-11-{1 + t // 86400:02d}T{t % 86400 // 3600:02d}:{t % 3600 // 60:02d}:"
                                f"{t % 60:02d}.000Z", mem=str(t)) for t in range(0, 500_000)]
    big = text(rows).encode()
    assert len(big) > 32 << 20
    stepped = text(rows[:450_000] + [rows[449_990]] + rows[450_000:]).encode()
    kept, st = both_roads(tmp_path, monkeypatch, [big])
    assert kept == [True] and st["counts"] == [(500_000, 500_000, 0, 0, 0, 0)]
    (tmp_path / "s").mkdir()
    kept, st = both_roads(tmp_path / "s", monkeypatch, [stepped])
    assert kept == [False] and st["counts"] == [(500_001, 500_000, 0, 1, 0, 0)]
