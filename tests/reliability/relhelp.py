"""Helpers for the reliability suite: generated input, `jobsight ingest` as a subprocess, and
order-free checksums of a database's public contents (ingest ids and times left out)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("JOBSIGHT_LONG") == "1"
INGEST_OPTS = ["--timezone", "Europe/Amsterdam", "--cluster", "demo"]

# Columns that depend on when or in which run a row was written, not on what was ingested.
VOLATILE = {"ingest_id", "started_at", "time", "finished_at", "applied_at"}
# What a user can read; `ingests` depends on file order (stored vs updated), so it has its own check.
CONTENT = ("jobs", "steps", "samples", "rejects", "sidecar_run")


def ingest_cmd(db: Path, *paths: Path | str, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "jobsight.analytics.cli", "ingest", "--db", str(db), *INGEST_OPTS, "--quiet", *extra,
            *map(str, paths)]


def run_ingest(db: Path, *paths: Path | str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(ingest_cmd(db, *paths, extra=extra), cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def table_checksum(con: duckdb.DuckDBPyConnection, rel: str, drop: set[str] = VOLATILE) -> tuple[int, str]:
    """(row count, md5 over the sorted rows) of a view or table, volatile columns left out."""
    cols = [r[0] for r in con.execute(f"DESCRIBE {rel}").fetchall() if r[0] not in drop]
    row = "concat_ws('\x1f', " + ", ".join(f"coalesce(CAST(\"{c}\" AS VARCHAR), '\\N')" for c in cols) + ")"
    n, digest = con.execute(
        f"SELECT count(*), md5(coalesce(string_agg(r, '\x1e' ORDER BY r), '')) FROM (SELECT {row} AS r FROM {rel})"
    ).fetchone()
    return int(n), digest


def content_checksums(con: duckdb.DuckDBPyConnection, drop: set[str] = VOLATILE) -> dict[str, tuple[int, str]]:
    return {rel: table_checksum(con, rel, drop) for rel in CONTENT}


def ingests_checksum(con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
    return table_checksum(con, "ingests")


def open_ro(db: Path) -> duckdb.DuckDBPyConnection:
    """Open through jobsight's own connect (runs migrations, so read-write), as a user would."""
    from jobsight.analytics.store import db as jdb
    return jdb.connect(db)


def snapshot(db: Path) -> dict:
    con = open_ro(db)
    try:
        out = content_checksums(con)
        out["ingests"] = ingests_checksum(con)
        return out
    finally:
        con.close()


_CLUSTER: dict = {}


def generated_cluster(tmp_path_factory) -> tuple[Path, list[Path]]:
    """(root, input folders) of a generated 14-day, 150-job cluster, made once per session: several
    weekly sacct text and JSON dumps sharing the jobs that span a week boundary, sidecar CSV +
    metadata, nvidia-smi logs, seff reports. (A helper, not a conftest.py: tests/ modules import
    names from `conftest`, which a second conftest module would shadow.)"""
    if "root" not in _CLUSTER:
        from jobsight.analytics.demo import SUBDIRS, generate
        root = tmp_path_factory.mktemp("cluster") / "data"
        generate(root, jobs=150, days=14, seed=5)
        _CLUSTER["root"] = (root, [root / d for d in SUBDIRS if (root / d).is_dir()])
    return _CLUSTER["root"]
