"""Sidecar CSV schema v1 (collector/csv_schema.py) and its optional `<stem>.meta.json` (read by sidecar_meta).

Read by its header's names (:class:`Layout`): the required columns in any order, any of the GPU
extras (a missing one is NULL), and columns it does not know ignored with a note. A header that
lacks a required column (or names one twice) refuses the file: each line is rejected with that
reason, and a note names the file. This is the 50M-row path, so
it is read in bulk:
- fast path: one polars ``read_csv`` with an explicit all-text schema, then vectorised casts;
- if any cast fails, or a line has the wrong number of fields (checked by counting separators),
  or a line is not UTF-8, the piece is split into lines and only the bad lines become Rejects,
  with their line numbers.
A last line without a trailing newline (a write cut short by a kill, or still being written) is
dropped and counted in ``dropped``, never an error. Times are ISO-8601 UTC with 'Z' and are stored naive UTC.

A clean file is not read here at all: :func:`bulk_read` hands the loader a DuckDB ``read_csv`` of it
(the 50M-row case), and the loader falls back to the readers above when DuckDB refuses a line or the
rows do not match the file's lines. Numbers are read as DuckDB reads them (``1e3``, ``1.0``, ``1_000``
are numbers; an integer column rounds a fraction), whichever reader takes the file.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Iterator, Optional

import duckdb
import polars as pl

from jobsight.analytics.ingest import lengths, limits
from jobsight.analytics.ingest.parsers.sidecar_meta import TIME_FORMAT, meta_frame, read_meta
from jobsight.analytics.ingest.records import BulkRead, ParseOptions, ParseResult, Reject
from jobsight.collector.csv_schema import COLUMNS, REQUIRED

FORMAT = "sidecar"
SOURCE = "sidecar"

TIME_FORMAT_OFFSET = "%Y-%m-%dT%H:%M:%S%.f%:z"   # also accepted (converted to UTC): what polars' reader takes
INT_COLUMNS = ("mem_used_bytes", "mem_total_bytes", "gpu_index")
FLOAT_COLUMNS = ("util_pct", "power_w", "energy_j", "sm_clock_mhz", "temperature_c", "sm_active_pct")
KEY_TEXT = ("job_id", "cluster", "host", "device")
_TYPES = {**{c: pl.Int64 for c in INT_COLUMNS}, **{c: pl.Float64 for c in FLOAT_COLUMNS}}
_TYPES["gpu_index"] = pl.Int32
_SQL_TYPES = {pl.Int64: "BIGINT", pl.Int32: "INTEGER", pl.Float64: "DOUBLE"}
_SAMPLE_COLUMNS = [("job_id_raw" if c == "job_id" else c) for c in COLUMNS]   # the CSV's columns as table sample names them


def _header_names(line: str) -> list[str]:
    return [n.strip().lower() for n in line.lstrip("\ufeff").rstrip("\r\n").split(",")]


def sniff(head: str, path: pathlib.Path) -> bool:
    """A header with every required column; or one plainly meant as a sidecar CSV (time, device and
    three more of the schema's names) that lacks one, so that the ingest refuses it with that reason
    instead of "not recognised"."""
    names = set(_header_names(head.split("\n", 1)[0]))
    return set(REQUIRED) <= names or ({"time", "device"} <= names and len(names & set(COLUMNS)) >= 5)


class Layout:
    """The file's columns, from its header line. ``internal``: the name each field is read under (a
    schema column's own name, or ``_ignored_<i>`` for one not in the schema); ``fields``: fields per line."""

    def __init__(self, header: str):
        names = _header_names(header)
        self.fields = len(names)
        self.internal = [n if n in COLUMNS else f"_ignored_{i}" for i, n in enumerate(names)]
        self.missing = [c for c in REQUIRED if c not in names]
        self.repeated = sorted({n for n in names if n in COLUMNS and names.count(n) > 1})
        self.unknown = [n for n in names if n not in COLUMNS]
        self.absent = [c for c in COLUMNS if c not in names]

    def problem(self) -> Optional[str]:
        """Why the file cannot be read by this header: a required column missing, or a column
        named twice (which one to read?). None when it can."""
        if self.missing:
            what = f"{self.missing[0]} column" if len(self.missing) == 1 else f"columns {', '.join(self.missing)}"
            return (f"the header has no {what} (sidecar schema v1 requires "
                    f"{', '.join(REQUIRED)}; the GPU columns are optional)")
        if self.repeated:
            return f"the header names {', '.join(self.repeated)} more than once"
        return None

    def note(self, path: pathlib.Path) -> list[str]:
        return [f"{path.name}: columns not in sidecar schema v1 ignored: {', '.join(map(repr, self.unknown))}"] \
            if self.unknown else []

    def complete(self, frame: pl.DataFrame, typed: bool) -> pl.DataFrame:
        """The schema's columns in schema order: an absent one NULL (typed, or text), unknown ones dropped."""
        return frame.with_columns(
            [pl.lit(None, dtype=_TYPES.get(c, pl.String) if typed else pl.String).alias(c) for c in self.absent]
        ).select(COLUMNS)


def _read_typed(source: bytes, layout: Layout) -> pl.DataFrame:
    """Fast path: polars parses the numbers itself (typed read is ~2.5x faster and uses ~1/3 of the
    memory of reading text and casting). Raises on any bad value or ragged line."""
    # time is read as text and converted with the fixed format: ~2x cheaper than letting the reader
    # parse datetimes (it infers per value); a value in another form (an offset) raises and the
    # line path below takes it.
    schema = {c: _TYPES.get(c, pl.String) for c in layout.internal}
    df = pl.read_csv(source, has_header=False, skip_rows=1, schema=schema, quote_char=None, raise_if_empty=False)
    # the reader fills a short line's missing fields with nulls (shifting nothing it can see), so
    # a line with too few fields is caught by counting separators: every line has fields-1
    if source.count(b",") != (len(df) + 1) * (layout.fields - 1):
        raise ValueError("a line has the wrong number of fields")
    return layout.complete(df, typed=True).with_columns(pl.col("time").str.to_datetime(TIME_FORMAT, time_unit="us", strict=True))


def _typed(frame: pl.DataFrame, strict: bool) -> pl.DataFrame:
    ts = pl.col("time").str.strip_chars()
    with_offset = (ts.str.to_datetime(TIME_FORMAT_OFFSET, time_unit="us", strict=False)
                   .dt.convert_time_zone("UTC").dt.replace_time_zone(None))
    exprs = [pl.coalesce(ts.str.to_datetime(TIME_FORMAT, time_unit="us", strict=False), with_offset).alias("time")]
    for c in KEY_TEXT:
        exprs.append(pl.col(c).str.strip_chars().replace("", None).alias(c))
    for c, t in _TYPES.items():
        exprs.append(pl.col(c).str.strip_chars().replace("", None).cast(t, strict=strict).alias(c))
    return _like_duckdb(frame, frame.select(exprs))


def _like_duckdb(raw: pl.DataFrame, typed: pl.DataFrame) -> pl.DataFrame:
    """Numbers polars could not read, read as DuckDB's CSV reader reads them (its TRY_CAST: 1e3, 1.0,
    0x10, 1_000), so a line gives the same values in a file DuckDB reads (bulk_read) and in one it
    refuses. What polars does read, DuckDB reads to the same value."""
    fixes = {}
    for c, t in _TYPES.items():
        text = raw[c].str.strip_chars()
        missed = typed[c].is_null() & text.is_not_null() & (text != "")
        if missed.any():
            got = duckdb.execute(f"SELECT TRY_CAST(unnest(?::VARCHAR[]) AS {_SQL_TYPES[t]})",
                                 [text.filter(missed).to_list()]).fetchall()
            fixes[c] = typed[c].scatter(missed.arg_true(), pl.Series([g[0] for g in got], dtype=t))
    return typed.with_columns(**fixes) if fixes else typed


def _reasons(raw: pl.DataFrame, typed: pl.DataFrame) -> pl.Series:
    """Per row: the first reason it cannot be stored, or null."""
    both = pl.concat([raw.rename({c: f"raw_{c}" for c in raw.columns}), typed], how="horizontal")
    checks: list[tuple[pl.Expr, pl.Expr]] = [
        (pl.col("time").is_null(), pl.lit("bad or missing time (want ISO-8601 UTC ...Z): ") + pl.col("raw_time").fill_null("")),
        (pl.col("device").is_null(), pl.lit("empty device")),
    ]
    for c in _TYPES:
        failed = pl.col(c).is_null() & pl.col(f"raw_{c}").str.strip_chars().fill_null("").ne("")
        checks.append((failed, pl.lit(f"{c} is not a number: ") + pl.col(f"raw_{c}").fill_null("")))
    checks += _limit_checks()
    expr = pl.lit(None, dtype=pl.String)
    for cond, msg in reversed(checks):
        expr = pl.when(cond).then(msg).otherwise(expr)
    return both.select(expr.alias("reason"))["reason"]


def _limit_checks() -> list[tuple[pl.Expr, pl.Expr]]:
    """(condition, reason) for values beyond physical limits (analytics/ingest/limits.py): NaN, inf,
    negative, a GPU above 100 %."""
    return limits.sample_reasons({c: pl.col(c) for c in ("time", *_TYPES)}, gpu=pl.col("device") != "cpu")


def _robust(source: bytes, layout: Layout, first_line: int = 2) -> tuple[pl.DataFrame, list[Reject], int]:
    """Line-level read: split raw lines, reject the ones that are not UTF-8, have the wrong field
    count or bad values. Only runs on a piece whose fast read failed, so Python per line is fine."""
    raw_lines = source.split(b"\n")[1:]          # header first; the piece ends with a newline
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    rejects: list[Reject] = []
    texts: list[str] = []
    numbers: list[int] = []
    for no, raw in enumerate(raw_lines, first_line):
        try:
            line = raw.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as exc:
            rejects.append(Reject(no, f"invalid UTF-8 at byte {exc.start}", raw[:1000].decode("utf-8", "replace")))
            continue
        n = line.count(",") + 1
        if line == "":
            rejects.append(Reject(no, "empty line", ""))
        elif n != layout.fields:
            rejects.append(Reject(no, f"{n} fields, the header has {layout.fields}", line[:1000]))
        else:
            texts.append(line)
            numbers.append(no)
    good = pl.DataFrame({"line": texts, "line_no": numbers}, schema={"line": pl.String, "line_no": pl.Int64})
    raw = layout.complete(good.select(
        pl.col("line").str.split_exact(",", layout.fields - 1).struct.rename_fields(layout.internal).struct.unnest(),
    ), typed=False)
    typed = _typed(raw, strict=False).with_columns(good["line_no"].alias("_line"))
    reasons = _reasons(raw, typed.drop("_line"))
    bad = reasons.is_not_null()
    if bad.any():
        for no, reason, line in zip(good["line_no"].filter(bad), reasons.filter(bad), good["line"].filter(bad)):
            rejects.append(Reject(no, reason, line[:1000]))
        typed = typed.filter(~bad)
    return typed, sorted(rejects, key=lambda r: r.line_no or 0), len(raw_lines)


def _read_clean(source: bytes, layout: Layout) -> pl.DataFrame:
    """The fast path's samples, one per data line; raises when any line needs the line-level read."""
    samples = _read_typed(source, layout)
    if samples["time"].null_count() or samples["device"].null_count():
        raise ValueError("null key")
    if samples.select(pl.any_horizontal([cond for cond, _ in _limit_checks()]).any()).item():
        raise ValueError("a value beyond its limits")
    return samples


def _read_block(source: bytes, first_line: int, layout: Layout) -> tuple[pl.DataFrame, list[Reject], int]:
    """(samples with a _line column, rejects, data rows read) for header + data lines."""
    try:
        samples = _read_clean(source, layout)
        line = pl.int_range(first_line, len(samples) + first_line, dtype=pl.Int64)
        return samples.with_columns(line.alias("_line")), [], len(samples)
    except Exception:  # noqa: BLE001 - any failure of the fast path: find the bad lines one by one
        return _robust(source, layout, first_line)


class _Defaults:
    """Values from the metadata JSON (or options) for cells the CSV leaves empty."""

    def __init__(self, path: pathlib.Path, opts: ParseOptions, notes: list[str]):
        self.meta = read_meta(path, notes)
        m = self.meta or {}
        self.cluster = m.get("cluster") or opts.cluster or "default"
        self.job = str(m.get("job_id") or "") or None
        self.host = m.get("host") or "unknown"


NO_JOB = "empty job_id and no metadata job_id"


def _identify(samples: pl.DataFrame, cluster: pl.Expr, job: pl.Expr, host: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(samples with the defaults in empty key cells, in table sample's columns; the rows left
    without a job, which are rejected)."""
    samples = samples.with_columns(
        pl.col("cluster").fill_null(cluster), pl.col("job_id").fill_null(job).alias("job_id_raw"),
        pl.col("host").fill_null(host), pl.lit(SOURCE).alias("source"),
    ).drop("job_id")
    no_job = samples["job_id_raw"].is_null()
    extra = [c for c in ("_file",) if c in samples.columns]
    keep = samples.select(_SAMPLE_COLUMNS + ["source", "_line"] + extra)   # _line: the loader's trust rejects
    return (keep.filter(~no_job), keep.filter(no_job)) if no_job.any() else (keep, keep.clear())


def _finish(result: ParseResult, samples: pl.DataFrame, rejects: list[Reject], d: _Defaults) -> None:
    samples, no_job = _identify(samples, pl.lit(d.cluster), pl.lit(d.job, dtype=pl.String), pl.lit(d.host))
    if no_job.height:
        rejects = sorted(rejects + [Reject(n, NO_JOB, None) for n in no_job["_line"]], key=lambda r: r.line_no or 0)
    result.samples = samples
    result.rejects = rejects


def _cut_short(result: ParseResult, tail: bytes) -> None:
    text = tail.decode("utf-8", "replace")
    if text.strip():
        result.dropped = 1
        result.notes.append(f"last line has no newline (cut short, or still being written: a later ingest "
                            f"reads it once complete): dropped: {text[:80]!r}")


_DUCKDB_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"   # what the sidecar writes; other forms fall back to polars
# DuckDB's read buffer: its default (16 x the longest line) held ~150 MB more while it met a 300 MB
# line; 4 MiB costs no measurable speed on a clean file
_DUCKDB_BUFFER = 4 * lengths.MAX_LINE_BYTES
_GLOB = set("*?[]{}")                            # DuckDB would read such a path as a pattern


def _sql_text(value: Optional[str]) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


def bulk_read(path: pathlib.Path, opts: ParseOptions) -> Optional[BulkRead]:
    """The file as a DuckDB read_csv the loader runs itself (see BulkRead), or None where it cannot be:
    a last line cut short (the piece reader drops and counts it), no data line, a first or last line
    these rules reject, first and last lines of different jobs, or a path DuckDB would take for a glob.
    Values DuckDB cannot read raise in the loader, which then reads the file with iter_parse."""
    path = pathlib.Path(path)
    if _GLOB & set(str(path)):
        return None
    with open(path, "rb") as fh:
        header, first = lengths.read_line(fh), lengths.read_line(fh)
        if header is None or first is None:
            return None   # a line too long: the line reader rejects it with its number
        fh.seek(max(fh.seek(0, 2) - 65536, 0))
        tail = fh.read()
    if not (header.endswith(b"\n") and first.endswith(b"\n") and tail.endswith(b"\n")):
        return None
    last = tail[:-1].rsplit(b"\n", 1)[-1] + b"\n"
    layout = Layout(header.decode("utf-8", "replace"))
    if layout.problem():
        return None   # the line reader refuses it with the reason
    notes: list[str] = layout.note(path)
    d = _Defaults(path, opts, notes)
    result = ParseResult(format=FORMAT)
    # the first and last lines: a file of several jobs (concatenated sidecar files) is told here,
    # before DuckDB reads it all only for the loader to refuse it
    samples, rejects, _ = _read_block(header + first + last, 2, layout)
    _finish(result, samples, rejects, d)
    if result.rejects or len(result.samples) != 2 or len(result.samples.select("cluster", "job_id_raw", "host").unique()) != 1:
        return None
    row0 = result.samples.row(0, named=True)
    result.samples, result.notes = None, notes
    if d.meta is not None:
        result.sidecar_runs = meta_frame(d.meta, path, row0["cluster"], row0["job_id_raw"], row0["host"])
    columns = ", ".join(f"'{c}': '{_SQL_TYPES.get(_TYPES.get(c), 'VARCHAR')}'" for c in layout.internal)
    values = {c: c if c in layout.internal else f"NULL::{_SQL_TYPES.get(_TYPES.get(c), 'VARCHAR')}" for c in COLUMNS}
    values.update(
        time=f"strptime(time, '{_DUCKDB_TIME_FORMAT}')",
        job_id=f"coalesce(job_id, {_sql_text(d.job)})",   # still NULL: the NOT NULL column refuses it
        cluster=f"coalesce(cluster, {_sql_text(d.cluster)})",
        host=f"coalesce(host, {_sql_text(d.host)})")
    select = (f"SELECT {', '.join(f'{values[c]} AS {o}' for c, o in zip(COLUMNS, _SAMPLE_COLUMNS))}, '{SOURCE}' AS source "
              f"FROM read_csv({_sql_text(str(path))}, header = true, delim = ',', quote = '', escape = '', "
              f"auto_detect = false, strict_mode = true, null_padding = false, "
              f"max_line_size = {lengths.MAX_LINE_BYTES}, buffer_size = {_DUCKDB_BUFFER}, columns = {{{columns}}})")
    # a row beyond the limits (a line too long fails the read) is left out: fewer rows than lines,
    # so the loader reads the file line by line, which rejects that row with the reason
    select = f"SELECT * FROM ({select}) WHERE {limits.sample_sql_ok()} AND {lengths.sql_ok(_SAMPLE_COLUMNS)}"
    return BulkRead(select=select, owner=(row0["cluster"], row0["job_id_raw"], row0["host"]), result=result,
                    fields=layout.fields)


def parse(path: pathlib.Path, opts: ParseOptions, end: Optional[int] = None) -> ParseResult:
    """The whole file (its first ``end`` bytes) as one result: iter_parse with a single piece."""
    path = pathlib.Path(path)
    size = path.stat().st_size if end is None else end
    (result,) = iter_parse(path, opts, chunk_bytes=max(1, size), end=size)
    return result


def iter_parse(path: pathlib.Path, opts: ParseOptions, chunk_bytes: int = 256 << 20, start: int = 0,
               end: Optional[int] = None, first_line: int = 2) -> Iterator[ParseResult]:
    """The file in pieces of about ``chunk_bytes`` (cut at line ends), for files too big to hold as
    one frame (50M rows ~ 6 GB as a frame). Line numbers in rejects are the file's own; the
    sidecar_run row and notes come with the first piece; the dropped last line with the last one.
    Summing rows_in / rows / rejects / dropped over the pieces gives the same totals as parse().
    ``start``, ``end``, ``first_line``: only the bytes [start, end), beginning at line first_line
    (the part of a growing file added since the last ingest: analytics/ingest/offsets.py)."""
    path = pathlib.Path(path)
    size = path.stat().st_size if end is None else end
    notes: list[str] = []
    d = _Defaults(path, opts, notes)
    with open(path, "rb") as fh:
        header = lengths.read_line(fh)
        # a header too long to read refuses the file as one without its columns does
        refusal = f"the header (line 1) is longer than the limit of {lengths.MAX_LINE_BYTES:,} bytes" \
            if header is None else None
        header = (header or b"") if (header or b"").endswith(b"\n") else (header or b"") + b"\n"
        layout = Layout(header.decode("utf-8", "replace"))
        # a header without a required column: every line is rejected with the reason (the file is
        # accounted for line by line, as any other), and a note names the file
        refusal = refusal or layout.problem()
        notes += [f"{path}: not read: {refusal}"] if refusal else layout.note(path)
        start = max(fh.tell(), start)
        # read in blocks of chunk_bytes, a line longer than lengths.MAX_LINE_BYTES skipped unread
        items = lengths.bounded_lines(fh, start, size, first_line, block=max(1, min(chunk_bytes, lengths.BLOCK_BYTES)))
        first = True
        for piece in _pieces_of(items, chunk_bytes):
            result = _piece_result(piece, header, layout, refusal, d)
            if first:
                result.notes[:0] = notes
                if d.meta is not None and not refusal:
                    row0 = result.samples.row(0, named=True) if len(result.samples) else {}
                    result.sidecar_runs = meta_frame(d.meta, path, row0.get("cluster") or d.cluster,
                                                      row0.get("job_id_raw"), row0.get("host"))
            first = False
            yield result


def _pieces_of(items: Iterator, chunk_bytes: int) -> Iterator[list]:
    """The Lines and LongLines of bounded_lines grouped into pieces of at most about chunk_bytes; at least one."""
    piece, size, any_piece = [], 0, False
    for item in items:
        n = len(item.data) if isinstance(item, lengths.Lines) else 0
        if size and size + n > chunk_bytes:
            yield piece
            piece, size, any_piece = [], 0, True
        piece.append(item)
        size += n
    if piece or not any_piece:
        yield piece


def _piece_result(piece: list, header: bytes, layout: Layout, refusal: Optional[str], d: _Defaults) -> ParseResult:
    """One piece's result: its runs of lines read, each line too long rejected with its number, a
    last line without a newline dropped and counted."""
    result = ParseResult(format=FORMAT)
    frames, rejects = [], []
    for item in piece:
        if isinstance(item, lengths.LongLine):
            if item.ended:
                rejects.append(Reject(item.line_no, item.reason(), None))
                result.rows_in += 1
            else:
                result.dropped += 1
                result.notes.append(f"last line has no newline (cut short, or still being written: a later ingest "
                                    f"reads it once complete): dropped ({item.size:,} bytes)")
            continue
        data = item.data
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            _cut_short(result, data[cut:])
            data = data[:cut]
        if refusal:
            rejects += _refused(data, item.first, refusal)
            result.rows_in += data.count(b"\n")
        elif data:
            samples, block_rejects, rows = _read_block(header + data, item.first, layout)
            frames.append(samples)
            rejects += block_rejects
            result.rows_in += rows
    result.rows_in += result.dropped
    if refusal:
        result.rejects = rejects
    else:
        samples = (pl.concat([f.select(frames[0].columns) for f in frames], how="vertical_relaxed") if frames
                   else _read_block(header, 2, layout)[0])
        _finish(result, samples, sorted(rejects, key=lambda r: r.line_no or 0), d)
    return result


def _refused(data: bytes, first_line: int, refusal: str) -> list[Reject]:
    """Every line of data rejected: the header refuses the file."""
    return [Reject(no, refusal, raw.decode("utf-8", "replace").removesuffix("\r")[:1000])
            for no, raw in enumerate(data.split(b"\n")[:-1], first_line)]


@dataclass(frozen=True)
class Part:
    """Complete lines of one file: those appended since an ingest, or all of them."""
    path: pathlib.Path
    header: bytes       # the file's first line, newline included
    data: bytes         # whole lines, each ending with a newline
    first_line: int     # the file's line number of data's first line
    rest: bytes = b""   # a part read to the file's end: its last line, not ended yet (dropped and counted)


def parse_parts(parts: list[Part], opts: ParseOptions) -> tuple[pl.DataFrame, list[ParseResult]]:
    """Many files' parts at once (what a watch cycle finds appended to a spool's files): one polars
    read of the parts under the same header, halved down to the parts with a line the fast path
    refuses, which are read line by line as iter_parse reads them. Returns the samples of all parts,
    with `_file` (the part's index) and `_line` (the file's own line number), and per part a
    ParseResult holding its rows_in, rejects, notes and sidecar_run row (its samples are the first's)."""
    results = [ParseResult(format=FORMAT) for _ in parts]
    defaults, groups, refused = [], {}, set()
    for i, part in enumerate(parts):
        notes: list[str] = []
        defaults.append(_Defaults(part.path, opts, notes))
        layout = Layout(part.header.decode("utf-8", "replace"))
        refusal = layout.problem()
        results[i].notes = notes + ([f"{part.path}: not read: {refusal}"] if refusal else layout.note(part.path))
        if refusal:
            results[i].rejects = _refused(part.data, part.first_line, refusal)
            results[i].rows_in += len(results[i].rejects)
            refused.add(i)
        else:
            groups.setdefault(part.header, []).append(i)
        _cut_short(results[i], part.rest)
        results[i].rows_in += results[i].dropped
    frames = [f for header, idx in groups.items()
              for f in _read_parts(parts, idx, header, Layout(header.decode("utf-8", "replace")), results)]
    if not frames:   # an empty frame of the columns read
        frames = [_read_typed(",".join(COLUMNS).encode() + b"\n", Layout(",".join(COLUMNS))).with_columns(
            _line=pl.lit(None, pl.Int64), _file=pl.lit(None, pl.Int32))]
    read = pl.concat(frames)
    d = pl.DataFrame({"_file": range(len(parts)), "_dc": [x.cluster for x in defaults],
                      "_dj": [x.job for x in defaults], "_dh": [x.host for x in defaults]},
                     schema={"_file": pl.Int32, "_dc": pl.String, "_dj": pl.String, "_dh": pl.String})
    samples, no_job = _identify(read.join(d, on="_file", how="left", maintain_order="left"),
                                pl.col("_dc"), pl.col("_dj"), pl.col("_dh"))
    for i, line_no in no_job.select("_file", "_line").iter_rows():
        results[i].rejects.append(Reject(line_no, NO_JOB, None))
    long = lengths.checked(samples, "sample")   # text beyond its limit, as load_pieces rejects it
    samples, too_long = long.frame, [] if long.rejected is None else long.rejected.select("_file", "_line", "reason").rows()
    for i, line_no, reason in too_long:
        results[i].rejects.append(Reject(line_no, reason, None))
    for i in set(no_job["_file"].to_list()) | {r[0] for r in too_long}:   # once per file, not once per line
        results[i].rejects.sort(key=lambda r: r.line_no or 0)
    first = {r["_file"]: r for r in samples.group_by("_file", maintain_order=True).first().iter_rows(named=True)} \
        if any(x.meta is not None for x in defaults) else {}
    for i, (part, x) in enumerate(zip(parts, defaults)):
        if x.meta is not None and i not in refused:
            row0 = first.get(i, {})
            results[i].sidecar_runs = meta_frame(x.meta, part.path, row0.get("cluster") or x.cluster,
                                                  row0.get("job_id_raw"), row0.get("host"))
    return samples, results


def _read_parts(parts: list[Part], idx: list[int], header: bytes, layout: Layout,
                results: list[ParseResult]) -> list[pl.DataFrame]:
    """The samples of parts idx (one header), each with _file and _line; a part with a line the fast
    path refuses is read by _read_block, which rejects that line."""
    counts = [parts[i].data.count(b"\n") for i in idx]
    try:
        samples = _read_clean(header + b"".join(parts[i].data for i in idx), layout)
        if len(samples) != sum(counts):
            raise ValueError("rows and lines differ")
    except Exception:  # noqa: BLE001 - some part has a line to reject: find it by halves
        if len(idx) > 1:
            half = len(idx) // 2
            return (_read_parts(parts, idx[:half], header, layout, results)
                    + _read_parts(parts, idx[half:], header, layout, results))
        (i,) = idx
        samples, results[i].rejects, rows = _read_block(header + parts[i].data, parts[i].first_line, layout)
        results[i].rows_in += rows
        return [samples.with_columns(_file=pl.lit(i, dtype=pl.Int32)).select(*COLUMNS, "_line", "_file")]
    for i, n in zip(idx, counts):
        results[i].rows_in += n
    spans = pl.DataFrame({"_file": idx, "first": [parts[i].first_line for i in idx], "n": counts},
                         schema={"_file": pl.Int32, "first": pl.Int64, "n": pl.Int64}).filter(pl.col("n") > 0)
    lines = spans.select(pl.col("_file").repeat_by("n").explode(),
                         pl.int_ranges("first", pl.col("first") + pl.col("n"), dtype=pl.Int64).explode().alias("_line"))
    return [pl.concat([samples.select(COLUMNS), lines.select("_line", "_file")], how="horizontal")]
