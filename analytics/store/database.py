"""The one way into a jobsight database (datasette's ``Database`` is the model): every command, the
reports, the lake export and the dashboard's pages open, refresh and query it through this class.

``Database.open(path, config)`` connects, migrates the schema (analytics/store/db.py), writes the
settings of jobsight.toml where the SQL reads them, brings the stored results up to date
(analytics/store/results.py: only the jobs ingested since the last refresh, or the tables whose definitions
or settings changed) and re-creates the reader views (sql/views/), so a database always answers
with the formulas of the jobsight that last wrote it: users querying the file with plain DuckDB see
the same numbers as the CLI. ``read_only=True`` refreshes nothing: it checks that the views are
this version's and refuses otherwise, rather than answer with other formulas.

``Database.of(con)`` wraps a connection that is already open: a cursor on a published snapshot
(analytics/store/snapshot.py hands the dashboard's requests these) or a test's.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import duckdb

from jobsight.analytics.config import Config, ConfigError, load_config
from jobsight.analytics.errors import UserError
from jobsight.analytics.store import db
from jobsight.analytics.store import results as store
from jobsight.analytics.store.settings import apply_to_db, has_settings

VIEWS_DIR = Path(__file__).resolve().parents[2] / "sql" / "views"


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
        db.rollback(con)
        raise


def check_readable(con: duckdb.DuckDBPyConnection, target: Path, db_path: Path, views: bool = True) -> None:
    """UserError unless the attached ``target`` (the database or its snapshot) has this jobsight's
    schema and, with ``views``, its metric views: a reader never answers with other formulas, and
    never upgrades a file itself (`jobsight settings` does, as a writer)."""
    have, need = db.current_version(con), db.known_version()
    if have != need:
        raise UserError(f"{target} has schema version {have}, this jobsight needs {need}; "
                        f"run `jobsight settings --db {db_path}` once to upgrade it")
    if views and stored_views_checksum(con) != views_checksum():
        raise UserError(f"{target}: its metric views are from another jobsight version; "
                        f"run `jobsight settings --db {db_path}` once to bring them up to date")


class Database:
    """An open jobsight database: queries (``execute``, ``rows``, ``fetch``, ``value``, ``df``),
    ``refresh`` and ``close``; a context manager."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Optional[Path] = None,
                 config: Optional[Config] = None, read_only: bool = False,
                 tables: Optional[frozenset[str]] = None, umask: Optional[int] = None):
        self.con = con
        self._umask = umask     # a writer's: the process's umask before it, restored by close()
        self.path = path
        self.config = config
        self.read_only = read_only
        self._tables = tables

    @classmethod
    def open(cls, path: str | Path, config: Config | str | None = None, read_only: bool = False,
             say: Optional[Callable[[str], None]] = say, must_exist: bool = False,
             progress: Optional[Callable[[str], None]] = None, write_settings: Optional[bool] = None) -> "Database":
        """The writer's open: connect, migrate, write the settings, refresh the stored results and
        the views (see the module docstring). ``config``: a Config (written), a jobsight.toml path,
        or None for the usual search; settings found in a file are written, and with no file the
        database keeps the settings it holds (the defaults go into a database that has none).
        ``write_settings``: write the config's settings (default: when a Config is passed or a file
        was found). ``must_exist``: refuse a path that holds no database rather than create one.
        ``read_only=True`` (tests): nothing is written; readers use ``Database.read``."""
        try:
            cfg = config if isinstance(config, Config) else load_config(config)
        except ConfigError as exc:
            raise UserError(str(exc)) from None
        given = (isinstance(config, Config) or cfg.path is not None) if write_settings is None else write_settings
        path = Path(path)
        if (read_only or must_exist) and not path.is_file():
            what = "not a file" if path.exists() else "no such database"
            raise UserError(f"{path}: {what} (create it with `jobsight ingest --db {path} ...`)")
        umask = None if read_only else os.umask(db.writer_umask(cfg.db_group))
        try:
            con = db.connect(path, read_only=read_only, group=cfg.db_group)
        except BaseException:
            if umask is not None:
                os.umask(umask)
            raise
        try:
            if read_only:
                if stored_views_checksum(con) != views_checksum():
                    raise UserError(f"{path}: its metric views are from another jobsight version; "
                                    f"run `jobsight settings --db {path}` once to bring them up to date")
            else:
                if given or not has_settings(con):
                    apply_to_db(con, cfg)
                done = store.refresh(con, say=say, progress=progress, lake_path=cfg.lake_path)
                if done.kept and say:
                    from jobsight.analytics.store.pruned import kept_message
                    say(kept_message(done.kept, done.skipped))
                apply_views(con)
        except BaseException:
            con.close()
            if umask is not None:
                os.umask(umask)
            raise
        return cls(con, path, cfg, read_only, umask=umask)

    @classmethod
    def read(cls, path: str | Path, config: Config | str | None = None,
             say: Optional[Callable[[str], None]] = say) -> "Database":
        """The readers' open (every read command): the newest published snapshot, else the database
        itself, attached read-only. Nothing is migrated, refreshed, published or written, so a user
        with read permission only can read, also while another process writes. ``say`` is told, in
        one line each, when the snapshot is older than the database's last commit (how old the data
        is), and when a config given differs from the settings the database holds (the stored ones
        are used)."""
        from jobsight.analytics.store import freshness
        try:
            cfg = config if isinstance(config, Config) else load_config(config)
        except ConfigError as exc:
            raise UserError(str(exc)) from None
        path = Path(path)
        target, note = freshness.read_target(path)
        con = duckdb.connect(":memory:")
        try:
            con.execute(f"ATTACH '{str(target).replace(chr(39), chr(39) * 2)}' AS jobs (READ_ONLY)")
            con.execute("USE jobs")
            check_readable(con, target, path)
            if note and say:
                say(note)
            if say and (isinstance(config, Config) or cfg.path is not None):
                from jobsight.analytics.store.settings import config_differences
                changed = config_differences(con, cfg)
                if changed:
                    where = cfg.path or "the config given"
                    say(f"{where} differs from the settings {path} holds ({len(changed)}: {changed[0]}"
                        f"{', ...' if len(changed) > 1 else ''}): read with the stored ones; "
                        f"`jobsight settings --db {path} --config {where}` applies it")
        except duckdb.Error as exc:
            con.close()
            raise UserError(f"cannot read {target}: {exc}") from None
        except BaseException:
            con.close()
            raise
        return cls(con, path, cfg, read_only=True)

    @classmethod
    def connect(cls, path: str | Path, config: Optional[Config] = None) -> "Database":
        """Connect and migrate only, for a writer that changes the data before anything is computed
        from it (`jobsight ingest`, which opens the database again to refresh it afterwards).
        ``config``: its [database] group may read the files."""
        group = config.db_group if config else None
        umask = os.umask(db.writer_umask(group))
        try:
            con = db.connect(path, group=group)
        except BaseException:
            os.umask(umask)
            raise
        return cls(con, Path(path), config, umask=umask)

    @classmethod
    def of(cls, con: "duckdb.DuckDBPyConnection | Database", tables: Optional[frozenset[str]] = None) -> "Database":
        """Wrap a connection (or cursor) that is already open."""
        if isinstance(con, Database):
            return con
        return cls(con, tables=tables)

    @contextlib.contextmanager
    def beside(self) -> Iterator["Database"]:
        """Another cursor on the same database and catalog, for statements run in another thread
        beside this one's (DuckDB runs each connection's query without holding the GIL). It does
        not see this cursor's temporary tables."""
        catalog = self.value("SELECT current_database()")
        cur = self.con.cursor()
        try:
            cur.execute("USE " + '"' + catalog.replace('"', '""') + '"')
            yield Database(cur, self.path, self.config, read_only=self.read_only, tables=self._tables)
        finally:
            cur.close()

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
        """Bring the stored per-job results and summaries up to date (analytics/store/results.py)."""
        if self.read_only:
            raise UserError(f"{self.path}: opened read-only; its stored results cannot be refreshed")
        return store.refresh(self.con, say=say, full=full, lake_path=self.config.lake_path if self.config else None)

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            if self._umask is not None:
                os.umask(self._umask)
                self._umask = None

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
