"""One definition of each number: the rules the reports, the dashboard and `jobsight usage` share.

- A GPU job known only from Slurm's job-level gres/gpuutil counts the same idle GPU-hours in the
  weekly report and on the dashboard (live views and a published snapshot).
- Thresholds and charging options have their defaults only in analytics/config.py: the SQL reads
  the setting table, has no fallback of its own, and fails loudly when a setting is missing.
"""
from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT

from jobsight.analytics import ingest, store
from jobsight.analytics.config import Config, parse_config
from jobsight.analytics.records import ParseOptions
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.period import iso_week
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.session import open_db
from jobsight.analytics.snapshot import ReadHandle, SnapshotReader, publish
from jobsight.dashboard import queries
from jobsight.dashboard.queries import Filters, Scope

# Week 47 of 2026 starts Monday 2026-11-16. Two GPU jobs with no samples, each 2 GPUs for 2 h:
# 801 at a job-level 0.5 % (under flags.gpu_idle_pct = 1: both GPUs idle, 4 idle GPU-hours),
# 802 at 40 % (none idle); 803 a CPU job.
SACCT = (
    "JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|AllocTRES|TRESUsageInTot\n"
    "801|801|ann|prj|gpu|COMPLETED|2026-11-17T10:00:00|2026-11-17T12:00:00|02:00:00|billing=2,cpu=2,gres/gpu=2,mem=8G,node=1|"
    "gres/gpuutil=0.5\n"
    "802|802|ann|prj|gpu|COMPLETED|2026-11-17T10:00:00|2026-11-17T12:00:00|02:00:00|billing=2,cpu=2,gres/gpu=2,mem=8G,node=1|"
    "gres/gpuutil=40\n"
    "803|803|ann|prj|cpu|COMPLETED|2026-11-17T10:00:00|2026-11-17T12:00:00|02:00:00|billing=1,cpu=1,mem=1G,node=1|\n"
)


@pytest.fixture()
def tres_db(tmp_path) -> Path:
    path = tmp_path / "jobs.duckdb"
    (tmp_path / "sacct.txt").write_text(SACCT, encoding="utf-8")
    con, _ = open_db(path, parse_config({}))
    (rep,) = ingest.ingest_paths(con, [tmp_path / "sacct.txt"], ParseOptions(timezone="UTC", cluster="c1"))
    assert (rep.stored, rep.rejected) == (3, 0)
    con.close()
    return path


def _report_idle(path: Path, cfg: Config) -> float:
    con, _ = open_db(path, cfg)
    try:
        ds = gather(con, iso_week(2026, 47), from_config(cfg))
        return ds.build("admin", "cluster").totals["idle_gpu_hours"]
    finally:
        con.close()


def test_gres_gpuutil_only_job_counts_the_same_idle_gpu_hours_everywhere(tres_db):
    cfg = parse_config({})
    assert _report_idle(tres_db, cfg) == pytest.approx(4.0)
    con, _ = open_db(tres_db, read_only=True)
    try:
        views = queries.totals(ReadHandle.of(con), Scope("admin", "root"), Filters())["idle_gpu_hours"]
        per_job = dict(con.execute("SELECT job_id_raw, idle_gpus FROM job_metrics").fetchall())
    finally:
        con.close()
    publish(tres_db)
    reader = SnapshotReader(tres_db)
    try:
        with reader.cursor() as h:
            assert "dash_job_metrics" in h.tables
            snap = queries.totals(h, Scope("admin", "root"), Filters())["idle_gpu_hours"]
    finally:
        reader.close()
    assert views == pytest.approx(4.0) and snap == pytest.approx(4.0)
    assert per_job == {"801": 2, "802": 0, "803": 0}


def test_idle_threshold_moves_every_reader_together(tres_db):
    """At gpu_idle_pct = 50 the 40 % job is idle too: 8 idle GPU-hours in the report and the views."""
    cfg = parse_config({"flags": {"gpu_idle_pct": 50}})
    assert _report_idle(tres_db, cfg) == pytest.approx(8.0)
    con, _ = open_db(tres_db, cfg)
    try:
        assert queries.totals(ReadHandle.of(con), Scope("admin", "root"), Filters())["idle_gpu_hours"] == pytest.approx(8.0)
    finally:
        con.close()


SQL_FILES = sorted((ROOT / "sql" / "metrics").glob("*.sql")) + sorted((ROOT / "sql" / "views").glob("*.sql"))
SETTING_REF = re.compile(r"setting_(?:value|text)\('([a-z_.]+)'\)")


def test_every_setting_the_sql_reads_has_its_default_in_config():
    written = {name for name, _, _ in Config().settings()}
    read = {m for f in SQL_FILES for m in SETTING_REF.findall(f.read_text())}
    assert len(read) >= 20
    assert read <= written, f"read by sql/ but never written by analytics/config.py: {read - written}"


def test_no_default_is_written_in_the_sql():
    text = "\n".join(f.read_text() for f in SQL_FILES)
    assert not re.findall(r"COALESCE\(\s*setting_(?:value|text)\(", text)
    assert "FROM setting WHERE name = '" not in text          # every read goes through the two macros


def test_a_missing_setting_is_an_error_not_a_silent_default(tres_db):
    con = duckdb.connect(str(tres_db))
    try:
        con.execute("DELETE FROM setting WHERE name = 'flags.gpu_idle_pct'")
        with pytest.raises(duckdb.Error, match="flags.gpu_idle_pct is not in the setting table"):
            store.refresh(con)
    finally:
        con.close()
