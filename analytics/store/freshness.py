"""What a reader reads, and how old it is: the newest published snapshot of a database (its
`<db>.snapshot`, analytics/store/snapshot.py), else the database itself.

A writer (`jobsight ingest`, `watch`, `settings`) commits into the database and then publishes the
snapshot; a reader never waits for it, so while a writer is at work, or after a publish failed, the
snapshot is older than the database's last commit: the reader still reads it and says how old it is.
"""
from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path
from typing import Optional

from jobsight.analytics.errors import UserError

SNAPSHOT_SUFFIX = ".snapshot"
SKEW_S = 1.0   # a publish finishes just after the commit it copies


def snapshot_path(db_path: str | os.PathLike) -> Path:
    p = Path(db_path)
    return p.with_name(p.name + SNAPSHOT_SUFFIX)


def _mtime(path: Path) -> Optional[float]:
    """The file's mtime; None when it is missing or not a regular file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None


def last_commit(db_path: Path) -> Optional[float]:
    """When the database last changed on disk: its file or its write-ahead log, whichever is later."""
    times = [t for t in (_mtime(db_path), _mtime(db_path.with_name(db_path.name + ".wal"))) if t is not None]
    return max(times) if times else None


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def read_target(db_path: Path) -> tuple[Path, Optional[str]]:
    """(the file to read, a note when its data is older than the database's last commit)."""
    snap = snapshot_path(db_path)
    try:
        db_path.stat()
    except PermissionError:     # its folder is closed to this user: as unreadable as the file itself
        raise UserError(f"{db_path}: permission denied (ask the site's jobsight dashboard instead: --server URL)") from None
    except OSError:
        pass
    published = _mtime(snap)
    if published is not None:
        changed = last_commit(db_path)
        if changed is not None and changed > published + SKEW_S:
            return snap, (f"reading the snapshot published {_utc(published)}: {db_path} has changed since "
                          f"({_utc(changed)}); a writer is at work, or its publish failed")
        return snap, None
    if db_path.is_file():
        return db_path, None
    what = "not a file" if db_path.exists() else "no such database"
    raise UserError(f"{db_path}: {what} (create it with `jobsight ingest --db {db_path} ...`)")


def stale(db_path: Path) -> bool:
    """The published snapshot is missing or older than the database's last commit."""
    published, changed = _mtime(snapshot_path(db_path)), last_commit(db_path)
    return published is None or (changed is not None and changed > published + SKEW_S)
