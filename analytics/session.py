"""Open a database for the metric commands: schema migrated, settings from jobsight.toml written
where the SQL reads them, stored per-job results current (analytics/store.py), reader views
(sql/views/) in place.

A read-write open refreshes the stored results (only the jobs ingested since the last refresh, or
everything once after a change of settings or definitions) and re-creates the reader views, so a
database always answers with the formulas of the jobsight that last wrote it; users querying the
file with plain DuckDB see the same numbers as the CLI. A read-only open checks that the views are
this version's and refuses otherwise, rather than answer with other formulas.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import duckdb

from jobsight.analytics import db, store
from jobsight.analytics.config import Config, ConfigError, apply_to_db, load_config
from jobsight.analytics.errors import UserError

VIEWS_DIR = Path(__file__).resolve().parents[1] / "sql" / "views"


def view_files() -> list[Path]:
    return sorted(VIEWS_DIR.glob("*.sql"))


def views_checksum() -> str:
    """This jobsight's SQL: the per-job definitions and the reader views."""
    h = hashlib.sha256()
    for p in store.metric_files() + view_files():
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _say(message: str) -> None:
    print(f"jobsight: {message}", file=sys.stderr, flush=True)


def apply_views(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        for p in view_files():
            con.execute(p.read_text(encoding="utf-8"))
        con.execute("DELETE FROM setting WHERE name = 'views.checksum'")
        con.execute("INSERT INTO setting VALUES ('views.checksum', NULL, ?)", [views_checksum()])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def open_db(path: str | Path, config: Config | str | None = None,
            read_only: bool = False) -> tuple[duckdb.DuckDBPyConnection, Config]:
    """Connect, migrate, refresh views and settings. Returns the connection and the config used."""
    try:
        cfg = config if isinstance(config, Config) else load_config(config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if read_only and not Path(path).exists():
        raise UserError(f"{path}: no such database (create it with `jobsight ingest --db {path} ...`)")
    con = db.connect(path, read_only=read_only)
    if read_only:
        stored = con.execute("SELECT text FROM setting WHERE name = 'views.checksum'").fetchone()
        if not stored or stored[0] != views_checksum():
            con.close()
            raise UserError(f"{path}: its metric views are from another jobsight version; "
                            "open it once read-write (e.g. `jobsight flags --db ...`) to refresh them")
        return con, cfg
    try:
        apply_to_db(con, cfg)
        store.refresh(con, say=_say)
        apply_views(con)
    except BaseException:
        con.close()
        raise
    return con, cfg
