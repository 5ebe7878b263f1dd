"""A line longer than lengths.MAX_LINE_BYTES in sacct text, PBS, LSF, seff or nvidia-smi input is
rejected with its number and never held: the lines around it and the files after it are stored as
they are without it, and the ingest's peak memory stays well under the line's size. A sacct --json
document over lengths.MAX_JSON_BYTES is refused unread."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import pytest
from conftest import accounted, jobsight_cmd

from jobsight.analytics.ingest import lengths
from jobsight.analytics.ingest.records import ParseOptions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LONG_BYTES = 200 << 20


@dataclass(frozen=True)
class Case:
    fixture: str                    # under fixtures/
    at: int                         # lines before the long one: it is line at + 1
    prefix: str                     # the long line starts as a record of the format would
    next_name: str                  # the valid file ingested after it
    next_text: Callable[[str], str]  # its text, from the fixture's: other jobs (or another job's samples)
    table: str                      # where the format's rows go
    lost: frozenset = frozenset()   # rows stored without the long line, not with it (a seff report holding it)


CASES = {
    "sacct": Case("sacct/mixed-jobs.txt", 4, "1999|1999|testclu|cpu|normal|acct1|grp1|alice|1500|", "next.txt",
                  lambda _: (FIXTURES / "sacct/completed-3001.txt").read_text(), "job"),
    "pbs": Case("pbs/20240301", 4, "03/01/2024 12:00:00;E;199.srv01;user=alice jobname=", "next-20240301",
                lambda t: t.replace(".srv01", ".srv02"), "job"),
    "lsf": Case("lsf/lsb.acct", 4, '"JOB_FINISH" "10.108" 1709298600 5999 1501 33554450 4 "', "next.acct",
                lambda t: re.sub(r'^("JOB_FINISH" "10\.108" \d+ )', r"\g<1>9", t, flags=re.M), "job"),
    "seff": Case("seff/seff-mixed.txt", 30, "Job Name: ", "next-seff.txt",
                 lambda t: t.replace("Cluster: hpc1", "Cluster: hpc2"), "job", frozenset({("hpc1", "5200")})),
    "nvidia-smi": Case("nvidia_smi/gpu-log-5150.csv", 4, "2026/03/29 02:00:00.100, 0, GPU-", "gpu-log-5151.csv",
                       lambda t: t.replace("2026/03/29", "2026/03/30"), "sample"),
}


def _with_long_line(src: Path, dst: Path, case: Case) -> int:
    """src's lines with a line of about LONG_BYTES after the first case.at, written in blocks (never
    held); returns its size, newline included."""
    lines = src.read_text().splitlines(keepends=True)
    block = "x" * (1 << 20)
    with open(dst, "w") as fh:
        fh.writelines(lines[:case.at])
        fh.write(case.prefix)
        for _ in range(LONG_BYTES >> 20):
            fh.write(block)
        fh.write("\n")
        fh.writelines(lines[case.at:])
    return len(case.prefix) + (LONG_BYTES >> 20) * len(block) + 1


def _ingest_measured(db: Path, paths: list[Path]) -> int:
    """The peak RSS in bytes of a `jobsight ingest` child of these paths, in this order, measured in a
    process of its own so that only that child's peak counts."""
    probe = textwrap.dedent("""
        import json, resource, subprocess, sys
        out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                          "rc": out.returncode, "stderr": out.stderr}))
    """)
    cmd = [*jobsight_cmd(), "ingest", "--db", str(db), "--timezone", "UTC", "--json", *map(str, paths)]
    got = json.loads(subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                                    check=True, timeout=300).stdout)
    assert got["rc"] == 0, got["stderr"]
    return got["rss_kib"] * 1024


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """Each format's fixture and the file after it ingested once as they are (the reference) and once
    with the long line in the fixture: {'ref'|'long': (db, peak RSS)}, the files, the long lines' sizes."""
    root = tmp_path_factory.mktemp("long_lines")
    files, sizes, runs = {}, {}, {}
    for name, case in CASES.items():
        src = FIXTURES / case.fixture
        for kind in ("ref", "long", "next"):
            (root / kind / name).mkdir(parents=True)
        ref, long, nxt = (root / k / name / (case.next_name if k == "next" else src.name) for k in ("ref", "long", "next"))
        ref.write_text(src.read_text())
        sizes[name] = _with_long_line(src, long, case)
        nxt.write_text(case.next_text(src.read_text()))
        files[name] = {"ref": ref, "long": long, "next": nxt}
    try:
        for kind in ("ref", "long"):
            db = root / f"{kind}.duckdb"
            order = [p for f in files.values() for p in (f[kind], f["next"])]   # each long file before its next
            runs[kind] = (db, _ingest_measured(db, order))
    finally:
        for f in files.values():
            f["long"].unlink()   # 1 GB: not left behind in pytest's kept folders
    return runs, files, sizes


def _file_rows(con, path: Path, table: str) -> set:
    """What the ingest of one file stored: job keys, or sample keys."""
    key = "cluster, job_id_raw" if table == "job" else "cluster, job_id_raw, device, time"
    ids = [r[0] for r in con.execute("SELECT ingest_id FROM ingest_log WHERE source_file = ?", [str(path)]).fetchall()]
    assert len(ids) == 1, f"{path} ingested {len(ids)} times"
    return set(con.execute(f"SELECT {key} FROM {table} WHERE ingest_id = ?", ids).fetchall())


def _log(con, path: Path) -> tuple:
    return con.execute("SELECT rows_in, stored, rejected, dropped FROM ingest_log WHERE source_file = ?",
                       [str(path)]).fetchone()


def _rejects(con, path: Path) -> list:
    return con.execute("SELECT line_no, reason FROM rejects WHERE source_file = ? ORDER BY line_no, reason",
                       [str(path)]).fetchall()


@pytest.mark.parametrize("name", list(CASES))
def test_a_long_line_is_rejected_by_number_and_the_rest_is_stored(ingested, name):
    runs, files, sizes = ingested
    case, f = CASES[name], files[name]
    ref = duckdb.connect(str(runs["ref"][0]), read_only=True)
    con = duckdb.connect(str(runs["long"][0]), read_only=True)
    long_no = case.at + 1
    # the long line: one rejected row, its number and size named, nothing of it stored
    got = _rejects(con, f["long"])
    mine = [(n, why) for n, why in got if n == long_no]
    assert len(mine) == 1, got
    assert mine[0][1].startswith(f"line of {sizes[name]:,} bytes, longer than the limit of {lengths.MAX_LINE_BYTES:,}: not read")
    (raw,) = con.execute("SELECT raw FROM rejects WHERE line_no = ? AND source_file = ?", [long_no, str(f["long"])]).fetchone()
    assert raw is None or "x" * 100 not in raw   # (a seff report's own lines)
    # every other line read as without it, at its own number
    want = [(n + (n > case.at), why) for n, why in _rejects(ref, f["ref"])]
    assert sorted(r for r in got if r[0] != long_no) == sorted(want)
    # the rows before and after it stored (but those of a seff report holding it), and the next file
    ref_rows, rows = _file_rows(ref, f["ref"], case.table), _file_rows(con, f["long"], case.table)
    assert ref_rows and rows == ref_rows - case.lost
    assert case.lost <= ref_rows
    assert _file_rows(con, f["next"], case.table) == _file_rows(ref, f["next"], case.table) != set()
    rows_in, stored, rejected, dropped = _log(ref, f["ref"])
    extra = 0 if case.lost else 1   # a seff report is one row with or without the long line in it
    assert _log(con, f["long"]) == (rows_in + extra, stored - len(case.lost), rejected + 1, dropped)
    assert _log(con, f["next"]) == _log(ref, f["next"])


def test_memory_stays_bounded_whatever_the_lines_hold(ingested):
    runs, _, sizes = ingested
    extra = runs["long"][1] - runs["ref"][1]
    # a line held whole costs its size at least once; bounded: a few read blocks over the same files without it
    assert extra < min(min(sizes.values()) // 2, 128 << 20), \
        f"peak RSS {runs['long'][1] >> 20} MiB, {extra >> 20} MiB over the same files without {LONG_BYTES >> 20} MiB lines"


def test_an_lsf_record_never_goes_on_past_a_long_line(tmp_path):
    """A quoted field open when a long line comes: the record is rejected as never closed, the long
    line by its number, and every line after it is read on its own."""
    from jobsight.analytics.ingest.parsers import lsf
    lines = (FIXTURES / "lsf/lsb.acct").read_text().splitlines(keepends=True)
    p = tmp_path / "lsb.acct"
    with open(p, "w") as fh:   # the long line inside the first record's quoted job script (lines 2-4)
        fh.writelines(lines[:2] + ["z" * (lengths.MAX_LINE_BYTES + 1) + "\n"] + lines[2:])
    r = lsf.parse(p, ParseOptions())
    assert accounted(r)
    reasons = {x.line_no: x.reason for x in r.rejects}
    assert reasons[2].endswith("a quoted field is never closed")
    assert reasons[3].startswith(f"line of {lengths.MAX_LINE_BYTES + 2:,} bytes")
    whole = lsf.parse(FIXTURES / "lsf/lsb.acct", ParseOptions())
    assert set(r.jobs["job_id_raw"]) == set(whole.jobs["job_id_raw"]) - {"5001"}


@pytest.mark.parametrize("fmt", ["sacct", "pbs", "lsf", "seff", "nvidia-smi"])
def test_a_long_last_line_without_newline_is_rejected_and_counted(tmp_path, fmt):
    from jobsight.analytics.ingest.files import load_parsers
    parser = load_parsers()[fmt]
    case = CASES[fmt]
    src = FIXTURES / case.fixture
    p = tmp_path / src.name
    p.write_text(src.read_text() + "q" * (lengths.MAX_LINE_BYTES + 5))
    n = len(src.read_text().splitlines()) + 1
    r = parser.parse(p, ParseOptions(timezone="UTC"))
    whole = parser.parse(src, ParseOptions(timezone="UTC"))
    assert accounted(r)
    assert [x for x in r.rejects if x.line_no == n][0].reason.startswith(f"line of {lengths.MAX_LINE_BYTES + 5:,} bytes")
    assert r.frame_rows() == whole.frame_rows()   # (seff: the last report, which holds it, is 'not-a-job' anyway)


def test_a_sacct_json_document_over_its_limit_is_refused_unread(tmp_path):
    from jobsight.analytics.ingest.parsers import sacct_json
    p = tmp_path / "big.json"
    with open(p, "w") as fh:   # sparse: the size without the bytes
        fh.write('{"meta": {}, "jobs": [{"job_id": 1')
        fh.truncate(lengths.MAX_JSON_BYTES + 1)
    r = sacct_json.parse(p, ParseOptions())
    assert (r.rows_in, len(r.rejects), r.jobs) == (1, 1, None)
    assert r.rejects[0].reason.startswith(
        f"a sacct --json document of {lengths.MAX_JSON_BYTES + 1:,} bytes, larger than the limit of {lengths.MAX_JSON_BYTES:,}")
