"""The snapshot's spare: the generation a publish replaces is kept, and the next publish rewrites
in it only the blocks that differ from the database, when no reader holds it any more."""
from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from jobsight.analytics.cli import main
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.store.snapshot import SnapshotReader, publish, snapshot_path, spare_path

ADMIN = Scope("admin", "root")


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ingest(db, name: str) -> None:
    """`jobsight ingest` of a fixture, which publishes the snapshot when it changed the database."""
    assert main(["ingest", "--db", str(db), str(FIXTURES / "sacct" / name)]) == 0


def published(caplog) -> list[str]:
    return [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.name == "jobsight.snapshot"]


@pytest.fixture
def db(tmp_path):
    db = tmp_path / "jobs.duckdb"
    ingest(db, "mixed-jobs.txt")      # the first publish is a copy
    return db


def test_the_spare_is_rewritten_only_where_it_differs(db, caplog):
    caplog.set_level(logging.INFO, logger="jobsight.snapshot")
    assert not spare_path(db).exists()
    first = snapshot_path(db).stat().st_ino
    ingest(db, "running-3001.txt")    # a copy again; the first generation becomes the spare
    assert spare_path(db).stat().st_ino == first
    ingest(db, "completed-3001.txt")  # the spare, brought up to date, is the snapshot now
    again, rewrote = published(caplog)
    assert again.startswith("copied ") and rewrote.startswith("rewrote ")
    assert snapshot_path(db).stat().st_ino == first
    assert digest(snapshot_path(db)) == digest(db)
    reader = SnapshotReader(db)
    with reader.cursor() as h:
        assert h.value("SELECT state FROM job_metrics WHERE job_id = '3001'") == "COMPLETED"
    reader.close()
    publish(db)                       # the spare is two generations old: brought up to date
    caplog.clear()
    publish(db)                       # now it equals the database: nothing to write
    assert published(caplog) == [f"rewrote 0 of {db.stat().st_size} bytes of the spare"]


def test_a_spare_damaged_by_a_crash_is_repaired(db):
    ingest(db, "running-3001.txt")
    with open(spare_path(db), "r+b") as f:      # a publish killed in the middle of its rewrite
        f.seek(db.stat().st_size // 2)
        f.write(b"\xff" * 10000)
        f.truncate(db.stat().st_size - 4096)
    ingest(db, "completed-3001.txt")
    assert digest(snapshot_path(db)) == digest(db)


def test_a_spare_a_reader_of_this_process_holds_is_not_touched(db, caplog):
    caplog.set_level(logging.INFO, logger="jobsight.snapshot")
    reader = SnapshotReader(db)
    with reader.cursor() as h:                  # holds the first generation open
        jobs = queries.totals(h, ADMIN, Filters())["jobs"]
        ingest(db, "running-3001.txt")          # the first generation is the spare now, still in use
        ingest(db, "completed-3001.txt")
        assert published(caplog)[-1].startswith("copied ")
        assert queries.totals(h, ADMIN, Filters())["jobs"] == jobs      # the request still reads its own
    with reader.cursor() as h:
        assert queries.totals(h, ADMIN, Filters())["jobs"] == jobs + 1
    reader.close()


def test_a_spare_another_process_holds_is_not_touched(db, caplog):
    caplog.set_level(logging.INFO, logger="jobsight.snapshot")
    ingest(db, "running-3001.txt")
    spare = spare_path(db)
    held = spare.stat().st_ino
    before = digest(spare)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(':memory:'); "
                               "c.execute(f\"ATTACH '{sys.argv[1]}' AS s (READ_ONLY)\"); print('open', flush=True); "
                               "time.sleep(60)", str(spare)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        ingest(db, "completed-3001.txt")
        assert published(caplog)[-1].startswith("copied ")
        assert digest(snapshot_path(db)) == digest(db)
        # the file the other process reads was not written, only replaced by name
        assert snapshot_path(db).stat().st_ino != held and spare_path(db).stat().st_ino != held
        assert digest(Path(f"/proc/{holder.pid}/fd") / held_fd(holder.pid, held)) == before
    finally:
        holder.kill()
        holder.wait()


def held_fd(pid: int, ino: int) -> str:
    """The name of process pid's descriptor of the file with inode ino."""
    fds = Path(f"/proc/{pid}/fd")
    return next(fd.name for fd in fds.iterdir() if fd.stat().st_ino == ino)
