"""The one way into a jobsight database (datasette's ``Database`` is the model): every command, the
reports, the lake export and the dashboard's pages open, refresh and query it through this class.

``Database.open(path, config)`` connects, migrates the schema (analytics/db.py), writes the
settings of jobsight.toml where the SQL reads them, brings the stored results up to date
(analytics/store.py: only the jobs ingested since the last refresh, or the tables whose definitions
or settings changed) and re-creates the reader views (sql/views/), so a database always answers
with the formulas of the jobsight that last wrote it: users querying the file with plain DuckDB see
the same numbers as the CLI. ``read_only=True`` refreshes nothing: it checks that the views are
this version's and refuses otherwise, rather than answer with other formulas.

``Database.of(con)`` wraps a connection that is already open: a cursor on a published snapshot
(analytics/snapshot.py hands the dashboard's requests these) or a test's.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

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


def stored_views_checksum(con: duckdb.DuckDBPyConnection) -> Optional[str]:
    row = con.execute("SELECT text FROM setting WHERE name = 'views.checksum'").fetchone()
    return row[0] if row else None


def say(message: str) -> None:
    """What a refresh tells the user (a full recompute and why): stderr, never the output."""
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


class Database:
    """An open jobsight database: queries (``execute``, ``rows``, ``fetch``, ``value``, ``df``),
    ``refresh`` and ``close``; a context manager."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Optional[Path] = None,
                 config: Optional[Config] = None, read_only: bool = False,
                 tables: Optional[frozenset[str]] = None):
        self.con = con
        self.path = path
        self.config = config
        self.read_only = read_only
        self._tables = tables

    @classmethod
    def open(cls, path: str | Path, config: Config | str | None = None, read_only: bool = False,
             say: Optional[Callable[[str], None]] = say, must_exist: bool = False) -> "Database":
        """Connect, migrate, write the settings, refresh the stored results and the views (see the
        module docstring). ``config``: a Config, a jobsight.toml path, or None for the usual search.
        ``must_exist``: refuse a path that holds no database rather than create one (the commands
        that only read: a mistyped --db is an error, not an empty database); read-only implies it."""
        try:
            cfg = config if isinstance(config, Config) else load_config(config)
        except ConfigError as exc:
            raise UserError(str(exc)) from None
        path = Path(path)
        if (read_only or must_exist) and not path.is_file():
            what = "not a file" if path.exists() else "no such database"
            raise UserError(f"{path}: {what} (create it with `jobsight ingest --db {path} ...`)")
        con = db.connect(path, read_only=read_only)
        try:
            if read_only:
                if stored_views_checksum(con) != views_checksum():
                    raise UserError(f"{path}: its metric views are from another jobsight version; "
                                    "open it once read-write (e.g. `jobsight flags --db ...`) to refresh them")
            else:
                apply_to_db(con, cfg)
                store.refresh(con, say=say)
                apply_views(con)
        except BaseException:
            con.close()
            raise
        return cls(con, path, cfg, read_only)

    @classmethod
    def connect(cls, path: str | Path) -> "Database":
        """Connect and migrate only, for a writer that changes the data before anything is computed
        from it (`jobsight ingest`, which opens the database again to refresh it afterwards)."""
        return cls(db.connect(path), Path(path))

    @classmethod
    def of(cls, con: "duckdb.DuckDBPyConnection | Database", tables: Optional[frozenset[str]] = None) -> "Database":
        """Wrap a connection (or cursor) that is already open."""
        if isinstance(con, Database):
            return con
        return cls(con, tables=tables)

    # --- queries ------------------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence | dict | None = None) -> duckdb.DuckDBPyConnection:
        return self.con.execute(sql, params if params is not None else [])

    def executemany(self, sql: str, params: Sequence) -> duckdb.DuckDBPyConnection:
        return self.con.executemany(sql, params)

    def fetch(self, sql: str, params: Sequence | None = None) -> tuple[list[str], list[tuple]]:
        """A query's column names and rows as tuples (no dict per row: outputs of 10^5 rows)."""
        cur = self.execute(sql, params)
        return [d[0] for d in cur.description], cur.fetchall()

    def rows(self, sql: str, params: Sequence | None = None) -> list[dict[str, Any]]:
        names, data = self.fetch(sql, params)
        return [dict(zip(names, r)) for r in data]

    def value(self, sql: str, params: Sequence | None = None) -> Any:
        """The first column of the first row (None when there is no row)."""
        row = self.execute(sql, params).fetchone()
        return row[0] if row else None

    def df(self, sql: str, params: Sequence | None = None):
        return self.execute(sql, params).df()

    @property
    def tables(self) -> frozenset[str]:
        """The tables of the database (looked up once)."""
        if self._tables is None:
            self._tables = frozenset(r[0] for r in self.con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall())
        return self._tables

    # --- the stored results -------------------------------------------------------------------

    def refresh(self, full: bool = False, say: Optional[Callable[[str], None]] = None) -> store.Refresh:
        """Bring the stored per-job results and summaries up to date (analytics/store.py)."""
        if self.read_only:
            raise UserError(f"{self.path}: opened read-only; its stored results cannot be refreshed")
        return store.refresh(self.con, say=say, full=full)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
