"""Crash consistency: `jobsight ingest` killed with SIGKILL at seeded random moments.

Reference: the same files ingested one at a time, the database's checksums taken after each
file. Files are ingested in a fixed order, so after a kill the database must equal the reference
after exactly the files its `ingests` lists (all of each committed file, nothing of the one in
flight); re-running the same command must then converge to a clean ingest's database.
5 trials always; 20 with JOBSIGHT_LONG=1. Also: a migration that fails midway, and a kill -9
during a slow migration, leave the schema and data of the version before."""
from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from relhelp import LONG, ROOT, generated_cluster, ingest_cmd, open_ro, run_ingest, snapshot


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return generated_cluster(tmp_path_factory)

TRIALS = 20 if LONG else 5


@pytest.fixture(scope="module")
def clean(cluster, tmp_path_factory):
    """A clean ingest: (db, ordered list of files, seconds it took, snapshot)."""
    _, dirs = cluster
    db = tmp_path_factory.mktemp("clean") / "clean.duckdb"
    t0 = time.monotonic()
    proc = run_ingest(db, *dirs, extra=("--json",))
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    files = [f["path"] for f in json.loads(proc.stdout)["files"]]
    assert all(f["status"] == "ingested" for f in json.loads(proc.stdout)["files"])
    return db, files, seconds, snapshot(db)


def _reference_at(files: list[str], ks: list[int], tmp: Path) -> dict[int, dict]:
    """Snapshots of a database after exactly the first k files, for each k in ks (ascending),
    ingesting the files between two ks in one in-process run."""
    from jobsight.analytics.cli import main as jobsight
    db = tmp / "ref.duckdb"
    open_ro(db).close()
    out, done = {}, 0
    for k in sorted(set(ks)):
        if k > done:
            assert jobsight(["ingest", "--db", str(db), "--timezone", "Europe/Amsterdam", "--cluster", "demo",
                             "--quiet", *files[done:k]]) == 0
            done = k
        out[k] = snapshot(db)
    return out


def _per_file_rows_match(db: Path) -> int:
    """Samples and rejects carry the id of the ingest that stored them and are never updated:
    per committed file, the rows present must be exactly the counts `ingests` recorded."""
    con = open_ro(db)
    try:
        rows = con.execute("""
            SELECT i.ingest_id, i.format, i.stored, i.rejected,
                   (SELECT count(*) FROM sample s WHERE s.ingest_id = i.ingest_id),
                   (SELECT count(*) FROM reject r WHERE r.ingest_id = i.ingest_id)
            FROM ingest_log i ORDER BY i.ingest_id""").fetchall()
        orphans = con.execute("""
            SELECT (SELECT count(*) FROM sample WHERE ingest_id NOT IN (SELECT ingest_id FROM ingest_log))
                 + (SELECT count(*) FROM job WHERE ingest_id NOT IN (SELECT ingest_id FROM ingest_log))
                 + (SELECT count(*) FROM step WHERE ingest_id NOT IN (SELECT ingest_id FROM ingest_log))
                 + (SELECT count(*) FROM reject WHERE ingest_id NOT IN (SELECT ingest_id FROM ingest_log))""").fetchone()[0]
    finally:
        con.close()
    assert orphans == 0, "rows of an ingest that never committed"
    for iid, fmt, stored, rejected, n_sample, n_reject in rows:
        assert n_reject == rejected, (iid, fmt)
        if fmt in ("sidecar", "nvidia-smi"):
            assert n_sample == stored, (iid, fmt, stored, n_sample)
    return len(rows)


def _snapshot_opens(db: Path) -> None:
    """A kill while the dashboard snapshot is published leaves the old one or the new one, whole."""
    from jobsight.analytics.store.snapshot import SnapshotReader, snapshot_path
    if snapshot_path(db).exists():
        reader = SnapshotReader(db, check_views=False)
        try:
            with reader.cursor() as cur:
                assert cur.con.execute("SELECT count(*) FROM jobs").fetchone()[0] > 0
        finally:
            reader.close()


def test_kill_9_during_ingest(cluster, clean, tmp_path, capsys):
    _, dirs = cluster
    _, files, seconds, final = clean
    assert final["jobs"][0] > 100 and final["samples"][0] > 10000   # the input is not trivially small
    rng = random.Random(20261122)
    outcomes, after_kill = [], {}
    for trial in range(TRIALS):
        db = tmp_path / f"trial{trial}.duckdb"
        delay = rng.uniform(0.3, max(0.6, seconds * 0.8))
        proc = subprocess.Popen(ingest_cmd(db, *dirs), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(delay)
        killed = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if db.exists():
            committed = _per_file_rows_match(db)
            after_kill[trial] = (committed, snapshot(db))
            _snapshot_opens(db)
        else:
            committed = 0
        again = run_ingest(db, *dirs)
        assert again.returncode == 0, again.stderr
        assert snapshot(db) == final, f"trial {trial}: re-run did not converge to the clean database"
        outcomes.append((round(delay, 2), killed, committed))
    # The state each kill left == the state after exactly the files it had committed.
    ref = _reference_at(files, [k for k, _ in after_kill.values()] + [len(files)], tmp_path)
    capsys.readouterr()
    assert ref[len(files)] == final, "ingesting in several runs differs from one run"
    for trial, (k, snap) in after_kill.items():
        assert snap == ref[k], f"trial {trial}: not the state after {k} whole files"
    print(f"\nkill -9 trials (delay s, killed before finishing, files committed of {len(files)}): {outcomes}")
    assert sum(k for _, k, _ in outcomes) >= TRIALS - 1, "the kills came too late to test anything"
    assert len({c for _, _, c in outcomes}) >= 2, "every kill landed at the same point"


# -- schema migrations --------------------------------------------------------------------------

def _schema_with(tmp: Path, sql: str) -> Path:
    from jobsight.analytics.store.db import SCHEMA_DIR
    d = tmp / "schema"
    shutil.copytree(SCHEMA_DIR, d)
    n = len(list(d.glob("[0-9][0-9][0-9][0-9]_*.sql"))) + 1
    (d / f"{n:04d}_reliability.sql").write_text(sql, encoding="utf-8")
    return d


def _version(db: Path) -> int:
    from jobsight.analytics.store.db import current_version
    con = open_ro(db)
    try:
        return current_version(con)
    finally:
        con.close()


def test_migration_failing_midway_changes_nothing(clean, tmp_path):
    from jobsight.analytics.store import db as jdb
    db = tmp_path / "m.duckdb"
    shutil.copy(clean[0], db)
    before, version = snapshot(db), _version(db)
    schema = _schema_with(tmp_path, """
        CREATE TABLE extra (a INTEGER);
        DELETE FROM sample;
        UPDATE job SET job_name = 'migrated';
        SELECT * FROM no_such_table_here;
    """)
    con = jdb.duckdb.connect(str(db))
    with pytest.raises(jdb.SchemaError, match="nothing changed"):
        jdb.migrate(con, schema_dir=schema)
    con.close()
    assert _version(db) == version
    assert snapshot(db) == before
    con = open_ro(db)
    assert con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'extra'").fetchone()[0] == 0
    con.close()


def test_kill_9_during_migration(clean, tmp_path):
    db = tmp_path / "k.duckdb"
    shutil.copy(clean[0], db)
    before, version = snapshot(db), _version(db)
    # Deletes data first, then works long enough to be killed in the middle.
    schema = _schema_with(tmp_path, """
        DELETE FROM sample;
        UPDATE job SET job_name = 'migrated';
        CREATE TABLE big AS SELECT i, md5(i::VARCHAR) AS m FROM range(40000000) t(i);
    """)
    script = ("import sys, duckdb; from pathlib import Path; from jobsight.analytics.store import db;"
              "con = duckdb.connect(sys.argv[1]); print('go', flush=True);"
              "db.migrate(con, schema_dir=Path(sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-c", script, str(db), str(schema)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "go"
    time.sleep(1.5)
    assert proc.poll() is None, "the migration finished before the kill"
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert _version(db) == version                   # opens with the normal schema: still the old version
    assert snapshot(db) == before
    # and the interrupted migration applies cleanly afterwards (a quick one this time)
    (schema / f"{version + 1:04d}_reliability.sql").write_text("CREATE TABLE extra (a INTEGER);", encoding="utf-8")
    from jobsight.analytics.store import db as jdb
    con = jdb.duckdb.connect(str(db))
    assert jdb.migrate(con, schema_dir=schema) == version + 1
    con.close()
