"""Ingest files into a jobsight database: find them, detect their format, pick how each is loaded,
load it and report. This is the public entry; the work is in
- ingest_walk: the folder walk, parser registry and format detection, the sha256 scan, and the
  lookup of an ingest that already loaded the same bytes;
- ingest_routes: the routes by which a file is read into the database (whole, early insert, in
  pieces, DuckDB's own CSV read), behind one interface;
- ingest_load: a file's one transaction, its ingest_log row and the row accounting;
- ingest_merge: the merge rule for jobs and steps;
- ingest_trust: the trust model: accounting only from trusted files, a user's samples only for
  that user's jobs;
- ingest_offsets: a growing sidecar file read from where the last ingest of it stopped.
- ingest_batch: many sidecar files read and loaded together (a watch cycle's spool).

Each file is loaded in one transaction, so a crash leaves either all of a file or none of it, and
every input row of a file is accounted for exactly once (stored, updated, unchanged, rejected or
dropped), or the file is not committed.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable, Optional

import duckdb

from jobsight.analytics.ingest import offsets, trust
from jobsight.analytics.ingest.load import AccountingError, FileReport, load_pieces, load_result
from jobsight.analytics.ingest.parsers import PARSER_MODULES
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.ingest.routes import (
    BulkCsvRoute,
    EarlyInsert,
    EarlyInsertRoute,
    ParserFailed,
    PiecesRoute,
    Route,
    SourceFile,
    WholeRoute,
    read_in_bulk,
)
from jobsight.analytics.ingest.walk import (
    Entry,
    FileScan,
    NotRegularFile,
    already_ingested,
    detect,
    import_parsers,
    open_regular,
    read_head,
    scan_file,
    seen_name,
    sha256_file,
    start_scan,
    walk,
)
from jobsight.analytics.store import db

__all__ = ["AccountingError", "Entry", "FileReport", "FileScan", "already_ingested", "detect", "ingest_file", "ingest_paths",
           "load_parsers", "load_pieces", "load_result", "read_head", "scan_file", "sha256_file", "walk"]

BIG_FILE = 64 << 20     # progress lines for files this big even when ingesting just one
STREAM_BYTES = 64 << 20   # files bigger than this whose parser has iter_parse are loaded in pieces this big (~0.8 GB peak)
EARLY_INSERT_BYTES = 64 << 20   # files bigger than this whose parser has on_piece are inserted while parsed (EarlyInsert)


def load_parsers(warn: Callable[[str], None] | None = None) -> dict[str, ModuleType]:
    """FORMAT -> module of PARSER_MODULES, in detection order. A parser module not written yet is skipped."""
    return import_parsers(PARSER_MODULES, warn)


def ingest_paths(con, paths: Iterable[str | Path], opts: ParseOptions, fmt: Optional[str] = None,
                 progress: Optional[Callable[[str], None]] = None,
                 on_file: Optional[Callable[[FileReport], None]] = None) -> list[FileReport]:
    """Ingest files and folders. The files a folder walk found are read together (ingest_batch, as
    `watch` reads its spool: small sidecar files in one transaction per batch, each still with its
    own report and ingest_log row), unless --format names one format for all; the rest one by one."""
    from jobsight.analytics.ingest import batch  # it builds on this module
    parsers = load_parsers(warn=progress)
    entries = walk(paths)
    judge = trust.PathJudge()   # each folder's chain checked once for the whole run
    n = sum(1 for e in entries if e.skip is None)
    reports, i = [], 0

    def report(rep: FileReport) -> None:
        reports.append(rep)
        if on_file:
            on_file(rep)

    for group in _groups(entries, fmt):
        if len(group) >= BATCH_MIN_FILES:
            if progress:
                progress(f"[{i + 1}-{i + len(group)}/{n}] {len(group)} files of {group[0].within}, read together")
            i += len(group)
            batch.ingest_files(con, group, group[0].within, opts, parsers, report, judge)
            continue
        for entry in group:
            path = entry.path
            if entry.skip is not None:   # never opened: a FIFO, a device, a link out of the folder, ...
                # named on the command line: an input that cannot be read; found in a folder: a note
                report(FileReport(path=str(path), status="unreadable" if entry.explicit else "skipped", error=entry.skip))
                continue
            i += 1
            if progress:
                try:
                    size = path.stat().st_size
                except OSError:
                    size = 0
                if n > 1 or size > BIG_FILE:
                    progress(f"[{i}/{n}] {path}" + (f" ({size / 1e6:.0f} MB)" if size > BIG_FILE else ""))
            if not path.exists():
                report(FileReport(path=str(path), status="unreadable", error="no such file or directory"))
            else:
                report(ingest_file(con, path, opts, parsers, fmt=fmt, explicit=entry.explicit, progress=progress,
                                   within=entry.within, given=entry.given, judge=judge))
    return reports


BATCH_MIN_FILES = 2   # files of one folder walk read together (ingest_batch) from this many on


def _groups(entries: list[Entry], fmt: Optional[str]) -> list[list[Entry]]:
    """Runs of entries, in walk order: the readable files one folder walk found (batched), and each
    other entry on its own. With --format every file is read alone, as that format."""
    groups: list[list[Entry]] = []
    for e in entries:
        batched = fmt is None and e.skip is None and e.within is not None and not e.explicit
        if batched and groups and groups[-1][0].within == e.within and groups[-1][0].skip is None \
                and not groups[-1][0].explicit:
            groups[-1].append(e)
        else:
            groups.append([e])
    return groups


def ingest_file(con, path: Path, opts: ParseOptions, parsers: dict[str, ModuleType],
                fmt: Optional[str] = None, explicit: bool = True,
                progress: Optional[Callable[[str], None]] = None, within: Optional[str] = None,
                given: Optional[str] = None, judge: Optional[trust.PathJudge] = None) -> FileReport:
    """Ingest one file: pick its route, run it (while the file is hashed, where that pays) and report.
    Only a regular file is read (a FIFO would block the run); `within`: the file was found by a
    walk of this (real) folder, and is not read if it now leads outside it. Who answers for it,
    judged by its whole path (`given`: the root named on the command line it was found under),
    decides what it may change (ingest_trust): accounting is read only from a trusted file. A
    sidecar file read before is read from where that ingest stopped (ingest_offsets)."""
    rep = FileReport(path=str(path))
    t0 = time.monotonic()
    try:
        fd = open_regular(path, within)
        try:
            st = os.fstat(fd)
            verdict = trust.judge_opened(fd, path, st, judge, given)
            ownership = trust.Ownership.of(path, st, verdict)   # the file as opened: inside the folder, regular
            mark = offsets.Mark.of(fd, st)
        finally:
            os.close(fd)
        if verdict.refused:
            raise NotRegularFile(f"{path}: {verdict.refused}")
        mod = _parser_for(path, parsers, fmt, explicit, rep, within)
        if mod is None:
            return rep
        rep.format = mod.FORMAT
        rep.trust = trust.trust_note(verdict, mod.FORMAT)
        refusal = trust.accounting_refusal(mod.FORMAT, ownership.owner, verdict)
        if refusal:   # like a file that is not regular: a note in a folder, an input not read when named
            rep.status, rep.error = ("unreadable" if explicit else "skipped"), refusal
            return rep
        size = path.stat().st_size
        file = SourceFile(con, path, mod, opts, str(Path(path).resolve()), recorded_options(opts, fmt, ownership.owner), t0,
                          ownership)
        tracked = mod.FORMAT in offsets.FORMATS
        file.end = mark.size if tracked else None   # lines written after the open wait for the next ingest
        resume, why = offsets.plan(file, mark, within) if tracked else (None, None)
        if resume is None:
            rep.notes += [why] if why else []
            route = _pick_route(file, size, progress)
            checksum = _Checksum.start(file, route, size, rep, mark.size if tracked else None)
    except NotRegularFile as exc:
        rep.status, rep.error = ("unreadable" if explicit else "skipped"), str(exc).removeprefix(f"{path}: ")
        return rep
    except OSError as exc:
        return failed_report(rep, exc)
    if resume is not None:
        return _appended(file, mark, resume, rep)
    if checksum.scan is not None and not checksum.new():   # hashed first: these bytes are in already
        return _known(file, mark, checksum, rep) if tracked else rep
    try:
        try:
            route.read()
        except BaseException:
            route.drop()
            checksum.wait()
            raise
        if not checksum.new():   # unreadable, or these bytes are in already (rep says which)
            route.drop()
            return _known(file, mark, checksum, rep) if tracked else rep
        if tracked:   # the next ingest goes on after the complete lines there were when it was opened
            file.before_commit = offsets.recorder(file, mark, checksum.scan.end_upto, checksum.scan.lines_upto)
        out = route.load(checksum.scan)
    except (OSError, ParserFailed, AccountingError, duckdb.Error) as exc:
        return failed_report(rep, exc)
    out.path, out.seconds, out.trust = str(path), time.monotonic() - t0, rep.trust
    out.notes[:0] = rep.notes
    return out


def _appended(file: SourceFile, mark: offsets.Mark, resume: offsets.Resume, rep: FileReport) -> FileReport:
    """Load the lines appended to a file since the last ingest of it."""
    try:
        out = offsets.load_tail(file, mark, resume)
    except (OSError, ParserFailed, AccountingError, duckdb.Error) as exc:
        return failed_report(rep, exc)
    out.path, out.seconds, out.trust = str(file.path), time.monotonic() - file.started, rep.trust
    return out


def _known(file: SourceFile, mark: offsets.Mark, checksum: "_Checksum", rep: FileReport) -> FileReport:
    """A tracked file whose bytes are in already: the next ingest goes on after them."""
    if rep.status == "already ingested" and checksum.scan is not None:
        try:
            offsets.record_known(file, mark, checksum.scan.end_upto, checksum.scan.lines_upto, rep.ingest_id)
        except (OSError, duckdb.Error) as exc:
            rep.notes.append(f"where the next ingest goes on was not recorded: {exc}")
    return rep


def _parser_for(path: Path, parsers: dict[str, ModuleType], fmt: Optional[str], explicit: bool,
                rep: FileReport, within: Optional[str] = None) -> Optional[ModuleType]:
    """The parser named by fmt, else the first that recognises the file; None (rep says why) if none."""
    if fmt:
        mod = parsers.get(fmt)
        if mod is None:
            rep.status, rep.error = "failed", f"format {fmt!r} is not available in this installation"
        return mod
    mod = detect(path, parsers, within)
    if mod is None:
        rep.status = "unrecognised" if explicit else "skipped"
        rep.error = "format not recognised (use --format to name it)"
    return mod


def recorded_options(opts: ParseOptions, fmt: Optional[str], owner: Optional[trust.Owner] = None) -> dict:
    """The options recorded with an ingest: the same bytes read with others are read again. An
    untrusted owner is one: a user's copy of another's file must not stand for the original."""
    return {k: v for k, v in (("timezone", opts.timezone), ("cluster", opts.cluster),
                              ("columns", opts.columns), ("job_id", opts.job_id), ("format", fmt),
                              ("owner_uid", owner.uid if owner else None)) if v}


def _pick_route(file: SourceFile, size: int, progress: Optional[Callable[[str], None]]) -> Route:
    """DuckDB's own read when the parser offers bulk_read, falling back to (else straight away):
    pieces for a big file whose parser has iter_parse, early inserts for a big accounting file into
    empty tables, else the whole file at once."""
    bulk = read_in_bulk(file.mod, file.path, file.opts)
    owner = file.ownership.owner if file.ownership else None
    if bulk is not None and owner is not None and not trust.owns_job(file.con, owner, *bulk.owner[:2]):
        bulk = None   # DuckDB's read goes straight into sample: only for rows of the owner's own job
    if hasattr(file.mod, "iter_parse") and size > STREAM_BYTES:
        route: Route = PiecesRoute(file, STREAM_BYTES)
    elif size > EARLY_INSERT_BYTES and EarlyInsert.applies(file.con, file.mod):
        route = EarlyInsertRoute(file, progress if size > BIG_FILE else None)
    else:
        route = WholeRoute(file, progress if size > BIG_FILE else None)
    return route if bulk is None else BulkCsvRoute(file, bulk, fallback=route)


class _Checksum:
    """The file's FileScan (its sha256, and a BulkRead's counts), taken at once or in a thread while
    the route reads the file, and whether its bytes still need loading."""

    def __init__(self, file: SourceFile, rep: FileReport, scan: Optional[FileScan] = None, pending=None):
        self.file, self.rep, self.scan, self.pending = file, rep, scan, pending
        self.is_new: Optional[bool] = None

    @classmethod
    def start(cls, file: SourceFile, route: Route, size: int, rep: FileReport, upto: Optional[int] = None) -> _Checksum:
        # A big file never ingested under this name is most likely new: hash it in a thread while it
        # is read (sha256 of a 1 GB dump takes seconds). A name seen before (the same folder
        # ingested again) is hashed first, so that unchanged files are not read for nothing.
        # upto: also count the complete lines below it (a growing file's offset, ingest_offsets).
        if route.hash_alongside and size > BIG_FILE and not seen_name(file.con, file.path):
            return cls(file, rep, pending=start_scan(file.path, route.delimiter, upto))
        return cls(file, rep, scan=scan_file(file.path, route.delimiter, upto))

    def wait(self) -> None:
        """Let the hash thread end (the file failed: its result no longer matters)."""
        if self.pending is not None:
            self.pending.join()

    def new(self) -> bool:
        """Wait for the hash; False (rep says why) when the file is unreadable or these bytes were
        loaded before with these options."""
        if self.is_new is None:
            self.is_new = self._new()
        return self.is_new

    def _new(self) -> bool:
        if self.pending is not None:
            self.pending.join()
            if self.pending.error is not None:
                failed_report(self.rep, self.pending.error)
                return False
            self.scan = self.pending.scan
        prior = already_ingested(self.file.con, self.scan.digest, self.file.options)
        if prior is not None:
            self.rep.status = "already ingested"
            self.rep.ingest_id = prior
            self.rep.notes.append(f"same content (sha256) and options as ingest {prior}: nothing changed")
        return prior is None


def failed_report(rep: FileReport, exc: BaseException) -> FileReport:
    """The report of a file that was not loaded (a failed load was rolled back: nothing of it is stored)."""
    if isinstance(exc, OSError):
        rep.status, rep.error = "unreadable", f"cannot read: {exc.strerror or exc}"
    elif isinstance(exc, ParserFailed):
        rep.status, rep.error = "failed", str(exc)
    else:
        full = db.disk_full(str(exc))
        rep.status, rep.error = "failed", f"not loaded: {full}" if full else f"not loaded ({type(exc).__name__}): {exc}"
    return rep
