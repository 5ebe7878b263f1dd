"""Slurm's "not set" and "unlimited" markers, and which fields a Slurm row cannot do without
(docs/ingest.md#fields-a-row-needs).

Slurm writes "no value" as the top of an integer's width (NO_VAL* = 2^w - 2, INFINITE* = 2^w - 1,
read signed as -2 and -1) and sums per-node or per-task values without checking for them: an
unset energy reads -4, -8, -16 summed over 2, 4, 8 nodes, and an average that overflowed to
2^63 - 2. Such a value means "not measured", never "impossible", and says nothing about the rest
of the row. A value beyond the limits (limits.py) in a field that does not identify or place the
row is not a reason to lose the row either: the field is stored NULL with the reason, and the
parser's note counts the rows. Only the fields in PLACING reject a row.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Optional

from jobsight.analytics.ingest import limits

WIDTHS = (8, 16, 32, 64)
_WRAPPED = 1 << 16      # an unsigned sum of markers over up to 32k nodes or tasks ends this close to 2^w
_OVERFLOW = 1 << 16     # ... and an average that overflowed this close below 2^63
# Fields that identify or place the row in time: a bad value rejects the row.
PLACING = frozenset({"submit_time", "eligible_time", "start_time", "end_time", "uid", "het_offset"})
# Fields whose INFINITE means "unlimited".
LIMITS = frozenset({"timelimit_s"})
# A TRES value the column-wise reader leaves to the per-line one, which tells a marker from a count:
# 19 digits or more (64-bit markers, their wrapped sums, an overflowed average) or a 32-bit one.
TRES_MARKER_SUSPECT = r"=\s*(?:[0-9]{19,}|429[0-9]{7})\s*(?:,|$)"


def marker(value, bits: int = 32) -> Optional[str]:
    """What a Slurm number means when it is a marker or a sum of markers ('NO_VAL', 'INFINITE',
    'NO_VAL summed', ...); None for an ordinary number. bits: the field's width (the counts jobsight
    stores are 32 or 64 bits wide), so that a wider field's 254 or 65534 stays a count."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            return None
        value = int(value)
    if value == -2:
        return "NO_VAL"
    if value == -1:
        return "INFINITE"
    if value < 0:
        return "NO_VAL summed" if value % 2 == 0 else "INFINITE summed"
    for w in WIDTHS:
        if w < bits:
            continue
        top = 1 << w
        if value == top - 2:
            return "NO_VAL"
        if value == top - 1:
            return "INFINITE"
        if w >= 32 and top - _WRAPPED <= value < top:
            return "NO_VAL summed" if value % 2 == 0 else "INFINITE summed"
    if (1 << 63) - _OVERFLOW <= value < (1 << 63):
        return "a marker averaged (overflowed)"
    return None


def reason(col: str, what: str) -> str:
    """The null_reasons text of a marker in col."""
    if what == "INFINITE" and col in LIMITS:
        return "UNLIMITED"
    return f"Slurm {what}: not set"


def settle(row: dict, nulls: dict[str, str], tally: Optional[Counter] = None) -> None:
    """Markers and values beyond the limits in row's fields other than PLACING -> NULL with the
    reason in nulls (and counted in tally, by field and kind); then raise, as limits.check does,
    for a PLACING field beyond its limits."""
    for col, lim in limits.RECORD.items():
        v = row.get(col)
        if v is None or isinstance(v, bool) or col in PLACING or not isinstance(v, (int, float)):
            continue
        what = marker(v)
        if what is not None:
            row[col] = None
            nulls[col] = reason(col, what)
            if tally is not None:
                tally[(col, "marker")] += 1
            continue
        try:
            limits.check({col: v}, {col: lim})
        except limits.OutOfLimits as exc:
            row[col] = None
            nulls[col] = f"impossible: {exc}"
            if tally is not None:
                tally[(col, "impossible")] += 1
    limits.check(row)


def tres_item(key: str, value: str) -> Optional[str]:
    """Why a TRES item's value ('energy=-8', 'mem=4G', 'cpu=00:01:00') is unknown: 'marker' for a
    Slurm marker or a sum of markers, 'impossible' for inf or nan or another negative; None for a
    value to keep."""
    v = value.strip()
    try:
        number = int(v)
    except ValueError:
        number = None
    if number is not None:
        return "marker" if marker(number, 64) is not None else None
    try:
        finite = math.isfinite(float(v))     # 1e999, inf, nan
    except ValueError:
        finite = True                        # not a number: a size ('4G') or a time ('00:01:00')
    return "impossible" if v.startswith("-") or not finite else None


def tally_nulled(file: str, tally: Counter) -> list[dict]:
    """tally_notes' facts, one entry a note: {"file", "field", "kind", "rows"} (ParseResult.nulled)."""
    return [{"file": file, "field": field, "kind": kind, "rows": n} for (field, kind), n in sorted(tally.items())]


def report_tally(result, file: str, tally: Counter) -> None:
    """A parser's tally in its result: a note per field, and the same as ParseResult.nulled entries."""
    result.notes += tally_notes(file, tally)
    result.nulled += tally_nulled(file, tally)


def tally_notes(file: str, tally: Counter) -> list[str]:
    """One note per field: how many rows of file had a marker or an impossible value there."""
    out = []
    for (field, kind), n in sorted(tally.items()):
        if kind == "marker":
            out.append(f"{file}: {field}: Slurm's 'not set' marker (or a sum of it) in {n} row(s), "
                       "stored as unknown (NULL)")
        else:
            out.append(f"{file}: {field}: an impossible value in {n} row(s), stored as NULL with the reason "
                       "(the rows are kept)")
    return out
