"""What the bulk accounting-log parsers (sacct text, PBS, LSF) share: a file read in blocks of whole lines
(a line longer than lengths.MAX_LINE_BYTES skipped unread and rejected with its number), a block's
lines as a polars frame with the file's own line numbers, blocks converted in threads and collected
in file order, and a scalar rule applied once per distinct value of a column."""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from functools import partial
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
            data = item.data[:-1] if item.data.endswith(b"\n") else item.data
            yield item.first, data.decode("utf-8", errors="replace")


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


# a file this big has its blocks converted in worker processes (when there are 2 cores or more);
# a smaller one in threads of this process, which start at once
PROCESS_BYTES = 4 * BLOCK_BYTES


def block_workers(path: Path) -> int:
    """How many worker processes convert path's blocks: one a core (at most 4), or 0 (threads) for a
    file under PROCESS_BYTES or a machine with one core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        cores = os.cpu_count() or 1
    return min(cores, 4) if cores > 1 and path.stat().st_size >= PROCESS_BYTES else 0


def blocks_in_file_order(calls: Iterable[tuple], workers: int, threads: int, name: str) -> Iterator:
    """The results of calls ((function, args...), one per block) in file order: in ``workers``
    processes (block_workers), else in ``threads`` threads."""
    if workers:
        return in_file_order_processes(calls, workers)
    return in_file_order((partial(fn, *args) for fn, *args in calls), threads, name)


def in_file_order_processes(calls: Iterable[tuple], workers: int) -> Iterator:
    """As in_file_order, for calls given as (function, args...) of module-level functions (picklable),
    run in ``workers`` processes (block_worker), each with one polars thread: a block's Python work
    (the GIL) and its polars work both run on every core. Block i goes to worker i mod ``workers``,
    at most 2 a worker waiting, so the blocks held stay bounded; results come back in file order.
    The workers are new interpreters running block_worker, not copies of this process and not
    multiprocessing's (which would run the caller's main script again in each)."""
    pool = [_Worker() for _ in range(workers)]
    pending: deque = deque()
    try:
        for i, (fn, *args) in enumerate(calls):
            w = pool[i % workers]
            w.submit((fn, tuple(args)))
            pending.append(w)
            while len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        for w in pool:
            w.close()
    finally:
        for w in pool:
            w.kill()


class _Worker:
    """One block_worker process: calls are written by a thread of its own (a big block must not
    wait on the worker's stdout being read), results read in order by the caller."""

    def __init__(self):
        import queue
        import subprocess
        import sys
        import threading
        env = {**os.environ, "POLARS_MAX_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "jobsight.analytics.ingest.parsers.block_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.calls: queue.Queue = queue.Queue()
        self.feeder = threading.Thread(target=self._feed, name=f"jobsight-block-{self.proc.pid}", daemon=True)
        self.feeder.start()

    def _feed(self) -> None:
        from jobsight.analytics.ingest.parsers.block_worker import write_message
        try:
            while (call := self.calls.get()) is not None:
                write_message(self.proc.stdin, call)
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):   # the worker ended: result() says how
            pass

    def submit(self, call: tuple) -> None:
        self.calls.put(call)

    def result(self):
        import pickle

        from jobsight.analytics.ingest.parsers.block_worker import read_message
        data = read_message(self.proc.stdout)
        if data is None:
            raise RuntimeError(f"block worker {self.proc.pid} ended (exit status {self.proc.wait()})")
        ok, value = pickle.loads(data)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self.calls.put(None)
        self.feeder.join()
        self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.calls.put(None)
        for fh in (self.proc.stdin, self.proc.stdout):
            try:
                fh.close()
            except OSError:
                pass


def polars_threads() -> int:
    return pl.thread_pool_size()


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
