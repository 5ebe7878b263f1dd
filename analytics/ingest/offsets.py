"""Growing sidecar files: an ingest reads a sidecar CSV from where the last ingest of it stopped.

The sidecar appends one line per sample while its job runs, so a cron ingest every few minutes
would otherwise read each running job's file whole every time. Table file_offset keeps, per path,
how far the last ingest read (complete lines only: a last line still being written waits for the
next ingest), how many lines lie before that point, and the file's identity: device, inode, the
sha256 of its first block and of the block that ends at the offset. The next ingest of the path
reads only the bytes after the offset when the file is still that one and is read with the same
options. A file truncated or replaced (another inode, fewer bytes than the offset, other first or
last bytes) is read again from the start; its samples already stored are not stored again (the
loader drops a sample whose (cluster, job, host, device, time) is stored), so nothing counts twice.

An appended part is loaded like a whole file: one transaction with its ingest_log row (its
checksum is the sha256 of the part), the same row accounting, and the same trust rule
(ingest_trust) for its owner; the offset is written in that transaction (a watch cycle loads the
parts of many files in one: ingest_batch).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Callable, Optional

import duckdb
import polars as pl

from jobsight.analytics.ingest.load import FileReport, load_pieces
from jobsight.analytics.ingest.merge import quote_name, run_sql
from jobsight.analytics.ingest.routes import SourceFile, _pieces
from jobsight.analytics.ingest.walk import open_regular
from jobsight.analytics.store import db

FORMATS = ("sidecar",)     # formats whose files grow by whole lines under one header
BLOCK = 4096               # the first and last bytes read, hashed to tell the same file
PIECE_BYTES = 64 << 20     # an appended part is parsed and loaded this much at a time (as ingest.STREAM_BYTES)


@dataclass(frozen=True)
class Mark:
    """The file as opened: device, inode, size and first block (fewer bytes in a smaller file)."""
    dev: int
    ino: int
    size: int
    head: bytes

    @classmethod
    def of(cls, fd: int, st: os.stat_result) -> "Mark":
        return cls(st.st_dev, st.st_ino, st.st_size, os.pread(fd, BLOCK, 0))


@dataclass(frozen=True)
class Resume:
    """Read the bytes [start, end) of the file: the complete lines appended since ingest `ingest_id`."""
    start: int
    end: int
    lines: int          # lines before start, header included
    ingest_id: int


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def options_text(options: dict) -> str:
    return json.dumps(options, sort_keys=True)


_STORED = ('SELECT source_file, dev, ino, head_len, head_sha256, tail_sha256, "offset", lines, options, ingest_id '
           "FROM file_offset")


def stored(con: duckdb.DuckDBPyConnection, folder: str) -> dict[str, tuple]:
    """The file_offset rows of the paths under folder (a resolved path), by path: plan()'s `row`."""
    return {r[0]: r[1:] for r in con.execute(_STORED + " WHERE starts_with(source_file, ?)", [folder]).fetchall()}


def plan(file: SourceFile, mark: Mark, within: Optional[str] = None,
         row: Optional[tuple] = ()) -> tuple[Optional[Resume], Optional[str]]:
    """Where to go on reading the file: (Resume, None); or (None, why it is read from the start),
    the reason None when no ingest read this path (or read nothing of it) before. `row`: its
    file_offset row as stored() gives it, None when it has none (looked up when not given)."""
    if row == ():
        row = file.con.execute(_STORED + " WHERE source_file = ?", [file.source_file]).fetchone()
        row = row and row[1:]
    if row is None or not row[5]:
        return None, None
    dev, ino, head_len, head_sha, tail_sha, offset, lines, options, ingest_id = row
    since = f"since ingest {ingest_id}"
    if options != options_text(file.options):
        return None, None          # other options read the same bytes again, as for any file
    if (dev, ino) != (mark.dev, mark.ino):
        return None, f"read from the start: replaced by another file (inode) {since}"
    if mark.size < offset or len(mark.head) < head_len:
        return None, f"read from the start: truncated {since} ({mark.size} bytes, {offset} read before)"
    with os.fdopen(open_regular(file.path, within), "rb") as fh:
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != (mark.dev, mark.ino):
            return None, f"read from the start: replaced while opened {since}"
        fh.seek(offset - min(BLOCK, offset))
        tail = fh.read(min(BLOCK, offset))
        if _sha(mark.head[:head_len]) != head_sha or _sha(tail) != tail_sha:
            return None, f"read from the start: rewritten {since} (its first or last bytes read differ)"
        end = _last_line_end(fh, offset, mark.size)
    return Resume(offset, end, lines, ingest_id), None


def _last_line_end(fh, start: int, size: int) -> int:
    """Where the last complete line in [start, size) ends; start when none does."""
    pos = size
    while pos > start:
        lo = max(start, pos - (1 << 20))
        fh.seek(lo)
        cut = fh.read(pos - lo).rfind(b"\n")
        if cut >= 0:
            return lo + cut + 1
        pos = lo
    return start


def _scan(file: SourceFile, start: int, end: int) -> tuple[str, int]:
    """sha256 and newline count of the bytes [start, end)."""
    h, newlines = hashlib.sha256(), 0
    with open(file.path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0 and (chunk := fh.read(min(8 << 20, left))):
            h.update(chunk)
            newlines += chunk.count(b"\n")
            left -= len(chunk)
    return h.hexdigest(), newlines


_OFFSET_SCHEMA = {"source_file": pl.String, "dev": pl.Int64, "ino": pl.Int64, "head_len": pl.Int64, "head_sha256": pl.String,
                  "tail_sha256": pl.String, "offset": pl.Int64, "lines": pl.Int64, "options": pl.String,
                  "ingest_id": pl.Int64}


def offset_row(file: SourceFile, mark: Mark, offset: int, lines: int, ingest_id: int, tail: bytes) -> tuple:
    """The file_offset row of a file read up to `offset` (`tail`: the block that ends there)."""
    return (file.source_file, mark.dev, mark.ino, len(mark.head), _sha(mark.head), _sha(tail[-BLOCK:]),
            offset, lines, options_text(file.options), ingest_id)


def write_offsets(con: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    """Replace the file_offset rows of these paths, in the caller's transaction."""
    if rows:
        con.execute("DELETE FROM file_offset WHERE list_contains(?, source_file)", [[r[0] for r in rows]])
        frame = pl.DataFrame(rows, schema=_OFFSET_SCHEMA, orient="row")
        run_sql(con, f"INSERT INTO file_offset ({', '.join(map(quote_name, _OFFSET_SCHEMA))}) SELECT * FROM _incoming", _incoming=frame)


def recorder(file: SourceFile, mark: Mark, offset: int, lines: int) -> Callable[[duckdb.DuckDBPyConnection, int], None]:
    """What writes the file's offset with the ingest that read up to it (load_pieces' before_commit)."""
    def record(con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
        with open(file.path, "rb") as fh:
            fh.seek(offset - min(BLOCK, offset))
            tail = fh.read(min(BLOCK, offset))
        write_offsets(con, [offset_row(file, mark, offset, lines, ingest_id, tail)])
    return record


def record_known(file: SourceFile, mark: Mark, offset: int, lines: int, ingest_id: int) -> None:
    """The offset of a file whose bytes an earlier ingest loaded (`already ingested`), in its own transaction."""
    con = file.con
    con.execute("BEGIN TRANSACTION")
    try:
        recorder(file, mark, offset, lines)(con, ingest_id)
        con.execute("COMMIT")
    except BaseException:
        db.rollback(con)
        raise


WAITS = "; the last line, still being written, waits"


def nothing_added(file: SourceFile, mark: Mark, resume: Resume) -> FileReport:
    """The report of a file with no complete line added since the last ingest."""
    rep = FileReport(path=str(file.path), format=file.mod.FORMAT, status="already ingested", ingest_id=resume.ingest_id)
    rep.notes.append(f"no complete line added since ingest {resume.ingest_id}: nothing changed"
                     + (WAITS if mark.size > resume.end else ""))
    return rep


def read_on_note(resume: Resume, mark: Mark) -> str:
    """The note of a part read on from the last ingest."""
    return (f"read from line {resume.lines + 1} (byte {resume.start}): the lines added since ingest {resume.ingest_id}"
            + (WAITS if mark.size > resume.end else ""))


def load_tail(file: SourceFile, mark: Mark, resume: Resume) -> FileReport:
    """Load the complete lines appended since the last ingest (nothing when there are none)."""
    if resume.end == resume.start:
        return nothing_added(file, mark, resume)
    digest, newlines = _scan(file, resume.start, resume.end)
    pieces = _pieces(file.mod, file.path, file.opts, PIECE_BYTES, start=resume.start, end=resume.end,
                     first_line=resume.lines + 1)
    rep = load_pieces(file.con, pieces, file.mod.FORMAT, file.source_file, digest, file.options,
                      ownership=file.ownership,
                      before_commit=recorder(file, mark, resume.end, resume.lines + newlines))
    rep.notes.insert(0, read_on_note(resume, mark))
    return rep


def read_to(con, folder: str) -> dict[str, tuple]:
    """source_file -> (dev, ino, offset, when the ingest that read it that far started, in µs) of
    the growing files under ``folder``."""
    return {row[0]: row[1:] for row in con.execute(
        'SELECT f.source_file, f.dev, f.ino, f."offset", epoch_us(l.started_at) FROM file_offset f '
        "JOIN ingest_log l USING (ingest_id) WHERE starts_with(f.source_file, ?)", [folder]).fetchall()}
