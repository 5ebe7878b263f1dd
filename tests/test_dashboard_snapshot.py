"""Living beside ingest: a separate writer process keeps adding jobs to the live database and
publishing snapshots while the dashboard answers requests. No request fails, none sees a
half-written batch, and the newest data is visible on the next request after a publish."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_dashboard_queries import build_db

from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.store.snapshot import SnapshotReader, publish, snapshot_path
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

ROOT = Path(__file__).resolve().parents[1]
BATCH = 3          # jobs per "ingest": one transaction, so a reader must always see a multiple of 3 new jobs
BATCHES = 4

# The writer: like `jobsight ingest` from cron, it opens the live file read-write (taking DuckDB's
# write lock), adds a batch in one transaction, closes, then publishes a snapshot.
WRITER = r"""
import datetime as dt, sys
from jobsight.analytics.store.database import Database
from jobsight.analytics.config import parse_config
from jobsight.analytics.store.snapshot import publish
db, batches, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for b in range(batches):
    con = Database.open(db, parse_config({}))
    con.execute("BEGIN TRANSACTION")
    for i in range(batch):
        jid = f"w{b}-{i}"
        t = dt.datetime(2026, 11, 18, 8, 0)
        con.execute("INSERT INTO job (cluster, job_id, job_id_raw, state, source, start_time, end_time, elapsed_s, "
                    "ncpus, billing, cpu_time_s, \"user\", account, \"partition\") VALUES "
                    "('c1', ?, ?, 'COMPLETED', 'test', ?, ?, 3600, 1, 1, 3600, 'alice', 'proj-a', 'cpu')",
                    [jid, jid, t, t + dt.timedelta(hours=1)])
    con.execute("COMMIT")
    con.close()
    publish(db)
    print("published", b, flush=True)
"""


def test_dashboard_reads_while_a_writer_process_publishes(tmp_path):
    db = build_db(tmp_path / "jobs.duckdb")
    publish(db)
    reader = SnapshotReader(db)
    admin = Scope("admin", "root")
    base_jobs = 4                          # the jobs of build_db
    errors: list[str] = []
    seen: set[int] = set()
    stop = threading.Event()

    def read_loop():
        while not stop.is_set():
            try:
                with reader.cursor() as h:
                    t = queries.totals(h, admin, Filters())
                    n_table = h.con.execute("SELECT count(*) FROM job").fetchone()[0]
                    n_mat = h.con.execute("SELECT count(*) FROM job_metrics").fetchone()[0]
                if (t["jobs"] - base_jobs) % BATCH or n_table != n_mat or t["jobs"] != n_mat:
                    errors.append(f"inconsistent: totals {t['jobs']}, job {n_table}, job_metrics {n_mat}")
                seen.add(t["jobs"])
            except Exception as exc:  # noqa: BLE001 - every failure is a test failure, collected
                errors.append(repr(exc))
            stop.wait(0.02)            # a busy dashboard, not a busy loop on a 2-core machine

    threads = [threading.Thread(target=read_loop) for _ in range(2)]
    for t in threads:
        t.start()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run([sys.executable, "-c", WRITER, str(db), str(BATCHES), str(BATCH)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("published") == BATCHES
    assert errors == [], errors[:5]
    # new data visible on the next request after the last publish
    with reader.cursor() as h:
        assert queries.totals(h, admin, Filters())["jobs"] == base_jobs + BATCHES * BATCH
    assert reader.reopened >= 1 and len(seen) >= 2       # the readers really saw several generations
    reader.close()


def test_http_requests_see_the_new_snapshot_after_publish(tmp_path):
    db = build_db(tmp_path / "jobs.duckdb")
    reader = SnapshotReader(db)            # no snapshot yet: the database itself, read-only
    app = create_app(reader, Auth("none", Roles()))
    client = app.server.test_client()
    spec = app.callback_map["job-content.children"]

    def job_page(job_id):
        body = {"output": "job-content.children", "outputs": {"id": "job-content", "property": "children"},
                "inputs": [{"id": "job-key", "property": "data", "value": {"cluster": "c1", "id": job_id}}],
                "state": [], "changedPropIds": []}
        assert spec["inputs"][0]["id"] == "job-key"
        r = client.post("/_dash-update-component", json=body)
        assert r.status_code == 200
        return r.data.decode()

    assert "No such job" in job_page("new-1")
    assert not snapshot_path(db).exists()
    reader.close()                         # the live file must be free for the writer (one process here)
    import duckdb
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO job (cluster, job_id, job_id_raw, state, source, job_name, \"user\") "
                "VALUES ('c1', 'new-1', 'new-1', 'RUNNING', 'test', 'fresh job', 'alice')")
    con.close()
    publish(db)
    assert "fresh job" in job_page("new-1")


def test_publish_failure_leaves_the_old_snapshot(tmp_path):
    db = build_db(tmp_path / "jobs.duckdb")
    snap = publish(db)
    before = snap.stat().st_ino
    from jobsight.analytics.errors import UserError
    with pytest.raises(UserError, match="no such database"):
        publish(tmp_path / "missing.duckdb")
    assert snap.stat().st_ino == before
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_publish_refuses_while_a_writer_holds_the_database(tmp_path):
    db = build_db(tmp_path / "jobs.duckdb")
    from jobsight.analytics.errors import UserError
    writer = subprocess.Popen([sys.executable, "-c",
                               "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
                               "time.sleep(60)", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        with pytest.raises(UserError, match="still writing"):
            publish(db)
        assert not snapshot_path(db).exists()
    finally:
        writer.kill()
        writer.wait()
    assert publish(db) == snapshot_path(db)


def test_a_snapshot_from_another_version_keeps_the_last_good_one(tmp_path, monkeypatch):
    db = build_db(tmp_path / "jobs.duckdb")
    publish(db)
    reader = SnapshotReader(db)
    admin = Scope("admin", "root")
    with reader.cursor() as h:
        assert queries.totals(h, admin, Filters())["jobs"] == 4
    import duckdb
    con = duckdb.connect(str(db))
    con.execute("UPDATE setting SET text = 'from-another-version' WHERE name = 'views.checksum'")
    con.execute("INSERT INTO job (cluster, job_id, job_id_raw, state, source) VALUES ('c1', 'x', 'x', 'RUNNING', 't')")
    con.close()
    # what another jobsight's publish leaves (this one's would first bring the views up to date)
    other = tmp_path / "other.snapshot"
    shutil.copyfile(db, other)
    os.replace(other, snapshot_path(db))
    with reader.cursor() as h:                      # no error; still the previous, good snapshot
        assert queries.totals(h, admin, Filters())["jobs"] == 4
    with pytest.raises(Exception, match="another jobsight version"):
        SnapshotReader(db).tables()                 # a fresh start does refuse it
    reader.close()


def test_publish_brings_a_lagging_database_up_to_date_first(tmp_path):
    """An ingest whose refresh did not run (killed, failed): the publish refreshes the stored
    results, with the settings the database holds, before it copies the file."""
    db = build_db(tmp_path / "jobs.duckdb")
    import duckdb

    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.ingest.records import ParseOptions
    dump = tmp_path / "late.txt"
    dump.write_text("JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|NCPUS|AllocTRES\n"
                    "9001|9001|alice|proj-a|cpu|COMPLETED|2026-11-18T08:00:00|2026-11-18T09:00:00|01:00:00|1|"
                    "billing=1,cpu=1,mem=1G,node=1\n", encoding="utf-8")
    con = duckdb.connect(str(db))
    (rep,) = ingest.ingest_paths(con, [dump], ParseOptions(timezone="UTC", cluster="c1"))
    con.close()
    assert rep.stored == 1
    publish(db)
    reader = SnapshotReader(db)
    with reader.cursor() as h:
        assert queries.totals(h, Scope("admin", "root"), Filters())["jobs"] == 5
        assert h.value("SELECT sbu FROM job_metrics WHERE job_id_raw = '9001'") is not None
    reader.close()
