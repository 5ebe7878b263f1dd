"""Open a database for the metric commands: schema migrated, metric views (sql/views/) current,
settings from jobsight.toml written where the views read them.

Views are re-created on every read-write open (they hold no data), so a database always answers
with the formulas of the jobsight that last wrote it; users querying the file with plain DuckDB
see the same numbers as the CLI. A read-only open checks that the stored views are this
version's and refuses otherwise, rather than answer with other formulas.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb

from jobsight.analytics import db
from jobsight.analytics.config import Config, ConfigError, apply_to_db, load_config
from jobsight.analytics.errors import UserError

VIEWS_DIR = Path(__file__).resolve().parents[1] / "sql" / "views"


def view_files() -> list[Path]:
    return sorted(VIEWS_DIR.glob("*.sql"))


def views_checksum() -> str:
    h = hashlib.sha256()
    for p in view_files():
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


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
    apply_to_db(con, cfg)
    apply_views(con)
    return con, cfg
