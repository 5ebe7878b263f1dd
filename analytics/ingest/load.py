"""Loading a parsed file: its one transaction, its ingest_log row and the row accounting, whichever
route read it (load_pieces; load_result for a file parsed whole). Every input row of a file ends up
exactly once as stored, updated, unchanged, rejected (with line and reason, in the `reject` table)
or dropped (counted); load_pieces checks that sum against the parser's count of rows read and
refuses to commit when it does not add up. Jobs and steps are merged by the rule in ingest_merge;
samples are deduplicated on (cluster, job_id_raw, host, device, time) by _SampleLoader. A file
whose owner is not trusted goes through the trust rule of ingest_trust (`ownership`).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Optional, Protocol

import duckdb
import polars as pl

from jobsight.analytics.ingest import lengths, trust
from jobsight.analytics.ingest.merge import load_sidecar_runs, merge_records, quote_name, refresh_job_usage, run_sql, select_casts
from jobsight.analytics.ingest.records import ParseResult
from jobsight.analytics.store import db


@dataclass
class FileReport:
    path: str
    format: Optional[str] = None
    status: str = "ingested"          # ingested | already ingested | unreadable | unrecognised | failed | skipped
    rows_in: int = 0
    stored: int = 0
    updated: int = 0
    unchanged: int = 0
    rejected: int = 0
    dropped: int = 0
    ingest_id: Optional[int] = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # fields made NULL (Slurm markers, impossible values): {"file", "field", "kind", "rows"}, as the notes say
    nulled: list[dict] = field(default_factory=list)
    error: Optional[str] = None
    trust: Optional[str] = None        # why the file was or was not trusted (ingest_trust.trust_note)

    def as_dict(self) -> dict:
        return asdict(self)

    def check_accounted(self, source_file: str) -> None:
        """Every row read is stored, updated, unchanged, rejected or dropped, exactly once."""
        accounted = self.stored + self.updated + self.unchanged + self.rejected + self.dropped
        if accounted != self.rows_in:
            raise AccountingError(
                f"{source_file}: {self.rows_in} rows read but {accounted} accounted for (stored {self.stored}, "
                f"updated {self.updated}, unchanged {self.unchanged}, rejected {self.rejected}, dropped {self.dropped})")


class AccountingError(RuntimeError):
    """The loader's row accounting does not add up: a bug, and the file is not committed."""


class EarlyRows(Protocol):
    """Rows a route inserted before load_pieces runs, in a transaction it holds open for it
    (EarlyInsert, BulkInsert): finish() says whether they stand; if not, it has rolled them back."""

    ingest_id: Optional[int]
    inserted: dict[str, int]     # table -> rows inserted
    alone: bool                  # the job and step tables held nothing before: all their rows are this file's

    def finish(self) -> bool: ...


def load_result(con: duckdb.DuckDBPyConnection, result: ParseResult, source_file: str,
                checksum: Optional[str], options: dict, early: Optional[EarlyRows] = None,
                ownership: Optional[trust.Ownership] = None,
                before_commit: Optional[Callable[[duckdb.DuckDBPyConnection, int], None]] = None) -> FileReport:
    """Load one parsed file in one transaction and record it in ingest_log. With `early`, its job
    and step rows were inserted while it was parsed (in the transaction early holds open). `ownership`:
    the file and its owner, when read from a file (its samples count only for an untrusted owner's
    jobs, and it is not committed if the path no longer leads to that file)."""
    return load_pieces(con, [result], result.format, source_file, checksum, options, early, ownership, before_commit)


def load_pieces(con: duckdb.DuckDBPyConnection, pieces: Iterable[ParseResult], fmt: str, source_file: str,
                checksum: Optional[str], options: dict, early: Optional[EarlyRows] = None,
                ownership: Optional[trust.Ownership] = None,
                before_commit: Optional[Callable[[duckdb.DuckDBPyConnection, int], None]] = None) -> FileReport:
    """Load one file, given as one or more parsed pieces (a big sidecar CSV is parsed and loaded a
    piece at a time, so memory stays bounded), in ONE transaction, and record it in ingest_log.
    The counts are summed over the pieces and checked once, for the whole file. `before_commit`
    (con, ingest_id) writes what belongs to the same transaction (how far a growing file was read)."""
    t0 = time.monotonic()
    rep = FileReport(path=source_file, format=fmt)
    ingest_id = None
    if early is not None:
        ingest_id = early.ingest_id   # kept when the early inserts were rolled back (no gap in the ids)
        if not early.finish():
            early = None              # a repeated key: loaded the ordinary way, in a new transaction
    if early is None:
        con.execute("BEGIN TRANSACTION")
    try:
        if ingest_id is None:
            ingest_id = con.execute("SELECT nextval('ingest_id_seq')").fetchall()[0][0]
        rep.ingest_id = ingest_id
        con.execute("INSERT INTO ingest_log (ingest_id, source_file, checksum, format, rows_in, started_at, options) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [ingest_id, source_file, checksum, fmt, 0,
                     datetime.now(timezone.utc).replace(tzinfo=None), json.dumps(options, sort_keys=True)])
        samples = _SampleLoader(con, ingest_id)
        for result in pieces:
            _load_piece(con, result, rep, samples, ingest_id, source_file, early,
                        ownership.owner if ownership else None)
        rep.check_accounted(source_file)
        if ownership is not None and (why := ownership.changed()):
            raise AccountingError(f"{source_file}: {why}")
        if before_commit is not None:
            before_commit(con, ingest_id)
        con.execute("UPDATE ingest_log SET rows_in = ?, stored = ?, updated = ?, unchanged = ?, rejected = ?, "
                    "dropped = ?, finished_at = ? WHERE ingest_id = ?",
                    [rep.rows_in, rep.stored, rep.updated, rep.unchanged, rep.rejected, rep.dropped,
                     datetime.now(timezone.utc).replace(tzinfo=None), ingest_id])
        con.execute("COMMIT")
    except BaseException:
        db.rollback(con)
        raise
    rep.seconds = time.monotonic() - t0
    return rep


def _load_piece(con, result: ParseResult, rep: FileReport, samples: _SampleLoader, ingest_id: int,
                source_file: str, early: Optional[EarlyRows] = None, file_owner: Optional[trust.Owner] = None) -> None:
    lengths.bound_text(result, source_file)   # whichever parser and route read it
    rep.rows_in += result.rows_in
    rep.rejected += len(result.rejects)
    rep.dropped += result.dropped
    rep.notes += result.notes
    rep.nulled += result.nulled
    if file_owner is not None and any(f is not None and f.height for f in (result.jobs, result.steps)):
        # ingest_file reads no accounting from such a file; a sample parser that made job rows is a bug
        raise AccountingError(f"{source_file}: a file owned by {file_owner} gave job records: not loaded")
    touched: list[pl.DataFrame] = []
    for frame, table, keys, tcols in (
            (result.jobs, "job", ["cluster", "job_id_raw"], ["end_time", "start_time", "submit_time", "eligible_time"]),
            (result.steps, "step", ["cluster", "job_id_raw", "step_id"], ["end_time", "start_time"])):
        if early is not None:   # inserted while parsing, every row (a failed insert rolled them all back)
            s, u, n = early.inserted.get(table, 0), 0, 0
        else:
            s, u, n = merge_records(con, frame, table, keys, tcols, ingest_id)
        rep.stored += s
        rep.updated += u
        rep.unchanged += n
        if frame is not None and frame.height:
            touched.append(frame.select("cluster", "job_id_raw"))
    if touched:
        jobs = pl.concat(touched, rechunk=False)
        # repeats are fine: IN (...) is a semi-join; into tables that were empty, every job is this file's
        refresh_job_usage(con, None if early is not None and early.alone else jobs)
        rep.notes += trust.promote(con, jobs, ingest_id)   # held samples of these jobs whose owner now matches
    sample_rows, runs, refused = result.samples, result.sidecar_runs, None
    if file_owner is not None:
        if sample_rows is not None and sample_rows.height:
            split = trust.split_samples(con, sample_rows, file_owner)
            sample_rows, refused = split.counted, split.rejects
            held, held_dup = trust.hold(con, split.held, ingest_id)
            rep.stored += held
            rep.unchanged += held_dup
            rep.rejected += refused.height
            rep.notes += split.notes
        runs, notes = trust.sidecar_runs(con, runs, file_owner)
        rep.notes += notes
    s, dup = samples.add(sample_rows)
    if early is not None:   # a BulkRead's samples, inserted by DuckDB before
        s += early.inserted.get("sample", 0)
    rep.stored += s
    rep.unchanged += dup
    load_sidecar_runs(con, runs, ingest_id, source_file)
    _store_rejects(con, result, refused, ingest_id, source_file)


def _store_rejects(con, result: ParseResult, refused: Optional[pl.DataFrame], ingest_id: int, source_file: str) -> None:
    """The parser's rejects and the rows the trust rule refused (line_no, reason), into table reject."""
    schema = {"line_no": pl.Int64, "reason": pl.String, "raw": pl.String}
    parts = [pl.DataFrame({"line_no": [r.line_no for r in result.rejects],
                           "reason": [lengths.short(r.reason) for r in result.rejects],
                           "raw": [lengths.short(r.raw) for r in result.rejects]}, schema=schema)]
    if refused is not None and refused.height:
        parts.append(refused.with_columns(raw=pl.lit(None, dtype=pl.String)).select(list(schema)))
    rj = pl.concat(parts)
    if rj.height:
        insert_rejects(con, rj.with_columns(ingest_id=pl.lit(ingest_id, dtype=pl.Int64), source_file=pl.lit(source_file)))


def insert_rejects(con, rj: pl.DataFrame) -> None:
    """Rows of table reject: ingest_id, source_file, line_no, reason, raw."""
    if rj.height:
        run_sql(con, "INSERT INTO reject (ingest_id, source_file, line_no, reason, raw) "
                  "SELECT ingest_id, source_file, line_no, reason, raw FROM _rj", _rj=rj)


class _SampleLoader:
    """Inserts one file's samples, a piece at a time (the 50M-row path), dropping rows whose
    (cluster, job_id_raw, host, device, time) is already stored, by an earlier ingest or by an
    earlier piece of this file, or repeated within the piece. The costly checks are skipped when
    they cannot find anything: a sidecar file is one (cluster, job, host) whose times rise per
    device, so it has no duplicates of its own, and a job/host seen by no earlier ingest has none
    in the table."""

    DEVICE = ["cluster", "job_id_raw", "host", "device"]
    OWNER = ["cluster", "job_id_raw", "host"]

    def __init__(self, con, ingest_id: int):
        self.con, self.ingest_id = con, ingest_id
        self.prior: dict[tuple, bool] = {}             # owner -> has samples from earlier ingests
        self.last: Optional[pl.DataFrame] = None       # per device: latest time this file loaded so far

    def _prior_owners(self, owners: pl.DataFrame) -> bool:
        rows = [tuple(r) for r in owners.iter_rows()]
        new = [r for r in rows if r not in self.prior]
        if new:
            # only owners this file has not loaded yet: the table then holds earlier ingests' rows only
            hit = owners_with_samples(self.con, pl.DataFrame(new, schema=owners.schema, orient="row"))
            for r in new:
                self.prior[r] = r in hit
        return any(self.prior[r] for r in rows)

    def add(self, frame: Optional[pl.DataFrame]) -> tuple[int, int]:
        """Insert a piece; returns (stored, duplicates)."""
        if frame is None or frame.height == 0:
            return 0, 0
        keys = self.DEVICE + ["time"]
        total = frame.height
        # one owner (a sidecar file): comparing with the first row is a plain scan, hashing is not
        single = all(frame.select([pl.col(c).eq_missing(pl.col(c).first()).all() for c in self.OWNER]).row(0))
        owners = frame.head(1).select(self.OWNER) if single else frame.select(self.OWNER).unique()
        by = ["device"] if single else self.DEVICE
        rising = frame.select((pl.col("time").diff().over(by) > pl.duration(microseconds=0)).fill_null(True).all()).item()
        if not rising:
            frame = frame.unique(subset=keys, keep="first", maintain_order=True)
        span = frame.group_by(by).agg(pl.col("time").min().alias("_t0"), pl.col("time").max().alias("_t1"))
        if single:
            span = span.with_columns(**{c: pl.lit(owners[c][0], dtype=owners[c].dtype) for c in self.OWNER})
        after_earlier = True   # every time in this piece is later than this file's earlier pieces'
        if self.last is not None:
            j = span.join(self.last, on=self.DEVICE, how="inner", nulls_equal=True)
            after_earlier = j.height == 0 or bool((j["_t0"] > j["_last"]).all())
            self.last = (pl.concat([self.last, span.select(self.DEVICE + [pl.col("_t1").alias("_last")])])
                         .group_by(self.DEVICE).agg(pl.col("_last").max()))
        else:
            self.last = span.select(self.DEVICE + [pl.col("_t1").alias("_last")])
        check = self._prior_owners(owners) or not after_earlier
        cols, sel = select_casts(self.con, frame, "sample", self.ingest_id)
        collist = ", ".join(quote_name(c) for c in cols)
        if check:
            stored = run_sql(self.con, f"INSERT INTO sample ({collist}) SELECT * FROM (SELECT {sel} FROM _incoming) i "
                                    f"WHERE NOT {stored_key(span['_t0'].min(), span['_t1'].max())}", _incoming=frame)[0][0]
        else:
            stored = run_sql(self.con, f"INSERT INTO sample ({collist}) SELECT {sel} FROM _incoming", _incoming=frame)[0][0]
        return stored, total - stored


def stored_key(lo: datetime, hi: datetime) -> str:
    """SQL: the key of sample row i, whose time lies in [lo, hi], is stored already. Bounding
    sample's scan to those times lets DuckDB skip the row groups outside (a growing file's few new
    lines would read all of it)."""
    return (f"EXISTS (SELECT 1 FROM sample s WHERE s.cluster = i.cluster AND s.job_id_raw = i.job_id_raw "
            f"AND s.host = i.host AND s.device = i.device AND s.time = i.time "
            f"AND s.time BETWEEN {_timestamp_sql(lo)} AND {_timestamp_sql(hi)})")


def _timestamp_sql(value: datetime) -> str:
    """A TIMESTAMP literal (UTC, as table sample holds it) of a time taken from parsed samples."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return f"TIMESTAMP '{value.isoformat(sep=' ')}'"


def owners_with_samples(con, owners: pl.DataFrame) -> set[tuple]:
    """The (cluster, job_id_raw, host) of `owners` that already have rows in table sample."""
    return {tuple(r) for r in run_sql(
        con, "SELECT DISTINCT o.cluster, o.job_id_raw, o.host FROM _owners o JOIN sample s "
        "ON s.cluster = o.cluster AND s.job_id_raw = o.job_id_raw AND s.host = o.host", _owners=owners)}


REJECTS_QUERY = "SELECT source_file, line_no, reason FROM rejects"


def rejects_hint(ingest_id: int) -> str:
    """The query that lists one ingest's rejected rows and why, for the summary."""
    return f"SELECT line_no, reason FROM rejects WHERE ingest_id = {int(ingest_id)}"
