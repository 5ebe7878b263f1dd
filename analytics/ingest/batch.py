"""A spool's files read together, as a watch cycle reads them: the lines appended to its growing
sidecar files since the last cycle, and the new files, parsed in one go (the parser's parse_parts)
and loaded in one transaction per BATCH_BYTES of them. Each file still gets what `ingest` of it
alone writes: its ingest_log row (checksum, row accounting), its rejects by line and reason, its
file_offset row, in the batch's transaction; so a crash leaves every file of the batch as the
last cycle left it, and the next cycle reads the same lines again. The checks are the per-file
ones, as set operations over the batch: duplicates within the batch and against what is stored,
the trust rule by each file's owner, the limits (in the parser), the row accounting per file, the
owner and inode of each file before the commit.

A file that is not plainly a sidecar file to read on (another format, a part bigger than
FILE_BYTES, a first line longer than a block) is ingested alone by ingest_file, as is each file
of a batch whose load fails (each then fails, or not, on its own, with the reason).
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Optional

import duckdb
import polars as pl

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import lengths, offsets, trust
from jobsight.analytics.ingest.load import AccountingError, FileReport, insert_rejects, stored_key
from jobsight.analytics.ingest.merge import load_sidecar_runs, quote_name, run_sql, select_casts
from jobsight.analytics.ingest.records import ParseOptions, ParseResult
from jobsight.analytics.ingest.routes import ParserFailed, SourceFile
from jobsight.analytics.ingest.walk import Entry, detect, open_regular
from jobsight.analytics.store import db

FILE_BYTES = 16 << 20      # a part bigger than this is ingested alone (in pieces, memory bounded)
BATCH_BYTES = 64 << 20     # parts loaded in one transaction (as ingest.STREAM_BYTES: memory bounded)


@dataclass
class _Part:
    """One file of a batch: the complete lines [start, end) to load, and what its rows record."""
    entry: Entry
    file: SourceFile
    mark: offsets.Mark
    resume: Optional[offsets.Resume]   # None: read from the start
    header: bytes
    data: bytes
    rest: bytes              # read from the start: a last line without its newline yet (dropped, counted)
    first_line: int
    end: int
    tail: bytes              # the block that ends at `end`
    digest: str              # ingest_log's checksum: of the part read on, or of the file read whole
    notes: list[str] = field(default_factory=list)
    known: Optional[int] = None   # read from the start: the ingest that loaded these bytes already
    trust: Optional[str] = None   # why it was or was not trusted (ingest_trust.trust_note)

    @property
    def lines(self) -> int:
        """Lines before `end`, header included (file_offset.lines)."""
        return self.first_line - 1 + self.data.count(b"\n")


def ingest_files(con: duckdb.DuckDBPyConnection, entries: list[Entry], folder: str, opts: ParseOptions,
                 parsers: dict, on_file: Callable[[FileReport], None],
                 judge: Optional[trust.PathJudge] = None) -> list[FileReport]:
    """Ingest the files of entries (found by a walk of `folder`, a resolved path): sidecar files
    together, the others one by one. on_file is told each file's report once it is committed.
    `judge`: the run's, when it reads other folders too (each folder's chain checked once)."""
    started = datetime.now(timezone.utc).replace(tzinfo=None)   # before any file is looked at
    stored = offsets.stored(con, folder)
    judge = judge or trust.PathJudge()
    reports, parts, alone = [], [], []
    for entry in entries:
        try:
            got = _prepare(con, entry, opts, parsers, stored, judge)
        except OSError:   # gone, not regular, unreadable: ingest_file says which
            got = None
        if got is None:
            alone.append(entry)
        elif isinstance(got, FileReport):
            reports.append(got)
            on_file(got)
        else:
            parts.append(got)
    _mark_known(con, [p for p in parts if p.resume is None])
    parts, copies = _copies(parts)
    for batch in _batches(parts) + ([copies] if copies else []):
        if batch is copies:
            _mark_known(con, copies)   # their first copy is stored now: "already ingested", as one by one
        for rep in _load_or_alone(con, batch, opts, parsers, started):
            reports.append(rep)
            on_file(rep)
    for entry in alone:
        rep = ingest.ingest_file(con, entry.path, opts, parsers, explicit=entry.explicit, within=entry.within,
                                 given=entry.given, judge=judge)
        reports.append(rep)
        on_file(rep)
    return reports


def _prepare(con, entry: Entry, opts: ParseOptions, parsers: dict, stored: dict, judge: trust.PathJudge):
    """The file's _Part; or its report (no complete line added); or None: ingest it alone."""
    t0 = time.monotonic()
    path = entry.path
    fd = open_regular(path, entry.within)
    try:
        st = os.fstat(fd)
        verdict = trust.judge_opened(fd, path, st, judge, entry.given)
        if verdict.refused:
            return None   # ingested alone, which reports why it is not read
        ownership = trust.Ownership.of(path, st, verdict)
        mark = offsets.Mark.of(fd, st)
        mod = detect(path, parsers, entry.within)
        if mod is None or mod.FORMAT not in offsets.FORMATS or not hasattr(mod, "parse_parts"):
            return None
        resolved = str(path.resolve())
        file = SourceFile(con, path, mod, opts, resolved, ingest.recorded_options(opts, None, ownership.owner), t0, ownership,
                          end=mark.size)
        resume, why = offsets.plan(file, mark, entry.within, stored.get(resolved))
        cut = mark.head.find(b"\n")
        if cut < 0:
            return None
        header = mark.head[:cut + 1]
        if resume is not None:
            if resume.end == resume.start:
                return offsets.nothing_added(file, mark, resume)
            start, end = resume.start, resume.end
            lo = min(start, max(0, end - offsets.BLOCK))   # the part, and the block that ends where it does
            if end - start > FILE_BYTES:
                return None
            buf = os.pread(fd, end - lo, lo)
            if len(buf) != end - lo:
                return None
            data, rest, first_line = buf[start - lo:], b"", resume.lines + 1
            digest = hashlib.sha256(data).hexdigest()
            notes = [offsets.read_on_note(resume, mark)]
        else:
            if mark.size > FILE_BYTES:
                return None
            buf = os.pread(fd, mark.size, 0)
            if len(buf) != mark.size:
                return None
            end = buf.rfind(b"\n") + 1
            data, rest, first_line = buf[len(header):end], buf[end:], 2
            digest = hashlib.sha256(buf).hexdigest()
            buf = buf[:end]
            notes = [why] if why else []
    finally:
        os.close(fd)
    if lengths.has_long_line(data):
        return None   # ingested alone, whose reader rejects that line by number without holding it
    return _Part(entry, file, mark, resume, header, data, rest, first_line, end, buf[-offsets.BLOCK:], digest, notes,
                 trust=trust.trust_note(verdict, mod.FORMAT))


def _mark_known(con, parts: list[_Part]) -> None:
    """Parts read from the start whose bytes an ingest loaded already with the same options (as
    ingest_walk.already_ingested finds them), in one query."""
    if not parts:
        return
    keys = pl.DataFrame({"_i": range(len(parts)), "checksum": [p.digest for p in parts],
                         "options": [offsets.options_text(p.file.options) for p in parts]},
                        schema={"_i": pl.Int64, "checksum": pl.String, "options": pl.String})
    for i, prior in run_sql(con, "SELECT k._i, min(l.ingest_id) FROM _keys k JOIN ingest_log l ON l.checksum = k.checksum "
                              "AND l.options = k.options AND l.finished_at IS NOT NULL GROUP BY k._i", _keys=keys):
        parts[i].known = prior


def _copies(parts: list[_Part]) -> tuple[list[_Part], list[_Part]]:
    """(parts, copies): a new file read from the start with the bytes and options of one before it
    in the walk is a copy, loaded after the batches (as ingest_file finds it already ingested)."""
    seen, keep, copies = set(), [], []
    for p in parts:
        key = (p.digest, offsets.options_text(p.file.options)) if p.resume is None and p.known is None else None
        (copies if key in seen else keep).append(p)
        if key is not None:
            seen.add(key)
    return keep, copies


def _batches(parts: list[_Part]) -> list[list[_Part]]:
    batches, size = [[]], 0
    for p in parts:
        if batches[-1] and size + len(p.data) > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(p)
        size += len(p.data)
    return [b for b in batches if b]


class _Changed(Exception):
    """Files of the batch replaced, or given to another owner, while it was read."""

    def __init__(self, parts: list[_Part], whys: list[str]):
        super().__init__()
        self.parts, self.whys = parts, whys


def _load_or_alone(con, batch: list[_Part], opts: ParseOptions, parsers: dict, started: datetime) -> list[FileReport]:
    """The batch in one transaction, less the files changed while it was read (not loaded, as
    ingest_file reports them); if that fails, each of its files alone (ingest_file says why one fails)."""
    try:
        return _load(con, batch, opts, started)
    except _Changed as exc:
        gone = {id(p) for p in exc.parts}
        reports = [ingest.failed_report(FileReport(path=str(p.file.path), format=p.file.mod.FORMAT),
                                  AccountingError(f"{p.file.source_file}: {why}")) for p, why in zip(exc.parts, exc.whys)]
        return reports + _load_or_alone(con, [p for p in batch if id(p) not in gone], opts, parsers, started)
    except (OSError, ParserFailed, AccountingError, duckdb.Error):
        return [ingest.ingest_file(con, p.entry.path, opts, parsers, explicit=p.entry.explicit, within=p.entry.within,
                                   given=p.entry.given)
                for p in batch]


def _known_report(p: _Part) -> FileReport:
    rep = FileReport(path=str(p.file.path), format=p.file.mod.FORMAT, status="already ingested", ingest_id=p.known)
    rep.notes = p.notes + [f"same content (sha256) and options as ingest {p.known}: nothing changed"]
    return rep


def _load(con, batch: list[_Part], opts: ParseOptions, started: datetime) -> list[FileReport]:
    if not batch:
        return []
    todo = [p for p in batch if p.known is None]
    mod = batch[0].file.mod
    try:
        parts = [mod.Part(p.file.path, p.header, p.data, p.first_line, p.rest) for p in todo]
        samples, results = mod.parse_parts(parts, opts) if todo else (None, [])
    except OSError:
        raise
    except Exception as exc:
        raise ParserFailed(f"{mod.FORMAT} parser failed: {exc!r}") from exc
    con.execute("BEGIN TRANSACTION")
    try:
        ids = sorted(r[0] for r in con.execute("SELECT nextval('ingest_id_seq') FROM range(?)", [len(todo)]).fetchall())
        reports = _load_parts(con, todo, ids, samples, results) if todo else []
        loaded = {id(p): i for p, i in zip(todo, ids)}
        offsets.write_offsets(con, [offsets.offset_row(p.file, p.mark, p.end, p.lines, loaded.get(id(p), p.known), p.tail)
                                    for p in batch])
        _log_rows(con, todo, reports, started)
        changed = [(p, why) for p in todo if p.file.ownership is not None and (why := p.file.ownership.changed())]
        if changed:
            raise _Changed(*map(list, zip(*changed)))
        con.execute("COMMIT")
    except BaseException:
        db.rollback(con)
        raise
    now = time.monotonic()
    by_part = dict(zip(map(id, todo), reports))
    out = []
    for p in batch:
        rep = by_part[id(p)] if p.known is None else _known_report(p)
        rep.seconds, rep.trust = now - p.file.started, p.trust
        out.append(rep)
    return out


def _load_parts(con, todo: list[_Part], ids: list[int], samples: pl.DataFrame,
                results: list[ParseResult]) -> list[FileReport]:
    """Insert the samples, rejects and sidecar_run rows of the parts; returns their reports."""
    n = len(todo)
    reps = [FileReport(path=str(p.file.path), format=p.file.mod.FORMAT, ingest_id=i, rows_in=r.rows_in,
                       rejected=len(r.rejects), dropped=r.dropped, notes=p.notes + r.notes)
            for p, i, r in zip(todo, ids, results)]
    files = pl.DataFrame({"_file": range(n), "ingest_id": ids, "source_file": [p.file.source_file for p in todo]},
                         schema={"_file": pl.Int32, "ingest_id": pl.Int64, "source_file": pl.String})
    samples = samples.join(files.select("_file", "ingest_id"), on="_file", how="left", maintain_order="left")
    rejects = [pl.DataFrame({"_file": [i] * len(r.rejects), "line_no": [x.line_no for x in r.rejects],
                             "reason": [x.reason for x in r.rejects], "raw": [x.raw for x in r.rejects]},
                            schema={"_file": pl.Int32, "line_no": pl.Int64, "reason": pl.String, "raw": pl.String})
               for i, r in enumerate(results) if r.rejects]
    samples, refused = _trust(con, todo, samples, reps)
    rejects += [refused]
    samples = samples.sort("_file", "_line")   # of a key in several files, the first file's row is stored
    counted = _per_file(samples, n)
    samples = samples.unique(subset=list(trust.SAMPLE_KEY), keep="first", maintain_order=True)
    if samples.height:
        dup = run_sql(con, f"SELECT _row FROM _incoming i WHERE {stored_key(samples['time'].min(), samples['time'].max())}",
                   _incoming=samples.select(*trust.SAMPLE_KEY).with_row_index("_row"))
        if dup:
            samples = samples.with_row_index("_row").filter(~pl.col("_row").is_in([r[0] for r in dup])).drop("_row")
        cols, sel = select_casts(con, samples, "sample", 0)
        run_sql(con, f"INSERT INTO sample ({', '.join(quote_name(c) for c in cols)}) SELECT {sel} FROM _incoming", _incoming=samples)
    for rep, c, s in zip(reps, counted, _per_file(samples, n)):
        rep.stored += s
        rep.unchanged += c - s
    insert_rejects(con, pl.concat(rejects).join(files, on="_file", how="left"))
    runs = []
    for p, rep, r in zip(todo, reps, results):
        frame, owner = r.sidecar_runs, p.file.ownership.owner if p.file.ownership else None
        if frame is not None and frame.height and owner is not None:
            frame, notes = trust.sidecar_runs(con, frame, owner)
            rep.notes += notes
        if frame is not None and frame.height:
            runs.append(frame.with_columns(ingest_id=pl.lit(rep.ingest_id, dtype=pl.Int64)))
    if runs:
        load_sidecar_runs(con, pl.concat(runs, how="diagonal_relaxed"), 0, "")
    return reps


def _per_file(samples: pl.DataFrame, n: int) -> list[int]:
    counts = [0] * n
    for i, c in samples.group_by("_file").len().iter_rows():
        counts[i] = c
    return counts


def _trust(con, todo: list[_Part], samples: pl.DataFrame, reps: list[FileReport]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The trust rule, by each file's owner: (the samples that count, the rows refused as rejects);
    held rows go into sample_pending; a user's sidecar_run rows of another user's job are dropped."""
    no_rejects = pl.DataFrame(schema={"_file": pl.Int32, "line_no": pl.Int64, "reason": pl.String, "raw": pl.String})
    owners = {i: p.file.ownership.owner for i, p in enumerate(todo) if p.file.ownership and p.file.ownership.owner}
    if not owners:
        return samples, no_rejects
    mine = pl.col("_file").is_in(list(owners))
    own = pl.DataFrame([(i, o.uid, o.user, str(o)) for i, o in owners.items()], orient="row",
                       schema={"_file": pl.Int32, "owner_uid": pl.Int64, "owner_user": pl.String, "_owner": pl.String})
    split = trust.split_owned(con, samples.filter(mine).join(own, on="_file", how="left", maintain_order="left"))
    for (i,), held in split.held.partition_by("_file", as_dict=True).items():
        stored, dup = trust.hold(con, held, 0)
        reps[i].stored += stored
        reps[i].unchanged += dup
        reps[i].notes.append(trust.held_note(held))
    for i, r in split.rejects.group_by("_file").len().iter_rows():
        reps[i].rejected += r
    counted = pl.concat([samples.filter(~mine), split.counted.drop(trust.OWNER_COLUMNS)])
    return counted, split.rejects.with_columns(raw=pl.lit(None, dtype=pl.String)).select(no_rejects.columns)


def _log_rows(con, todo: list[_Part], reports: list[FileReport], started: datetime) -> None:
    """The parts' ingest_log rows, after checking each part's row accounting."""
    for rep in reports:
        rep.check_accounted(rep.path)
    finished = datetime.now(timezone.utc).replace(tzinfo=None)
    log = pl.DataFrame([(r.ingest_id, p.file.source_file, p.digest, r.format, r.rows_in, r.stored, r.updated, r.unchanged,
                         r.rejected, r.dropped, started, finished, offsets.options_text(p.file.options))
                        for p, r in zip(todo, reports)], orient="row",
                       schema={"ingest_id": pl.Int64, "source_file": pl.String, "checksum": pl.String, "format": pl.String,
                               "rows_in": pl.Int64, "stored": pl.Int64, "updated": pl.Int64, "unchanged": pl.Int64,
                               "rejected": pl.Int64, "dropped": pl.Int64, "started_at": pl.Datetime("us"),
                               "finished_at": pl.Datetime("us"), "options": pl.String})
    if log.height:
        run_sql(con, f"INSERT INTO ingest_log ({', '.join(log.columns)}) SELECT * FROM _incoming", _incoming=log)
