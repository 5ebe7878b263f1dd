"""The block pipeline: a file read in blocks, each cut into sections (lines + column set) in order
and converted in worker threads, the rows collected in block order; then the lines the column-wise
reader could not take, one by one."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import polars as pl

from jobsight.analytics.ingest import slurm_values, timezones
from jobsight.analytics.ingest.parsers.line_blocks import in_file_order, iter_blocks, reject_long_lines, set_aside
from jobsight.analytics.ingest.parsers.sacct_columns import fast_frame, split_fields
from jobsight.analytics.ingest.parsers.sacct_format import (
    AWS_COLUMNS,
    FORMAT,
    HEADER_RE,
    JOB_COLS,
    JOBID_RE,
    OUT_SCHEMA,
    STEP_COLS,
    XDMOD_COLUMNS,
    Ctx,
    delimiter,
    guess_columns,
    header_columns,
    resolve_zone,
)
from jobsight.analytics.ingest.parsers.sacct_lines import parse_line
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject


@dataclass
class _Layout:
    cols: Optional[list[str]]   # None: unknown (headerless without --columns)
    origin: str                 # 'header line N' | '--columns' | 'guess'


def _sections(first: int, text: str, layout: _Layout, ctx: Ctx) -> tuple[list, int, _Layout]:
    """One block's lines -> ([(data lines, layout)], '#' comment count, the layout after the block)."""
    lines = pl.DataFrame({"text": pl.Series([text]).str.split("\n").explode()}).with_row_index("_line", offset=first)
    lines = lines.with_columns(pl.col("_line").cast(pl.Int64),
                               *([pl.col("text").str.strip_suffix("\r")] if "\r" in text else []))
    lines = lines.filter(pl.col("text").str.strip_chars() != "")   # blank lines are not rows
    ncom = 0
    if "#" in text:
        is_comment = pl.col("text").str.starts_with("#")
        ncom = int(lines.select(is_comment.sum()).item())
        if ncom:
            lines = lines.filter(~is_comment)
    # header lines: the anchored pattern fails at once on data lines; only its few hits are lowercased
    headers = lines.filter(pl.col("text").str.contains(HEADER_RE.pattern))
    headers = headers.filter(pl.col("text").str.to_lowercase().str.contains(r"(?:^|\||☃|\^)jobid(?:raw)?(?:$|\||☃|\^)"))
    # sections between header lines, each with its own column set
    bounds = headers["_line"].to_list()
    htexts = headers["text"].to_list()
    data = lines.filter(~pl.col("_line").is_in(headers["_line"].implode())) if headers.height else lines
    out = []
    for i, start in enumerate([None] + bounds):
        if start is not None:
            layout = _Layout(header_columns(htexts[i - 1], ctx.delim), f"header line {start}")
        end = bounds[i] if i < len(bounds) else None
        sec = data
        if start is not None:
            sec = sec.filter(pl.col("_line") > start)
        if end is not None:
            sec = sec.filter(pl.col("_line") < end)
        if sec.height:
            out.append((sec, layout))
    return out, ncom, layout


@dataclass
class _Converted:
    pieces: list = field(default_factory=list)    # [(job rows, step rows)]
    slow: list = field(default_factory=list)      # lines for the per-line path, as in parse_file()
    guessed: dict = field(default_factory=dict)   # layout name -> (lines, columns)


def _convert_block(sections: list, ctx: Ctx, fast_path: bool) -> _Converted:
    """A block's sections -> their rows split into jobs and steps (run in a pipeline thread)."""
    out, typed, guessed, guessed_cols = _Converted(), [], {}, {}
    for sec, layout in sections:
        _section(sec, layout, ctx, typed, out.slow, guessed, guessed_cols, fast_path)
    out.pieces = [_split_kinds(rows) for rows in typed]
    out.guessed = {name: (n, guessed_cols[name]) for name, n in guessed.items()}
    return out


def parse_file(path: Path, opts: ParseOptions, on_piece: Optional[Callable[[pl.DataFrame, pl.DataFrame], None]], *,
               fast_path: bool, block_bytes: int, threads: int) -> ParseResult:
    """The whole file's rows, read in blocks of block_bytes converted `threads` at once (see
    sacct_text.parse for on_piece and fast_path)."""
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(65536).decode("utf-8", errors="replace")
    ctx = Ctx(tz=resolve_zone(opts.timezone), cluster=opts.cluster, delim=delimiter(head))
    result = ParseResult(format=FORMAT)
    layout = (_Layout(header_columns(ctx.delim.join(opts.columns), ctx.delim), "--columns") if opts.columns
              else _Layout(None, "guess"))
    frames = _Frames(on_piece)
    slow: list[tuple[int, str, Optional[list[str]]]] = []  # (line_no, text, cols or None=guess)
    comments = 0
    long_lines: list = []   # lines over lengths.MAX_LINE_BYTES, skipped unread
    guessed: dict[str, int] = {}
    guessed_cols: dict[str, list[str]] = {}
    # Blocks are split into sections (lines + column layout) here, in order, as a header line may
    # change the layout for the blocks after it; the sections' conversion, the costly part, runs in
    # `threads` threads (polars releases the GIL) and is collected in block order, so the results and
    # the on_piece calls (one at a time, from this thread) are as if the blocks were done in turn.
    def calls():
        nonlocal layout, comments
        for first, text in set_aside(iter_blocks(path, block_bytes, skip_bom=True), long_lines):
            sections, ncom, layout = _sections(first, text, layout, ctx)
            comments += ncom
            result.rows_in += sum(sec.height for sec, _ in sections)
            yield partial(_convert_block, sections, ctx, fast_path)

    for out in in_file_order(calls(), threads, "jobsight-sacct"):
        for job_rows, step_rows in out.pieces:
            frames.add(job_rows, step_rows)
        slow.extend(out.slow)
        for name, (n, cols) in out.guessed.items():
            guessed[name] = guessed.get(name, 0) + n
            guessed_cols[name] = cols
    # the odd lines, one by one
    recs = []
    for line_no, text, cols in slow:
        fields = text.split(ctx.delim)
        try:
            if cols is None:
                try:
                    cols = guess_columns(fields)
                except ValueError:
                    if len(guessed_cols) != 1:
                        raise
                    cols = next(iter(guessed_cols.values()))  # the layout the rest of the file has
            recs.append(parse_line(cols, fields, line_no, ctx))
        except ValueError as exc:
            result.rejects.append(Reject(line_no, str(exc), text))
        except Exception as exc:  # a bug here must not lose the line silently
            result.rejects.append(Reject(line_no, f"internal error reading this line: {exc!r}", text))
    if recs:
        frames.append(pl.DataFrame(recs, schema=OUT_SCHEMA, orient="row"))
    result.jobs, result.steps = frames.finish()
    reject_long_lines(result, long_lines)
    result.rejects.sort(key=lambda r: r.line_no or 0)
    result.dropped = comments
    result.rows_in += comments
    if comments:
        result.notes.append(f"{comments} '#' comment line(s) skipped (counted as dropped)")
    for name, n in guessed.items():
        result.notes.append(f"no header: {n} line(s) read as the {name} layout")
    slurm_values.report_tally(result, path.name, ctx.tally)
    result.notes += timezones.fall_back_note(ctx.tz, sorted(ctx.folds), "read as the readings that keep End "
                                             "not before Start and agree with Elapsed")
    if any("--columns" in r.reason for r in result.rejects):
        result.notes.append("some lines have no header to name their columns: pass --columns")
    return result


def _split_kinds(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parsed rows -> (job rows, step rows), each with only its own columns (+ _line): a 3M-line
    dump would otherwise carry every column for every row until the end."""
    return (rows.filter(pl.col("_kind") == "job").rename({"name": "job_name"}).select(["_line"] + JOB_COLS),
            rows.filter(pl.col("_kind") == "step").rename({"name": "step_name"}).select(["_line"] + STEP_COLS))


def _filled(rows: pl.DataFrame) -> pl.DataFrame:
    """rows without the columns that are null in every row (those the column set does not have):
    the insert writes NULL for a missing column, rather than read an all-null one row by row."""
    return rows.select([c for c in rows.columns if rows[c].null_count() < rows.height])


class _Frames:
    """Parsed job and step rows, handed to on_piece as they come."""

    def __init__(self, on_piece=None):
        self.jobs: list[pl.DataFrame] = []
        self.steps: list[pl.DataFrame] = []
        self.on_piece = on_piece

    def append(self, rows: pl.DataFrame) -> None:
        self.add(*_split_kinds(rows))

    def add(self, jobs: pl.DataFrame, steps: pl.DataFrame) -> None:
        self.jobs.append(jobs)
        self.steps.append(steps)
        if self.on_piece is not None:
            self.on_piece(_filled(jobs.drop("_line")), _filled(steps.drop("_line")))

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        out = []
        for parts, cols in ((self.jobs, JOB_COLS), (self.steps, STEP_COLS)):
            if parts:
                df = pl.concat(parts, how="vertical", rechunk=False)
                if not df["_line"].is_sorted():   # blocks come in order: only per-line rows are out of place
                    df = df.sort("_line")
                out.append(df.drop("_line"))
            else:
                out.append(pl.DataFrame(schema=OUT_SCHEMA)
                           .rename({"name": "job_name" if cols is JOB_COLS else "step_name"}).select(cols))
        return out[0], out[1]


def _section(sec: pl.DataFrame, layout: _Layout, ctx: Ctx, frames: list, slow: list, guessed: dict,
             guessed_cols: dict, fast_path: bool) -> None:
    """A section's lines -> typed rows appended to frames, and the lines for the per-line path
    appended to slow (all of them without fast_path). Without a column set, the headerless layouts
    are told apart by field count and first fields; guessed counts the lines read as each."""
    if layout.cols is not None:
        groups = [(layout.cols, layout.origin, sec)]
    else:
        fields = sec.with_columns(_n=pl.col("text").str.count_matches(ctx.delim, literal=True) + 1,
                                  _f=pl.col("text").str.split(ctx.delim))
        first = pl.col("_f").list.first().str.strip_chars()
        second = pl.col("_f").list.get(1, null_on_oob=True).str.strip_chars()
        trail = (pl.col("_f").list.last() == "").cast(pl.Int32)
        n_eff = pl.col("_n") - trail
        x = fields.filter((n_eff == 26) & first.str.contains(r"^\d"))
        a = fields.filter(n_eff.is_in([25, 26]) & first.str.contains(r"^[A-Za-z]") &
                          second.str.contains(JOBID_RE.pattern).fill_null(False))
        a25 = a.filter(n_eff == 25)
        a26 = a.filter(n_eff == 26)
        taken = pl.concat([x["_line"], a["_line"]])
        rest = fields.filter(~pl.col("_line").is_in(taken.implode()))
        for row in rest.select("_line", "text").iter_rows():
            slow.append((row[0], row[1], None))
        groups = [(XDMOD_COLUMNS, "XDMoD 26-column", x), (AWS_COLUMNS, "aws-samples 25-column", a25),
                  (AWS_COLUMNS + ["partition"], "aws-samples 26-column", a26)]
        for cols, name, g in groups:
            if g.height:
                guessed[name] = guessed.get(name, 0) + g.height
                guessed_cols[name] = cols
    for cols, _origin, g in groups:
        if g.height == 0:
            continue
        strs, odd = split_fields(g, cols, ctx.delim)
        for row in odd.iter_rows():
            slow.append((row[0], row[1], cols))
        if strs.height == 0:
            continue
        if not fast_path or not set(cols) & {"jobid", "jobidraw"}:
            for row in strs.select("_line", "text").iter_rows():
                slow.append((row[0], row[1], cols))
            continue
        typed = fast_frame(strs.drop("text"), cols, ctx)
        badlines = typed.select(pl.col("_line").filter(pl.col("_bad"))).to_series()
        if badlines.len():
            for row in strs.filter(pl.col("_line").is_in(badlines.implode())).select("_line", "text").iter_rows():
                slow.append((row[0], row[1], cols))
            typed = typed.filter(~pl.col("_bad"))
        frames.append(typed)
