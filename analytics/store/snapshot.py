"""Read-only snapshots of the database for the dashboard, so that it can live beside ingest.

DuckDB lets one process write a file and a writer keeps other processes from opening it, so the
dashboard never reads the live database. After a successful ingest, ``publish(db)``:

1. holding DuckDB's shared (read) lock on ``<db>``, so that no writer is at work, copies it (and
   its ``.wal``, if any) to a temporary name in the same directory;
   Everything the dashboard reads (the stored per-job results and the per-day summaries dash_*)
   is in the file, kept current by each refresh (analytics/store/results.py), so a publish costs a copy.
   A database whose stored results lag its ingests (an ingest whose refresh failed) or whose
   views are another version's is refreshed first, with the settings it holds;
2. merges a copied ``.wal`` into the copy (a checkpoint);
3. fsyncs the copy and ``os.replace``-s it onto ``<db>.snapshot``, then fsyncs the directory.

The generation it replaces is kept as ``<db>.snapshot.spare``. The next publish, when no reader
holds that file any more (DuckDB's lock, or a reader of this process), rewrites in it only the
blocks that differ from the database and swaps it in: a small ingest into a large database then
writes and fsyncs a few megabytes instead of copying the whole file. A crash while the spare is
rewritten leaves ``<db>.snapshot`` untouched, and the next publish compares every block again.

A reader therefore sees either the old snapshot or the new one, never a half-written file.
``SnapshotReader`` opens the newest snapshot read-only (the database itself, read-only, when no
snapshot was published yet) and reopens it when the file's inode or mtime changes; requests
already running keep the generation they started with until they finish.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import duckdb

from jobsight.analytics.errors import UserError
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database, check_readable, views_checksum
from jobsight.analytics.store.freshness import SNAPSHOT_SUFFIX, snapshot_path  # noqa: F401 - imported from here too

SPARE_SUFFIX = ".spare"            # <db>.snapshot.spare: the previous generation, rewritten in place
CHUNK = 1 << 20                    # compare and write the spare in 1 MiB pieces
WINDOW = 64 << 20                  # mapped at a time (the maps count in the publisher's RSS)
log = logging.getLogger("jobsight.snapshot")
# (st_dev, st_ino) of the snapshot files this process's readers hold open, with a count: a lock
# test cannot see them (POSIX record locks of one process never conflict with each other)
_open_here: dict[tuple[int, int], int] = {}
_open_lock = threading.Lock()

def _sql_str(path: Path) -> str:
    return str(path).replace("'", "''")


def spare_path(db_path: str | os.PathLike) -> Path:
    snap = snapshot_path(db_path)
    return snap.with_name(snap.name + SPARE_SUFFIX)


def _held_here(ident: tuple[int, int], delta: int) -> None:
    with _open_lock:
        n = _open_here.get(ident, 0) + delta
        if n > 0:
            _open_here[ident] = n
        else:
            _open_here.pop(ident, None)


def _claim_spare(spare: Path) -> int | None:
    """An O_RDWR descriptor of the spare with an exclusive lock on it, or None when there is no
    spare or a reader (another process's DuckDB, or one of ours) still has it open."""
    try:
        fd = os.open(spare, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        with _open_lock:
            busy = (st.st_dev, st.st_ino) in _open_here
        if not busy:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _rewrite_differences(src: Path, fd: int) -> int:
    """Make the file open as ``fd`` equal to ``src`` by writing only the pieces that differ;
    fdatasync it. Returns the bytes written.

    Both files are mapped, a window at a time, and compared in place 8 bytes at a time (numpy):
    reading them into buffers costs a copy of each, 4-5 times slower on a 1.2 GB file."""
    import numpy as np  # with pandas; not needed by the rest of the module
    size = src.stat().st_size
    written = 0
    os.ftruncate(fd, size)          # a longer spare is cut, a shorter one grows (zeros: rewritten below)
    with open(src, "rb") as f:
        for start in range(0, size, WINDOW):
            n = min(WINDOW, size - start)
            with mmap.mmap(f.fileno(), n, prot=mmap.PROT_READ, offset=start) as ms, \
                    mmap.mmap(fd, n, prot=mmap.PROT_READ, offset=start) as md:
                words = n // 8
                a, b = np.frombuffer(ms, np.uint64, words), np.frombuffer(md, np.uint64, words)
                try:
                    for lo in range(0, n, CHUNK):
                        hi = min(lo + CHUNK, n)
                        same = np.array_equal(a[lo // 8:hi // 8], b[lo // 8:hi // 8]) and ms[hi // 8 * 8:hi] == md[hi // 8 * 8:hi]
                        if not same:
                            written += os.pwrite(fd, ms[lo:hi], start + lo)
                finally:
                    del a, b            # release the maps' buffers before they are closed
    os.fdatasync(fd)
    return written


def same_access(src: Path, copy: Path) -> None:
    """The copy readable by exactly whom the database is (its mode and group: analytics/store/db.py's protect)."""
    st = src.stat()
    os.chmod(copy, stat.S_IMODE(st.st_mode))
    if copy.stat().st_gid != st.st_gid:
        os.chown(copy, -1, st.st_gid)


def fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _current(guard: duckdb.DuckDBPyConnection) -> bool:
    """Whether the attached database ``src`` holds stored results of everything written into it,
    with this jobsight's views (as after `jobsight ingest`, which refreshes before it publishes)."""
    guard.execute("USE src")
    watermark = guard.execute("SELECT value FROM metric_state WHERE name = 'ingest_watermark'").fetchone()
    views = guard.execute("SELECT text FROM setting WHERE name = 'views.checksum'").fetchone()
    return (watermark is not None and int(watermark[0]) >= store.watermark_now(guard)
            and not store.hand_written(guard) and views is not None and views[0] == views_checksum())


def _bring_up_to_date(src: Path) -> None:
    """Refresh the stored results with the settings the database holds, and its views: the writer's
    open of Database, as an ingest does."""
    from jobsight.analytics.config import Config
    Database.open(src, Config(), write_settings=False, say=None).close()


def publish(db_path: str | os.PathLike) -> Path:
    """Publish an atomic read-only snapshot of ``db_path`` next to it; return its path (_publish).
    The copy is made under umask 077, then given the database's own mode and group."""
    umask = os.umask(0o077)
    try:
        return _publish(db_path)
    finally:
        os.umask(umask)


def _publish(db_path: str | os.PathLike) -> Path:
    """Publish an atomic read-only snapshot of ``db_path`` next to it; return its path.

    Call it after the writer has closed its connection (closing checkpoints the file), e.g. at the
    end of a successful `jobsight ingest`. While another process writes the file it fails (DuckDB's
    lock); a connection still open in the calling process itself is not detected, hence "after".
    Raises UserError with the reason if anything fails; the previous snapshot then stays untouched.
    """
    src = Path(db_path)
    if not src.is_file():
        raise UserError(f"{src}: no such database to snapshot")
    dest, spare = snapshot_path(src), spare_path(src)
    old = dest.with_name(f".{dest.name}.old")     # the current generation, on its way to be the spare
    tmp = src.with_name(f".{src.name}.snapshot-tmp-{os.getpid()}-{threading.get_ident()}")
    tmp_wal = tmp.with_name(tmp.name + ".wal")
    fd = dir_fd = None
    try:
        # one publish of a directory at a time: they share the spare and the .old name
        dir_fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            old.unlink()                              # left by a crash between the renames below
        # A read-only attach takes DuckDB's shared lock: a writer still at work makes this fail
        # at once (rather than copy a file in mid-write), and no writer can start during the copy.
        for attempt in (1, 2):
            guard = duckdb.connect(":memory:")
            try:
                guard.execute(f"ATTACH '{_sql_str(src)}' AS src (READ_ONLY)")
                if attempt == 1 and not _current(guard):
                    guard.close()       # e.g. an ingest whose refresh failed: refresh, then copy
                    _bring_up_to_date(src)
                    continue
            except duckdb.Error as exc:
                guard.close()
                raise UserError(f"{src}: cannot read it for a snapshot (is `jobsight ingest` still writing it? "
                                f"publish after it has finished): {exc}") from exc
            break
        try:
            # Everything the dashboard reads is in the file (the stored results and summaries), so
            # the snapshot is a copy of it: the spare's differing blocks rewritten, or a new copy.
            wal = src.with_name(src.name + ".wal")
            has_wal = wal.is_file() and wal.stat().st_size > 0
            fd = None if has_wal else _claim_spare(spare)
            if fd is not None:
                written = _rewrite_differences(src, fd)
                log.info("%s: rewrote %d of %d bytes of the spare", dest, written, src.stat().st_size)
            else:
                shutil.copyfile(src, tmp)
                log.info("%s: copied %d bytes", dest, src.stat().st_size)
                if has_wal:
                    shutil.copyfile(wal, tmp_wal)   # merged into the copy below
        finally:
            guard.close()
        if fd is None:
            if tmp_wal.exists():
                try:
                    con = duckdb.connect(str(tmp))
                    con.execute("CHECKPOINT")
                    con.close()
                except duckdb.Error as exc:
                    raise UserError(f"{src}: cannot open the copy for the snapshot: {exc}") from exc
            if tmp_wal.exists():
                tmp_wal.unlink()
            fsync_path(tmp)
        if dest.exists():
            os.link(dest, old)
        same_access(src, spare if fd is not None else tmp)
        os.replace(spare if fd is not None else tmp, dest)
        os.utime(dest)   # published now, also when no block differed: readers compare it with the database's last commit
        if old.exists():
            os.replace(old, spare)
        os.fsync(dir_fd)
    except OSError as exc:
        raise UserError(f"{src}: cannot write snapshot {dest}: {exc}") from exc
    finally:
        for fdx in (fd, dir_fd):
            if fdx is not None:
                os.close(fdx)
        for p in (tmp, tmp_wal):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    return dest


def drop_spare(db_path: str | os.PathLike) -> bool:
    """Remove the spare (the previous generation) when no reader holds it: after the database shrank
    (`jobsight prune`), so that the disk it held is freed now. The next publish copies the file."""
    spare = spare_path(db_path)
    fd = _claim_spare(spare)
    if fd is None:
        return False
    try:
        spare.unlink()
    finally:
        os.close(fd)
    return True


class _Replaced(Exception):
    """The snapshot file was replaced between its stat() and its ATTACH."""


@dataclass
class _Generation:
    """One opened file. Closed once it is replaced and no request uses it any more."""
    con: duckdb.DuckDBPyConnection
    key: tuple[int, int, int, int]     # (inode, mtime_ns, size, device) of the file when opened
    path: Path
    users: int = 0
    retired: bool = False
    tables: frozenset[str] = field(default_factory=frozenset)

    def close(self) -> None:
        self.con.close()
        _held_here((self.key[3], self.key[0]), -1)


class SnapshotReader:
    """Hands out read-only cursors on the newest snapshot of a database.

    ``with reader.cursor() as h:`` gives a Database on a cursor whose default catalog is the snapshot. Each
    generation lives in its own in-memory DuckDB instance with the file ATTACHed read-only:
    ``duckdb.connect(path)`` would return the process-wide cached instance of the *old* file.
    """

    def __init__(self, db_path: str | os.PathLike, check_views: bool = True):
        self.db_path = Path(db_path)
        self.check_views = check_views
        self._lock = threading.Lock()
        self._gen: _Generation | None = None
        self._failed_key: tuple[int, int, int, int] | None = None
        self.reopened = 0

    def _target(self) -> Path:
        snap = snapshot_path(self.db_path)
        if snap.is_file():
            return snap
        if self.db_path.is_file():
            return self.db_path
        raise UserError(f"{self.db_path}: no such database (and no snapshot {snap})")

    @staticmethod
    def _key(path: Path) -> tuple[int, int, int, int]:
        st = path.stat()
        return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_dev)

    def _open(self, path: Path) -> _Generation:
        for _ in range(3):
            try:
                return self._open_once(path)
            except _Replaced:
                continue
        raise UserError(f"{path} keeps being replaced while it is opened")

    def _open_once(self, path: Path) -> _Generation:
        key = self._key(path)
        con = duckdb.connect(":memory:")
        try:
            con.execute(f"ATTACH '{_sql_str(path)}' AS snap (READ_ONLY)")
            con.execute("USE snap")
            if self._key(path) != key:      # replaced while attaching: the key must be the file held
                raise _Replaced(path)
            check_readable(con, path, self.db_path, views=self.check_views)
            tables = frozenset(r[0] for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'snap'").fetchall())
        except duckdb.Error as exc:
            con.close()
            raise UserError(f"cannot open {path} read-only: {exc}") from exc
        except BaseException:
            con.close()
            raise
        _held_here((key[3], key[0]), +1)
        return _Generation(con=con, key=key, path=path, tables=tables)

    def _current(self) -> _Generation:
        """The generation to use now, reopening when the file changed. Caller holds the lock."""
        path = self._target()
        try:
            key = self._key(path)
        except FileNotFoundError:          # replaced between is_file() and stat(): look again
            path = self._target()
            key = self._key(path)
        gen = self._gen
        if gen is None or gen.key != key or gen.path != path:
            try:
                new = self._open(path)
            except UserError as exc:
                if gen is None:
                    raise
                # e.g. published by an upgraded jobsight: keep serving the last good snapshot
                if self._failed_key != key:
                    log.warning("keeping the previous snapshot: %s", exc)
                    self._failed_key = key
                return gen
            if gen is not None:
                gen.retired = True
                self.reopened += 1
                if gen.users == 0:
                    gen.close()
            self._gen = gen = new
        return gen

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Database]:
        with self._lock:
            gen = self._current()
            gen.users += 1
            cur = gen.con.cursor()
        try:
            cur.execute("USE snap")
            yield Database.of(cur, gen.tables)
        finally:
            cur.close()
            with self._lock:
                gen.users -= 1
                if gen.retired and gen.users == 0:
                    gen.close()

    def tables(self) -> frozenset[str]:
        with self._lock:
            return self._current().tables

    def close(self) -> None:
        with self._lock:
            if self._gen is not None:
                self._gen.retired = True
                if self._gen.users == 0:
                    self._gen.close()
                self._gen = None
