"""The Parquet lake (`jobsight lake`, analytics/store/lake.py) and the portable metric SQL over it
(sql/metrics/NN_lake_*.sql: the one definition of job_gpu_devices and job_metrics, which the
database's refresh runs too).

One database for the module: a generated cluster ("demo", two months of sacct, sidecar and
nvidia-smi data through the real ingest) plus a hand-made cluster ("hand") whose two jobs have
GPU utilisation and SBU worked out below by hand. Checked:
- the Hive layout and that every row lands in its month's partition, counted in Python;
- the portable files keep to the SQL that Spark runs too, and read only their inputs;
- the lake SQL run by DuckDB over the Parquet files equals the stored job_metrics job by job, under
  both charging policies. The SQL is the same files now (store.py runs them over the database), so
  this no longer compares two definitions: it checks that the export carries every input the SQL
  reads (time_ms, settings, charging table) and that the database's input mapping (store.INPUTS)
  and the lake's give the same results;
- re-exporting a month, or everything, never duplicates rows;
- DuckDB reads only the partitions a month filter names;
- Spark (local mode, partition discovery) gets the same per-job results as DuckDB from the same SQL.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from conftest import require_service

from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.config import parse_config
from jobsight.analytics.demo import SUBDIRS, generate
from jobsight.analytics.store import lake
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import publish

GIB = 1073741824
TABLE_POLICY = {"charging": {"policy": "table", "preset": "snellius", "rates": [
    {"partition": "*", "per_core_h": 1, "mem_per_core_gb": 2},
    {"partition": "gpu_a100", "gpu_type": "a100", "per_gpu_h": 100, "per_core_h": 0.1, "min_gpus": 1,
     "cores_per_gpu": 18, "mem_per_gpu_gb": 120}]}}
POLICIES = {"slurm-billing": {}, "table": TABLE_POLICY}
COMPARED = ["gpu_util_pct", "gpu_util_source", "gpus_sampled", "gpus_idle", "gpu_util_min_device_pct",
            "charged_cores", "charged_gpus", "sbu", "sbu_source", "core_hours", "gpu_hours",
            "cpu_eff_pct", "cpu_eff_source", "mem_peak_bytes", "mem_charged_bytes", "mem_eff_pct", "time_eff_pct",
            "gpu_mem_peak_pct", "idle_gpus", "gpu_energy_kwh", "charge_driver", "charge_eff_pct", "wasted_sbu"]
REL = 1e-9   # summation order differs between engines: the last bits of a double may too

# The hand cluster. H1: 2 GPUs, 1 h, straddles the month boundary. GPU-a samples every 10 s with
# util 10, 20, 30, 40 (each weighs 10 s) -> 25 %; GPU-b 100 % then 0 % 1210 s later: both weights
# capped at 600 s -> 50 %. Job: (25 x 40 + 50 x 1200) / 1240. Its nvidia-smi samples (0 %) lose to
# the sidecar's. H2: CPU only, no billing, no memory request: charged memory = the sidecar's cgroup
# limits, 8 GiB on each of 2 hosts.
H1_UTIL = (25 * 40 + 50 * 1200) / 1240
HAND_SBU = {
    # billing 10 x 1 h; H2 has no billing and no rate applies under the default policy: core-hours 4 x 2 h
    "slurm-billing": {"H1": 10.0, "H2": 8.0},
    # H1 by the gpu_a100/a100 rate: 1 h x (36 cores x 0.1 + max(2, 1, 36/18, 240/120) GPUs x 100) = 203.6
    # H2 by '*': 2 h x max(4 cores, 16 GiB / 2 GiB per core) x 1 = 16
    "table": {"H1": 203.6, "H2": 16.0},
}


def _hand_cluster(con) -> None:
    con.execute(f"""
        INSERT INTO job (cluster, job_id, job_id_raw, account, "partition", state, submit_time, start_time,
                         end_time, elapsed_s, ncpus, ngpus, gpu_type, mem_alloc_bytes, billing, source)
        VALUES ('hand', 'H1', 'H1', 'acct', 'gpu_a100', 'COMPLETED', TIMESTAMP '2026-10-31 23:00:00',
                TIMESTAMP '2026-10-31 23:30:00', TIMESTAMP '2026-11-01 00:30:00', 3600, 36, 2, 'a100',
                {240 * GIB}, 10, 'slurm-sacct'),
               ('hand', 'H2', 'H2', 'acct', 'cpu', 'COMPLETED', TIMESTAMP '2026-11-02 08:00:00',
                TIMESTAMP '2026-11-02 08:00:00', TIMESTAMP '2026-11-02 10:00:00', 7200, 4, 0, NULL,
                NULL, NULL, 'slurm-sacct')""")
    rows = [("H1", "n1", "GPU-a", "2026-10-31 23:59:40", 10, "sidecar"),
            ("H1", "n1", "GPU-a", "2026-10-31 23:59:50", 20, "sidecar"),
            ("H1", "n1", "GPU-a", "2026-11-01 00:00:00", 30, "sidecar"),
            ("H1", "n1", "GPU-a", "2026-11-01 00:00:10", 40, "sidecar"),
            ("H1", "n1", "GPU-b", "2026-10-31 23:59:50", 100, "sidecar"),
            ("H1", "n1", "GPU-b", "2026-11-01 00:20:00", 0, "sidecar"),
            ("H1", "n1", "GPU-0", "2026-10-31 23:59:50", 0, "nvidia-smi"),
            ("H1", "n1", "GPU-0", "2026-11-01 00:00:50", 0, "nvidia-smi")]
    con.con.executemany("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                    "mem_total_bytes, source) VALUES ('hand', ?, ?, ?, CAST(? AS TIMESTAMP), ?, 1, 2, ?)", rows)
    con.con.executemany("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                    "mem_total_bytes, source) VALUES ('hand', 'H2', ?, 'cpu', CAST(? AS TIMESTAMP), 50, ?, ?, "
                    "'sidecar')",
                    [(h, t, GIB, 8 * GIB) for h in ("n1", "n2")
                     for t in ("2026-11-02 08:00:00", "2026-11-02 09:00:00")])


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lake")
    data = root / "data"
    generate(data, jobs=120, days=28, seed=7)            # 2026-10-21 .. 2026-11-18: two months
    path = root / "jobs.duckdb"
    rc = jobsight(["ingest", "--db", str(path), "--timezone", "Europe/Amsterdam", "--cluster", "demo", "--quiet",
                   *[str(data / d) for d in SUBDIRS if (data / d).is_dir()]])
    assert rc == 0
    con = Database.open(path, parse_config({}))
    _hand_cluster(con)
    store.refresh(con)      # rows written by hand: compute their stored results, as an ingest does
    con.close()
    publish(path)           # and publish them, as an ingest does: `lake export` reads the snapshot
    shutil.rmtree(data)
    return path


def _export(db: Path, out: Path, policy: str = "slurm-billing", *months: str) -> dict:
    con = Database.open(db, parse_config(POLICIES[policy]))
    try:
        return lake.export(con, out, *(months or (None, None)))
    finally:
        con.close()


def _by_job(con, view: str) -> dict[tuple, dict]:
    cur = con.execute(f"SELECT cluster, job_id_raw, {', '.join(COMPARED)} FROM {view}")
    return {(r[0], r[1]): dict(zip(COMPARED, r[2:])) for r in cur.fetchall()}


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)
    return a == b


def _diff(left: dict, right: dict) -> list:
    assert left.keys() == right.keys(), (sorted(left.keys() - right.keys())[:5], sorted(right.keys() - left.keys())[:5])
    return [(k, c, left[k][c], right[k][c]) for k in sorted(left) for c in COMPARED
            if not _same(left[k][c], right[k][c])]


def _lake_metrics(out: Path) -> dict:
    con = duckdb.connect()
    lake.attach(con, out)
    try:
        return _by_job(con, "lake_job_metrics")
    finally:
        con.close()


def _rows(sql: str) -> list[tuple]:
    with duckdb.connect() as con:
        return con.execute(sql).fetchall()


def _scalar(sql: str):
    return _rows(sql)[0][0]


def _files(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------- layout

def test_hive_layout_puts_every_row_in_its_month(db, tmp_path):
    out = tmp_path / "lake"
    _export(db, out)
    con = duckdb.connect(str(db), read_only=True)
    sample_times = con.execute("SELECT cluster, time FROM samples").fetchall()
    job_times = con.execute("SELECT cluster, submit_time, eligible_time, start_time, end_time FROM jobs").fetchall()
    con.close()
    want_samples = Counter((c, t.strftime("%Y-%m")) for c, t in sample_times)
    want_jobs = Counter((c, next((t.strftime("%Y-%m") for t in ts if t), "undated")) for c, *ts in job_times)
    assert {m for _, m in want_samples} == {"2026-10", "2026-11"}
    files = _files(out)
    for table, want in (("samples", want_samples), ("jobs", want_jobs)):
        assert [f for f in files if f.startswith(table + "/")] == sorted(
            f"{table}/cluster={c}/month={m}/data_0.parquet" for c, m in want)
        for (c, m), n in want.items():
            got = _scalar(f"SELECT count(*) FROM '{out}/{table}/cluster={c}/month={m}/data_0.parquet'")
            assert got == n, (table, c, m)
    for table in ("setting", "charge_rate"):
        assert [f for f in files if f.startswith(table + "/")] == [
            f"{table}/cluster={c}/{table}.parquet" for c in ("demo", "hand")]
    assert not [f for f in files if "staging" in f]
    # the partition columns come from the directory names, not from the files
    cols = [r[0] for r in _rows(f"DESCRIBE SELECT * FROM read_parquet("
                                   f"'{out}/samples/cluster=hand/month=2026-10/data_0.parquet', hive_partitioning = false)")]
    assert "cluster" not in cols and "month" not in cols and "time_ms" in cols


# ------------------------------------------------------------- the portable metric SQL

# What Spark rejects or reads differently, or DuckDB alone has.
NOT_PORTABLE = (
    (r"::", "DuckDB cast syntax"), (r"\bQUALIFY\b", "no QUALIFY in Spark"),
    (r"\bEXCLUDE\b", "no SELECT * EXCLUDE in Spark"), (r'"', "Spark reads \"x\" as a string"),
    (r"(?<![\w.])\d+\.\d+(?![\d.eE])", "Spark reads 1.0 as DECIMAL: write 1e0"),
    (r"\b(wmean|setting_value|setting_text|gib|slurm_time|date_diff|datediff|epoch_ms|epoch_us|epoch|to_seconds"
     r"|any_value|printf|strftime|generate_series|unnest|list|struct_pack|error|raise_error|arg_max|arg_min)\s*\(",
     "DuckDB-only (or differently spelt) function, or a jobsight macro"),
    (r"\bOVER\s+\w+\s*[-+*/]", "Spark parses `OVER w - x` as window `w-x`"),
    (r"\b(SEMI|ANTI|ASOF|POSITIONAL)\s+JOIN\b", "DuckDB's join spelling"), (r"\bLATERAL\b", "no LATERAL"),
    (r"//", "DuckDB integer division"), (r"\bGROUP\s+BY\s+ALL\b|\bORDER\s+BY\s+ALL\b", "DuckDB's BY ALL"),
    (r"\bCREATE\b|;", "one SELECT per file"),
)
INPUTS = set(lake.INPUT_VIEWS.values())


def test_portable_sql_keeps_to_the_subset_spark_runs():
    """What Spark would reject or read differently, caught even where Spark is not installed."""
    views = lake.lake_views()
    names = [name for name, _ in views]
    assert names[-1] == "lake_job_metrics" and {"lake_job_gpu_devices", "lake_config"} <= set(names)
    assert {s.view for s in store.STORED if s.view.startswith("lake_")} == {"lake_job_gpu_devices", "lake_job_cpu_hosts",
                                                                          "lake_job_metrics"}
    for i, (name, select) in enumerate(views):
        code = re.sub(r"--[^\n]*", "", select)
        assert code.lstrip().upper().startswith("SELECT"), name
        for pattern, why in NOT_PORTABLE:
            assert not re.search(pattern, code, re.IGNORECASE), f"{name}: {why}"
        # reads only the four inputs and the views of earlier files
        read = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", code, re.IGNORECASE))
        assert read <= INPUTS | set(names[:i]), f"{name} reads {read - INPUTS - set(names[:i])}"
    # the portable files come first in sql/metrics/: the DuckDB-only ones read what they store
    files = [p.name for p in store.metric_files()]
    assert files[:len(views)] == [p.name for p in lake.portable_files()]
    assert not any("_lake_" in f for f in files[len(views):])


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_lake_sql_over_parquet_equals_job_metrics(db, tmp_path, policy):
    out = tmp_path / "lake"
    _export(db, out, policy)
    con = Database.open(db, parse_config(POLICIES[policy]))
    views = _by_job(con, "job_metrics")
    columns = [r[0] for r in con.execute("DESCRIBE job_metrics").fetchall()]
    con.close()
    lk = _lake_metrics(out)
    assert _diff(views, lk) == []
    with duckdb.connect() as lcon:
        lake.attach(lcon, out)
        assert [r[0] for r in lcon.execute("DESCRIBE lake_job_metrics").fetchall()] == columns
    # the comparison covers every route through the formulas, not one easy case
    sources = Counter(r["sbu_source"] for r in lk.values())
    gpu_sources = Counter(r["gpu_util_source"] for r in lk.values())
    assert {"sidecar", "nvidia-smi", "slurm-tres"} <= set(gpu_sources), gpu_sources
    assert sources["table" if policy == "table" else "billing"] > 50, sources
    assert policy == "table" or sources["core-hours"] > 0, sources
    for job in ("H1", "H2"):
        assert math.isclose(lk["hand", job]["sbu"], HAND_SBU[policy][job], rel_tol=REL), (job, lk["hand", job])
        assert math.isclose(views["hand", job]["sbu"], HAND_SBU[policy][job], rel_tol=REL), (job, views["hand", job])
    assert math.isclose(lk["hand", "H1"]["gpu_util_pct"], H1_UTIL, rel_tol=REL)
    assert lk["hand", "H1"]["gpu_util_source"] == "sidecar" and lk["hand", "H1"]["gpus_sampled"] == 2
    assert lk["hand", "H2"]["gpu_util_pct"] is None


# ------------------------------------------------------------------------------- re-export

def test_reexport_replaces_partitions_and_never_duplicates(db, tmp_path):
    out = tmp_path / "lake"
    first = _export(db, out)
    files = _files(out)
    with duckdb.connect(str(db), read_only=True) as con:
        db_samples, db_jobs = con.execute("SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM jobs)").fetchone()
    counts = _scalar(f"SELECT count(*) FROM '{out}/samples/**/*.parquet'")
    assert counts == first["samples"]["rows"] == db_samples > 1000
    _export(db, out, "slurm-billing", "2026-10", "2026-10")
    _export(db, out)
    assert _files(out) == files
    assert _scalar(f"SELECT count(*) FROM '{out}/samples/**/*.parquet'") == counts
    jobs = _rows(f"SELECT count(*), count(DISTINCT (cluster, job_id_raw)) FROM read_parquet("
                 f"'{out}/jobs/**/*.parquet', hive_partitioning = true)")[0]
    assert jobs[0] == jobs[1] == first["jobs"]["rows"] == db_jobs

    # A change in the database reaches the lake by re-exporting the month it belongs to
    copy = tmp_path / "changed.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("DELETE FROM sample WHERE cluster = 'hand' AND device = 'GPU-b'")
    con.execute("UPDATE job SET state = 'FAILED' WHERE job_id_raw = 'H1'")
    con.close()
    hand_sql = (f"SELECT month, count(*) FROM read_parquet('{out}/samples/cluster=hand/**/*.parquet', "
                "hive_partitioning = true) GROUP BY ALL ORDER BY 1")
    assert _rows(hand_sql) == [("2026-10", 4), ("2026-11", 8)]
    _export(copy, out, "slurm-billing", "2026-11", "2026-11")
    assert _rows(hand_sql) == [("2026-10", 4), ("2026-11", 7)]   # October still has GPU-b's first
    _export(copy, out, "slurm-billing", "2026-10", "2026-10")
    assert _rows(hand_sql) == [("2026-10", 3), ("2026-11", 7)]
    state = _rows(f"SELECT state FROM '{out}/jobs/**/*.parquet' WHERE job_id_raw = 'H1'")
    assert state == [("FAILED",)]

    # A job whose submit time moved to another month (a requeue may do that) is reported, and
    # re-exporting both months leaves one copy
    con = duckdb.connect(str(copy))
    con.execute("UPDATE job SET submit_time = TIMESTAMP '2026-11-01 00:10:00' WHERE job_id_raw = 'H1'")
    con.close()
    assert _export(copy, out, "slurm-billing", "2026-11", "2026-11")["moved_jobs"] == [
        ("hand", "H1", ["2026-10", "2026-11"])]
    assert _export(copy, out, "slurm-billing", "2026-10", "2026-11")["moved_jobs"] == []
    assert _rows(f"SELECT month FROM read_parquet('{out}/jobs/**/*.parquet', hive_partitioning = true) "
                 "WHERE job_id_raw = 'H1'") == [("2026-11",)]


def test_month_filter_reads_only_that_months_files(db, tmp_path):
    out = tmp_path / "lake"
    _export(db, out)
    november = [f for f in _files(out) if f.startswith("samples/") and "/month=2026-11/" in f]
    assert len(november) == 2 and len([f for f in _files(out) if f.startswith("samples/")]) == 4
    con = duckdb.connect()
    lake.attach(con, out)
    plan = "\n".join(r[1] for r in con.execute(
        "EXPLAIN ANALYZE SELECT count(*) FROM lake_samples WHERE month = '2026-11'").fetchall())
    assert re.search(r"Total Files Read:\s*2\b", plan), plan
    con.close()


# ------------------------------------------------------------------------------------- CLI

def test_cli_export_metrics_and_errors(db, tmp_path, capsys):
    out = tmp_path / "lake"
    assert jobsight(["lake", "export", "--db", str(db), "--out", str(out), "--month", "2026-10"]) == 0
    said = capsys.readouterr().out
    assert "samples:" in said and "months 2026-10..2026-10" in said
    assert {p.name for p in (out / "samples" / "cluster=demo").iterdir()} == {"month=2026-10"}
    assert jobsight(["lake", "metrics", str(out), "--cluster", "hand", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("cluster,job_id_raw,") and ",H1," in lines[1]
    assert jobsight(["lake", "query", str(out), "SELECT count(*) AS n FROM lake_jobs WHERE cluster = 'hand'",
                     "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "1"]
    assert jobsight(["lake", "export", "--db", str(db), "--out", str(out), "--month", "2026-13"]) == 2
    assert "--month '2026-13': give a month as YYYY-MM" in capsys.readouterr().err
    assert jobsight(["lake", "metrics", str(tmp_path / "nowhere")]) == 2
    assert "no samples/ Parquet files" in capsys.readouterr().err


def test_a_lake_missing_a_setting_is_refused_not_given_a_default(db, tmp_path, capsys):
    out = tmp_path / "lake"
    _export(db, out)
    setting = out / "setting" / "cluster=hand" / "setting.parquet"
    _rows(f"COPY (SELECT * FROM '{setting}' WHERE name <> 'samples.max_gap_s') TO '{setting}.new' (FORMAT parquet)")
    setting.with_suffix(".parquet.new").replace(setting)
    assert jobsight(["lake", "metrics", str(out)]) == 2
    assert "settings missing from setting/ (cluster hand: samples.max_gap_s)" in capsys.readouterr().err
    # the SQL alone (an engine without jobsight's check) gives that cluster no rows, not defaults
    con = duckdb.connect()
    for table in lake.PARTITIONED + lake.PER_CLUSTER:
        con.execute(f"CREATE TEMP VIEW {lake.INPUT_VIEWS[table]} AS SELECT * FROM {lake._read_parquet(out, table)}")
    for name, select in lake.lake_views():
        con.execute(f"CREATE TEMP VIEW {name} AS {select}")
    assert con.execute("SELECT DISTINCT cluster FROM lake_job_metrics").fetchall() == [("demo",)]
    con.close()


def test_export_refuses_cluster_names_unfit_for_a_directory(db, tmp_path, capsys):
    copy = tmp_path / "odd.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("UPDATE job SET cluster = 'a/b' WHERE job_id_raw = 'H2'")
    con.close()
    assert jobsight(["lake", "export", "--db", str(copy), "--out", str(tmp_path / "lake")]) == 2
    assert "'a/b' cannot be a lake partition directory" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").iterdir())


# ----------------------------------------------------------------------------------- Spark

def _java_ok() -> bool:
    try:
        return subprocess.run(["java", "-version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def spark():
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        SparkSession = None
    require_service(SparkSession is not None, "pyspark is not installed (pip install -e '.[test]')")
    require_service(_java_ok(), "Java (17+) is not installed: Spark needs it")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[2]").appName("jobsight-test-lake")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "1").config("spark.sql.session.timeZone", "UTC")
               # a small job on a small machine: start fast rather than optimise long runs
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
               .config("spark.sql.codegen.wholeStage", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_spark_and_duckdb_agree_on_the_lake(db, tmp_path, spark):
    out = tmp_path / "lake"
    _export(db, out, "table")
    lake.attach_spark(spark, out)
    rows = spark.sql(f"SELECT cluster, job_id_raw, {', '.join(COMPARED)} FROM lake_job_metrics").collect()
    on_spark = {(r[0], r[1]): dict(zip(COMPARED, r[2:])) for r in rows}
    on_duckdb = _lake_metrics(out)
    assert len(on_spark) == len(on_duckdb) > 100
    assert _diff(on_spark, on_duckdb) == []
    assert math.isclose(on_spark["hand", "H1"]["sbu"], HAND_SBU["table"]["H1"], rel_tol=REL)
    assert math.isclose(on_spark["hand", "H1"]["gpu_util_pct"], H1_UTIL, rel_tol=REL)
    # Spark found the partitions by itself: cluster and month are columns of the input views
    months = spark.sql("SELECT DISTINCT cluster, month FROM lake_samples ORDER BY 1, 2").collect()
    assert [tuple(r) for r in months] == [("demo", "2026-10"), ("demo", "2026-11"),
                                          ("hand", "2026-10"), ("hand", "2026-11")]
