"""One definition of each number: the rules the reports, the dashboard and `jobsight usage` share.

- A GPU job known only from Slurm's job-level gres/gpuutil counts the same idle GPU-hours in the
  weekly report and on the dashboard (live views and a published snapshot).
- Thresholds and charging options have their defaults only in analytics/config.py: the SQL reads
  the setting table (the portable files: lake_setting, pivoted in one file), has no fallback of its
  own, and fails loudly when a setting is missing (the portable files alone: give no result).
"""
from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT

from jobsight.analytics.config import Config, parse_config
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.period import iso_week
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.store import lake
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish

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
    con = Database.open(path, parse_config({}))
    (rep,) = ingest.ingest_paths(con.con, [tmp_path / "sacct.txt"], ParseOptions(timezone="UTC", cluster="c1"))
    assert (rep.stored, rep.rejected) == (3, 0)
    con.close()
    return path


def _report_idle(path: Path, cfg: Config) -> float:
    con = Database.open(path, cfg)
    try:
        ds = gather(con, iso_week(2026, 47), from_config(cfg))
        return ds.build("admin", "cluster").totals["idle_gpu_hours"]
    finally:
        con.close()


def test_gres_gpuutil_only_job_counts_the_same_idle_gpu_hours_everywhere(tres_db):
    cfg = parse_config({})
    assert _report_idle(tres_db, cfg) == pytest.approx(4.0)
    con = Database.open(tres_db, read_only=True)
    try:
        views = queries.totals(Database.of(con), Scope("admin", "root"), Filters())["idle_gpu_hours"]
        per_job = dict(con.execute("SELECT job_id_raw, idle_gpus FROM job_metrics").fetchall())
    finally:
        con.close()
    publish(tres_db)
    reader = SnapshotReader(tres_db)
    try:
        with reader.cursor() as h:
            assert h.value("SELECT current_database()") == "snap"     # the published snapshot
            snap = queries.totals(h, Scope("admin", "root"), Filters())["idle_gpu_hours"]
    finally:
        reader.close()
    assert views == pytest.approx(4.0) and snap == pytest.approx(4.0)
    assert per_job == {"801": 2, "802": 0, "803": 0}


def test_idle_threshold_moves_every_reader_together(tres_db):
    """At gpu_idle_pct = 50 the 40 % job is idle too: 8 idle GPU-hours in the report and the views."""
    cfg = parse_config({"flags": {"gpu_idle_pct": 50}})
    assert _report_idle(tres_db, cfg) == pytest.approx(8.0)
    con = Database.open(tres_db, cfg)
    try:
        assert queries.totals(Database.of(con), Scope("admin", "root"), Filters())["idle_gpu_hours"] == pytest.approx(8.0)
    finally:
        con.close()


SQL_FILES = sorted((ROOT / "sql" / "metrics").glob("*.sql")) + sorted((ROOT / "sql" / "views").glob("*.sql"))
SETTING_REF = re.compile(r"setting_(?:value|text)\('([a-z_.]+)'\)")
# The portable files (sql/metrics/NN_lake_*.sql, which Spark runs too) read lake_setting instead: one
# file pivots it to one row of columns per cluster.
PORTABLE_FILES = lake.portable_files()
PIVOT_REF = re.compile(r"\bname\s*=\s*'([a-z_.]+)'\s+THEN\s+(value|text)\b", re.IGNORECASE)
PIVOT_COLUMN = re.compile(r"max\(CASE WHEN name = '[a-z_.]+' THEN (?:value|text) END\)\s+AS\s+(\w+)", re.IGNORECASE)


def _pivot() -> tuple[set[str], set[str]]:
    """(the settings the portable files read, the columns they become)."""
    text = "\n".join(f.read_text() for f in PORTABLE_FILES)
    return {n for n, _ in PIVOT_REF.findall(text)}, set(PIVOT_COLUMN.findall(text))


def _call_arguments(text: str, function: str) -> list[list[str]]:
    """The arguments of every call of `function` in `text`, split at its own commas."""
    out = []
    for m in re.finditer(rf"\b{function}\s*\(", text, re.IGNORECASE):
        depth, i, args, start = 1, m.end(), [], m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if (depth == 1 and text[i] == ",") or depth == 0:
                args.append(text[start:i].strip())
                start = i + 1
            i += 1
        out.append(args)
    return out


def test_every_setting_the_sql_reads_has_its_default_in_config():
    written = {name for name, _, _ in Config().settings()}
    pivoted, columns = _pivot()
    assert pivoted == set(lake.settings_read()) and len(columns) == len(pivoted) >= 4
    read = {m for f in SQL_FILES for m in SETTING_REF.findall(f.read_text())} | pivoted
    assert len(read) >= 20
    assert read <= written, f"read by sql/ but never written by analytics/config.py: {read - written}"


def test_no_default_is_written_in_the_sql():
    text = "\n".join(f.read_text() for f in SQL_FILES)
    assert not re.findall(r"COALESCE\(\s*setting_(?:value|text)\(", text)
    assert "FROM setting WHERE name = '" not in text          # every read goes through the two macros
    # nor in the portable files: no pivoted setting column is an argument of COALESCE (or IFNULL, NVL)
    _, columns = _pivot()
    assert _call_arguments("COALESCE(c.max_gap_s, 600e0)", "COALESCE") == [["c.max_gap_s", "600e0"]]
    for f in PORTABLE_FILES:
        code = re.sub(r"--[^\n]*", "", f.read_text())
        for function in ("COALESCE", "IFNULL", "NVL"):
            for args in _call_arguments(code, function):
                given = [a for a in args if re.fullmatch(rf"(\w+\.)?({'|'.join(columns)})", a)]
                assert not given, f"{f.name}: {function}({', '.join(args)}) gives {given} a default"


@pytest.mark.parametrize("name", ["flags.gpu_idle_pct", "samples.max_gap_s", "charging.policy"])
def test_a_missing_setting_is_an_error_not_a_silent_default(tres_db, name):
    con = duckdb.connect(str(tres_db))
    try:
        con.execute("DELETE FROM setting WHERE name = ?", [name])
        with pytest.raises(duckdb.Error, match=f"{re.escape(name)} is not in the setting table"):
            store.refresh(con)
    finally:
        con.close()


def test_a_cluster_missing_a_setting_gets_no_portable_results(tres_db):
    """Where the portable SQL runs without jobsight's check (Spark over a lake), a cluster whose
    settings lack one the SQL reads gets no rows, never rows computed with a default."""
    con = duckdb.connect(str(tres_db))
    try:
        con.execute("INSERT INTO metric_scope SELECT cluster, job_id_raw FROM job")
        for table, select in store.INPUTS.items():
            con.execute(f"CREATE TEMP VIEW {lake.INPUT_VIEWS[table]} AS {select}")
        for name, select in lake.lake_views():
            con.execute(f"CREATE TEMP VIEW {name} AS {select}")
        assert con.execute("SELECT count(*) FROM lake_job_metrics").fetchone()[0] == 3
        for name in lake.settings_read():
            con.execute(f"CREATE OR REPLACE TEMP VIEW lake_setting AS {store.INPUTS['setting']} "
                        f"WHERE s.name <> '{name}'")
            assert lake.missing_settings(con.execute("SELECT * FROM lake_setting").fetchall()) == {"c1": [name]}
            assert con.execute("SELECT count(*) FROM lake_job_metrics").fetchone()[0] == 0, name
            assert con.execute("SELECT count(*) FROM lake_job_gpu_devices").fetchone()[0] == 0, name
    finally:
        con.close()
