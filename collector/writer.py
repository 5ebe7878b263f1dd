"""Safe output files for the sidecar: CSV rows and the metadata JSON.

- Files are created with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0640 (minus the umask): in a shared
  output directory a planted file or symlink makes the open fail instead of being followed.
- Each row is one os.write() on an unbuffered descriptor, so a SIGKILL leaves at most a
  partial last line; fsync once at close.
- Any write error (disk full, quota, read-only, EIO) prints one stderr line and turns the
  writer off; the caller decides whether to keep running. So does the CSV being removed (or
  its directory, by a cleanup): rows written to an unlinked file would be lost without a word,
  and recreating what someone deleted is not the sidecar's call. Standard library only.
"""
from __future__ import annotations

import errno
import json
import os

from .problems import stderr_line

FILE_MODE = 0o640
DIR_MODE = 0o750
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_APPEND


class OutputError(Exception):
    """The output directory or a file in it cannot be created or written (message is user-facing)."""


def ensure_dir(path: str) -> None:
    """Create the output directory (and parents) with 0750 if missing."""
    try:
        os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create output directory {path}: {exc.strerror or exc}") from exc
    if not os.path.isdir(path):
        raise OutputError(f"output path {path} is not a directory")


def create_exclusive(path: str) -> int:
    """Open a new file for writing; never follows or reuses an existing file or symlink."""
    try:
        return os.open(path, _CREATE_FLAGS, FILE_MODE)
    except FileExistsError as exc:
        raise OutputError(f"refusing to write {path}: it already exists (file or symlink not created by this sidecar)") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"refusing to write {path}: it is a symlink") from exc
        raise OutputError(f"cannot create {path}: {exc.strerror or exc}") from exc


def _write_all(fd: int, data: bytes) -> None:
    """One write; a short write (disk full mid-line) is an error, not a retry loop."""
    n = os.write(fd, data)
    if n != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (short write)")


def format_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return ""
        text = f"{value:.3f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    text = str(value)
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


class CsvWriter:
    """Append-only CSV file: header at creation, one os.write per row."""

    def __init__(self, path: str, columns: tuple[str, ...], warn=None) -> None:
        self.path = path
        self.columns = columns
        self._warn = warn or (lambda key, msg: stderr_line(msg))
        self.fd: int | None = create_exclusive(path)
        self.failed = False
        self.rows_written = 0
        try:
            _write_all(self.fd, (",".join(columns) + "\n").encode())
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self._stop(f"cannot write {self.path}: {exc.strerror or exc}")

    def _stop(self, reason: str) -> None:
        self.failed = True
        self._warn("write", f"jobsight sidecar: {reason}; sampling stopped, the job is not affected")
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _removed(self) -> bool:
        """The file has no name left (one fstat: well under a microsecond)."""
        try:
            return os.fstat(self.fd).st_nlink == 0
        except OSError:
            return False

    def write_row(self, row: dict) -> bool:
        """Write one row (missing keys = blank). False once writing has failed."""
        if self.fd is None:
            return False
        if self._removed():
            self._stop(f"{self.path} was removed (or its directory was)")
            return False
        line = ",".join(format_cell(row.get(c)) for c in self.columns) + "\n"
        try:
            _write_all(self.fd, line.encode("utf-8"))
        except OSError as exc:
            self._fail(exc)
            return False
        self.rows_written += 1
        return True

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass


class NullWriter:
    """Rows go nowhere: a job's own sidecar when the site's sidecar records the job (it keeps its idle alert)."""
    path = ""
    failed = False
    rows_written = 0

    def write_row(self, row: dict) -> bool:
        return True

    def close(self) -> None:
        pass


def write_json_new(path: str, data: dict) -> None:
    """Create a new JSON file (exclusive, no symlink following)."""
    fd = create_exclusive(path)
    try:
        _write_all(fd, (json.dumps(data, indent=1, sort_keys=False) + "\n").encode())
        os.fsync(fd)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def replace_json(path: str, data: dict) -> None:
    """Rewrite a JSON file this sidecar created: new exclusive temp file, then rename over it
    (rename replaces a planted symlink itself instead of writing through it). The temp file is a
    dot-file, so one left behind by a kill at that moment is skipped by `jobsight ingest DIR`."""
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.tmp-{os.getpid()}")
    try:
        write_json_new(tmp, data)
    except OutputError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(f"cannot replace {path}: {exc.strerror or exc}") from exc
