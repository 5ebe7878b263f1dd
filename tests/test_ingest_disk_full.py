"""A full disk during ingest (analytics/store/db.py disk_full, rollback): the file's report and the
refresh's error name the cause, "No space left on device", and where (the database's folder or
DuckDB's temp folder), never the "cannot rollback" that a second ROLLBACK raised; nothing of the
file is stored. The disk is a 20 MB tmpfs mounted by the test (root only)."""
from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta

import duckdb
import pytest
from conftest import require_service

from jobsight.analytics import cli
from jobsight.analytics.store import db

HEAD = ("time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes,gpu_index,power_w,energy_j,"
        "sm_clock_mhz,temperature_c,sm_active_pct\n")


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs, 17 MB of it taken: a few MB left for the database."""
    if os.geteuid() != 0:
        require_service(False, "mounts a 20 MB tmpfs for a full disk: run as root")
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(disk)], capture_output=True, text=True)
    require_service(proc.returncode == 0, f"cannot mount a tmpfs: {proc.stderr.strip()}")
    try:
        with open(disk / "filler", "wb") as f:
            f.write(os.urandom(17 << 20))
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _samples(path, rows: int) -> None:
    t0 = datetime(2026, 11, 1)
    with open(path, "w") as f:
        f.write(HEAD)
        for i in range(rows):   # values that do not compress: the rows need their room
            f.write(f"{t0 + timedelta(seconds=i):%Y-%m-%dT%H:%M:%S}.000Z,555,c1,n1,cpu,{(i * 7919) % 10007 / 100.3:.4f},"
                    f"{(i * 2654435761) % 10 ** 10},4294967296,,,,,,\n")


def test_a_full_disk_is_named_and_nothing_is_stored(small_disk, tmp_path, capsys):
    dbp = small_disk / "jobs.duckdb"
    db.connect(dbp).close()   # the database, with its schema, before the disk fills
    big = tmp_path / "jobsight-c1-555-n1-x.csv"
    _samples(big, 400_000)
    rc = cli.main(["ingest", "--db", str(dbp), "--quiet", str(big)])
    out, err = capsys.readouterr()
    assert rc != 0
    assert f"{big}: failed: not loaded: No space left on device in the database's folder {small_disk}" in out
    assert "cannot rollback" not in out + err and "no transaction is active" not in out + err
    with duckdb.connect(str(dbp), read_only=True) as con:   # consistent: nothing of the file
        assert con.execute("SELECT count(*) FROM sample").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM ingest_log WHERE source_file = ?", [str(big)]).fetchone()[0] == 0


def test_where_the_disk_is_full():
    spill = 'IO Error: Could not write file "/data/jobs.duckdb.tmp/duckdb_temp_storage_DEFAULT-0.tmp": No space left on device'
    assert db.disk_full(spill).startswith(
        "No space left on device in DuckDB's temp (spill) folder /data/jobs.duckdb.tmp (writing ")
    main = 'TransactionContext Error: Failed to commit: Could not write file "/data/jobs.duckdb.wal": No space left on device'
    assert db.disk_full(main).startswith("No space left on device in the database's folder /data (writing /data/jobs.duckdb.wal)")
    assert db.disk_full("Constraint Error: duplicate key") is None


def test_rollback_after_duckdb_ended_the_transaction_keeps_the_first_error():
    con = duckdb.connect()
    db.rollback(con)   # no transaction: no second error
    con.execute("BEGIN TRANSACTION")
    db.rollback(con)
    con.execute("BEGIN TRANSACTION")   # the first was rolled back
    con.execute("ROLLBACK")
