"""A watch cycle's spool read together (analytics/ingest/batch.py): the lines appended to several
growing sidecar files loaded in one transaction give exactly what `ingest` of each file alone gives
(samples, rejects by file, line and reason, ingest_log counts, offsets); a user's file counts only
for her jobs; a truncated file is read again without counting twice; a cycle killed mid-batch
leaves nothing, and the next one reads the same lines again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import harness_user

from jobsight.analytics.commands import watch as watch_cli
from jobsight.analytics.ingest import batch as ingest_batch
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import trust
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector.csv_schema import HEADER

OPTS = ParseOptions(timezone="UTC")


def line(i: int, job: str, util: float = 50.0) -> str:
    """Sample i of `job` on host n1: one GPU row, i seconds after 10:00:00."""
    return f"2026-11-22T10:{i // 60:02d}:{i % 60:02d}.000Z,{job},c1,n1,GPU-{job},{util},1000,80000,0,100.0,,1410,50,\n"


def lines(a: int, b: int, job: str) -> str:
    return "".join(line(i, job) for i in range(a, b))


def append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def cycle(con, spool: Path) -> dict:
    """The spool part of one watch cycle: the reports by file name."""
    return {Path(r.path).name: r for r in watch_cli._ingest_spool(con, spool, OPTS, lambda rep: None)}


def alone(con, spool: Path) -> None:
    """The same files ingested one by one (the reference)."""
    for f in sorted(spool.glob("*.csv")):
        ingest.ingest_paths(con, [f], OPTS)


def state(con, spool: Path) -> dict:
    """What the database holds of the spool's files, ingest ids aside (they count differently)."""
    q = {"sample": "SELECT * EXCLUDE (ingest_id) FROM sample ORDER BY ALL",
         "reject": "SELECT source_file, line_no, reason, raw FROM reject ORDER BY ALL",
         "log": "SELECT source_file, checksum, format, rows_in, stored, updated, unchanged, rejected, dropped, options "
                "FROM ingest_log ORDER BY ALL",
         "offset": "SELECT * EXCLUDE (ingest_id) FROM file_offset ORDER BY ALL",
         "pending": "SELECT * EXCLUDE (ingest_id) FROM sample_pending ORDER BY ALL",
         "runs": "SELECT * EXCLUDE (ingest_id) FROM sidecar_run ORDER BY ALL"}
    return {k: con.execute(sql).fetchall() for k, sql in q.items()}


def one_batch(con, reports) -> bool:
    """The loaded files' ingest_log rows were written by one batch (one start and finish time)."""
    ids = [r.ingest_id for r in reports if r.status == "ingested"]
    return con.execute("SELECT count(DISTINCT (started_at, finished_at)) FROM ingest_log WHERE list_contains(?, ingest_id)",
                       [ids]).fetchone()[0] == 1 and len(set(ids)) == len(ids) > 1


@pytest.fixture
def dbs(tmp_path):
    a, b = db.connect(tmp_path / "batch.duckdb"), db.connect(tmp_path / "alone.duckdb")
    yield a, b
    a.close()
    b.close()


def test_growing_files_with_one_bad_line_as_ingested_alone(dbs, tmp_path):
    batch, ref = dbs
    spool = tmp_path / "spool"
    spool.mkdir()
    files = {job: spool / f"jobsight-c1-{job}-n1.csv" for job in ("501", "502", "503")}
    for job, f in files.items():
        f.write_text(HEADER + "\n" + lines(0, 3, job) + line(3, job)[:15])     # a last line still being written
    (spool / "jobsight-c1-501-n1.meta.json").write_text('{"job_id": "501", "cluster": "c1", "host": "n1", "interval_s": 1}')
    first = cycle(batch, spool)
    alone(ref, spool)
    assert one_batch(batch, first.values())
    assert [(r.rows_in, r.stored, r.dropped) for r in first.values()] == [(4, 3, 1)] * 3
    assert batch.execute("SELECT job_id_raw, interval_s FROM sidecar_run").fetchall() == [("501", 1.0)]
    as_first = files["503"].read_bytes()
    for job, f in files.items():
        bad = line(5, job).replace(",50.0,", ",150.0,") if job == "502" else line(5, job)   # line 7: a GPU above 100 %
        more = lines(7, 107, job) if job == "503" else ""                 # more than a 4 KiB block
        append(f, line(3, job)[15:] + line(4, job) + bad + line(6, job) + more)
    second = cycle(batch, spool)
    alone(ref, spool)
    assert one_batch(batch, second.values())
    got = {name: (r.status, r.rows_in, r.stored, r.unchanged, r.rejected) for name, r in second.items()}
    assert got == {f.name: ("ingested", 4 + 100 * (job == "503"), 3 + (job != "502") + 100 * (job == "503"), 0,
                            int(job == "502")) for job, f in files.items()}
    assert any(n.startswith("read from line 5 (byte") for n in second[files["501"].name].notes)
    (reject,) = batch.execute("SELECT source_file, line_no, reason FROM reject").fetchall()
    assert reject[:2] == (str(files["502"].resolve()), 7) and "util_pct" in reject[2]
    assert batch.execute("SELECT count(*), count(DISTINCT (job_id_raw, time)) FROM sample").fetchone() == (120, 120)
    assert state(batch, spool) == state(ref, spool)
    for job, f in files.items():                          # read on from the end of what was read
        append(f, line(200, job))
    third = cycle(batch, spool)
    assert [(r.rows_in, r.stored) for r in third.values()] == [(1, 1)] * 3
    copy = spool / "copy" / "jobsight-c1-503-n1-copy.csv"                     # its bytes are in already
    copy.parent.mkdir()
    copy.write_bytes(as_first)
    known = cycle(batch, spool)[copy.name]
    assert known.status == "already ingested" and known.ingest_id == first[files["503"].name].ingest_id
    assert batch.execute('SELECT "offset", ingest_id FROM file_offset WHERE source_file = ?',
                         [str(copy.resolve())]).fetchone() == (as_first.rindex(b"\n") + 1, known.ingest_id)
    n = batch.execute("SELECT count(*) FROM ingest_log").fetchone()[0]
    again = cycle(batch, spool)            # nothing written since: only the copy, its last line unfinished, is looked at
    assert [(name, r.status) for name, r in again.items()] == [(copy.name, "already ingested")]
    assert batch.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == n


def test_truncated_file_is_read_again_in_the_batch(dbs, tmp_path):
    batch, ref = dbs
    spool = tmp_path / "spool"
    spool.mkdir()
    a, b = spool / "jobsight-c1-501-n1.csv", spool / "jobsight-c1-502-n1.csv"
    reports = {}
    for con in dbs:
        a.write_text(HEADER + "\n" + lines(0, 10, "501"))
        b.write_text(HEADER + "\n" + lines(0, 2, "502"))
        cycle(con, spool) if con is batch else alone(con, spool)
        a.write_text(HEADER + "\n" + lines(0, 4, "501"))    # truncated in place (same inode)
        append(b, lines(2, 5, "502"))
        reports = cycle(con, spool) if con is batch else alone(con, spool) or reports
    assert one_batch(batch, reports.values())
    ra, rb = reports[a.name], reports[b.name]
    assert any("read from the start: truncated" in n for n in ra.notes)
    assert (ra.rows_in, ra.stored, ra.unchanged, rb.rows_in, rb.stored) == (4, 0, 4, 3, 3)
    assert batch.execute("SELECT count(*) FROM sample").fetchone()[0] == 15
    assert state(batch, spool) == state(ref, spool)


def test_a_users_file_counts_only_for_her_jobs_in_the_batch(dbs, tmp_path):
    alice = harness_user("alice")
    batch, ref = dbs
    spool = tmp_path / "spool"
    spool.mkdir()
    own = spool / "jobsight-c1-501-n1.csv"       # root's: trusted
    hers = spool / "jobsight-c1-502-n1.csv"      # alice's: her job 502, then lines of bob's 503 and of 504 (no accounting)
    for con in dbs:
        con.execute("INSERT INTO job (cluster, job_id, job_id_raw, \"user\", uid, source) VALUES ('c1', '502', '502', "
                    "'alice', ?, 'slurm-sacct'), ('c1', '503', '503', 'bob', 1, 'slurm-sacct')", [alice.pw_uid])
    reports = {}
    for con in dbs:
        own.write_text(HEADER + "\n" + lines(0, 2, "501"))
        hers.write_text(HEADER + "\n" + lines(0, 2, "502"))
        os.chown(hers, alice.pw_uid, alice.pw_gid)
        cycle(con, spool) if con is batch else alone(con, spool)
        append(own, lines(2, 4, "501"))
        append(hers, lines(2, 3, "502") + lines(3, 5, "503") + lines(5, 6, "504"))
        reports = cycle(con, spool) if con is batch else alone(con, spool) or reports
    assert one_batch(batch, reports.values())
    r = reports[hers.name]
    assert (r.rows_in, r.stored, r.rejected) == (4, 2, 2)      # 502's line and 504's (held) stored; 503's rejected
    assert batch.execute("SELECT line_no, reason FROM reject ORDER BY 1").fetchall() == [
        (n, f"job 503 of cluster c1 is bob's, and this file is owned by alice (uid {alice.pw_uid}): a user's samples "
            "count only for their own jobs") for n in (5, 6)]
    assert batch.execute("SELECT job_id_raw, owner_user FROM sample_pending").fetchall() == [("504", "alice")]
    assert batch.execute("SELECT count(*) FROM sample WHERE job_id_raw = '503'").fetchone()[0] == 0
    assert any("held (table sample_pending)" in n for n in r.notes)
    assert state(batch, spool) == state(ref, spool)


KILLED_MID_BATCH = """
import sys, time
from pathlib import Path
from jobsight.analytics.store import db
from jobsight.analytics.ingest import batch as ingest_batch
from jobsight.analytics.commands import watch as watch_cli
from jobsight.analytics.ingest.records import ParseOptions
log_rows = ingest_batch._log_rows
def log_then_hang(*args):
    log_rows(*args)
    print("in the batch", flush=True)
    time.sleep(60)
ingest_batch._log_rows = log_then_hang
con = db.connect(sys.argv[1])
watch_cli._ingest_spool(con, Path(sys.argv[2]), ParseOptions(timezone="UTC"), lambda rep: None)
"""


def test_a_cycle_killed_mid_batch_leaves_nothing_and_the_next_reads_the_same_lines(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    files = [spool / f"jobsight-c1-{job}-n1.csv" for job in ("501", "502")]
    path = tmp_path / "t.duckdb"
    con = db.connect(path)
    for f in files:
        f.write_text(HEADER + "\n" + lines(0, 3, f.name.split("-")[2]))
    cycle(con, spool)
    con.close()
    for f in files:
        append(f, lines(3, 6, f.name.split("-")[2]))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MID_BATCH, str(path), str(spool)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "in the batch"   # samples, rejects, offsets and log rows written
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    con = db.connect(path)
    try:
        assert con.execute("SELECT count(*), max(\"offset\") FROM file_offset").fetchone()[0] == 2
        assert con.execute("SELECT count(*) FROM sample").fetchone()[0] == 6
        again = cycle(con, spool)
        assert [(r.rows_in, r.stored, r.unchanged) for r in again.values()] == [(3, 3, 0)] * 2
        assert con.execute("SELECT count(*), count(DISTINCT (job_id_raw, time)) FROM sample").fetchone() == (12, 12)
    finally:
        con.close()


def test_a_file_given_to_another_owner_while_read_is_not_loaded(dbs, tmp_path, monkeypatch):
    batch, ref = dbs
    spool = tmp_path / "spool"
    spool.mkdir()
    files = [spool / f"jobsight-c1-{job}-n1.csv" for job in ("501", "502", "503")]
    for f in files:
        f.write_text(HEADER + "\n" + lines(0, 3, f.name.split("-")[2]))
    swapped = str(files[1])
    changed = trust.Ownership.changed
    monkeypatch.setattr(trust.Ownership, "changed", lambda self: "replaced, or given to another owner, while it was "
                        "read: not loaded" if self.path == swapped else changed(self))
    got = cycle(batch, spool)
    (want,) = ingest.ingest_paths(ref, [files[1]], OPTS)
    assert (got[files[1].name].status, got[files[1].name].error) == (want.status, want.error) == (
        "failed", f"not loaded (AccountingError): {files[1].resolve()}: replaced, or given to another owner, while it "
        "was read: not loaded")
    assert one_batch(batch, [got[files[0].name], got[files[2].name]])
    assert batch.execute("SELECT job_id_raw, count(*) FROM sample GROUP BY 1 ORDER BY 1").fetchall() == [("501", 3), ("503", 3)]
    assert batch.execute("SELECT count(*) FROM file_offset WHERE source_file = ?", [str(files[1].resolve())]).fetchone() == (0,)
    monkeypatch.setattr(trust.Ownership, "changed", changed)
    assert cycle(batch, spool)[files[1].name].stored == 3          # the next cycle reads it


def test_several_batches_and_a_big_part_alone_as_ingested_alone(dbs, tmp_path, monkeypatch):
    batch, ref = dbs
    monkeypatch.setattr(ingest_batch, "BATCH_BYTES", 500)       # two parts of 3 lines a batch
    monkeypatch.setattr(ingest_batch, "FILE_BYTES", 2000)       # 501's second part goes alone
    spool = tmp_path / "spool"
    spool.mkdir()
    files = {job: spool / f"jobsight-c1-{job}-n1.csv" for job in map(str, range(501, 508))}
    for job, f in files.items():
        f.write_text(HEADER + "\n" + lines(0, 3, job))
    cycle(batch, spool)
    alone(ref, spool)
    for job, f in files.items():
        append(f, lines(3, 40 if job == "501" else 6, job))
    second = cycle(batch, spool)
    alone(ref, spool)
    assert [second[f.name].stored for f in files.values()] == [37] + [3] * 6
    log = batch.execute("SELECT finished_at, count(*) FROM ingest_log WHERE list_contains(?, ingest_id) GROUP BY 1",
                        [[r.ingest_id for r in second.values()]]).fetchall()
    assert sorted(n for _, n in log) == [1, 2, 2, 2]             # three batches, and 501 alone
    assert state(batch, spool) == state(ref, spool)
