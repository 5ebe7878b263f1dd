"""A Hive-partitioned Parquet lake of a jobsight database, and the portable metric SQL over it.

    LAKE/samples/cluster=C/month=YYYY-MM/data_N.parquet     samples by the month of their time
    LAKE/jobs/cluster=C/month=YYYY-MM/data_N.parquet        jobs by the month they were submitted
    LAKE/setting/cluster=C/setting.parquet                   the charging/sample settings in force
    LAKE/charge_rate/cluster=C/charge_rate.parquet           the charging table (may hold no rows)

Jobs go by submit month (else eligible, start, end; `month=undated` when none is known) because it
does not change while a job runs: re-exporting a month then replaces its jobs with their latest
state and never leaves a stale copy in another month, as an end-time key would for a job that was
still running at the previous export.

Export replaces whole partitions: every (cluster, month) for which the database holds samples or
jobs is written to a staging folder, then its directory in each table is swapped in (rename the old
one away, rename the new one in, delete the old). Re-running an export never duplicates rows;
cluster-months the database holds nothing for (pruned from it) are left as they are.

The per-job metrics are sql/metrics/NN_lake_<view>.sql: single SELECTs in the subset of SQL that
DuckDB and Spark SQL share, the one definition the database's stored job_gpu_devices and job_metrics
are computed with too (analytics/store/results.py). The rules: no `::`, no macros, no QUALIFY, no `* EXCLUDE`,
no double-quoted identifiers, no DuckDB-only functions, double literals written `1e0` (Spark reads
`1.0` as DECIMAL), every divisor guarded with NULLIF (Spark's ANSI mode fails on division by zero),
`(LAG(x) OVER w)` in parentheses (Spark reads `OVER w - x` as a window named `w-x`),
no setting defaults (a cluster whose settings lack one gets no result). They read the tables
lake_samples, lake_jobs, lake_setting and lake_charge_rate, and each engine creates them as
temporary views named by the file: lake_views() gives (name, SELECT) in order.
"""
from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Optional

import duckdb

from jobsight.analytics.errors import UserError

# The portable metric SQL: sql/metrics/NN_lake_<view>.sql (the DuckDB-only files there come after).
LAKE_SQL_DIR = Path(__file__).resolve().parents[2] / "sql" / "metrics"
PORTABLE_GLOB = "[0-9][0-9]_lake_*.sql"
SETTINGS_VIEW = "lake_config"      # the file that reads lake_setting: one row of settings per cluster
PARTITIONED = ("samples", "jobs")          # cluster / month
PER_CLUSTER = ("setting", "charge_rate")   # cluster only: the settings in force at the last export
INPUT_VIEWS = {t: f"lake_{t}" for t in PARTITIONED + PER_CLUSTER}
UNDATED = "undated"
# Sizes for distributed readers: a row group of 1M samples is ~4 MB compressed (one Spark/Trino split
# reads many), a file is cut at 512 MB (~130M samples), so a busy cluster-month is ~10 files, not
# thousands. Parquet v2 pages bring DELTA_BINARY_PACKED for the sorted time columns: 3.6-4.0 instead of
# 6.8 bytes per sample row (bench/lake_bench.py). Spark >= 3.3, Trino and Athena read them.
ROW_GROUP_SIZE = 1_048_576
FILE_SIZE = "512MB"
PARQUET_OPTIONS = (f"COMPRESSION zstd, PARQUET_VERSION V2, ROW_GROUP_SIZE {ROW_GROUP_SIZE}, "
                   f"FILE_SIZE_BYTES '{FILE_SIZE}'")
_MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
# Partition values become directory names that Spark, Trino and Athena parse: keep them plain.
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

SAMPLE_MONTH = "strftime(time, '%Y-%m')"
JOB_MONTH = (f"COALESCE(strftime(COALESCE(submit_time, eligible_time, start_time, end_time), '%Y-%m'), "
             f"'{UNDATED}')")

# time_ms, epoch milliseconds, is the portable clock of the sample weights: DuckDB and Spark share no
# function from TIMESTAMP to a number. Rounded down, as date_diff('millisecond', ...) counts (DuckDB's
# epoch_ms() rounds to the nearest): the lake's files and the database's refresh (store.py) use this
# one expression, so both weigh sub-millisecond times alike.
TIME_MS = "epoch_us(time) // 1000"

# What goes into each table's files.
EXPORT_SQL = {
    "samples": f"SELECT *, {TIME_MS} AS time_ms, {SAMPLE_MONTH} AS month FROM samples",
    "jobs": f"SELECT *, {JOB_MONTH} AS month FROM jobs",
}
SORT = {"samples": "cluster, month, job_id_raw, host, device, time", "jobs": "cluster, month, job_id_raw"}


def portable_files() -> list[Path]:
    """The portable metric SQL files, in order."""
    return sorted(LAKE_SQL_DIR.glob(PORTABLE_GLOB))


def lake_views() -> list[tuple[str, str]]:
    """(view name, SELECT) for every portable metric file, in file order."""
    out = []
    for p in portable_files():
        name = p.stem.split("_", 1)[1]
        out.append((name, p.read_text(encoding="utf-8").strip().rstrip(";")))
    return out


_SETTING_READ = re.compile(r"\bname\s*=\s*'([a-z_.]+)'\s+THEN\s+(value|text)\b", re.IGNORECASE)


def settings_read() -> dict[str, str]:
    """The settings the portable SQL reads from lake_setting: {name: 'value' or 'text'}."""
    select = dict(lake_views())[SETTINGS_VIEW]
    return {name: column.lower() for name, column in _SETTING_READ.findall(select)}


_SETTING_COLUMN = re.compile(r"\bname\s*=\s*'([a-z_.]+)'\s+THEN\s+(?:value|text)\s+END\)\s+AS\s+(\w+)", re.IGNORECASE)


def settings_columns(views: dict[str, str] | None = None) -> dict[str, str]:
    """{setting: the lake_config column that holds it} (`views`: lake_views() as a dict, if read)."""
    return dict(_SETTING_COLUMN.findall((views or dict(lake_views()))[SETTINGS_VIEW]))


def missing_settings(rows) -> dict[str, list[str]]:
    """{cluster: [setting, ...]} for each cluster of (cluster, name, value, text) rows that lacks a
    setting the portable SQL reads (or has it empty): such a cluster's jobs get no results."""
    read = settings_read()
    have: dict[str, set[str]] = {}
    for cluster, name, value, text in rows:
        names = have.setdefault(cluster, set())
        if name in read and (text if read[name] == "text" else value) is not None:
            names.add(name)
    return {c: sorted(set(read) - names) for c, names in sorted(have.items()) if set(read) - names}


def _check_settings(lake: str | Path, rows) -> None:
    missing = missing_settings(rows)
    if missing:
        which = "; ".join(f"cluster {c}: {', '.join(names)}" for c, names in missing.items())
        raise UserError(f"{lake}: settings missing from setting/ ({which}): re-export those clusters "
                        "with this jobsight (`jobsight lake export`); the metric SQL has no defaults")


def parse_month(text: str, option: str) -> str:
    if not _MONTH_RE.match(text or ""):
        raise UserError(f"{option} {text!r}: give a month as YYYY-MM, e.g. 2026-11")
    return text


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _month_where(table: str, since: str | None, until: str | None) -> tuple[str, list]:
    """WHERE clause for a month range. Samples are filtered on `time` itself, so that DuckDB skips
    row groups by their min/max time instead of formatting every row's month."""
    clauses, params = [], []
    if table == "samples":
        if since:
            clauses.append("time >= CAST(? AS TIMESTAMP)")
            params.append(f"{since}-01")
        if until:
            year, month = map(int, until.split("-"))
            clauses.append("time < CAST(? AS TIMESTAMP)")
            params.append(f"{year + month // 12:04d}-{month % 12 + 1:02d}-01")
    else:
        if since:
            clauses.append("month >= ?")
            params.append(since)
        if until:
            # 'undated' sorts after every YYYY-MM: only an export with no --until takes undated jobs
            clauses.append("month <= ?")
            params.append(until)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _check_clusters(clusters: set[str]) -> None:
    bad = sorted(c for c in clusters if not _CLUSTER_RE.match(c))
    if bad:
        raise UserError(f"cluster name(s) {', '.join(map(repr, bad))} cannot be a lake partition directory: "
                        "use letters, digits, '.', '_' and '-' (rename with --cluster at ingest)")


def _swap(new: Path | None, target: Path, trash: Path) -> None:
    """Put `new` (a finished directory, or None for 'no rows any more') where `target` is."""
    if target.exists():
        old = trash / uuid.uuid4().hex
        os.replace(target, old)
    if new is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(new, target)


def export(con: duckdb.DuckDBPyConnection, out: str | Path, since: str | None = None,
           until: str | None = None) -> dict:
    """Write the database's rows of the month range into the lake at `out`. Returns counts per table:
    {"samples": {"rows": n, "partitions": [(cluster, month), ...]}, ...}."""
    out = Path(out)
    if since and until and since > until:
        raise UserError(f"--since {since} is after --until {until}")
    _check_clusters({c for (c,) in con.execute(
        "SELECT DISTINCT cluster FROM job UNION SELECT DISTINCT cluster FROM sample").fetchall()})
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".staging-{uuid.uuid4().hex}"
    trash = staging / "trash"
    trash.mkdir(parents=True)
    summary: dict[str, dict] = {}
    try:
        for table, sql in EXPORT_SQL.items():
            if table == "samples":
                sql += _pruned_samples(con, since, until)
            where, params = _month_where(table, since, until)
            dest = staging / table
            n = con.execute(
                f"COPY (SELECT * FROM ({sql}){where} ORDER BY {SORT[table]}) TO {_quote(str(dest))} "
                f"(FORMAT parquet, PARTITION_BY (cluster, month), {PARQUET_OPTIONS})", params).fetchone()[0]
            # the partitions the database holds rows for are the ones COPY wrote
            written = sorted((c.name.split("=", 1)[1], m.name.split("=", 1)[1])
                             for c in dest.glob("cluster=*") for m in c.glob("month=*"))
            summary[table] = {"rows": n, "partitions": written}
        # A cluster-month the database holds any sample or job of is replaced in both tables: a job
        # that left the month (its submit time changed) must not stay behind in the old copy.
        covered = {p for t in PARTITIONED for p in summary[t]["partitions"]}
        for table in PARTITIONED:
            for cluster, month in sorted(covered):
                rel = Path(table) / f"cluster={cluster}" / f"month={month}"
                _swap(staging / rel if (staging / rel).is_dir() else None, out / rel, trash)
        clusters = {c for c, _ in covered}
        for table in PER_CLUSTER:
            for cluster in sorted(clusters):
                folder = staging / table / f"cluster={cluster}"
                folder.mkdir(parents=True)
                where = " WHERE name <> 'views.checksum'" if table == "setting" else ""
                con.execute(f"COPY (SELECT * FROM {table}{where}) TO "
                            f"{_quote(str(folder / (table + '.parquet')))} (FORMAT parquet)")
                _swap(folder, out / table / f"cluster={cluster}", trash)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    summary["moved_jobs"] = moved_jobs(out, clusters) if summary["jobs"]["partitions"] else []
    return summary


def _pruned_samples(con, since: str | None, until: str | None) -> str:
    """` UNION ALL BY NAME ...`: the samples `jobsight prune` moved to a lake (table pruned_month),
    read back from it for the months exported, so that a re-exported month keeps them; "" if none."""
    rows = con.execute("SELECT cluster, month, before, lake FROM pruned_month WHERE month >= ? AND month <= ? "
                       "ORDER BY ALL", [since or "0000-00", until or "9999-99"]).fetchall()
    parts = []
    for cluster, month, before, root in rows:
        where = _under(root, "samples", f"cluster={cluster}", f"month={month}")
        files = sorted(Path(where).glob("*.parquet")) if "://" not in root else [_under(where, "*.parquet")]
        if not files:
            raise UserError(f"the samples of {cluster} {month} before {before} were pruned to the lake {root}, "
                            f"which no longer holds them ({where}): restore that partition; nothing was exported")
        paths = "[" + ", ".join(_quote(str(f)) for f in files) + "]"
        parts.append(f"SELECT * FROM read_parquet({paths}, hive_partitioning = true, hive_types = "
                     f"{{'cluster': VARCHAR, 'month': VARCHAR}}) WHERE time < {_quote(str(before))}::TIMESTAMP")
    return "".join(f" UNION ALL BY NAME {p}" for p in parts)


def moved_jobs(lake: str | Path, clusters: set[str]) -> list[tuple[str, str, list[str]]]:
    """Jobs of these clusters found in more than one month: their submit time changed since an
    earlier export (a requeue may reset it) and an older month still holds the old copy.
    (cluster, job_id_raw, months); re-exporting the older months removes the copies."""
    if not clusters:
        return []
    with duckdb.connect() as con:
        return [(c, j, sorted(ms)) for c, j, ms in con.execute(
            f"SELECT cluster, job_id_raw, list(month) FROM {_read_parquet(lake, 'jobs')} "
            f"WHERE list_contains(?, cluster) GROUP BY ALL HAVING count(*) > 1 ORDER BY 1, 2",
            [sorted(clusters)]).fetchall()]


def _under(lake: str | Path, *parts: str) -> str:
    """A path inside the lake, as a string: also for s3://... or hdfs://... roots, which Path would mangle."""
    return "/".join([str(lake).rstrip("/"), *parts])


def _read_parquet(lake: str | Path, table: str) -> str:
    """DuckDB's read_parquet() of one lake table, partition columns read as strings."""
    hive_types = "{'cluster': VARCHAR, 'month': VARCHAR}" if table in PARTITIONED else "{'cluster': VARCHAR}"
    return (f"read_parquet({_quote(_under(lake, table, '**', '*.parquet'))}, hive_partitioning = true, "
            f"hive_types = {hive_types})")


def attach(con: duckdb.DuckDBPyConnection, lake: str | Path) -> None:
    """Create the lake_* input views over the Parquet files in place, then the metric views.
    A remote root (s3://...) needs DuckDB's httpfs extension and credentials set up on `con`."""
    for table in PARTITIONED + PER_CLUSTER:
        if "://" not in str(lake) and not any(Path(lake, table).glob("**/*.parquet")):
            raise UserError(f"{lake}: no {table}/ Parquet files: is this a jobsight lake? "
                            f"(write one with `jobsight lake export --db DB --out {lake}`)")
        con.execute(f"CREATE OR REPLACE TEMPORARY VIEW {INPUT_VIEWS[table]} AS SELECT * FROM "
                    f"{_read_parquet(lake, table)}")
    _check_settings(lake, con.execute(f"SELECT cluster, name, value, text FROM {INPUT_VIEWS['setting']}").fetchall())
    for name, select in lake_views():
        con.execute(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {select}")


def attach_spark(spark, lake: str | Path) -> None:
    """The same views in a SparkSession (pyspark is not a dependency: the caller brings Spark).
    Partition discovery reads cluster and month from the directory names, as strings."""
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    for table in PARTITIONED + PER_CLUSTER:
        path = _under(lake, table)
        spark.read.option("basePath", path).parquet(path).createOrReplaceTempView(INPUT_VIEWS[table])
    _check_settings(lake, [tuple(r) for r in spark.sql(
        f"SELECT cluster, name, value, text FROM {INPUT_VIEWS['setting']}").collect()])
    for name, select in lake_views():
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {select}")


def job_metrics(db, columns: list[str], cluster: Optional[str] = None, month: Optional[str] = None) -> list[dict]:
    """The lake's per-job metrics (lake_job_metrics), of one cluster and of the jobs of one month
    partition (DuckDB then prunes the other months' job files)."""
    clauses, params = [], []
    if cluster:
        clauses.append("m.cluster = ?")
        params.append(cluster)
    if month:
        clauses.append("EXISTS (SELECT 1 FROM lake_jobs j WHERE j.cluster = m.cluster "
                       "AND j.job_id_raw = m.job_id_raw AND j.month = ?)")
        params.append(month)
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    cols = ", ".join(f'm."{c}"' for c in columns)
    return db.rows(f"SELECT {cols} FROM lake_job_metrics m{where} ORDER BY cluster, job_id_raw", params)
