"""Finding the files to ingest and what they are: the folder walk, the parser registry and format
detection, the sha256 scan (at once or in a thread while the file is read), and the lookup of an
ingest that already loaded the same bytes.

What a folder walk reads (docs/ingest.md): regular files only. FIFOs, sockets and devices are
listed as skipped from their stat alone, never opened (opening a FIFO blocks until a writer comes,
so one planted in a user's folder would stall root's cron ingest). A symlink is followed only when
it leads inside the folder given, and a folder or file reached twice (a link, a loop) is read once;
a dangling link is a note. The opens here (open_regular) are O_NONBLOCK with an fstat after the
open, and inside a folder walk they check where the opened file really is, so a swap between the
walk and the open is refused too."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable, NamedTuple, Optional

from jobsight.analytics.ingest.trust_path import opened_where, pseudo_fs

HEAD_BYTES = 65536


def import_parsers(names: Iterable[str], warn: Callable[[str], None] | None = None) -> dict[str, ModuleType]:
    """FORMAT -> module for the parser modules `names`, in detection order. A parser module not
    written yet is skipped."""
    found: dict[str, ModuleType] = {}
    for name in names:
        modname = f"jobsight.analytics.ingest.parsers.{name}"
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name == modname:
                continue
            if warn:
                warn(f"parser {name} skipped: {exc}")
            continue
        except Exception as exc:  # a half-written parser must not stop the others
            if warn:
                warn(f"parser {name} skipped: {exc!r}")
            continue
        if hasattr(mod, "FORMAT") and hasattr(mod, "sniff") and hasattr(mod, "parse"):
            found[mod.FORMAT] = mod
    return found


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"))


def kind(mode: int) -> str:
    """What a st_mode is, in words: 'a FIFO (named pipe)', 'a socket', ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def not_regular(mode: int) -> str:
    """The reason a file of this st_mode is not read."""
    return f"{kind(mode)}, not a regular file: not read"


class NotRegularFile(OSError):
    """A path that is not a regular file, or (in a folder walk) one that leads outside the folder
    given; never read. An OSError, so a caller that only knows "cannot read" still stops."""


def _inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def open_regular(path: Path, within: Optional[str] = None) -> int:
    """A read-only descriptor of the regular file `path`, or NotRegularFile: stat first (nothing
    else is ever opened), then an O_NONBLOCK open (a FIFO swapped in after the stat does not block
    it) and an fstat of what was opened, which must not be on a pseudo file system (/proc, /sys:
    the kernel's, with whatever a user put in a command line or environment); with `within` (a
    folder walk's real folder), also where the opened file really is. The caller closes the descriptor."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(f"{path}: {not_regular(st.st_mode)}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path}: {not_regular(st.st_mode)} (replaced after it was listed)")
        real = opened_where(fd, path)
        if within is not None and not _inside(within, real):
            raise NotRegularFile(f"{path}: leads outside {within} (changed after it was listed): not read")
        if (why := pseudo_fs(real, st.st_dev)) is not None:
            raise NotRegularFile(f"{path}: {why}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_head(path: Path, within: Optional[str] = None) -> str:
    with os.fdopen(open_regular(path, within), "rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")


def detect(path: Path, parsers: dict[str, ModuleType], within: Optional[str] = None) -> Optional[ModuleType]:
    head = read_head(path, within)
    for mod in parsers.values():
        try:
            if mod.sniff(head, path):
                return mod
        except Exception:
            continue
    return None


@dataclass
class FileScan:
    digest: str                # sha256 of the bytes
    newlines: int = 0          # counted only when a delimiter is given (a BulkRead's checks)
    delimiters: int = 0
    lines_upto: int = 0        # with `upto`: newlines in the first `upto` bytes
    end_upto: int = 0          # with `upto`: where the last of them ends (complete lines only)
    size: int = 0              # bytes hashed


def scan_file(path: Path, delimiter: Optional[bytes] = None, upto: Optional[int] = None) -> FileScan:
    """sha256 of the file; with a delimiter, also its newline and delimiter counts (one more pass
    over bytes already in memory: ~1 s per GB, against ~3 s for the hash); with `upto` (the size
    when the file was opened), the complete lines below it (where a growing file's next read starts)."""
    h = hashlib.sha256()
    newlines = delimiters = lines_upto = end_upto = pos = 0
    with os.fdopen(open_regular(path), "rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
            if delimiter is not None:
                newlines += chunk.count(b"\n")
                delimiters += chunk.count(delimiter)
            if upto is not None and pos < upto:
                below = chunk[:upto - pos]
                lines_upto += below.count(b"\n")
                if (last := below.rfind(b"\n")) >= 0:
                    end_upto = pos + last + 1
            pos += len(chunk)
    return FileScan(h.hexdigest(), newlines, delimiters, lines_upto, end_upto, pos)


def sha256_file(path: Path) -> str:
    return scan_file(path).digest


class _ScanThread(threading.Thread):
    def __init__(self, path: Path, delimiter: Optional[bytes], upto: Optional[int] = None):
        super().__init__(daemon=True, name="jobsight-sha256")
        self.path, self.delimiter, self.upto, self.scan, self.error = path, delimiter, upto, None, None

    def run(self) -> None:
        try:
            self.scan = scan_file(self.path, self.delimiter, self.upto)   # hashlib releases the GIL on big buffers
        except OSError as exc:
            self.error = exc


def start_scan(path: Path, delimiter: Optional[bytes] = None, upto: Optional[int] = None) -> _ScanThread:
    t = _ScanThread(path, delimiter, upto)
    t.start()
    return t


def seen_name(con, path: Path) -> bool:
    return bool(con.execute("SELECT 1 FROM ingest_log WHERE source_file = ? LIMIT 1",
                            [str(Path(path).resolve())]).fetchall())


class Entry(NamedTuple):
    """One thing walk() found: a file to read, or (skip set) one it will not read, and why."""
    path: Path
    explicit: bool                  # named on the command line (not found by a folder walk)
    skip: Optional[str] = None      # why it is not read: not a regular file, a link out of the folder, ...
    within: Optional[str] = None    # found by a folder walk: the real path of the folder given
    given: Optional[str] = None     # the path named on the command line it was found under (trust judges it too)


def walk(paths: Iterable[str | Path]) -> list[Entry]:
    """The Entry of each path; folders are walked recursively, in name order (a folder's files,
    then its subfolders). Sidecar metadata (*.meta.json) is read by the sidecar parser beside its
    CSV, not on its own; hidden files are left out. Only stat/lstat is used: nothing is opened."""
    out: list[Entry] = []
    for p in paths:
        p = Path(p)
        given = os.path.abspath(p)
        try:
            st = os.stat(p)
        except OSError:
            out.append(Entry(p, True, given=given))        # missing or unreadable: ingest_paths says which
            continue
        if (why := pseudo_fs(os.path.realpath(p), st.st_dev)) is not None:
            out.append(Entry(p, True, why, given=given))   # never listed, never read
        elif stat.S_ISDIR(st.st_mode):
            out += [e._replace(given=given) for e in _walk_folder(p)]
        elif stat.S_ISREG(st.st_mode):
            out.append(Entry(p, True, given=given))
        else:
            out.append(Entry(p, True, not_regular(st.st_mode), given=given))
    return out


def _walk_folder(top: Path) -> list[Entry]:
    """A folder given on the command line, walked without following symlinks out of it: a link is
    followed when its target is inside `top`; a folder or file is listed once however many ways
    lead to it (links, loops, hard links)."""
    root = os.path.realpath(top)
    out: list[Entry] = []
    seen: dict[tuple[int, int], Path] = {}      # (st_dev, st_ino) -> the path it was first reached by
    stack = [top]                               # not recursion: a deep nest of folders is no RecursionError
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
            key = (st.st_dev, st.st_ino)
            if key in seen:
                out.append(Entry(folder, False, f"same folder as {seen[key]} (already walked)", root))
                continue
            seen[key] = folder
            with os.scandir(folder) as it:
                names = sorted(e.name for e in it)
        except OSError as exc:
            out.append(Entry(folder, folder == top, f"cannot list folder: {exc.strerror or exc}", root))
            continue
        subfolders: list[Path] = []
        for name in names:
            entry = _entry(folder / name, name, root, seen)
            if isinstance(entry, Path):
                subfolders.append(entry)
            elif entry is not None:
                out.append(entry)
        stack += reversed(subfolders)
    return out


def _entry(path: Path, name: str, root: str, seen: dict) -> Entry | Path | None:
    """What the walk does with one name in a folder: a subfolder to walk (its Path), an Entry (a
    file to read, or one skipped with the reason), or None (a hidden or *.meta.json name that is
    not a folder)."""
    quiet = name.startswith(".") or name.endswith(".meta.json")
    try:
        st = os.lstat(path)
    except OSError as exc:   # gone since the folder was listed
        return None if quiet else Entry(path, False, f"cannot stat: {exc.strerror or exc}", root)
    if stat.S_ISLNK(st.st_mode):
        if quiet:
            return None
        real = os.path.realpath(path)
        if not _inside(root, real):
            return Entry(path, False, f"symlink to {real}, outside {root}: not followed", root)
        try:
            st = os.stat(path)
        except OSError as exc:
            return Entry(path, False, f"broken symlink ({exc.strerror or exc}): not followed", root)
    if stat.S_ISDIR(st.st_mode):
        return path
    if quiet:
        return None
    if not stat.S_ISREG(st.st_mode):
        return Entry(path, False, not_regular(st.st_mode), root)
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return Entry(path, False, f"same file as {seen[key]} (already listed)", root)
    seen[key] = path
    return Entry(path, False, None, root)


def already_ingested(con, checksum: str, options: Optional[dict] = None) -> Optional[int]:
    """The ingest that already loaded these bytes with these options (a file first read with, say,
    the wrong --columns or --timezone can be read again with the right ones)."""
    sql = "SELECT ingest_id FROM ingest_log WHERE checksum = ? AND finished_at IS NOT NULL"
    args: list = [checksum]
    if options is not None:
        sql += " AND options = ?"
        args.append(json.dumps(options, sort_keys=True))
    rows = con.execute(sql + " ORDER BY ingest_id LIMIT 1", args).fetchall()
    return rows[0][0] if rows else None
