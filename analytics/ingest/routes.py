"""The routes by which a file is read into the database, behind one interface (Route): ingest_file
runs each alike, read() while the file may still be hashed in a thread, then load(scan) once the
bytes are known to be new, or drop() when they are not. Every route ends in load_pieces, the
file's one transaction.

- WholeRoute: the parser reads the whole file into one ParseResult, which is then merged.
- EarlyInsertRoute: a big accounting file going into empty job and step tables: its rows are
  inserted while it is parsed (EarlyInsert), in the transaction load_pieces then completes.
- PiecesRoute: a big file whose parser offers iter_parse is parsed and loaded a piece at a time,
  still in its one transaction, so memory stays bounded (~0.8 GB at 50M rows).
- BulkCsvRoute: a file whose parser offers bulk_read (sidecar CSV) is first read by DuckDB itself in
  one INSERT (BulkInsert), kept only where that is exactly what the line rules give; else one of
  the routes above reads it, which says what is wrong with which line.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional

import duckdb
import polars as pl

from jobsight.analytics.ingest import lengths
from jobsight.analytics.ingest.load import FileReport, load_pieces, load_result, owners_with_samples
from jobsight.analytics.ingest.merge import quote_name, run_sql, select_casts, table_columns
from jobsight.analytics.ingest.records import BulkRead, ParseOptions, ParseResult
from jobsight.analytics.ingest.trust import Ownership
from jobsight.analytics.ingest.walk import FileScan


@dataclass
class SourceFile:
    """The file a route loads, and what its ingest_log row records of it."""
    con: duckdb.DuckDBPyConnection
    path: Path
    mod: ModuleType          # its parser
    opts: ParseOptions
    source_file: str         # the resolved path, as ingest_log records it
    options: dict            # the options recorded with it: the same bytes read with others are read again
    started: float           # time.monotonic() when its ingest began
    ownership: Optional[Ownership] = None   # its owner (untrusted: samples count only for the owner's jobs)
    # a growing file (analytics/ingest/offsets.py): read up to `end`, its size when opened, and
    # before_commit writes, in the load's transaction, how far it was read
    end: Optional[int] = None
    before_commit: Optional[Callable[[duckdb.DuckDBPyConnection, int], None]] = None

    def part(self) -> dict:
        """The parser's arguments that bound a growing file's read."""
        return {} if self.end is None else {"end": self.end}


class Route:
    """One way to read a file into the database. read() does the work that may overlap the hash of
    the file; load(scan) loads it in its one transaction (load_pieces) and returns its report;
    drop() undoes read() when the file turns out known or unreadable, or read() failed. A failure
    raises OSError (unreadable), ParserFailed, AccountingError or duckdb.Error, nothing stored."""

    hash_alongside = True                 # read() is long enough to hash the file in a thread meanwhile
    delimiter: Optional[bytes] = None     # the hash also counts newlines and these (a BulkRead's checks)

    def __init__(self, file: SourceFile):
        self.file = file

    def read(self) -> None:
        pass

    def drop(self) -> None:
        pass

    def load(self, scan: FileScan) -> FileReport:
        raise NotImplementedError

    def read_and_load(self, scan: FileScan) -> FileReport:
        """read() then load(), for a file already hashed."""
        try:
            self.read()
        except BaseException:
            self.drop()
            raise
        return self.load(scan)


class ParserFailed(Exception):
    """The parser raised while a file was being read."""


class WholeRoute(Route):
    """The parser reads the whole file; the result is merged once the hash says the bytes are new."""

    def __init__(self, file: SourceFile, progress: Optional[Callable[[str], None]] = None):
        super().__init__(file)
        self.progress = progress      # told when the file is read and its loading begins
        self.early: Optional[EarlyInsert] = None
        self.result: Optional[ParseResult] = None

    def read(self) -> None:
        try:
            self.result = self._parse()
        except OSError:
            raise
        except Exception as exc:
            raise ParserFailed(f"{self.file.mod.FORMAT} parser failed: {exc!r}") from exc

    def _parse(self) -> ParseResult:
        return self.file.mod.parse(self.file.path, self.file.opts, **self.file.part())

    def load(self, scan: FileScan) -> FileReport:
        f = self.file
        if self.progress:
            self.progress(f"{f.path}: read {self.result.rows_in:,} rows in {time.monotonic() - f.started:.1f} s; loading")
        return load_result(f.con, self.result, f.source_file, scan.digest, f.options, self.early, f.ownership,
                           f.before_commit)


class EarlyInsertRoute(WholeRoute):
    """A WholeRoute whose job and step rows are inserted while the file is parsed (EarlyInsert).
    When a key repeats, the early inserts are rolled back and load_result merges the file the
    ordinary way."""

    def read(self) -> None:
        self.early = EarlyInsert(self.file.con)
        super().read()

    def _parse(self) -> ParseResult:
        result = self.file.mod.parse(self.file.path, self.file.opts, on_piece=self.early.put)
        self.early.finish()   # con is free again (rolled back if an insert failed)
        return result

    def drop(self) -> None:
        if self.early is not None:
            self.early.rollback()


class PiecesRoute(Route):
    """A big file whose parser reads it in pieces: each piece is loaded as soon as it is parsed,
    all in the file's one transaction (peak memory ~ one piece, not the whole file)."""

    hash_alongside = False   # nothing is read before load(): the hash comes first

    def __init__(self, file: SourceFile, piece_bytes: int):
        super().__init__(file)
        self.piece_bytes = piece_bytes

    def load(self, scan: FileScan) -> FileReport:
        f = self.file
        return load_pieces(f.con, _pieces(f.mod, f.path, f.opts, self.piece_bytes, **f.part()), f.mod.FORMAT,
                           f.source_file, scan.digest, f.options, ownership=f.ownership, before_commit=f.before_commit)


def _pieces(mod: ModuleType, path: Path, opts: ParseOptions, piece_bytes: int, **part: int):
    """The parser's pieces (`part`: the start, end and first_line of a part of the file); a
    parser's failure raises ParserFailed."""
    it = mod.iter_parse(path, opts, piece_bytes, **part)
    while True:
        try:
            piece = next(it)
        except StopIteration:
            return
        except OSError:
            raise
        except Exception as exc:
            raise ParserFailed(f"{mod.FORMAT} parser failed: {exc!r}") from exc
        yield piece


class BulkCsvRoute(Route):
    """DuckDB reads the file in one INSERT (BulkInsert) while it is hashed; the rows stand only
    where that is exactly what the line rules give, else `fallback` reads the file."""

    def __init__(self, file: SourceFile, bulk: BulkRead, fallback: Route):
        super().__init__(file)
        self.bulk, self.fallback, self.delimiter = bulk, fallback, bulk.delimiter
        self.inserted: Optional[BulkInsert] = None

    def read(self) -> None:
        self.inserted = BulkInsert(self.file.con, self.bulk)

    def drop(self) -> None:
        if self.inserted is not None:
            self.inserted.rollback()

    def load(self, scan: FileScan) -> FileReport:
        f, inserted = self.file, self.inserted
        # a growing file's rows stand only when it did not grow while DuckDB and the hash read it:
        # the lines read are then those below `end`, where the next ingest goes on
        if inserted.ok and inserted.matches(scan, self.bulk) and (f.end is None or scan.size == f.end):
            self.bulk.result.rows_in = inserted.inserted["sample"]
            return load_result(f.con, self.bulk.result, f.source_file, scan.digest, f.options, inserted, f.ownership,
                               f.before_commit)
        inserted.rollback()   # refused: read the ordinary way, which says what is wrong with which line
        return self.fallback.read_and_load(scan)


def read_in_bulk(mod: ModuleType, path: Path, opts: ParseOptions) -> Optional[BulkRead]:
    """The parser's BulkRead of this file, if it offers one; a file it trips on is read the ordinary
    way, which says what is wrong with it."""
    reader = getattr(mod, "bulk_read", None)
    if reader is None:
        return None
    try:
        return reader(path, opts)
    except OSError:
        raise
    except Exception:   # noqa: BLE001
        return None


class BulkInsert:
    """The samples of a BulkRead, inserted by DuckDB itself in the file's transaction before
    load_pieces records the file (the protocol of EarlyInsert: ingest_id, inserted per table,
    finish(), rollback()). They stand only as a plain insert: DuckDB read every line, the rows are
    one owner with no samples stored before (else each row needs the duplicate check), and each
    device's times rise in file order (no duplicates within the file). `ok` is False, and nothing is kept, otherwise;
    the caller then reads the file the ordinary way, which finds bad lines and duplicates one by one."""

    MAX_DEVICES = 64   # one ordered pass per device; more is not a sidecar file
    alone = False      # samples only: the job and step tables may hold anything

    def __init__(self, con, bulk: BulkRead):
        self.con, self.open, self.ok = con, False, False
        self.inserted = {"sample": 0}
        self.ingest_id: Optional[int] = None
        owner = pl.DataFrame([bulk.owner], schema=["cluster", "job_id_raw", "host"], orient="row")
        if owners_with_samples(con, owner):
            return
        con.execute("BEGIN TRANSACTION")
        self.open = True
        self.ingest_id = con.execute("SELECT nextval('ingest_id_seq')").fetchall()[0][0]
        cols = [c for c, _ in table_columns(con, "sample")]
        values = ", ".join(str(int(self.ingest_id)) if c == "ingest_id" else quote_name(c) for c in cols)
        try:
            self.inserted["sample"] = con.execute(f"INSERT INTO sample ({', '.join(quote_name(c) for c in cols)}) "
                                                  f"SELECT {values} FROM ({bulk.select})").fetchall()[0][0]
            self.ok = self._one_owner(bulk.owner) and self._rising()
        except duckdb.Error:   # a line DuckDB cannot read, an empty key (NOT NULL), out of memory
            self.ok = False
        if not self.ok:
            self.rollback()

    def _one_owner(self, owner: tuple) -> bool:
        return not self.con.execute(
            "SELECT count(*) FROM sample WHERE ingest_id = ? AND NOT (cluster = ? AND job_id_raw = ? AND host = ?)",
            [self.ingest_id, *owner]).fetchall()[0][0]

    def _rising(self) -> bool:
        devices = [r[0] for r in self.con.execute(
            "SELECT DISTINCT device FROM sample WHERE ingest_id = ?", [self.ingest_id]).fetchall()]
        if len(devices) > self.MAX_DEVICES:
            return False
        # lag() OVER () with no ORDER BY runs as DuckDB's streaming window, in table (= file) order:
        # no sort of the whole file, as ORDER BY or PARTITION BY would need
        passes = " UNION ALL ".join(
            "SELECT count(*) FILTER (WHERE time <= prev) FROM (SELECT time, lag(time) OVER () AS prev "
            "FROM sample WHERE ingest_id = ? AND device = ?)" for _ in devices)
        args = [a for d in devices for a in (self.ingest_id, d)]
        return not devices or not any(r[0] for r in self.con.execute(passes, args).fetchall())

    def matches(self, scan: FileScan, bulk: BulkRead) -> bool:
        """DuckDB's rows are the file's lines, each of bulk.fields fields: it skips blank lines and
        takes a trailing delimiter, which the line rules reject."""
        lines = scan.newlines   # bulk_read takes only files ending with a newline
        return (self.inserted["sample"] == lines - bulk.header_lines
                and scan.delimiters == lines * (bulk.fields - 1))

    def finish(self) -> bool:
        return self.ok

    def rollback(self) -> None:
        if self.open:
            self.con.execute("ROLLBACK")
            self.open = False
        self.ok = False


class EarlyInsert:
    """Inserts a big accounting file's job and step rows while the file is still being parsed: the
    parser hands over each block's rows (its on_piece) and a worker thread inserts them, in the
    file's transaction, while the next block is parsed (polars and DuckDB both release the GIL, so
    the two overlap on two cores). Only used when the job and step tables are empty, where the merge
    rule has nothing to decide: every row is a plain insert. A key repeated within the file is found
    once the inserts are done; the transaction is then rolled back and the file loaded the ordinary way."""

    alone = True   # applies() only to empty job and step tables

    def __init__(self, con):
        self.con = con
        self.error: Optional[BaseException] = None
        self.inserted = {"job": 0, "step": 0}
        self.checked = False   # for a repeated key: finish() is called after the parse and again by load_pieces
        self.queue: queue.Queue = queue.Queue()   # unbounded: the parser keeps every frame anyway
        con.execute("BEGIN TRANSACTION")
        self.ingest_id = con.execute("SELECT nextval('ingest_id_seq')").fetchall()[0][0]
        # DuckDB's own worker threads would only contend with polars' for the two cores while the
        # parse runs (measured: ~10 % less CPU and wall time with one); restored when done
        self.threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
        con.execute("SET threads = 1")
        self.open = True
        self.thread = threading.Thread(target=self._work, daemon=True, name="jobsight-insert")
        self.thread.start()

    @staticmethod
    def applies(con, mod: ModuleType) -> bool:
        """The parser hands over its blocks (ON_PIECE) and the job and step tables are empty."""
        return (getattr(mod, "ON_PIECE", False) and
                not con.execute("SELECT EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM step)").fetchall()[0][0])

    def put(self, jobs: pl.DataFrame, steps: pl.DataFrame) -> None:
        if self.error is None and not (lengths.within(jobs) and lengths.within(steps)):
            # text beyond its limit: the ordinary load rejects or cuts it, row by row (load_pieces)
            self.error = ValueError("a text value beyond its limit")
        if self.error is None:
            self.queue.put((jobs, steps))

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is not None:
                continue
            try:
                for frame, table in zip(item, ("job", "step")):
                    if frame.height:
                        cols, sel = select_casts(self.con, frame, table, self.ingest_id)
                        self.inserted[table] += run_sql(
                            self.con, f"INSERT INTO {table} ({', '.join(quote_name(c) for c in cols)}) SELECT {sel} FROM _incoming",
                            _incoming=frame)[0][0]
            except BaseException as exc:   # a repeated key (or anything else): load the ordinary way
                self.error = exc

    def _join(self) -> None:
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()

    def _restore_threads(self) -> None:
        if self.threads is not None:   # not inside an aborted transaction: after finish's rollback
            self.con.execute(f"SET threads = {int(self.threads)}")
            self.threads = None

    def finish(self) -> bool:
        """Wait for the inserts; True if they all went in and no key repeats (the transaction stays
        open), else roll back."""
        self._join()
        if self.error is None and self.open and not self.checked:
            self._restore_threads()   # the parse is over: the check gets both cores
            self.error, self.checked = self._repeated_key(), True
        if self.error is not None:
            self.rollback()
        self._restore_threads()
        return self.error is None

    def _repeated_key(self) -> Optional[Exception]:
        """The tables held nothing before, so a key twice in them is a key the file repeats (no index
        refuses it: the keys are the loader's to keep, see sql/schema/0003)."""
        twice = self.con.execute(
            "SELECT EXISTS (SELECT 1 FROM job GROUP BY cluster, job_id_raw HAVING count(*) > 1) "
            "OR EXISTS (SELECT 1 FROM step GROUP BY cluster, job_id_raw, step_id HAVING count(*) > 1)").fetchall()[0][0]
        return KeyError("a key repeats in the file") if twice else None

    def rollback(self) -> None:
        self._join()
        if self.open:
            self.con.execute("ROLLBACK")
            self.open = False
        self._restore_threads()
