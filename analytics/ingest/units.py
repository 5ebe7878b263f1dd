"""Scalar parsers for the value formats schedulers print: memory, durations, TRES strings, states.

Every parser returns ``None`` for "no value" and raises ``ValueError`` with a short reason for a
value that is malformed, so callers can reject the row and say why. Slurm's unit letters are
powers of 1024 (see ../shared/docs/sacct.md).
"""
from __future__ import annotations

import math
import re

from jobsight.analytics.ingest.limits import MAX_BYTES, OutOfLimits

# Words sacct prints where a value is absent or infinite; stored as NULL with the word kept.
NULL_WORDS = frozenset({"", "unlimited", "partition_limit", "unknown", "none", "n/a", "invalid"})

# Slurm's NO_VAL64 (2^64 - 2) as a ReqMem in MiB: sacct prints it (as 18446744073709551616.00M) for a
# job whose request slurmdbd has not recorded, e.g. just after a short job ended. That value (2^64 MiB
# as a float, in any unit) is "not recorded", as NO_VAL is in sacct's JSON; other huge sizes are
# impossible numbers, rejected.
NO_VAL_MIB = (2.0 ** 64 * (1 - 1e-9), 2.0 ** 64 * (1 + 1e-9))      # the range that is it


def is_no_val_mib(mib: float) -> bool:
    return NO_VAL_MIB[0] <= mib <= NO_VAL_MIB[1]


_MEM_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)(i?B?)\s*([nc]?)\s*$", re.IGNORECASE)
_MEM_POW = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def to_bytes(value: float, text: str) -> int:
    """A size in bytes as an int; one too large for a float (400 digits) is refused with the limit."""
    if not math.isfinite(value):
        raise OutOfLimits(f"{text.strip()[:40]!r} is above the limit of {MAX_BYTES} bytes (1 EiB)")
    return int(round(value))


def is_null_word(text: str | None) -> bool:
    return text is None or text.strip().lower() in NULL_WORDS


def parse_mem(text: str | None, default_unit: str = "") -> int | None:
    """'438.50M' -> bytes. A bare number is in ``default_unit`` ('' = bytes, 'K' for MaxRSS-style).

    A per-core / per-node suffix ('4000Mc', '16Gn') is refused here: use :func:`parse_reqmem`.
    """
    if is_null_word(text):
        return None
    m = _MEM_RE.match(text)
    if not m:
        raise ValueError(f"not a memory size: {text!r}")
    num, unit, _b, per = m.groups()
    if per:
        raise ValueError(f"per-{'core' if per.lower() == 'c' else 'node'} memory where a total was expected: {text!r}")
    unit = (unit or default_unit).upper()
    return to_bytes(float(num) * 1024 ** _MEM_POW[unit], text)


def parse_reqmem(text: str | None, ncpus: int | None, nnodes: int | None) -> int | None:
    """ReqMem -> job total bytes. Legacy '4000Mc' is per core (x ncpus), '16Gn' per node (x nnodes).

    A bare number is MiB (Slurm's memory base unit). '0n'/'0c' means "all of the node's memory":
    NULL, since the total is not known from accounting alone; so is NO_VAL (see NO_VAL_MIB).
    """
    if is_null_word(text):
        return None
    m = _MEM_RE.match(text)
    if not m:
        raise ValueError(f"not a ReqMem value: {text!r}")
    num, unit, _b, per = m.groups()
    value = float(num) * 1024 ** _MEM_POW[(unit or "M").upper()]
    if value == 0 or is_no_val_mib(value / 1024 ** 2):     # all of the node's memory; not recorded
        return None
    per = per.lower()
    if per == "c":
        if not ncpus:
            raise ValueError(f"per-core ReqMem {text!r} without a CPU count")
        value *= ncpus
    elif per == "n":
        value *= nnodes or 1
    return to_bytes(value, text)


def parse_duration(text: str | None) -> float | None:
    """'D-HH:MM:SS', 'HH:MM:SS', 'MM:SS', 'MM:SS.mmm' (TotalCPU), or plain seconds -> seconds."""
    if is_null_word(text):
        return None
    t = text.strip()
    days, dash, clock = t.rpartition("-") if "-" in t else ("", "", t)
    try:
        parts = [float(p) for p in clock.split(":")]
        ndays = int(days) if dash else 0
    except ValueError:
        raise ValueError(f"not a duration: {text!r}") from None
    if len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        # 'D-HH:MM' is Slurm's days form; without days two fields are MM:SS (TotalCPU style).
        h, m, s = (parts[0], parts[1], 0.0) if dash else (0.0, parts[0], parts[1])
    elif len(parts) == 1 and not dash and 0 <= parts[0] < math.inf:
        return parts[0]  # plain seconds (ElapsedRaw-style)
    else:
        raise ValueError(f"not a duration: {text!r}")
    if min(h, m, s, ndays) < 0 or m >= 60 or s >= 60 or (dash and h >= 24) or not math.isfinite(h):
        raise ValueError(f"not a duration (field out of range): {text!r}")
    return ndays * 86400 + h * 3600 + m * 60 + s


def parse_int(text: str | None) -> int | None:
    if is_null_word(text):
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"not an integer: {text!r}") from None


def parse_tres(text: str | None) -> dict[str, str]:
    """'billing=67,cpu=2,gres/gpu:a100=1,gres/gpu=1,mem=4G' -> {'billing': '67', ...} (raw values)."""
    out: dict[str, str] = {}
    if is_null_word(text):
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"TRES item without '=': {part!r}")
        out[key.strip()] = value.strip()
    return out


def tres_gpus(tres: dict[str, str]) -> tuple[int | None, str | None]:
    """GPU count and type from parsed TRES: 'gres/gpu=2' and/or 'gres/gpu:a100=2'."""
    count = None
    gtype = None
    typed_total = 0
    def n(key: str, value: str) -> int:
        v = float(value)
        if not 0 <= v < math.inf:
            raise ValueError(f"{key}={value} is not a GPU count")
        return int(v)
    for key, value in tres.items():
        if key == "gres/gpu":
            count = n(key, value)
        elif key.startswith("gres/gpu:"):
            typed_total += n(key, value)
            gtype = key.split(":", 1)[1] if gtype is None else gtype
    if count is None and typed_total:
        count = typed_total
    return count, gtype


_GRES_IDX = re.compile(r"\([^)]*\)$")   # 'gpu:2(IDX:0-1)': the device indexes after the count


def gres_gpus(text: str | None) -> tuple[int | None, str | None]:
    """GPU count and type from a GRES string, as AllocGRES / ReqGRES print it before Slurm 19.05:
    'gpu:2', 'gpu:tesla:2', 'gpu:2(IDX:0-1)', 'gpu' (one), 'gpu:k80' (one k80); other resources
    ('mic:1') are skipped, several gpu items summed. (None, None) when no item names gpu."""
    if is_null_word(text) or text.strip() == "(null)":
        return None, None
    count, gtype = None, None
    for item in text.split(","):
        parts = _GRES_IDX.sub("", item.strip()).split(":")
        if parts[0].strip() != "gpu":
            continue
        parts = [p.strip() for p in parts[1:]]
        n = 1
        if parts and parts[-1].isdigit():
            n = int(parts.pop())
        if len(parts) > 1 or (parts and not parts[0]):
            raise ValueError(f"not a GRES gpu item: {item!r}")
        count = (count or 0) + n
        gtype = gtype or (parts[0] if parts else None)
    return count, gtype


_STATE_RE = re.compile(r"^\s*([A-Za-z_]+)\+?(?:\s+by\s+(\d+))?\s*$", re.IGNORECASE)


def parse_state(text: str | None) -> tuple[str | None, int | None]:
    """'CANCELLED by 1234' -> ('CANCELLED', 1234); fixed-width 'CANCELLED+' -> 'CANCELLED'."""
    if text is None or not text.strip():
        return None, None
    m = _STATE_RE.match(text)
    if not m:
        raise ValueError(f"not a job state: {text!r}")
    return m.group(1).upper(), (int(m.group(2)) if m.group(2) else None)
