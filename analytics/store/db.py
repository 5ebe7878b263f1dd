"""Open a jobsight DuckDB file and bring its schema to the version this code knows.

Migrations are the files sql/schema/NNNN_<name>.sql, applied in order, each in its own
transaction, and recorded in ``schema_version``. A file without that table is version 0 (empty or
pre-versioning) and gets every migration. A file written by a newer jobsight (a version above the
highest file here) is refused rather than half-understood.
"""
from __future__ import annotations

import grp
import os
import re
import resource
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import duckdb

from jobsight.analytics.errors import UserError

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "sql" / "schema"
_NAME_RE = re.compile(r"^(\d{4})_([A-Za-z0-9_]+)\.sql$")


class SchemaError(UserError):
    """The database file's schema cannot be used by this version of jobsight."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path


def migrations(schema_dir: Path = SCHEMA_DIR) -> list[Migration]:
    found = []
    for p in schema_dir.iterdir():
        m = _NAME_RE.match(p.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), p))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"schema migrations in {schema_dir} are not numbered 1..N: {versions}")
    return found


def known_version(schema_dir: Path = SCHEMA_DIR) -> int:
    return len(migrations(schema_dir))


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    has = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
    ).fetchone()[0]
    if not has:
        return 0
    v = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    return int(v or 0)


def migrate(con: duckdb.DuckDBPyConnection, schema_dir: Path = SCHEMA_DIR, where: str = "database") -> int:
    """Apply the missing migrations; return the version now in effect."""
    todo = migrations(schema_dir)
    have = current_version(con)
    newest = len(todo)
    if have > newest:
        raise SchemaError(
            f"{where} has schema version {have}, but this jobsight only knows versions up to {newest}: "
            "it was written by a newer jobsight; upgrade jobsight to use it (the file was not modified)")
    for mig in todo[have:]:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)")
            con.execute(mig.path.read_text(encoding="utf-8"))
            con.execute("INSERT INTO schema_version VALUES (?, ?, now()::TIMESTAMP)", [mig.version, mig.name])
            con.execute("COMMIT")
        except Exception as exc:
            rollback(con)
            raise SchemaError(f"{where}: migration {mig.path.name} failed, nothing changed: {exc}") from exc
    return newest


# Under `ulimit -v` every mapping counts, and most of it is reserved, not used: Python, polars and
# DuckDB map ~1.4 GB (thread stacks, allocator arenas) before reading anything, and polars'
# allocator keeps the address space of a parsed 64 MB piece (~0.7 GB) mapped after freeing it.
# DuckDB gets a share of what is left after those, so that it evicts and spills instead of failing.
_RESERVED_AS = 5 << 29          # 2.5 GiB
_DUCKDB_SHARE = 0.75
_MIN_LIMIT = 256 << 20
# Without either: at most 2 GiB. DuckDB's own default (80 % of RAM) lets a full refresh of 50M
# samples grow to 8 GB on a 24 GB machine and crowd out the dashboard beside it; capped, the same
# refresh spills and runs as fast (it is CPU-bound), and jobsight stays within 3 GB.
DEFAULT_LIMIT = 2 << 30
_SIZE_RE = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)


def memory_limit() -> str | None:
    """DuckDB's memory_limit for this process, or None to keep DuckDB's default (80 % of RAM or of
    the cgroup limit) when that is below DEFAULT_LIMIT. $JOBSIGHT_MEMORY_LIMIT (e.g. "2GB") wins.
    Under `ulimit -v` (RLIMIT_AS), which DuckDB does not look at: 3/4 of what the reservations above
    leave, so that DuckDB evicts and spills to <db>.tmp instead of failing an allocation it thought
    it had room for. Otherwise DEFAULT_LIMIT."""
    env = os.environ.get("JOBSIGHT_MEMORY_LIMIT", "").strip()
    if env:
        if not _SIZE_RE.match(env):
            raise UserError(f"$JOBSIGHT_MEMORY_LIMIT={env!r}: expected a size such as 2GB or 512MiB")
        return env
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return f"{DEFAULT_LIMIT >> 20}MiB" if ram * 0.8 > DEFAULT_LIMIT else None
    return f"{max(_MIN_LIMIT, int((soft - _RESERVED_AS) * _DUCKDB_SHARE)) >> 20}MiB"


def configure_engine(con: duckdb.DuckDBPyConnection) -> None:
    """Settings for every database instance jobsight opens: memory_limit (see memory_limit()), and
    no progress bar (DuckDB draws it on stdout for queries over 2 s, which breaks `--json` output)."""
    con.execute("SET enable_progress_bar = false")
    limit = memory_limit()
    if limit is not None:
        con.execute(f"SET memory_limit = '{limit}'")


def writer_umask(group: Optional[str] = None) -> int:
    """The umask a writer holds while its connection is open, so that the files DuckDB creates
    beside the database (the write-ahead log, spill files) are no more readable than it."""
    return 0o027 if group else 0o077


def protect(path: str | Path, group: Optional[str] = None) -> None:
    """The database's files are everyone's jobs: readable by their owner only (0600), or also by
    ``group`` (0640, [database] group); never by others. Without a group, group bits a configured
    writer set before are left as they are."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    mode = 0o640 if group else (st.st_mode & 0o660 if st.st_mode & 0o040 else 0o600)
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)
    if group:
        gid = grp.getgrnam(group).gr_gid
        if st.st_gid != gid:
            os.chown(path, -1, gid)


def connect(path: str | Path, read_only: bool = False, group: Optional[str] = None) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a jobsight database and migrate it to the known schema; a writer's
    file is protected (``protect``) before anything is written. The caller holds writer_umask
    while the connection is open (Database does)."""
    where = str(path)
    try:
        if not read_only:
            protect(path, group)
        con = duckdb.connect(where, read_only=read_only)
        if not read_only:
            protect(path, group)   # created just now: under the umask already; an existing one tightened
    except duckdb.Error as exc:
        raise UserError(f"cannot open database {where}: {exc}") from exc
    except OSError as exc:
        raise UserError(f"cannot set the permissions of {where}: {exc.strerror or exc}") from exc
    try:
        configure_engine(con)
        if read_only:
            have, newest = current_version(con), known_version()
            if have != newest:
                raise SchemaError(f"{where} has schema version {have}, this jobsight needs {newest}; "
                                  "open it once read-write (e.g. `jobsight ingest --db ...`) to upgrade")
        else:
            migrate(con, where=where)
    except BaseException:
        con.close()
        raise
    return con


def replace_source(con: duckdb.DuckDBPyConnection, table: str, columns: tuple[str, ...], new_rows: list[tuple],
                   source: str, cluster: Optional[str] = None, per_cluster: bool = False) -> None:
    """Replace the rows of ``table`` that came from ``source`` (and, when ``per_cluster``, only those
    of ``cluster``: a scheduler command reads one cluster at a time) by ``new_rows``, whose values
    follow ``columns`` (the last of which is source)."""
    if per_cluster:
        con.execute(f"DELETE FROM {table} WHERE source = ? AND cluster IS NOT DISTINCT FROM ?", [source, cluster])
    else:
        con.execute(f"DELETE FROM {table} WHERE source = ?", [source])
    if new_rows:
        names = ", ".join(f'"{c}"' for c in columns)
        con.executemany(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})", new_rows)


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """ROLLBACK after a failure. A fatal error (a full disk) has already ended the transaction in
    DuckDB; a second error from ROLLBACK ("no transaction is active") would then hide the cause."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        pass


_WRITING_RE = re.compile(r'(?:write|writing|open|create)[^"]*"([^"]+)"', re.IGNORECASE)
DISK_FULL = "No space left on device"


def disk_full(message: str) -> Optional[str]:
    """For an error of a full disk: where it is full, the database's folder or DuckDB's temp (spill)
    folder, and the error; None for any other error."""
    if DISK_FULL.lower() not in message.lower() and "errno 28" not in message.lower():
        return None
    m = _WRITING_RE.search(message)
    if not m:
        return f"{DISK_FULL}: {message}"
    path = Path(m.group(1))
    spill = any(p.endswith(".tmp") for p in path.parent.parts) or path.name.startswith("duckdb_temp")
    where = "DuckDB's temp (spill) folder" if spill else "the database's folder"
    return f"{DISK_FULL} in {where} {path.parent} (writing {path}): {message}"
