"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] [-l N]` logs -> samples.

What users actually log, and how each case is handled:
- header `timestamp, index, utilization.gpu [%], memory.used [MiB], ...`; values `99 %`, `30994 MiB`
  (or bare numbers with `nounits`). Fields are split on ',' and stripped (a few logs lose the space).
- `[N/A]`, `N/A`, `[Not Supported]`, `[Insufficient Permissions]`, any other `[...]` word -> NULL.
- a restarted `-l` (or a loop calling nvidia-smi) repeats the header: repeated headers are skipped
  and counted in a note; a *different* header starts a new column set from that line on.
- no header (`noheader`): the columns come from ``opts.columns``; without them the rows are
  rejected (there is no way to know which column is which).
- timestamps `YYYY/MM/DD HH:MM:SS.mmm` are local time of ``opts.timezone`` (None = this machine's
  zone) and stored as naive UTC; a time in a DST gap is rejected; one in the hour the clocks go
  back, which occurs twice, is its later instant once the log's times have gone back, else its
  earlier one (with a note).
- lines garbled by two writers appending to one file: when a complete record follows the garbage
  (it starts with a full timestamp and has the header's field count) that record is kept;
  anything else is rejected with its line number.
- `--query-compute-apps` logs (per-process memory, not GPU samples) are recognised and their rows
  rejected with that reason, so they are never mistaken for another format.
Keys: job id = ``opts.job_id``, else the one `<digits>` or `<digits>_<digits>` token in the file
name (dates like 2026-11-21 or 20261121T100000Z are ignored), else every row is rejected
"no job id: pass --job-id". Device = the `uuid` column, else `gpu<index>` from the `index`
column, else `gpu<n>` with n the row's position within its poll (nvidia-smi lists GPUs in index
order, one poll shares one timestamp). Host = a `hostname` column if the query has one, else
"unknown". Cluster = ``opts.cluster`` or "default".
"""
from __future__ import annotations

import io
import pathlib
import re
import zoneinfo
from typing import Optional

import polars as pl

from jobsight.analytics.ingest import lengths, limits
from jobsight.analytics.ingest.parsers.line_blocks import lines_frame, reject_long_lines
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject
from jobsight.analytics.ingest.timezones import fall_back_note, fall_back_utc, local_zone_name

FORMAT = "nvidia-smi"
SOURCE = "nvidia-smi"

# nvidia-smi field name -> (sample column, multiplier applied to the number)
_MIB = 1024 ** 2
FIELD_MAP: dict[str, tuple[str, float]] = {
    "utilization.gpu": ("util_pct", 1.0),
    "memory.used": ("mem_used_bytes", _MIB),
    "memory.total": ("mem_total_bytes", _MIB),
    "power.draw": ("power_w", 1.0),
    "power.draw.average": ("power_w", 1.0),
    "power.draw.instant": ("power_w", 1.0),
    "temperature.gpu": ("temperature_c", 1.0),
    "clocks.sm": ("sm_clock_mhz", 1.0),
    "clocks.current.sm": ("sm_clock_mhz", 1.0),
    "total_energy_consumption": ("energy_j", 1e-3),   # mJ since driver load
    "index": ("gpu_index", 1.0),
}
_INT_COLUMNS = {"mem_used_bytes", "mem_total_bytes", "gpu_index"}
# fields that mark a line as the header of a GPU query (generic names like 'name' or 'index'
# alone are not enough: plenty of other CSVs have them)
_GPU_FIELDS = (set(FIELD_MAP) - {"index"}) | {
    "timestamp", "uuid", "pci.bus_id", "utilization.memory", "memory.free", "driver_version",
    "fan.speed", "pstate", "clocks.mem", "clocks.gr", "enforced.power.limit",
}
_APP_FIELDS = {"pid", "process_name", "used_gpu_memory", "used_memory", "gpu_uuid", "gpu_name", "gpu_bus_id"}
_HEADER_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]]*\])?$")
_TS = r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
_TS_RE = re.compile(_TS)
_TS_LINE = re.compile(r"^" + _TS + r",")
_TIME_FORMAT = "%Y/%m/%d %H:%M:%S%.f"
_UNITS = ["%", "MiB", "W", "MHz", "C", "mJ", "J"]
_JOBID_TOKEN = re.compile(r"(?<![A-Za-z0-9])(\d+(?:_\d+)?)(?![A-Za-z0-9])")
_DATEISH = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T_ ]\d{2}[:-]?\d{2}[:-]?\d{2})?|\d{8}T\d{6}Z?|\d{2}:\d{2}:\d{2}")


def _base(field: str) -> str:
    return field.split(" [", 1)[0].strip()


def _header_kind(line: str) -> Optional[str]:
    """'gpu' / 'apps' when the line is a query header, else None."""
    fields = [f.strip() for f in line.split(",")]
    if not fields or not all(_HEADER_FIELD.match(f) for f in fields):
        return None
    names = {_base(f) for f in fields}
    if names & _APP_FIELDS and not names & (set(FIELD_MAP) | {"uuid", "index"}):
        return "apps"
    if names & _GPU_FIELDS:
        return "gpu"
    return None


def sniff(head: str, path: pathlib.Path) -> bool:
    for line in head.lstrip("\ufeff").splitlines():
        line = line.strip()
        if not line:
            continue
        # A header line, or a headerless (noheader) log starting with nvidia-smi's timestamp.
        return _header_kind(line) is not None or bool(_TS_LINE.match(line))
    return False


def job_id_from_name(path: pathlib.Path) -> tuple[Optional[str], Optional[str]]:
    """(job id, None) or (None, reason) from the file name."""
    stem = _DATEISH.sub("-", path.name)
    tokens = sorted(set(_JOBID_TOKEN.findall(stem)))
    if len(tokens) == 1:
        return tokens[0], None
    if not tokens:
        return None, "no job id: pass --job-id"
    return None, f"no job id: the file name has several numbers ({', '.join(tokens[:5])}): pass --job-id"


_HEADER_LINE = r"^[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]]*\])?(?:\s*,\s*[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]]*\])?)*$"
_LINES_SCHEMA = {"line_no": pl.Int64, "line": pl.String}


def _read_lines(path: pathlib.Path) -> tuple[pl.DataFrame, list[lengths.LongLine]]:
    """(line_no, line) for the non-blank lines, stripped, read in blocks with polars (no Python per
    line); and the lines longer than lengths.MAX_LINE_BYTES, skipped unread."""
    parts, long_lines = [], []
    with open(path, "rb") as fh:
        for item in lengths.bounded_lines(fh):
            if isinstance(item, lengths.LongLine):
                long_lines.append(item)
                continue
            lines = _block_lines(item)
            lines = lines.select(line_no="_line", line=pl.col("text").fill_null("").str.strip_chars()
                                 .str.strip_prefix("\ufeff").str.strip_chars())
            parts.append(lines.filter(pl.col("line") != ""))
    return (pl.concat(parts) if parts else pl.DataFrame(schema=_LINES_SCHEMA)), long_lines


def _block_lines(block: lengths.Lines) -> pl.DataFrame:
    """A block's lines as _line, text: one multi-threaded polars read, or split in Python where that
    read does not give one row per line."""
    n = block.data.count(b"\n") + (not block.data.endswith(b"\n"))
    try:
        text = pl.read_csv(io.BytesIO(block.data), has_header=False, separator="\x01", quote_char=None,
                           schema={"text": pl.String}, empty_string_is_null=False, raise_if_empty=False,
                           encoding="utf8-lossy", truncate_ragged_lines=True)["text"]
    except Exception:  # noqa: BLE001 - odd bytes polars refuses
        text = None
    if text is None or len(text) != n:
        return lines_frame(block.first, block.data.decode("utf-8", errors="replace").removesuffix("\n"))
    return pl.DataFrame({"_line": pl.int_range(block.first, block.first + n, eager=True, dtype=pl.Int64), "text": text})


def _segments(lines: pl.DataFrame, opts_columns: Optional[list[str]], notes: list[str]):
    """Split the file into (header fields | None, kind, DataFrame[line_no, line]) runs."""
    maybe = lines.filter(pl.col("line").str.contains(_HEADER_LINE))
    bounds: list[tuple[int, list[str], str]] = []       # (line_no, fields, kind) where a new header starts
    header_lines: list[int] = []
    current = [c.strip() for c in opts_columns] if opts_columns else None
    repeated = 0
    for no, line in maybe.iter_rows():
        kind = _header_kind(line)
        if kind is None:
            continue
        header_lines.append(no)
        fields = [f.strip() for f in line.split(",")]
        if fields == current:
            repeated += 1
            continue
        bounds.append((no, fields, kind))
        current = fields
    if repeated:
        notes.append(f"{repeated} repeated header line(s) skipped (restarted nvidia-smi -l or a logging loop)")
    data = lines.filter(~pl.col("line_no").is_in(header_lines)) if header_lines else lines
    starts = pl.Series([b[0] for b in bounds], dtype=pl.Int64)
    seg = data.with_columns((starts.search_sorted(data["line_no"], side="right").cast(pl.Int64) - 1).alias("_seg"))
    first = ([c.strip() for c in opts_columns] if opts_columns else None, "gpu")
    out = []
    for (idx,), part in seg.group_by(["_seg"], maintain_order=True):
        header, kind = first if idx < 0 else (bounds[idx][1], bounds[idx][2])
        out.append((header, kind, part.drop("_seg")))
    return out


_TS_ANYWHERE = re.compile(r"(?=" + _TS + r"\s*,)")
_TS_FIRST = r"^" + _TS + r"\s*(?:,|$)"


def _recover(line: str, n_fields: int) -> Optional[str]:
    """The complete record at the end of a line garbled by a concurrent writer, if there is one."""
    for m in reversed(list(_TS_ANYWHERE.finditer(line))):
        if m.start() == 0:
            break
        tail = line[m.start():]
        if len(tail.split(",")) == n_fields:
            return tail
    return None


def _reject_all(rows: pl.DataFrame, reason: str, rejects: list[Reject]) -> None:
    rejects.extend(Reject(no, reason, text[:1000]) for no, text in rows.select("line_no", "line").iter_rows())


def _segment_frame(header: list[str], df: pl.DataFrame, rejects: list[Reject], notes: list[str],
                   zone: str) -> Optional[pl.DataFrame]:
    names = [_base(h) for h in header]
    n = len(names)
    if "timestamp" not in names:
        _reject_all(df, "no timestamp column in this nvidia-smi query: add 'timestamp' to --query-gpu", rejects)
        return None
    ts_idx = names.index("timestamp")
    ok = pl.col("line").str.count_matches(",", literal=True) == n - 1
    if ts_idx == 0:
        ok = ok & pl.col("line").str.contains(_TS_FIRST)
    df = df.with_columns(ok.alias("_ok"))
    # Odd lines (wrong field count, garbled time): recover a complete record at their end (Python, rare).
    odd = df.filter(~pl.col("_ok"))
    if len(odd):
        fixed_no, fixed_line = [], []
        recovered = 0
        for no, text in odd.select("line_no", "line").iter_rows():
            tail = _recover(text, n) if ts_idx == 0 else None
            nf = len(text.split(","))
            if tail is not None:
                recovered += 1
            elif nf == n:
                tail = text  # right shape, odd time: the vectorised pass below says what is wrong
            else:
                rejects.append(Reject(no, f"{nf} fields, the header has {n} (garbled or truncated line)", text[:1000]))
                continue
            fixed_no.append(no)
            fixed_line.append(tail)
        if recovered:
            notes.append(f"{recovered} garbled line(s) (two writers on one file?): the complete record at their end was kept")
        df = pl.concat([df.filter(pl.col("_ok")).drop("_ok"),
                        pl.DataFrame({"line_no": fixed_no, "line": fixed_line}, schema={"line_no": pl.Int64, "line": pl.String})])
        df = df.sort("line_no")
    else:
        df = df.drop("_ok")
    if not len(df):
        return None
    cols = [f"f{i}" for i in range(n)]
    parts = df.select(
        "line_no", "line",
        pl.col("line").str.split_exact(",", n - 1).struct.rename_fields(cols).struct.unnest(),
    ).with_columns([pl.col(c).str.strip_chars() for c in cols])
    out: dict[str, pl.Expr] = {}
    checks: list[tuple[pl.Expr, pl.Expr]] = []

    def clean(c: str) -> pl.Expr:
        v = pl.col(c)
        # '[N/A]', '[Not Supported]', '[Unknown Error]', any bracketed word; bare N/A
        absent = v.str.starts_with("[") | v.is_in(["N/A", "n/a", "", "Not Supported"])
        return pl.when(absent).then(None).otherwise(v)

    ts_raw = pl.col(cols[ts_idx])
    local = ts_raw.str.to_datetime(_TIME_FORMAT, time_unit="us", strict=False)
    utc, twice = fall_back_utc(local, zone)   # the hour the clocks go back: by the order of the log
    out["time"] = utc
    checks.append((local.is_null(), pl.lit("timestamp not in nvidia-smi's 'YYYY/MM/DD HH:MM:SS.mmm' form: ") + ts_raw))
    checks.append((local.is_not_null() & utc.is_null(), pl.lit(f"local time does not exist in {zone} (DST gap): ") + ts_raw))
    for i, name in enumerate(names):
        target = FIELD_MAP.get(name)
        if target is None or target[0] in out:
            continue
        col, mult = target
        cleaned = clean(cols[i])
        # '99 %', '30994 MiB', '250.00 W' (or bare with nounits): the number is the first word;
        # a known unit, if any, must follow it
        word = cleaned.str.split_exact(" ", 1)
        unit_ok = word.struct.field("field_1").is_null() | word.struct.field("field_1").is_in(_UNITS)
        parsed = pl.when(unit_ok).then(word.struct.field("field_0").cast(pl.Float64, strict=False))
        number = pl.when(parsed.is_finite()).then(parsed)        # 'inf', 'nan' or 400 digits are no reading
        checks.append((cleaned.is_not_null() & number.is_null(), pl.lit(f"{name}: not a number: ") + pl.col(cols[i])))
        value = number * mult
        if col in _INT_COLUMNS:
            fits = value.abs() < 2.0 ** 63
            checks.append((number.is_not_null() & ~fits, pl.lit(f"{name}: out of range: ") + pl.col(cols[i])))
            value = pl.when(fits).then(value).round(0).cast(pl.Int64)
        out[col] = value
    checks.extend(limits.sample_reasons(out, gpu=True))   # negative, beyond a GPU's physical range
    if "uuid" in names:
        out["device"] = clean(cols[names.index("uuid")])
    if "hostname" in names:
        out["host"] = clean(cols[names.index("hostname")])
    reason = pl.lit(None, dtype=pl.String)
    for cond, msg in reversed(checks):
        reason = pl.when(cond).then(msg).otherwise(reason)
    frame = parts.select("line_no", "line", ts_raw.alias("_ts"), reason.alias("_reason"), twice.alias("_twice"),
                         *[e.alias(k) for k, e in out.items()])
    notes += fall_back_note(zone, frame.filter(pl.col("_twice") & pl.col("_reason").is_null())["line_no"].to_list(),
                            "read as the later reading once the log's times went back, else the earlier")
    frame = frame.drop("_twice")
    bad = frame.filter(pl.col("_reason").is_not_null())
    for no, why, text in bad.select("line_no", "_reason", "line").iter_rows():
        rejects.append(Reject(no, why, text[:1000]))
    frame = frame.filter(pl.col("_reason").is_null())
    if "gpu_index" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Int32).alias("gpu_index"))
        pos = (pl.int_range(pl.len()).over(pl.col("_ts").rle_id())).cast(pl.Int64)
    else:
        pos = pl.col("gpu_index")
    if "device" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("device"))
    frame = frame.with_columns(
        pl.coalesce(pl.col("device"), pl.lit("gpu") + pos.cast(pl.String)).alias("device"),
        pl.col("gpu_index").cast(pl.Int32),
    )
    # A row whose device could not be named (no uuid, index [N/A]): nothing to key it on.
    nodev = frame.filter(pl.col("device").is_null())
    for no, text in nodev.select("line_no", "line").iter_rows():
        rejects.append(Reject(no, "no uuid and no index value: cannot name the GPU", text[:1000]))
    return frame.filter(pl.col("device").is_not_null()).drop("line", "_ts", "_reason")


def _ends_with_newline(path: pathlib.Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return True
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


def _without_cut_last_line(path: pathlib.Path, segments: list, notes: list[str]) -> tuple[list, int]:
    """A last line with no newline and fewer fields than its header is a record cut short (nvidia-smi
    -l killed mid-write): dropped and counted, as the sidecar reader does, never rejected."""
    if not segments or _ends_with_newline(path):
        return segments, 0
    header, kind, rows = segments[-1]
    if header is None or not len(rows):
        return segments, 0
    no, text = rows.row(len(rows) - 1)
    if text.count(",") + 1 >= len(header):
        return segments, 0
    notes.append(f"last line has no newline and {text.count(',') + 1} of {len(header)} fields "
                 f"(cut short): dropped: {text[:80]!r}")
    return segments[:-1] + [(header, kind, rows.head(len(rows) - 1))], 1


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    zone = opts.timezone or local_zone_name()
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {zone!r} (want an IANA name like Europe/Amsterdam)") from None
    lines, long_lines = _read_lines(path)
    segments = _segments(lines, opts.columns, result.notes)
    result.rows_in = sum(len(rows) for _, _, rows in segments)
    reject_long_lines(result, long_lines)
    if not long_lines or long_lines[-1].ended:   # else the last line is the long one
        segments, result.dropped = _without_cut_last_line(path, segments, result.notes)
    job_id, why = (opts.job_id, None) if opts.job_id else job_id_from_name(path)
    frames = []
    for header, kind, rows in segments:
        if job_id is None:
            _reject_all(rows, why or "no job id: pass --job-id", result.rejects)
        elif header is None:
            _reject_all(rows, "no header line and no --columns: cannot tell which column is which", result.rejects)
        elif kind == "apps":
            _reject_all(rows, "nvidia-smi --query-compute-apps row (per-process GPU memory): not a GPU sample, not stored", result.rejects)
        else:
            f = _segment_frame(header, rows, result.rejects, result.notes, zone)
            if f is not None and len(f):
                frames.append(f)
    result.rejects.sort(key=lambda r: r.line_no or 0)
    if frames:
        # _line kept: the loader names it when it rejects a row of another user's job
        samples = pl.concat(frames, how="diagonal_relaxed").sort("line_no").rename({"line_no": "_line"})
        if "host" not in samples.columns:
            samples = samples.with_columns(pl.lit(None, dtype=pl.String).alias("host"))
        result.samples = samples.with_columns(
            pl.lit(opts.cluster or "default").alias("cluster"),
            pl.lit(str(job_id)).alias("job_id_raw"),
            pl.col("host").fill_null("unknown"),
            pl.lit(SOURCE).alias("source"),
        )
    if zone and not opts.timezone:
        result.notes.append(f"nvidia-smi times read as local time of this machine ({zone}); pass --timezone if the log came from elsewhere")
    return result
