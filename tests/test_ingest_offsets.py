"""Growing sidecar files (analytics/ingest/offsets.py): each ingest reads what was appended since the
last one, complete lines only; a truncated, replaced or rewritten file is read again from the start;
no sample is stored twice; rejects keep the file's own line numbers; a user's appended lines pass
the trust rule like a whole file."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from conftest import harness_user

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector.csv_schema import HEADER

GPU = "GPU-00000000-1111-2222-3333-444444444444"


@pytest.fixture
def con(tmp_path):
    c = db.connect(tmp_path / "t.duckdb")
    yield c
    c.close()


def line(i: int, job: str = "501", util: float = 50.0) -> str:
    """Sample i of job 501 on host n1: one GPU row, i seconds after 10:00:00."""
    return f"2026-11-22T10:{i // 60:02d}:{i % 60:02d}.000Z,{job},c1,n1,{GPU},{util},1000,80000,0,100.0,,1410,50,\n"


def lines(a: int, b: int, **kw) -> str:
    return "".join(line(i, **kw) for i in range(a, b))


def run(con, path, opts: ParseOptions | None = None):
    (rep,) = ingest.ingest_paths(con, [path], opts or ParseOptions())
    return rep


def value(con, sql, *args):
    return con.execute(sql, list(args)).fetchone()[0]


def offset(con, path):
    return con.execute('SELECT "offset", lines, ingest_id FROM file_offset WHERE source_file = ?',
                       [str(path.resolve())]).fetchone()


def samples(con) -> list:
    return con.execute("SELECT time, util_pct FROM sample ORDER BY time").fetchall()


def test_appended_lines_only_and_the_partial_last_line_waits(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    first = HEADER + "\n" + lines(0, 3)
    f.write_text(first + line(3)[:20])                       # the 4th line is still being written
    a = run(con, f)
    assert (a.status, a.rows_in, a.stored, a.dropped) == ("ingested", 4, 3, 1)
    assert offset(con, f) == (len(first), 4, a.ingest_id)
    with open(f, "a") as fh:                                  # the line completed, two more
        fh.write(line(3)[20:] + lines(4, 6))
    b = run(con, f)
    assert (b.status, b.rows_in, b.stored, b.unchanged, b.rejected, b.dropped) == ("ingested", 3, 3, 0, 0, 0)
    assert any("read from line 5" in n for n in b.notes)
    tail = (line(3) + lines(4, 6)).encode()
    assert value(con, "SELECT checksum FROM ingest_log WHERE ingest_id = ?", b.ingest_id) == hashlib.sha256(tail).hexdigest()
    assert len(samples(con)) == 6 and offset(con, f) == (f.stat().st_size, 7, b.ingest_id)
    c = run(con, f)                                           # nothing added: nothing read, no ingest row
    assert c.status == "already ingested" and c.ingest_id == b.ingest_id
    assert value(con, "SELECT count(*) FROM ingest_log") == 2
    with open(f, "a") as fh:
        fh.write(line(6)[:10])                               # only a partial line added
    d = run(con, f)
    assert d.status == "already ingested" and any("still being written, waits" in n for n in d.notes)


def test_clean_file_read_by_duckdb_then_appended(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 50))
    a = run(con, f)
    assert (a.rows_in, a.stored) == (50, 50) and offset(con, f)[:2] == (f.stat().st_size, 51)
    with open(f, "a") as fh:
        fh.write(lines(50, 60))
    b = run(con, f)
    assert (b.rows_in, b.stored, b.unchanged) == (10, 10, 0) and len(samples(con)) == 60


def test_rejects_keep_the_files_line_numbers(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 3))
    run(con, f)
    with open(f, "a") as fh:
        fh.write(line(3) + line(4).replace(",50.0,", ",150.0,") + line(5))   # line 6: a GPU above 100 %
    b = run(con, f)
    assert (b.rows_in, b.stored, b.rejected) == (3, 2, 1)
    assert con.execute("SELECT line_no FROM reject WHERE ingest_id = ?", [b.ingest_id]).fetchall() == [(6,)]


def test_truncated_file_is_read_again_without_counting_twice(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 10))
    run(con, f)
    f.write_text(HEADER + "\n" + lines(0, 4))                 # truncated in place (same inode)
    b = run(con, f)
    assert any("read from the start: truncated" in n for n in b.notes)
    assert (b.rows_in, b.stored, b.unchanged) == (4, 0, 4) and len(samples(con)) == 10
    assert offset(con, f)[:2] == (f.stat().st_size, 5)
    with open(f, "a") as fh:
        fh.write(lines(4, 12))
    c = run(con, f)
    assert (c.rows_in, c.stored, c.unchanged) == (8, 2, 6) and len(samples(con)) == 12


def test_replaced_file_is_read_again(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 5))
    run(con, f)
    new = tmp_path / "new.csv"
    new.write_text(HEADER + "\n" + lines(0, 8))
    os.replace(new, f)                                        # another inode under the same name
    b = run(con, f)
    assert any("read from the start: replaced" in n for n in b.notes)
    assert (b.rows_in, b.stored, b.unchanged) == (8, 3, 5) and len(samples(con)) == 8


def test_rewritten_file_of_the_same_inode_is_read_again(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 5))
    run(con, f)
    with open(f, "r+") as fh:                                 # the same inode, other bytes, longer
        fh.write(HEADER + "\n" + lines(0, 5, util=7.0) + lines(5, 7))
    b = run(con, f)
    assert any("read from the start: rewritten" in n for n in b.notes)
    assert (b.rows_in, b.stored, b.unchanged) == (7, 2, 5)   # the key is stored: the first value stays


def test_other_options_read_the_whole_file(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 5))
    run(con, f)
    b = run(con, f, ParseOptions(cluster="other"))
    assert (b.status, b.rows_in, b.unchanged) == ("ingested", 5, 5)


def test_a_copy_already_ingested_goes_on_after_its_bytes(con, tmp_path):
    f = tmp_path / "501-n1.csv"
    f.write_text(HEADER + "\n" + lines(0, 5))
    a = run(con, f)
    copy = tmp_path / "copy" / "501-n1.csv"
    copy.parent.mkdir()
    shutil.copy(f, copy)
    b = run(con, copy)
    assert b.status == "already ingested" and offset(con, copy) == (copy.stat().st_size, 6, a.ingest_id)
    with open(copy, "a") as fh:
        fh.write(lines(5, 7))
    c = run(con, copy)
    assert (c.rows_in, c.stored) == (2, 2)


def test_a_users_appended_lines_count_only_for_her_job(tmp_path):
    alice = harness_user("alice")
    con = db.connect(tmp_path / "t.duckdb")
    try:
        con.execute("INSERT INTO job (cluster, job_id, job_id_raw, \"user\", uid, source) VALUES "
                    "('c1', '501', '501', 'alice', ?, 'slurm-sacct'), ('c1', '502', '502', 'bob', 1, 'slurm-sacct')",
                    [alice.pw_uid])
        d = tmp_path / "home"
        d.mkdir()
        os.chown(d, alice.pw_uid, alice.pw_gid)
        f = d / "501-n1.csv"
        f.write_text(HEADER + "\n" + lines(0, 3))
        os.chown(f, alice.pw_uid, alice.pw_gid)
        a = run(con, f)
        assert (a.stored, a.rejected) == (3, 0)
        with open(f, "a") as fh:                              # her file now also claims bob's job
            fh.write(lines(3, 5) + lines(5, 7, job="502"))
        b = run(con, f)
        assert (b.rows_in, b.stored, b.rejected) == (4, 2, 2)
        assert value(con, "SELECT count(*) FROM sample WHERE job_id_raw = '502'") == 0
        assert con.execute("SELECT line_no FROM reject WHERE ingest_id = ? ORDER BY 1", [b.ingest_id]).fetchall() == [(7,), (8,)]
    finally:
        con.close()
