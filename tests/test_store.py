"""Stored per-job results (analytics/store/results.py): computed once, kept current by ingests, rebuilt
once after a change of settings, and never half-refreshed.

Each test compares the stored tables with a from-scratch recompute of the same database, so the
incremental path has to reach exactly what a full build gives.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from jobsight.analytics.config import parse_config
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.settings import apply_to_db
from jobsight.collector.csv_schema import COLUMNS, HEADER

OPTS = ParseOptions(timezone="UTC", cluster="c1")
HDR = "JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|Timelimit|NCPUS|TotalCPU|ReqMem|AllocTRES\n"


def job_line(jid: str, state: str = "COMPLETED", user: str = "ann", partition: str = "cpu", hours: int = 2,
             gpus: int = 0, cpu: str = "01:00:00") -> str:
    end = f"2026-11-17T{10 + hours:02d}:00:00" if state != "RUNNING" else "Unknown"
    tres = f"billing={max(gpus * 10, 4)},cpu=4,mem=16G,node=1" + (f",gres/gpu={gpus}" if gpus else "")
    return (f"{jid}|{jid}|{user}|prj|{partition}|{state}|2026-11-17T10:00:00|{end}|{hours:02d}:00:00|1-00:00:00|4|"
            f"{cpu}|16G|{tres}\n")


def sidecar_file(folder: Path, jid: str, utils: list[float], first_minute: int = 0) -> Path:
    path = folder / f"jobsight-c1-{jid}-n1-20261117T10{first_minute:02d}00Z-1.csv"
    rows = []
    for i, u in enumerate(utils):
        cell = {c: "" for c in COLUMNS}
        m = first_minute + i
        cell.update(time=f"2026-11-17T{10 + m // 60:02d}:{m % 60:02d}:00.000Z", job_id=jid, cluster="c1",
                    host="n1", device="GPU-aaaa", util_pct=str(u), mem_used_bytes="1000", mem_total_bytes="80000",
                    gpu_index="0")
        rows.append(",".join(cell[c] for c in COLUMNS))
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _exact(value):
    """Floats to 12 significant digits: the per-day summaries are sums of doubles, whose last bits
    depend on the order DuckDB's threads add them in."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


def stored(con) -> dict[str, list]:
    return {s.table: [tuple(_exact(v) for v in row) for row in con.execute(f"SELECT * FROM {s.table} ORDER BY ALL").fetchall()]
            for s in store.STORED}


def stored_of(db: Path) -> dict[str, list]:
    con = duckdb.connect(str(db))
    try:
        return stored(con)
    finally:
        con.close()


def recomputed(db: Path, tmp: Path) -> dict[str, list]:
    """The stored tables of a copy of the database, rebuilt from scratch."""
    copy = tmp / f"full-{random.random()}.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    try:
        assert store.refresh(con, full=True).mode == "full"
        return stored(con)
    finally:
        con.close()


def ingest_files(db: Path, *paths: Path, config=None):
    con = Database.open(db, config or parse_config({}))
    try:
        return ingest.ingest_paths(con.con, list(paths), OPTS), con.refresh()
    finally:
        con.close()


@pytest.fixture()
def base(tmp_path) -> Path:
    """Four GPU jobs (two on partition gpu, with samples) and ten CPU jobs, stored."""
    db = tmp_path / "jobs.duckdb"
    dump = tmp_path / "a.txt"
    lines = [job_line(str(100 + i), cpu=f"0{i % 4}:30:00") for i in range(10)]
    lines += [job_line(str(200 + i), partition="gpu", gpus=2, cpu="00:10:00") for i in range(4)]
    dump.write_text(HDR + "".join(lines), encoding="utf-8")
    reps, first = ingest_files(db, dump, sidecar_file(tmp_path, "200", [0, 0, 0, 0]),
                               sidecar_file(tmp_path, "201", [90, 80, 95, 85]))
    assert [r.status for r in reps] == ["ingested"] * 3
    assert first == store.Refresh("incremental", 14, 14, days=1)     # the open had built them empty
    con = Database.open(db, parse_config({}))
    try:
        assert con.execute("SELECT count(*) FROM job_metrics").fetchone()[0] == 14
        assert con.execute("SELECT value FROM metric_state WHERE name = 'last_refresh'").fetchone()[0] == "incremental 14 14 1"
    finally:
        con.close()
    return db


def test_a_second_ingest_recomputes_only_the_jobs_it_changed(base, tmp_path):
    con = Database.open(base, parse_config({}))
    before = stored(con)
    flags_before = con.execute("SELECT job_id_raw, code FROM job_flags").fetchall()
    con.close()
    assert ("200", "gpu_idle") in flags_before          # 200 sampled at 0 %
    # 103 comes back FAILED (was COMPLETED); 202 gets samples; 100 is repeated unchanged
    dump = tmp_path / "b.txt"
    dump.write_text(HDR + job_line("103", state="FAILED", cpu="03:30:00") + job_line("100", cpu="00:30:00"),
                    encoding="utf-8")
    reps, refresh = ingest_files(base, dump, sidecar_file(tmp_path, "202", [0, 0, 0]))
    assert (reps[0].updated, reps[0].unchanged, reps[1].stored) == (1, 1, 3)
    assert refresh == store.Refresh("incremental", 2, 2, days=1)
    after = stored_of(base)
    assert after == recomputed(base, tmp_path)
    state = dict(con_rows(base, "SELECT job_id_raw, state FROM job_metrics"))
    assert state["103"] == "FAILED"
    assert ("202", "gpu_idle") in con_rows(base, "SELECT job_id_raw, code FROM job_flags")
    assert ("202", "gpu_idle") not in flags_before
    # every other job's rows are the very same stored rows
    per_job = [s.table for s in store.STORED if s.key == store.KEY]
    others = {t: [r for r in before[t] if r[1] not in ("103", "202")] for t in per_job}
    assert others == {t: [r for r in after[t] if r[1] not in ("103", "202")] for t in per_job}


def test_an_ingest_recomputes_only_the_days_its_jobs_ran(base, tmp_path):
    """A job of another day changes that day's dashboard summaries only: the rows of 2026-11-17 are
    the very same stored rows, and a job that ran across midnight adds both its days."""
    day = "2026-11-17"
    before = {s.table: con_rows(base, f"SELECT * FROM {s.table} WHERE day = '{day}' ORDER BY ALL")
              for s in store.STORED if s.key == store.DAY}
    dump = tmp_path / "later.txt"
    dump.write_text(HDR + job_line("600", partition="gpu", gpus=1).replace("2026-11-17", "2026-11-20")
                    + job_line("601", hours=2).replace("2026-11-17T12", "2026-11-22T01")
                    .replace("2026-11-17T10", "2026-11-21T23"), encoding="utf-8")
    _, refresh = ingest_files(base, dump)
    assert refresh == store.Refresh("incremental", 2, 2, days=3)
    assert {s.table: con_rows(base, f"SELECT * FROM {s.table} WHERE day = '{day}' ORDER BY ALL")
            for s in store.STORED if s.key == store.DAY} == before
    days = con_rows(base, "SELECT DISTINCT day::DATE::VARCHAR FROM dash_day ORDER BY 1")
    assert days == [(d,) for d in ("2026-11-17", "2026-11-20", "2026-11-21", "2026-11-22")]
    assert stored_of(base) == recomputed(base, tmp_path)


def con_rows(db: Path, sql: str) -> list:
    con = duckdb.connect(str(db))
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_samples_before_their_job_count_once_it_arrives(tmp_path):
    db = tmp_path / "jobs.duckdb"
    _, r1 = ingest_files(db, sidecar_file(tmp_path, "300", [0, 0, 0]))
    assert con_rows(db, "SELECT count(*) FROM job_metrics") == [(0,)]
    dump = tmp_path / "late.txt"
    dump.write_text(HDR + job_line("300", partition="gpu", gpus=1), encoding="utf-8")
    _, r2 = ingest_files(db, dump)
    assert r2.mode == "incremental" and r2.jobs == 1
    assert con_rows(db, "SELECT gpu_util_pct, gpu_util_source FROM job_metrics") == [(0.0, "sidecar")]
    assert stored_of(db) == recomputed(db, tmp_path)


def test_a_new_gpu_partition_reflags_the_cpu_jobs_already_there(base, tmp_path):
    """cpu_job_on_gpu_partition spans jobs: the first GPU job on partition 'cpu' changes the flags of
    the ten CPU jobs stored there, and the refresh recomputes exactly those flags."""
    assert ("100", "cpu_job_on_gpu_partition") not in con_rows(base, "SELECT job_id_raw, code FROM job_flags")
    dump = tmp_path / "gpu-on-cpu.txt"
    dump.write_text(HDR + job_line("900", partition="cpu", gpus=1), encoding="utf-8")
    _, refresh = ingest_files(base, dump)
    assert refresh == store.Refresh("incremental", 1, 11, days=1)
    flagged = {r[0] for r in con_rows(base, "SELECT job_id_raw FROM job_flags WHERE code = 'cpu_job_on_gpu_partition'")}
    assert flagged == {str(100 + i) for i in range(10)}
    assert stored_of(base) == recomputed(base, tmp_path)


def test_a_flags_setting_rebuilds_the_flags_and_summaries_once_and_says_so(base, tmp_path, capsys):
    late = "SELECT count(*) FROM job_flags WHERE code = 'time_oversized'"
    assert con_rows(base, late) == [(14,)]         # 2 h of a 1-day limit: 8.3 %
    dump = tmp_path / "d.txt"                       # waiting for a refresh: included in it
    dump.write_text(HDR + job_line("701", state="FAILED"), encoding="utf-8")
    con = duckdb.connect(str(base))
    ingest.ingest_paths(con, [dump], OPTS)
    con.close()
    config = parse_config({"flags": {"time_oversized_pct": 5}})
    con = Database.open(base, config)
    con.close()
    # time_oversized_pct is read by job_flags only: it and the summaries after it are rebuilt, not
    # job_metrics, which would weigh every sample again
    rebuilt = "job_flags, job_advice, job_savings, job_flags_by_owner, dash_day, dash_eff_day, dash_flag_day, dash_flag_top"
    assert f"computing the stored {rebuilt} of all 15 jobs (once)" in capsys.readouterr().err
    assert con_rows(base, "SELECT value FROM metric_state WHERE name = 'last_refresh'") == [(f"full 15 {rebuilt}",)]
    assert con_rows(base, "SELECT state FROM job_metrics WHERE job_id_raw = '701'") == [("FAILED",)]
    con = Database.open(base, config)
    con.close()
    assert capsys.readouterr().err == ""           # nothing to do the second time
    assert con_rows(base, late) == [(0,)]
    assert stored_of(base) == recomputed(base, tmp_path)


def test_a_flags_setting_alone_rebuilds_only_the_tables_that_read_the_flags(base, tmp_path, capsys):
    """With nothing new to take in, a change of time_oversized_pct rebuilds the flags and the tables
    computed from them (store.dependencies), not dash_eff_day, which reads job_day only."""
    assert store.dependencies()["dash_eff_day"] == ["job_day"]
    eff_before = stored_of(base)["dash_eff_day"]
    rebuilt = "job_flags, job_advice, job_savings, job_flags_by_owner, dash_day, dash_flag_day, dash_flag_top"
    con = duckdb.connect(str(base))
    assert store.rebuild_plan(con) == ()
    apply_to_db(con, parse_config({"flags": {"time_oversized_pct": 5}}))
    assert store.rebuild_plan(con) == tuple(rebuilt.split(", "))    # what the refresh below rebuilds
    con.close()
    con = Database.open(base, parse_config({"flags": {"time_oversized_pct": 5}}))
    con.close()
    assert f"computing the stored {rebuilt} of all 14 jobs (once)" in capsys.readouterr().err
    assert con_rows(base, "SELECT value FROM metric_state WHERE name = 'last_refresh'") == [(f"full 14 {rebuilt}",)]
    assert con_rows(base, "SELECT count(*) FROM job_flags WHERE code = 'time_oversized'") == [(0,)]
    after = stored_of(base)
    assert after["dash_eff_day"] == eff_before
    assert after == recomputed(base, tmp_path)


def test_a_setting_of_the_per_job_sql_rebuilds_from_the_stored_devices(base, tmp_path, capsys):
    """gpu_idle_pct is read by job_metrics (idle_gpus), not by the per-device and per-host rows: those
    stay, and job_metrics and every table after it are rebuilt from them; an ingest waiting at the
    same time is included."""
    idle = "SELECT count(*) FROM job_flags WHERE code = 'gpu_idle'"
    assert con_rows(base, idle) == [(1,)]         # 200 sampled at 0 %; 201 at ~87 %; 202, 203 unmeasured
    dump = tmp_path / "d.txt"
    dump.write_text(HDR + job_line("700", partition="gpu", gpus=1), encoding="utf-8")
    con = duckdb.connect(str(base))
    ingest.ingest_paths(con, [dump], OPTS)
    con.close()
    con = Database.open(base, parse_config({"flags": {"gpu_idle_pct": 95}}))
    con.close()
    rebuilt = ("job_metrics, job_day, job_flags, job_advice, job_savings, job_flags_by_owner, dash_day, dash_eff_day, dash_flag_day, "
               "dash_flag_top")
    assert f"computing the stored {rebuilt} of all 15 jobs (once)" in capsys.readouterr().err
    assert con_rows(base, "SELECT value FROM metric_state WHERE name = 'last_refresh'") == [(f"full 15 {rebuilt}",)]
    assert con_rows(base, idle) == [(2,)]         # 201 is under 95 %
    assert ("700",) in con_rows(base, "SELECT job_id_raw FROM job_metrics")
    assert stored_of(base) == recomputed(base, tmp_path)


def test_a_migration_of_the_samples_view_rebuilds_every_table(base):
    """The portable SQL reads the schema's `samples` view, whose MIG rule is a macro that migrations
    define: a new migration, or a new text of the view, makes every table stale; another view's
    new text does not."""
    con = duckdb.connect(str(base))
    try:
        assert store.rebuild_plan(con) == ()
        con.execute("CREATE OR REPLACE VIEW rejects AS SELECT 1 AS x")
        assert store.rebuild_plan(con) == ()
        con.execute("BEGIN")
        con.execute("CREATE OR REPLACE MACRO sample_util_pct(util_pct, device, sm_active_pct) AS "
                    "COALESCE(util_pct, sm_active_pct)")
        con.execute("INSERT INTO schema_version VALUES (99, 'another_rule', now()::TIMESTAMP)")
        assert store.rebuild_plan(con) == tuple(s.table for s in store.STORED)
        con.execute("ROLLBACK")
        assert store.rebuild_plan(con) == ()
        con.execute("CREATE OR REPLACE VIEW samples AS SELECT * FROM sample")
        assert store.rebuild_plan(con) == tuple(s.table for s in store.STORED)
    finally:
        con.close()


def test_a_setting_of_the_sample_weights_rebuilds_every_table(base, tmp_path, capsys):
    """samples.max_gap_s weighs each sample: every table is rebuilt from the samples."""
    before = con_rows(base, "SELECT util_weight_s FROM job_gpu_devices WHERE job_id_raw = '201'")
    con = Database.open(base, parse_config({"samples": {"max_gap_s": 1}}))
    con.close()
    assert "computing the stored metrics of all 14 jobs (once)" in capsys.readouterr().err
    assert con_rows(base, "SELECT value FROM metric_state WHERE name = 'last_refresh'") == [("full 14",)]
    after = con_rows(base, "SELECT util_weight_s FROM job_gpu_devices WHERE job_id_raw = '201'")
    assert after != before and all(w <= n for (w,), (n,) in zip(after, con_rows(
        base, "SELECT n_samples FROM job_gpu_devices WHERE job_id_raw = '201'")))
    assert stored_of(base) == recomputed(base, tmp_path)


# A child that refreshes from scratch, in a loop, until it is killed.
CHILD = r"""
import sys, duckdb
from jobsight.analytics.store import results as store
con = duckdb.connect(sys.argv[1])
print("ready", flush=True)
while True:
    store.refresh(con, full=True)
"""


def test_kill_9_during_a_refresh_leaves_the_last_results_and_the_next_run_completes(base, tmp_path):
    # stored results left stale on purpose: the new data below is ingested without a refresh
    con = duckdb.connect(str(base))
    dump = tmp_path / "c.txt"
    dump.write_text(HDR + job_line("104", state="FAILED") + job_line("500", partition="gpu", gpus=4), encoding="utf-8")
    ingest.ingest_paths(con, [dump], OPTS)
    con.close()
    stale = stored_of(base)
    want = recomputed(base, tmp_path)
    assert stale != want
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(base)], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert stored_of(base) in (stale, want)       # all of one refresh or none of it
    con = Database.open(base, parse_config({}))         # the next run completes what is missing
    con.close()
    assert stored_of(base) == want
