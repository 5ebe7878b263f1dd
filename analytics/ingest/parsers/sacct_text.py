"""`sacct --parsable2` (and `--parsable`, `--delimiter=X`) text output -> job and step rows.

How a file is read:
- Lines are read in blocks and split on the delimiter with polars. A header line (field names, one
  of them JobID or JobIDRaw) sets the column set for the lines after it; a file may hold several
  sections with different headers. Without a header the columns come from ``--columns``; failing
  that, XDMoD's 26-column `--allocations --duplicates` layout and the 25/26-column layout of
  aws-samples/hpc-cost-simulator are recognised by field count and the first field.
- Blocks are cut into sections (lines + column set) in order, as the reader goes; their conversion
  runs in PIPELINE threads, a block per thread, and is collected in block order.
- Lines whose field count matches are converted column-wise (the fast path). Lines that do not
  match, or whose values the vectorised conversion cannot read, go one by one through
  :func:`parse_line`, which either recovers them (the delimiter inside free text: a job name, a
  WorkDir; see sacct_lines._placed) or rejects
  them with the reason. Both paths give the same values for the same line.
- '#' lines are comments: counted in ``dropped`` and named in a note. Blank lines and headers are
  not rows.
Timestamps without an offset are local time of the zone given (--timezone, default this
machine's) and are stored in UTC; all-digit timestamps are Unix epochs.

This module is the parser the loader finds by name; the work is done in sacct_format (columns,
output schema, detection, header lines), sacct_lines (the per-line reader), sacct_columns (the
column-wise conversion) and sacct_pipeline (blocks, sections, threads).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import polars as pl

from jobsight.analytics.ingest.parsers.sacct_format import FORMAT, SOURCE, resolve_zone, sniff
from jobsight.analytics.ingest.parsers.sacct_lines import parse_line
from jobsight.analytics.ingest.parsers.sacct_pipeline import parse_file
from jobsight.analytics.ingest.records import ParseOptions, ParseResult

__all__ = ["FORMAT", "ON_PIECE", "PIPELINE", "SOURCE", "parse", "parse_line", "resolve_zone", "sniff"]

ON_PIECE = True  # parse() takes on_piece: the loader inserts each block while the next is parsed
# the block size and the blocks converted at once, handed to the pipeline at each parse()
_BLOCK_BYTES = 16 << 20
PIPELINE = 2   # blocks converted at once (threads); more only holds more blocks in memory on 2 cores


def parse(path: Path, opts: ParseOptions,
          on_piece: Optional[Callable[[pl.DataFrame, pl.DataFrame], None]] = None, *,
          fast_path: bool = True) -> ParseResult:
    """The whole file's rows. on_piece(jobs, steps), if given, is also handed each block's rows as
    soon as they are converted (the loader inserts them while the next block is parsed); the pieces
    together are exactly result.jobs / result.steps, in another order. fast_path=False sends every
    line through parse_line instead of the column-wise conversion (the rows are the same)."""
    return parse_file(path, opts, on_piece, fast_path=fast_path, block_bytes=_BLOCK_BYTES, threads=PIPELINE)
