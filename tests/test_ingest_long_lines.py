"""Memory stays bounded whatever a line holds: a line longer than lengths.MAX_LINE_BYTES is rejected
with its number, never held; the lines around it and the files after it are stored."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import duckdb
import pytest
from conftest import jobsight_cmd

from jobsight.analytics.ingest import lengths
from jobsight.collector.csv_schema import COLUMNS

HEADER = ",".join(COLUMNS)


def _row(job: str, second: int, host: str = "gpu01") -> str:
    values = {"time": f"2026-11-21T10:00:{second:02d}.000Z", "job_id": job, "cluster": "c", "host": host,
              "device": "cpu", "util_pct": "50"}
    return ",".join(values.get(c, "") for c in COLUMNS)


def _write_with_long_line(path, job: str, long_bytes: int, before: int = 3, after: int = 3) -> int:
    """A sidecar CSV with `before` rows, one line of long_bytes (written in blocks: never held), then
    `after` rows; returns the long line's number."""
    with open(path, "w") as fh:
        fh.write(HEADER + "\n" + "".join(_row(job, s) + "\n" for s in range(before)))
        fh.write(_row(job, 59)[:-1] + ",")   # a row whose last cell goes on and on
        block = "x" * (1 << 20)
        for _ in range(long_bytes >> 20):
            fh.write(block)
        fh.write("\n" + "".join(_row(job, s) + "\n" for s in range(before, before + after)))
    return before + 2


def _ingest_measured(db, *paths) -> tuple[int, dict]:
    """(peak RSS in bytes of the `jobsight ingest` child, its JSON output), measured in a subprocess
    of its own so that only that child's peak counts."""
    probe = textwrap.dedent("""
        import json, resource, subprocess, sys
        out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                          "rc": out.returncode, "stdout": out.stdout, "stderr": out.stderr}))
    """)
    cmd = [*jobsight_cmd(), "ingest", "--db", str(db), "--json", *map(str, paths)]
    got = json.loads(subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                                    check=True).stdout)
    assert got["rc"] == 0, got["stderr"]
    return got["rss_kib"] * 1024, got


def test_a_200_mb_line_is_rejected_by_number_and_memory_stays_bounded(tmp_path):
    long_bytes = 200 << 20
    small = tmp_path / "small" / "jobsight-c-7000-gpu01-20261121T100000Z-1.csv"
    small.parent.mkdir()
    small.write_text(HEADER + "\n" + _row("7000", 1) + "\n")
    baseline, _ = _ingest_measured(tmp_path / "small.duckdb", small)   # the command's own imports
    big = tmp_path / "a" / "jobsight-c-7001-gpu01-20261121T100000Z-1.csv"
    big.parent.mkdir()
    line_no = _write_with_long_line(big, "7001", long_bytes)
    after = tmp_path / "a" / "jobsight-c-7002-gpu01-20261121T100000Z-2.csv"   # read after it
    after.write_text(HEADER + "\n" + "".join(_row("7002", s) + "\n" for s in range(4)))
    db = tmp_path / "j.duckdb"
    rss, _ = _ingest_measured(db, big.parent)
    con = duckdb.connect(str(db), read_only=True)
    rejects = con.execute("SELECT line_no, reason, length(raw) FROM rejects WHERE source_file LIKE '%7001%'").fetchall()
    assert [(r[0], r[2]) for r in rejects] == [(line_no, None)]
    assert f"longer than the limit of {lengths.MAX_LINE_BYTES:,}" in rejects[0][1]
    stored = con.execute("SELECT job_id_raw, count(*) FROM sample GROUP BY 1 ORDER BY 1").fetchall()
    assert stored == [("7001", 6), ("7002", 4)]   # before and after the long line; the next file whole
    assert con.execute("SELECT max(strlen(host)) FROM sample").fetchone()[0] == len("gpu01")
    # a line held whole would cost its size at least once (and several times over as a frame);
    # bounded: a few read blocks above what ingesting a one-line file costs
    extra = rss - baseline
    assert extra < min(long_bytes // 2, 128 << 20), \
        f"peak RSS {rss >> 20} MiB, {extra >> 20} MiB over a one-line file's, for a {long_bytes >> 20} MiB line"


def test_a_long_last_line_without_newline_is_dropped_and_counted(tmp_path):
    p = tmp_path / "jobsight-c-7003-gpu01-20261121T100000Z-3.csv"
    with open(p, "w") as fh:
        fh.write(HEADER + "\n" + _row("7003", 1) + "\n" + "y" * (3 << 20))
    db = tmp_path / "j.duckdb"
    _, got = _ingest_measured(db, p)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT rows_in, stored, dropped FROM ingests").fetchall() == [(2, 1, 1)]


@pytest.mark.parametrize("where", ["header", "first", "middle", "last"])
def test_parse_rejects_a_long_line_anywhere(tmp_path, where):
    from jobsight.analytics.ingest.parsers import sidecar_csv
    from jobsight.analytics.ingest.records import ParseOptions
    long = "z" * (lengths.MAX_LINE_BYTES + 10)
    rows = [_row("7004", s) for s in range(4)]
    at = {"first": 0, "middle": 2, "last": 4}.get(where)
    if at is not None:
        rows.insert(at, long)
    head = long if where == "header" else HEADER
    p = tmp_path / "x.csv"
    p.write_text(head + "\n" + "\n".join(rows) + "\n")
    r = sidecar_csv.parse(p, ParseOptions())
    assert r.rows_in == 5 if where != "header" else 4
    if where == "header":
        assert len(r.rejects) == 4 and all("header (line 1) is longer" in x.reason for x in r.rejects)
        return
    assert [x.line_no for x in r.rejects] == [at + 2]
    assert r.samples["_line"].to_list() == [n for n in range(2, 7) if n != at + 2]
    assert r.samples["time"].dt.second().to_list() == [0, 1, 2, 3]


def test_bounded_lines_never_hold_a_long_line_and_number_every_line(tmp_path):
    p = tmp_path / "l.txt"
    lines = [b"a", b"b" * 50, b"c", b"d" * 9, b"", b"e"]
    p.write_bytes(b"\n".join(lines) + b"\n" + b"f" * 30)
    with open(p, "rb") as fh:
        items = list(lengths.bounded_lines(fh, block=7, max_line=10))
    longs = [(i.line_no, i.size, i.ended) for i in items if isinstance(i, lengths.LongLine)]
    assert longs == [(2, 51, True), (7, 30, False)]
    kept = b"".join(i.data for i in items if isinstance(i, lengths.Lines))
    assert kept == b"a\nc\n" + b"d" * 9 + b"\n\ne\n"
    firsts = [i.first for i in items if isinstance(i, lengths.Lines)]
    assert firsts[0] == 1 and 3 in firsts


def test_has_long_line_finds_one_line_over_the_bound():
    assert not lengths.has_long_line(b"ab\n" * 100, max_line=10)
    assert lengths.has_long_line(b"ab\n" * 50 + b"x" * 11 + b"\n" + b"ab\n" * 50, max_line=10)
    assert not lengths.has_long_line(b"ab\n" * 50 + b"x" * 9 + b"\n" + b"ab\n" * 50, max_line=10)
    assert lengths.has_long_line(b"ab\n" * 50 + b"x" * 11, max_line=10)


def test_a_long_line_in_a_watch_spool_is_rejected_by_number(tmp_path):
    from pathlib import Path

    from jobsight.analytics.commands import watch as watch_cli
    from jobsight.analytics.ingest.records import ParseOptions
    from jobsight.analytics.store import db
    spool = tmp_path / "spool"
    spool.mkdir()
    line_no = _write_with_long_line(spool / "jobsight-c-7005-n1-20261121T100000Z-1.csv", "7005", 2 << 20)
    (spool / "jobsight-c-7006-n1-20261121T100000Z-2.csv").write_text(HEADER + "\n" + _row("7006", 1) + "\n")
    con = db.connect(tmp_path / "t.duckdb")
    try:
        reps = {Path(r.path).name[:15]: r for r in watch_cli._ingest_spool(con, spool, ParseOptions(), lambda rep: None)}
        assert {k: (r.stored, r.rejected) for k, r in reps.items()} == {"jobsight-c-7005": (6, 1), "jobsight-c-7006": (1, 0)}
        (reason,) = con.execute("SELECT reason FROM reject WHERE line_no = ?", [line_no]).fetchone()
        assert reason.startswith(f"line of {(2 << 20) + len(_row('7005', 59)) + 1:,} bytes, longer than the limit")
    finally:
        con.close()
