"""What a parser hands the loader: normalised rows per table, plus rejects and drops.

Column names are those of the tables in sql/schema/ (job, step, sample, sidecar_run); a parser
fills the columns it knows and the loader sets the rest to NULL. Every input row of a file must be
accounted for exactly once: as a row of one of the frames, as a Reject, or in ``dropped``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import polars as pl


@dataclass(frozen=True)
class ParseOptions:
    timezone: Optional[str] = None      # IANA zone of naive timestamps (sacct text, nvidia-smi); None = this machine's
    cluster: Optional[str] = None       # used where the input names no cluster
    columns: Optional[list[str]] = None # sacct text without a header: its --format columns
    job_id: Optional[str] = None        # nvidia-smi logs: the job the samples belong to


@dataclass(frozen=True)
class Reject:
    line_no: Optional[int]              # 1-based line number in the file (JSON: 1-based job index)
    reason: str
    raw: Optional[str] = None


@dataclass
class ParseResult:
    format: str                         # sacct | sacct-json | seff | sidecar | nvidia-smi
    rows_in: int = 0                    # input rows seen (data lines / JSON jobs+steps)
    jobs: Optional[pl.DataFrame] = None
    steps: Optional[pl.DataFrame] = None
    samples: Optional[pl.DataFrame] = None
    sidecar_runs: Optional[pl.DataFrame] = None
    rejects: list[Reject] = field(default_factory=list)
    dropped: int = 0                    # e.g. a truncated last line of a sidecar CSV
    notes: list[str] = field(default_factory=list)  # one-line remarks shown to the user
    # fields made NULL because of a marker or an impossible value, one entry a file and field (and
    # kind), said in the notes too: {"file", "field", "kind": "marker" | "impossible", "rows"}
    nulled: list[dict] = field(default_factory=list)

    def frame_rows(self) -> int:
        return sum(len(f) for f in (self.jobs, self.steps, self.samples) if f is not None)


@dataclass
class BulkRead:
    """A file that DuckDB reads itself, in one statement (both cores, no rows through Python): `select`
    gives its sample rows with the columns of table sample; `result` carries the rest of the file
    (sidecar_run rows, notes; its rows_in is set by the loader); `owner` is the first row's (cluster,
    job_id_raw, host). DuckDB's reader is more lenient than the line rules (it skips blank lines and
    takes one trailing delimiter), so the loader keeps the rows only if they are exactly the file's
    lines, each of `fields` fields, and otherwise reads the file the ordinary way."""
    select: str
    owner: tuple[str, str, str]
    result: ParseResult
    fields: int
    delimiter: bytes = b","
    header_lines: int = 1


def field_value(fields: dict[str, str], key: str, convert: Callable[[str], Any], what: str) -> Any:
    """A record field through `convert`, None when absent or empty; a value `convert` refuses raises
    ValueError naming the key, the value and `what` it should be (the parsers' reject reason)."""
    v = fields.get(key)
    if v is None or v == "":
        return None
    try:
        return convert(v)
    except ValueError:
        raise ValueError(f"{key}={v!r} is not {what}") from None
