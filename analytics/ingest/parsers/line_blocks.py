"""What the bulk accounting-log parsers (sacct text, PBS, LSF) share: a file read in blocks of whole lines
(a line longer than lengths.MAX_LINE_BYTES skipped unread and rejected with its number), a block's
lines as a polars frame with the file's own line numbers, blocks converted in threads and collected
in file order, and a scalar rule applied once per distinct value of a column."""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar, Union

import polars as pl

from jobsight.analytics.ingest import lengths
from jobsight.analytics.ingest.records import ParseResult, Reject

BLOCK_BYTES = 16 << 20
T = TypeVar("T")
Block = Union[tuple[int, str], lengths.LongLine]
# ints a column can hold; a rule giving more (a fuzzed '0*99999999999999999999') is refused as too large
_INT_MAX = 2 ** 62


def iter_blocks(path: Path, block_bytes: int = BLOCK_BYTES, skip_bom: bool = False) -> Iterator[Block]:
    """(first line number, text) for blocks of about block_bytes, cut after a newline, and a
    lengths.LongLine in their place for each line longer than lengths.MAX_LINE_BYTES, which is
    skipped unread (the block after it starts at the next line's number): see set_aside.
    ``skip_bom``: a UTF-8 byte order mark (Windows editors) at the start is not part of the first line."""
    with open(path, "rb") as fh:
        start = 3 if skip_bom and fh.read(3) == b"\xef\xbb\xbf" else 0
        for item in lengths.bounded_lines(fh, start, block=block_bytes):
            if isinstance(item, lengths.LongLine):
                yield item
                continue
            data = item.data
            # decoded without the last newline, from the block's bytes (no copy of them first)
            yield item.first, str(memoryview(data)[:-1] if data.endswith(b"\n") else data, "utf-8", "replace")


def set_aside(blocks: Iterable[Block], long_lines: list[lengths.LongLine]) -> Iterator[tuple[int, str]]:
    """The (first line number, text) blocks of iter_blocks, its LongLines appended to long_lines."""
    for item in blocks:
        if isinstance(item, lengths.LongLine):
            long_lines.append(item)
        else:
            yield item


def reject_long_lines(result: ParseResult, long_lines: list[lengths.LongLine]) -> None:
    """Each line set aside as too long is an input row of result, rejected with its number."""
    result.rows_in += len(long_lines)
    result.rejects.extend(Reject(ll.line_no, ll.reason(), None) for ll in long_lines)


def close_records(result: ParseResult, long_lines: list[lengths.LongLine], comments: int, skipped: int) -> None:
    """The end of a record parser's result (PBS, LSF): its too-long lines rejected, the rejects in
    line order, comment lines and the records it does not read counted as dropped."""
    reject_long_lines(result, long_lines)
    result.rejects.sort(key=lambda r: r.line_no or 0)
    result.dropped = comments + skipped
    if comments:
        result.notes.append(f"{comments} comment line(s) ('#') skipped")


def in_file_order(calls: Iterable[Callable[[], T]], threads: int, name: str) -> Iterator[T]:
    """The results of ``calls`` (one per block), run in ``threads`` threads (polars releases the
    GIL) and given back in the order of the calls, so that blocks are collected in file order.
    The next calls are taken (and what makes them runs, in this thread) while earlier ones run."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name) as pool:
        pending: deque = deque()
        try:
            for call in calls:
                pending.append(pool.submit(call))
                while len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def lines_frame(first: int, text: str) -> pl.DataFrame:
    """A block's lines: _line (the file's line number) and text (without a trailing '\\r')."""
    lines = pl.DataFrame({"text": pl.Series([text]).str.split("\n")}).explode("text")
    lines = lines.with_row_index("_line", offset=first).with_columns(pl.col("_line").cast(pl.Int64))
    if "\r" in text:
        lines = lines.with_columns(pl.col("text").str.strip_suffix("\r"))
    return lines


def map_distinct(values: pl.Series, rule: Callable, dtypes: dict[str, pl.DataType]) -> pl.DataFrame:
    """rule(value) for each distinct non-null value, beside `values` in their order: one column per
    dtypes entry (rule returns a tuple of them, or one value) and _error, the text of the ValueError
    (or OverflowError) rule raised, else null. The rule stays the one scalar definition."""
    distinct = values.unique().drop_nulls()
    cols: dict[str, list] = {k: [] for k in dtypes}
    errors: list = []
    for v in distinct.to_list():
        try:
            out = rule(v)
            out = out if isinstance(out, tuple) else (out,)
            if any(isinstance(x, int) and abs(x) > _INT_MAX for x in out):
                raise ValueError(f"{v[:40]!r}: a number too large")
            for k, x in zip(dtypes, out):
                cols[k].append(x)
            errors.append(None)
        except (ValueError, OverflowError) as exc:
            for k in dtypes:
                cols[k].append(None)
            errors.append(str(exc))
    table = pl.DataFrame([distinct.rename("_v"), *(pl.Series(k, cols[k], dtype=t) for k, t in dtypes.items()),
                          pl.Series("_error", errors, dtype=pl.String)])
    return values.rename("_v").to_frame().join(table, on="_v", how="left", maintain_order="left").drop("_v")
