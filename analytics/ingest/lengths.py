"""The longest text jobsight reads or stores, in one place (docs/ingest.md#limits-of-text-and-lines).

A line, a metadata file or a text cell longer than any real record is a broken or forged input,
and held whole it would cost every later reader its length in memory. So: a line longer than
MAX_LINE_BYTES is never held (the readers skip to its end: bounded_lines) and is rejected with its
number; a `.meta.json` larger than MAX_META_BYTES is not read, a sacct --json document larger than
MAX_JSON_BYTES is refused unread; a text value longer than its column's
limit in TEXT rejects its row, except the free text of FREE_TEXT, which is cut with a note. Every
route applies the same rule: the loader checks each parsed frame (checked), the batch loader and
the DuckDB bulk read of sidecar files check the same limits (checked, sql_ok).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional, Union

import polars as pl

MAX_LINE_BYTES = 1 << 20     # one line of any input; a sacct line of every field is ~10 KB
MAX_META_BYTES = 1 << 20     # a sidecar's <stem>.meta.json; the sidecar writes ~1 KB
# a sacct --json document, parsed whole: Python's objects cost ~7x its bytes, so 256 MiB peaks near
# 2 GiB (docs/benchmarks.md's 3 GB); that is tens of thousands of jobs, and sacct -S/-E splits a dump
MAX_JSON_BYTES = 256 << 20
MAX_REJECT_TEXT = 1000       # a reject's reason and raw line, as stored

_ID, _NAME, _TRES = 1024, 256, 65536
# characters per text column of tables job, step, sample and sidecar_run (the same name means the
# same thing in each)
TEXT: dict[str, int] = {
    "cluster": _NAME, "job_id": _ID, "job_id_raw": _ID, "array_job_id": _ID, "array_task_id": _ID,
    "het_job_id": _ID, "step_id": _ID,
    "user": _NAME, "group": _NAME, "account": _NAME, "partition": _ID, "qos": _NAME, "state": _NAME,
    "exit_code": _NAME, "gpu_type": _NAME, "source": _NAME,
    "host": _NAME, "device": _NAME,                      # a DNS name is at most 253
    "alloc_tres": _TRES, "req_tres": _TRES,
    "tres_usage_in_tot": _TRES, "tres_usage_in_max": _TRES, "tres_usage_in_ave": _TRES,
    "node_list": 262144,                                 # PBS's exec_host names every node: 10k nodes ~ 200 KB
    "scheduler": 1000, "cpu_method": 1000, "driver_version": 1000, "nvml_version": 1000,
    "gpus": MAX_META_BYTES, "metadata": MAX_META_BYTES, "source_file": 4096, "owner_user": _NAME,
    "job_name": 1024, "step_name": 1024, "null_reasons": 4096,
}
# free text, cut to its limit (with a note) rather than rejecting the record it belongs to
FREE_TEXT = frozenset({"job_name", "step_name", "null_reasons"})


def _over(col: str) -> pl.Expr:
    """True where col is longer than its limit; bytes first (cheap), characters only past that."""
    n = TEXT[col]
    return ((pl.col(col).str.len_bytes() > n) & (pl.col(col).str.len_chars() > n)).fill_null(False)


@dataclass
class Checked:
    frame: Optional[pl.DataFrame]
    rejected: Optional[pl.DataFrame]   # the rows rejected: _line (null when the frame has none) and reason
    cut: dict[str, int]                # free-text column -> values cut


def checked(frame: Optional[pl.DataFrame], what: str = "row") -> Checked:
    """frame with the rows whose text is beyond TEXT rejected (the first such column's reason) and
    free text cut to its limit. `what` names the row in the reason ('job', 'sample')."""
    if frame is None or frame.height == 0:
        return Checked(frame, None, {})
    if within(frame):
        return Checked(frame, None, {})   # the usual case: nothing near a limit
    cols = [c for c, t in frame.schema.items() if c in TEXT and t == pl.String]
    cut, fixes = {}, []
    for c in cols:
        if c in FREE_TEXT:
            n = int(frame.select(_over(c).sum()).item())
            if n:
                cut[c] = n
                fixes.append(pl.when(_over(c)).then(pl.col(c).str.slice(0, TEXT[c])).otherwise(pl.col(c)).alias(c))
    strict = [c for c in cols if c not in FREE_TEXT]
    rejected = None
    if strict:
        reason = pl.lit(None, dtype=pl.String)
        for c in reversed(strict):
            reason = pl.when(_over(c)).then(pl.format(
                f"{c}: {{}} characters, longer than its limit of {TEXT[c]}: {what} not stored",
                pl.col(c).str.len_chars())).otherwise(reason)
        frame = frame.with_columns(reason.alias("_too_long"))
        bad = frame.filter(pl.col("_too_long").is_not_null())
        line = bad["_line"] if "_line" in bad.columns else pl.Series("_line", [None] * bad.height, dtype=pl.Int64)
        rejected = pl.DataFrame({"_line": line.cast(pl.Int64), "reason": bad["_too_long"]})
        if "_file" in bad.columns:   # the batch loader's parts
            rejected = rejected.with_columns(bad["_file"])
        frame = frame.filter(pl.col("_too_long").is_null()).drop("_too_long")
    if fixes:
        frame = frame.with_columns(fixes)
    return Checked(frame, rejected if rejected is not None and rejected.height else None, cut)


def within(frame: Optional[pl.DataFrame]) -> bool:
    """No text of frame is near its limit (the cheap test of checked, in bytes)."""
    if frame is None or frame.height == 0:
        return True
    cols = [c for c, t in frame.schema.items() if c in TEXT and t == pl.String]
    return not cols or not frame.select(pl.any_horizontal([pl.col(c).str.len_bytes() > TEXT[c] for c in cols])
                                        .fill_null(False).any()).item()


def bound_text(result, source: str) -> None:
    """A parsed file's (piece's) rows with text beyond TEXT rejected and free text cut (a note
    says how much): result (a records.ParseResult) changed in place. Its sidecar_run row is the
    metadata's, whose text the parser checks (MAX_META_BYTES, and 1000 characters a value)."""
    from jobsight.analytics.ingest.records import Reject
    cut: dict[str, int] = {}
    for name, what in (("jobs", "job"), ("steps", "step"), ("samples", "sample")):
        got = checked(getattr(result, name), what)
        if got.rejected is None and not got.cut:
            continue
        setattr(result, name, got.frame)
        for c, n in got.cut.items():
            cut[c] = cut.get(c, 0) + n
        if got.rejected is not None:
            result.rejects = sorted(result.rejects + [Reject(line, reason, None) for line, reason in
                                                      got.rejected.select("_line", "reason").iter_rows()],
                                    key=lambda r: r.line_no or 0)
    result.notes += cut_note(source, cut)


def cut_note(source: str, cut: dict[str, int]) -> list[str]:
    """The note of free text cut in a file: one line naming it and how many values were cut."""
    if not cut:
        return []
    what = ", ".join(f"{n} {c} value(s) to {TEXT[c]} characters" for c, n in sorted(cut.items()))
    return [f"{source}: text longer than its limit cut: {what}"]


def sql_ok(columns: list[str]) -> str:
    """SQL: true where each of these text columns (those with a limit) is within it. strlen counts
    bytes, at least the characters: a value it refuses goes to the line reader, which counts characters."""
    terms = [f'coalesce(strlen("{c}") <= {TEXT[c]}, true)' for c in columns if c in TEXT]
    return " AND ".join(terms) or "true"


def short(text: Optional[str], limit: int = MAX_REJECT_TEXT) -> Optional[str]:
    """A reject's reason or raw line cut to what is stored of it."""
    return text if text is None or len(text) <= limit else text[:limit - 3] + "..."


# --- lines, read without ever holding one longer than MAX_LINE_BYTES ---

@dataclass(frozen=True)
class Lines:
    """Whole lines of a file (each at most MAX_LINE_BYTES), starting at line `first`; `data` ends with
    a newline unless it is the file's last line, not ended."""
    first: int
    data: bytes


@dataclass(frozen=True)
class LongLine:
    """A line longer than MAX_LINE_BYTES, not read: its number and size (newline included)."""
    line_no: int
    size: int
    ended: bool = True   # False: the file's last line, without a newline

    def reason(self) -> str:
        return f"line of {self.size:,} bytes, longer than the limit of {MAX_LINE_BYTES:,}: not read"


BLOCK_BYTES = 8 << 20


def has_long_line(data: bytes, max_line: int = MAX_LINE_BYTES) -> bool:
    """Whether some line of data is longer than max_line. A line that long spans a whole window of
    max_line/2 bytes without a newline, so one find per window tells the usual case."""
    if len(data) <= max_line:
        return False
    w = max(1, max_line // 2)
    if all(data.find(b"\n", k, k + w) >= 0 for k in range(0, len(data) - w + 1, w)):
        return False
    return any(b - a > max_line for a, b in _line_spans(data))


def _line_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of data, newline included."""
    a = 0
    while a < len(data):
        b = data.find(b"\n", a)
        b = len(data) if b < 0 else b + 1
        yield a, b
        a = b


def _split(first: int, data: bytes, max_line: int) -> Iterator[Union[Lines, LongLine]]:
    """data's lines as runs of Lines around each LongLine."""
    if not has_long_line(data, max_line):
        yield Lines(first, data)
        return
    run, line = 0, first
    for a, b in _line_spans(data):
        if b - a > max_line:
            if a > run:
                yield Lines(first, data[run:a])
            yield LongLine(line, b - a, data[b - 1:b] == b"\n")
            run, first = b, line + 1
        line += 1
    if run < len(data):
        yield Lines(first, data[run:])


def bounded_lines(fh: BinaryIO, start: int = 0, end: Optional[int] = None, first_line: int = 1,
                  block: int = BLOCK_BYTES, max_line: int = MAX_LINE_BYTES) -> Iterator[Union[Lines, LongLine]]:
    """The bytes [start, end) of fh as Lines of at most about `block` bytes and a LongLine for each
    line longer than max_line, which is skipped without being held: memory stays about block +
    max_line whatever the lines hold."""
    fh.seek(start)
    pos, line, carry, skipped = start, first_line, b"", 0   # skipped: bytes of a long line read so far
    while end is None or pos < end:
        chunk = fh.read(block if end is None else min(block, end - pos))
        if not chunk:
            break
        pos += len(chunk)
        if skipped:
            i = chunk.find(b"\n")
            if i < 0:
                skipped += len(chunk)
                continue
            yield LongLine(line, skipped + i + 1)
            line, skipped, chunk = line + 1, 0, chunk[i + 1:]
        # the whole lines copied once (carry holds no newline)
        cut = chunk.rfind(b"\n") + 1
        if cut:
            whole = b"".join((carry, memoryview(chunk)[:cut])) if carry or cut < len(chunk) else chunk
            carry = chunk[cut:]
        else:
            whole, carry = b"", carry + chunk
        if whole:
            for item in _split(line, whole, max_line):
                yield item
            line += whole.count(b"\n")
        if len(carry) > max_line:
            skipped, carry = len(carry), b""
    if skipped:
        yield LongLine(line, skipped, ended=False)
    elif carry:
        yield Lines(line, carry)


def read_line(fh: BinaryIO, max_line: int = MAX_LINE_BYTES) -> Optional[bytes]:
    """The next line of fh (newline included, if it has one), or None when it is longer than
    max_line: then fh is left after it, and nothing of it was held beyond max_line + a block."""
    got = fh.readline(max_line + 1)
    if len(got) <= max_line:
        return got
    if got.endswith(b"\n"):
        return None
    while (more := fh.readline(BLOCK_BYTES)) and not more.endswith(b"\n"):
        pass
    return None
