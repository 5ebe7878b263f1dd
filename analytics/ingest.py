"""Ingest files into a jobsight database: find them, detect their format, parse, and load.

Each file is loaded in one transaction, so a crash leaves either all of a file or none of it.
Every input row of a file ends up exactly once as stored, updated, unchanged, rejected (with line
and reason, in the `reject` table) or dropped (counted); the loader checks that sum against the
parser's count of rows read and refuses to commit when it does not add up.

The merge rule for jobs and steps (keys (cluster, job_id_raw) and (cluster, job_id_raw, step_id)):
a record ranks by (final state?, coalesce(end, start, submit, eligible)); an incoming record
replaces the stored one when its rank is >= the stored rank (values it lacks are kept), otherwise
it is "unchanged"; an identical record is "unchanged". Records from lower-fidelity sources (seff,
nvidia-smi, sidecar) only fill NULL columns of a record from accounting (sacct text or JSON).
Several records of one key in one file: the best-ranked (then the last) is loaded and the others
count as unchanged. Samples are deduplicated on (cluster, job_id_raw, host, device, time).
A file whose parser offers bulk_read (sidecar CSV) is first read by DuckDB itself in one INSERT
(_BulkInsert), kept only where that is exactly what the line rules give; else, or without bulk_read,
a file bigger than STREAM_BYTES whose parser offers iter_parse is parsed and loaded a piece at a
time, still in its one transaction, so memory stays bounded (~0.8 GB at 50M rows).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable, Optional

import duckdb
import polars as pl

from jobsight.analytics.parsers import PARSER_MODULES
from jobsight.analytics.records import BulkRead, ParseOptions, ParseResult

FINAL_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "TIMEOUT", "REVOKED")
# Sources that hold the scheduler's accounting record; the others only fill gaps.
ACCOUNTING_SOURCES = ("slurm-sacct", "slurm-sacct-json", "pbs", "lsf")
HEAD_BYTES = 65536
BIG_FILE = 64 << 20     # progress lines for files this big even when ingesting just one
STREAM_BYTES = 64 << 20   # files bigger than this whose parser has iter_parse are loaded in pieces this big (~0.8 GB peak)
EARLY_INSERT_BYTES = 64 << 20   # files bigger than this whose parser has on_piece are inserted while parsed (_EarlyInsert)


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
    error: Optional[str] = None

    def as_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# parser registry

def load_parsers(warn: Callable[[str], None] | None = None) -> dict[str, ModuleType]:
    """FORMAT -> module, in detection order. A parser module not written yet is skipped."""
    found: dict[str, ModuleType] = {}
    for name in PARSER_MODULES:
        modname = f"jobsight.analytics.parsers.{name}"
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


def read_head(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")


def detect(path: Path, parsers: dict[str, ModuleType]) -> Optional[ModuleType]:
    head = read_head(path)
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


def scan_file(path: Path, delimiter: Optional[bytes] = None) -> FileScan:
    """sha256 of the file; with a delimiter, also its newline and delimiter counts (one more pass
    over bytes already in memory: ~1 s per GB, against ~3 s for the hash)."""
    h = hashlib.sha256()
    newlines = delimiters = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
            if delimiter is not None:
                newlines += chunk.count(b"\n")
                delimiters += chunk.count(delimiter)
    return FileScan(h.hexdigest(), newlines, delimiters)


def sha256_file(path: Path) -> str:
    return scan_file(path).digest


class _ScanThread(threading.Thread):
    def __init__(self, path: Path, delimiter: Optional[bytes]):
        super().__init__(daemon=True, name="jobsight-sha256")
        self.path, self.delimiter, self.scan, self.error = path, delimiter, None, None

    def run(self) -> None:
        try:
            self.scan = scan_file(self.path, self.delimiter)   # hashlib releases the GIL on big buffers
        except OSError as exc:
            self.error = exc


def _start_scan(path: Path, delimiter: Optional[bytes] = None) -> _ScanThread:
    t = _ScanThread(path, delimiter)
    t.start()
    return t


def _seen_name(con, path: Path) -> bool:
    return bool(con.execute("SELECT 1 FROM ingest_log WHERE source_file = ? LIMIT 1",
                            [str(Path(path).resolve())]).fetchall())


def walk(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """(file, given explicitly?) for each path; folders are walked recursively in name order.
    Sidecar metadata (*.meta.json) is read by the sidecar parser beside its CSV, not on its own."""
    out: list[tuple[Path, bool]] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs.sort()
                for f in sorted(files):
                    if f.startswith(".") or f.endswith(".meta.json"):
                        continue
                    out.append((Path(root) / f, False))
        else:
            out.append((p, True))
    return out


# ------------------------------------------------------------------------------------------------
# loading

class _ArrowStream:
    """Hands a polars frame to DuckDB through the Arrow C stream interface (no pyarrow needed)."""

    def __init__(self, frame: pl.DataFrame):
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema=None):
        return self.frame.__arrow_c_stream__(requested_schema)



def _run(con: duckdb.DuckDBPyConnection, sql: str, _incoming: Optional[pl.DataFrame] = None,
         _keys: Optional[pl.DataFrame] = None, _owners: Optional[pl.DataFrame] = None,
         _touched: Optional[pl.DataFrame] = None, _rj: Optional[pl.DataFrame] = None) -> list[tuple]:
    """Run sql reading the given polars frames by these names. DuckDB finds them as this function's
    local variables (its replacement scan), not through con.register(): a registered view is a
    catalog entry, and a dropped catalog entry lives until the transaction ends, so each frame
    registered in a file's transaction (a 50M-row file's every piece) would stay in memory to the end."""
    _incoming, _keys, _owners, _touched, _rj = (None if f is None else _ArrowStream(f)
                                                for f in (_incoming, _keys, _owners, _touched, _rj))
    return con.execute(sql).fetchall()


def _table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "AND table_schema = 'main' ORDER BY ordinal_position", [table]).fetchall()]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stage(con, frame: pl.DataFrame, table: str, stage: str, ingest_id: int) -> list[str]:
    """Create temp table `stage` with the table's columns (missing ones NULL) plus _row."""
    cols, sel = _select_casts(con, frame, table, ingest_id)
    _run(con, f"CREATE OR REPLACE TEMP TABLE {stage} AS SELECT {sel}, _row FROM _incoming",
         _incoming=frame.with_row_index("_row"))
    return cols


def _fidelity(expr: str) -> str:
    srcs = ", ".join(f"'{s}'" for s in ACCOUNTING_SOURCES)
    return f"(CASE WHEN {expr} IN ({srcs}) THEN 2 ELSE 1 END)"


def _merge_records(con, frame: pl.DataFrame, table: str, keys: list[str], time_cols: list[str],
                   ingest_id: int) -> tuple[int, int, int]:
    """Upsert frame into table by the merge rule; returns (stored, updated, unchanged)."""
    if frame is None or frame.height == 0:
        return 0, 0, 0
    # Bulk case (a new dump into an empty or unrelated database): no key repeats in the file and
    # none is stored yet, so every row is simply inserted, straight from the frame.
    if not frame.select(keys).is_duplicated().any():
        on = " AND ".join(f"t.{_q(k)} = k.{_q(k)}" for k in keys)
        known = _run(con, f"SELECT count(*) FROM (SELECT 1 FROM _keys k JOIN {table} t ON {on} LIMIT 1)",
                     _keys=frame.select(keys))[0][0]
        if not known:
            cols, sel = _select_casts(con, frame, table, ingest_id)
            n = _run(con, f"INSERT INTO {table} ({', '.join(_q(c) for c in cols)}) SELECT {sel} FROM _incoming",
                     _incoming=frame)[0][0]
            return n, 0, 0
    cols = _stage(con, frame, table, "_in", ingest_id)
    finals = ", ".join(f"'{s}'" for s in FINAL_STATES)
    rank_t = "coalesce(" + ", ".join(time_cols) + ")"
    st_t = "coalesce(" + ", ".join("t." + c for c in time_cols) + ")"
    keyl = ", ".join(_q(k) for k in keys)
    total = con.execute("SELECT count(*) FROM _in").fetchall()[0][0]
    # best record per key within the file: best rank, then the later line
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _w AS
        SELECT * EXCLUDE (_rn) FROM (
            SELECT *, (state IN ({finals}))::INT AS _final, {rank_t} AS _t,
                   row_number() OVER (PARTITION BY {keyl}
                       ORDER BY (state IN ({finals}))::INT DESC, {rank_t} DESC NULLS LAST, _row DESC) AS _rn
            FROM _in) WHERE _rn = 1""")
    winners = con.execute("SELECT count(*) FROM _w").fetchall()[0][0]
    con.execute("DROP TABLE _in")  # keep one staged copy at a time (memory on 1M-job files)
    data_cols = [c for c in cols if c not in keys and c != "ingest_id"]
    on = " AND ".join(f"t.{_q(k)} = w.{_q(k)}" for k in keys)
    replace_changed = " OR ".join(f"(w.{_q(c)} IS NOT NULL AND w.{_q(c)} IS DISTINCT FROM t.{_q(c)})" for c in data_cols)
    fill_changed = " OR ".join(f"(t.{_q(c)} IS NULL AND w.{_q(c)} IS NOT NULL)" for c in data_cols if c != "source")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _act AS
        SELECT w.*, CASE
            WHEN t.{_q(keys[0])} IS NULL THEN 'insert'
            WHEN {_fidelity('w.source')} < {_fidelity('t.source')} THEN (CASE WHEN {fill_changed} THEN 'fill' ELSE 'same' END)
            WHEN {_fidelity('w.source')} > {_fidelity('t.source')}
                 OR w._final > (t.state IN ({finals}))::INT
                 OR (w._final = (t.state IN ({finals}))::INT
                     AND coalesce(w._t, '-infinity'::TIMESTAMP) >= coalesce({st_t}, '-infinity'::TIMESTAMP))
                 THEN (CASE WHEN {replace_changed} THEN 'replace' ELSE 'same' END)
            ELSE 'same' END AS _action
        FROM _w w LEFT JOIN {table} t ON {on}""")
    con.execute("DROP TABLE _w")
    counts = dict(con.execute("SELECT _action, count(*) FROM _act GROUP BY 1").fetchall())
    collist = ", ".join(_q(c) for c in cols)
    if counts.get("insert"):
        con.execute(f"INSERT INTO {table} ({collist}) SELECT {collist} FROM _act WHERE _action = 'insert'")
    where = " AND ".join(f"{table}.{_q(k)} = a.{_q(k)}" for k in keys)
    if counts.get("replace"):
        # Values the newer record lacks are kept, unless it says why it has none (its null_reasons:
        # "Unknown", "return code lost"): that is a statement about the job, and the reasons stored
        # are the newer record's own (a RUNNING job's {"end_time": "Unknown"} must not outlive it).
        def newer(c: str) -> str:
            if c == "null_reasons":
                return f"{_q(c)} = a.{_q(c)}"
            said_null = f"""coalesce(json_exists(a.null_reasons, '$."{c}"'), false)"""
            return f"{_q(c)} = CASE WHEN {said_null} THEN NULL ELSE coalesce(a.{_q(c)}, {table}.{_q(c)}) END"
        sets = ", ".join(newer(c) for c in data_cols)
        con.execute(f"UPDATE {table} SET {sets}, ingest_id = a.ingest_id FROM _act a WHERE {where} AND a._action = 'replace'")
    if counts.get("fill"):
        # a lower-fidelity record only fills NULLs the stored record does not explain; the stored
        # reasons stay (the filler's reasons would describe columns that the stored record has)
        def fill(c: str) -> str:
            explained = f"""coalesce(json_exists({table}.null_reasons, '$."{c}"'), false)"""
            return f"{_q(c)} = CASE WHEN {explained} THEN {table}.{_q(c)} ELSE coalesce({table}.{_q(c)}, a.{_q(c)}) END"
        sets = ", ".join(fill(c) for c in data_cols if c not in ("source", "null_reasons"))
        con.execute(f"UPDATE {table} SET {sets} FROM _act a WHERE {where} AND a._action = 'fill'")
    stored = counts.get("insert", 0)
    updated = counts.get("replace", 0) + counts.get("fill", 0)
    unchanged = counts.get("same", 0) + (total - winners)
    for t in ("_in", "_w", "_act"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    return stored, updated, unchanged


def _refresh_job_usage(con, touched: pl.DataFrame) -> None:
    """Job-level numbers derived from steps, for the jobs this file touched.
    mem_peak_bytes: the largest step's TRESUsageInTot mem, else max over steps of MaxRSS x NTasks.
    cpu_time_s: kept when the job record has TotalCPU, else the sum over its steps.
    gpu_util_tres / gpu_mem_tres_bytes (Slurm's gres/gpuutil, gres/gpumem): kept when the job record
    has them, else the max over its steps' TRESUsageInTot (as the sacct JSON parser does), so a GPU
    job without sidecar samples still has Slurm's figure."""
    _run(con, """
        UPDATE job SET
            mem_peak_bytes = coalesce(s.peak, job.mem_peak_bytes),
            cpu_time_s = coalesce(job.cpu_time_s, s.cpu),
            gpu_util_tres = coalesce(job.gpu_util_tres, s.gutil),
            gpu_mem_tres_bytes = coalesce(job.gpu_mem_tres_bytes, s.gmem)
        FROM (SELECT cluster, job_id_raw,
                     coalesce(max(mem_usage_tot_bytes), max(max_rss_bytes * coalesce(ntasks, 1))) AS peak,
                     sum(cpu_time_s) AS cpu, max(gpu_util_tres) AS gutil, max(gpu_mem_tres_bytes) AS gmem
              FROM step WHERE (cluster, job_id_raw) IN (SELECT cluster, job_id_raw FROM _touched)
              GROUP BY cluster, job_id_raw) s
        WHERE job.cluster = s.cluster AND job.job_id_raw = s.job_id_raw
          AND ((s.peak IS NOT NULL AND job.mem_peak_bytes IS DISTINCT FROM s.peak)
               OR (job.cpu_time_s IS NULL AND s.cpu IS NOT NULL)
               OR (job.gpu_util_tres IS NULL AND s.gutil IS NOT NULL)
               OR (job.gpu_mem_tres_bytes IS NULL AND s.gmem IS NOT NULL))""", _touched=touched)


def _select_casts(con, frame: pl.DataFrame, table: str, ingest_id: int) -> tuple[list[str], str]:
    """(table columns, SELECT list) turning `frame` columns into the table's types, missing ones NULL."""
    have = set(frame.columns)
    cols = _table_columns(con, table)
    sel = []
    for name, typ in cols:
        if name == "ingest_id":
            sel.append(f"{int(ingest_id)}::BIGINT AS ingest_id")
        elif name in have:
            sel.append(f"CAST({_q(name)} AS {typ}) AS {_q(name)}")
        else:
            sel.append(f"NULL::{typ} AS {_q(name)}")
    return [c for c, _ in cols], ", ".join(sel)


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
            hit = _owners_with_samples(self.con, pl.DataFrame(new, schema=owners.schema, orient="row"))
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
        cols, sel = _select_casts(self.con, frame, "sample", self.ingest_id)
        collist = ", ".join(_q(c) for c in cols)
        if check:
            stored = _run(self.con, f"""INSERT INTO sample ({collist}) SELECT * FROM (SELECT {sel} FROM _incoming) i
                                     WHERE NOT EXISTS (SELECT 1 FROM sample s WHERE s.cluster = i.cluster
                                     AND s.job_id_raw = i.job_id_raw AND s.host = i.host AND s.device = i.device
                                     AND s.time = i.time)""", _incoming=frame)[0][0]
        else:
            stored = _run(self.con, f"INSERT INTO sample ({collist}) SELECT {sel} FROM _incoming", _incoming=frame)[0][0]
        return stored, total - stored


def _owners_with_samples(con, owners: pl.DataFrame) -> set[tuple]:
    """The (cluster, job_id_raw, host) of `owners` that already have rows in table sample."""
    return {tuple(r) for r in _run(
        con, "SELECT DISTINCT o.cluster, o.job_id_raw, o.host FROM _owners o JOIN sample s "
        "ON s.cluster = o.cluster AND s.job_id_raw = o.job_id_raw AND s.host = o.host", _owners=owners)}


class _BulkInsert:
    """The samples of a BulkRead, inserted by DuckDB itself in the file's transaction before
    load_pieces records the file (the protocol of _EarlyInsert: ingest_id, inserted per table,
    finish(), rollback()). They stand only as a plain insert: DuckDB read every line, the rows are
    one owner with no samples stored before (else each row needs the duplicate check), and each
    device's times rise in file order (no duplicates within the file). `ok` is False, and nothing is kept, otherwise;
    the caller then reads the file the ordinary way, which finds bad lines and duplicates one by one."""

    MAX_DEVICES = 64   # one ordered pass per device; more is not a sidecar file

    def __init__(self, con, bulk: BulkRead):
        self.con, self.open, self.ok = con, False, False
        self.inserted = {"sample": 0}
        self.ingest_id: Optional[int] = None
        owner = pl.DataFrame([bulk.owner], schema=["cluster", "job_id_raw", "host"], orient="row")
        if _owners_with_samples(con, owner):
            return
        con.execute("BEGIN TRANSACTION")
        self.open = True
        self.ingest_id = con.execute("SELECT nextval('ingest_id_seq')").fetchall()[0][0]
        cols = [c for c, _ in _table_columns(con, "sample")]
        values = ", ".join(str(int(self.ingest_id)) if c == "ingest_id" else _q(c) for c in cols)
        try:
            self.inserted["sample"] = con.execute(f"INSERT INTO sample ({', '.join(_q(c) for c in cols)}) "
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


def _load_sidecar_runs(con, frame: Optional[pl.DataFrame], ingest_id: int, source_file: str) -> None:
    if frame is None or frame.height == 0:
        return
    if "source_file" not in frame.columns:
        frame = frame.with_columns(source_file=pl.lit(source_file))
    cols = _stage(con, frame, "sidecar_run", "_in_r", ingest_id)
    collist = ", ".join(_q(c) for c in cols)
    con.execute("DELETE FROM sidecar_run WHERE (cluster, job_id_raw, host, source_file) IN "
                "(SELECT cluster, job_id_raw, host, source_file FROM _in_r)")
    con.execute(f"INSERT INTO sidecar_run ({collist}) SELECT DISTINCT ON (cluster, job_id_raw, host, source_file) "
                f"{collist} FROM _in_r")
    con.execute("DROP TABLE IF EXISTS _in_r")


class _EarlyInsert:
    """Inserts a big accounting file's job and step rows while the file is still being parsed: the
    parser hands over each block's rows (its on_piece) and a worker thread inserts them, in the
    file's transaction, while the next block is parsed (polars and DuckDB both release the GIL, so
    the two overlap on two cores). Only used when the job and step tables are empty, where the merge
    rule has nothing to decide: every row is a plain insert. A key repeated within the file is found
    once the inserts are done; the transaction is then rolled back and the file loaded the ordinary way."""

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
    def applies(con, mod: ModuleType, size: int) -> bool:
        return (getattr(mod, "ON_PIECE", False) and size > EARLY_INSERT_BYTES and
                not con.execute("SELECT EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM step)").fetchall()[0][0])

    def put(self, jobs: pl.DataFrame, steps: pl.DataFrame) -> None:
        if self.error is None:
            self.queue.put((jobs, steps))

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is not None:
                continue
            try:
                for frame, table in zip(item, ("job", "step")):
                    if frame.height:
                        cols, sel = _select_casts(self.con, frame, table, self.ingest_id)
                        self.inserted[table] += _run(
                            self.con, f"INSERT INTO {table} ({', '.join(_q(c) for c in cols)}) SELECT {sel} FROM _incoming",
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


class AccountingError(RuntimeError):
    """The loader's row accounting does not add up: a bug, and the file is not committed."""


def load_result(con: duckdb.DuckDBPyConnection, result: ParseResult, source_file: str,
                checksum: Optional[str], options: dict, early: "Optional[_EarlyInsert | _BulkInsert]" = None) -> FileReport:
    """Load one parsed file in one transaction and record it in ingest_log. With `early`, its job
    and step rows were inserted while it was parsed (in the transaction early holds open)."""
    return load_pieces(con, [result], result.format, source_file, checksum, options, early)


def load_pieces(con: duckdb.DuckDBPyConnection, pieces: Iterable[ParseResult], fmt: str, source_file: str,
                checksum: Optional[str], options: dict, early: "Optional[_EarlyInsert | _BulkInsert]" = None) -> FileReport:
    """Load one file, given as one or more parsed pieces (a big sidecar CSV is parsed and loaded a
    piece at a time, so memory stays bounded), in ONE transaction, and record it in ingest_log.
    The counts are summed over the pieces and checked once, for the whole file."""
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
            _load_piece(con, result, rep, samples, ingest_id, source_file, early)
        accounted = rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped
        if accounted != rep.rows_in:
            raise AccountingError(
                f"{source_file}: {rep.rows_in} rows read but {accounted} accounted for (stored {rep.stored}, "
                f"updated {rep.updated}, unchanged {rep.unchanged}, rejected {rep.rejected}, dropped {rep.dropped})")
        con.execute("UPDATE ingest_log SET rows_in = ?, stored = ?, updated = ?, unchanged = ?, rejected = ?, "
                    "dropped = ?, finished_at = ? WHERE ingest_id = ?",
                    [rep.rows_in, rep.stored, rep.updated, rep.unchanged, rep.rejected, rep.dropped,
                     datetime.now(timezone.utc).replace(tzinfo=None), ingest_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    rep.seconds = time.monotonic() - t0
    return rep


def _load_piece(con, result: ParseResult, rep: FileReport, samples: _SampleLoader, ingest_id: int,
                source_file: str, early: "Optional[_EarlyInsert | _BulkInsert]" = None) -> None:
    rep.rows_in += result.rows_in
    rep.rejected += len(result.rejects)
    rep.dropped += result.dropped
    rep.notes += result.notes
    touched: list[pl.DataFrame] = []
    for frame, table, keys, tcols in (
            (result.jobs, "job", ["cluster", "job_id_raw"], ["end_time", "start_time", "submit_time", "eligible_time"]),
            (result.steps, "step", ["cluster", "job_id_raw", "step_id"], ["end_time", "start_time"])):
        if early is not None:   # inserted while parsing, every row (a failed insert rolled them all back)
            s, u, n = early.inserted.get(table, 0), 0, 0
        else:
            s, u, n = _merge_records(con, frame, table, keys, tcols, ingest_id)
        rep.stored += s
        rep.updated += u
        rep.unchanged += n
        if frame is not None and frame.height:
            touched.append(frame.select("cluster", "job_id_raw"))
    if touched:
        _refresh_job_usage(con, pl.concat(touched, rechunk=False))   # repeats are fine: IN (...) is a semi-join
    s, dup = samples.add(result.samples)
    if early is not None:   # a BulkRead's samples, inserted by DuckDB before
        s += early.inserted.get("sample", 0)
    rep.stored += s
    rep.unchanged += dup
    _load_sidecar_runs(con, result.sidecar_runs, ingest_id, source_file)
    if result.rejects:
        rj = pl.DataFrame({"ingest_id": [ingest_id] * len(result.rejects),
                           "source_file": [source_file] * len(result.rejects),
                           "line_no": [r.line_no for r in result.rejects],
                           "reason": [r.reason for r in result.rejects],
                           "raw": [r.raw for r in result.rejects]},
                          schema={"ingest_id": pl.Int64, "source_file": pl.String, "line_no": pl.Int64,
                                  "reason": pl.String, "raw": pl.String})
        _run(con, "INSERT INTO reject (ingest_id, source_file, line_no, reason, raw) "
                  "SELECT ingest_id, source_file, line_no, reason, raw FROM _rj", _rj=rj)


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


def ingest_file(con, path: Path, opts: ParseOptions, parsers: dict[str, ModuleType],
                fmt: Optional[str] = None, explicit: bool = True,
                progress: Optional[Callable[[str], None]] = None) -> FileReport:
    rep = FileReport(path=str(path))
    t0 = time.monotonic()
    try:
        if fmt:
            mod = parsers.get(fmt)
            if mod is None:
                rep.status, rep.error = "failed", f"format {fmt!r} is not available in this installation"
                return rep
        else:
            mod = detect(path, parsers)
            if mod is None:
                rep.status = "unrecognised" if explicit else "skipped"
                rep.error = "format not recognised (use --format to name it)"
                return rep
        rep.format = mod.FORMAT
        size = path.stat().st_size
        bulk = _bulk_read(mod, path, opts)
        streamed = hasattr(mod, "iter_parse") and size > STREAM_BYTES
        # A big file never ingested under this name is most likely new: hash it in a thread while it
        # is read (sha256 of a 1 GB dump takes seconds). A name seen before (the same folder
        # ingested again) is hashed first, so that unchanged files are not read for nothing.
        overlap = (bulk is not None or not streamed) and size > BIG_FILE and not _seen_name(con, path)
        delimiter = bulk.delimiter if bulk is not None else None
        scanning = _start_scan(path, delimiter) if overlap else None
        scan = None if overlap else scan_file(path, delimiter)
    except OSError as exc:
        rep.status, rep.error = "unreadable", f"cannot read: {exc.strerror or exc}"
        return rep
    options = {k: v for k, v in (("timezone", opts.timezone), ("cluster", opts.cluster),
                                 ("columns", opts.columns), ("job_id", opts.job_id), ("format", fmt)) if v}
    source = str(Path(path).resolve())

    def known(checksum: str) -> bool:
        prior = already_ingested(con, checksum, options)
        if prior is not None:
            rep.status = "already ingested"
            rep.ingest_id = prior
            rep.notes.append(f"same content (sha256) and options as ingest {prior}: nothing changed")
        return prior is not None

    def scanned(pending) -> bool:
        """Wait for the hash thread; False (rep says why) when the file is unreadable or known."""
        nonlocal scan
        if pending is None:
            return True
        pending.join()
        if pending.error is not None:
            rep.status, rep.error = "unreadable", f"cannot read: {pending.error.strerror or pending.error}"
            return False
        scan = pending.scan
        return not known(scan.digest)

    if scan is not None and known(scan.digest):
        return rep
    if bulk is not None:
        inserted = _BulkInsert(con, bulk)
        if not scanned(scanning):
            inserted.rollback()
            return rep
        scanning = None
        if inserted.ok and inserted.matches(scan, bulk):
            bulk.result.rows_in = inserted.inserted["sample"]
            return _loaded(rep, path, t0, lambda: load_result(con, bulk.result, source, scan.digest, options, inserted))
        inserted.rollback()   # refused: read the ordinary way below, which says what is wrong with which line
    checksum = scan.digest if scan is not None else None
    if streamed:
        return _ingest_streamed(con, path, opts, mod, checksum, options, rep, t0)
    early = _EarlyInsert(con) if _EarlyInsert.applies(con, mod, size) else None
    try:
        result = mod.parse(path, opts, on_piece=early.put) if early else mod.parse(path, opts)
        if early:
            early.finish()   # con is free again (rolled back if an insert failed)
    except BaseException as exc:
        if early:
            early.rollback()
        if scanning is not None:
            scanning.join()
        if isinstance(exc, OSError):
            rep.status, rep.error = "unreadable", f"cannot read: {exc.strerror or exc}"
            return rep
        if isinstance(exc, Exception):
            rep.status, rep.error = "failed", f"{mod.FORMAT} parser failed: {exc!r}"
            return rep
        raise
    if not scanned(scanning):
        if early:
            early.rollback()
        return rep
    checksum = scan.digest
    if progress and path.stat().st_size > BIG_FILE:
        progress(f"{path}: read {result.rows_in:,} rows in {time.monotonic() - t0:.1f} s; loading")
    return _loaded(rep, path, t0, lambda: load_result(con, result, source, checksum, options, early))


def _bulk_read(mod: ModuleType, path: Path, opts: ParseOptions) -> Optional[BulkRead]:
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


class _ParserFailed(Exception):
    """The parser raised while a file was being loaded piece by piece."""


def _pieces(mod: ModuleType, path: Path, opts: ParseOptions):
    it = mod.iter_parse(path, opts, STREAM_BYTES)
    while True:
        try:
            piece = next(it)
        except StopIteration:
            return
        except OSError:
            raise
        except Exception as exc:
            raise _ParserFailed(f"{mod.FORMAT} parser failed: {exc!r}") from exc
        yield piece


def _ingest_streamed(con, path: Path, opts: ParseOptions, mod: ModuleType, checksum: str, options: dict,
                     rep: FileReport, t0: float) -> FileReport:
    """A big file whose parser reads it in pieces: each piece is loaded as soon as it is parsed,
    all in the file's one transaction (peak memory ~ one piece, not the whole file)."""
    return _loaded(rep, path, t0, lambda: load_pieces(con, _pieces(mod, path, opts), mod.FORMAT,
                                                      str(Path(path).resolve()), checksum, options))


def _loaded(rep: FileReport, path: Path, t0: float, load: Callable[[], FileReport]) -> FileReport:
    """Run one file's load (its own transaction) and turn a failure into the file's report line;
    a failed load was rolled back, so nothing of the file is stored."""
    try:
        out = load()
    except OSError as exc:
        rep.status, rep.error = "unreadable", f"cannot read: {exc.strerror or exc}"
        return rep
    except _ParserFailed as exc:
        rep.status, rep.error = "failed", str(exc)
        return rep
    except (AccountingError, duckdb.Error) as exc:
        rep.status, rep.error = "failed", f"not loaded ({type(exc).__name__}): {exc}"
        return rep
    out.path = str(path)
    out.seconds = time.monotonic() - t0
    return out


def ingest_paths(con, paths: Iterable[str | Path], opts: ParseOptions, fmt: Optional[str] = None,
                 progress: Optional[Callable[[str], None]] = None,
                 on_file: Optional[Callable[[FileReport], None]] = None) -> list[FileReport]:
    parsers = load_parsers(warn=progress)
    files = walk(paths)
    reports = []
    for i, (path, explicit) in enumerate(files, 1):
        if progress:
            try:
                size = path.stat().st_size
            except OSError:
                size = 0
            if len(files) > 1 or size > BIG_FILE:
                progress(f"[{i}/{len(files)}] {path}" + (f" ({size / 1e6:.0f} MB)" if size > BIG_FILE else ""))
        if not path.exists():
            rep = FileReport(path=str(path), status="unreadable", error="no such file or directory")
        else:
            rep = ingest_file(con, path, opts, parsers, fmt=fmt, explicit=explicit, progress=progress)
        reports.append(rep)
        if on_file:
            on_file(rep)
    return reports
