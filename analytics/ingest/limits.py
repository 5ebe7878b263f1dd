"""The physical limits of the numbers jobsight stores, in one place (docs/ingest.md#impossible-numbers).

A value outside them cannot be a measurement or an accounting record of a real job: a non-finite
number, a negative count, size, duration or reading, or more than any machine has. The parsers
reject such a row with the reason instead of storing it; every check here comes in the three forms
the readers need: per record (check, for the line-by-line parsers), as polars expressions
(sample_reasons, out_of_range, for the column-wise readers) and as SQL (sample_sql_ok, for the
sidecar CSV that DuckDB reads itself). The bounds are generous: ten times the largest machine built.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

import polars as pl

MAX_CPUS = 100_000_000          # cores (or tasks) of one job; the largest machines have ~10M
MAX_NODES = 1_000_000           # nodes of one job; the largest machines have ~160k
MAX_GPUS = 10_000_000           # GPUs of one job; the largest clusters have ~200k
MAX_BYTES = 2 ** 60             # 1 EiB of memory; the largest machines have ~10 PiB in all
MAX_SECONDS = 3_155_760_000     # 100 years: elapsed time, time limit
MAX_CPU_SECONDS = MAX_CPUS * MAX_SECONDS
MAX_BILLING = 1e12              # Slurm billing units of one job: TRES counts x weights
MAX_UID = 2 ** 32 - 2           # uid_t; 2^32 - 1 is (uid_t) -1, "no user"
MAX_INT32 = 2 ** 31 - 1
MAX_HOST_CPUS = 8192            # logical CPUs of one host (Linux's largest NR_CPUS)
MAX_POWER_W = 10_000            # one GPU; the largest draw ~1.2 kW
MAX_CLOCK_MHZ = 10_000
EARLIEST = datetime(1970, 1, 1)   # Unix time 0: accounting holds no earlier job
LATEST = datetime(2200, 1, 1)     # the dashboard's range ends with 2199
# Clocks of nodes and controllers may run a little ahead of this machine's; a time later than now
# plus this is no record of a job yet (a stored End in 2199 would start every incremental
# --from-sacct window there, reading nothing)
FUTURE_SKEW = timedelta(days=1)


class OutOfLimits(ValueError):
    """A value beyond its limit: the row is rejected, never stored with the value NULL."""


@dataclass(frozen=True)
class Limit:
    lo: float | datetime
    hi: float | datetime
    what: str = ""               # why hi is the limit, for the reason
    until_now: bool = False      # a time: hi is also now + FUTURE_SKEW, whichever is earlier


def latest_time() -> datetime:
    """The latest time a record may hold (UTC, naive as stored): now plus FUTURE_SKEW."""
    return min(datetime.now(timezone.utc).replace(tzinfo=None) + FUTURE_SKEW, LATEST)


def _top(lim: Limit):
    return min(lim.hi, latest_time()) if lim.until_now else lim.hi


def _future(top: datetime) -> str:
    return f"is in the future (after now + {FUTURE_SKEW.days} day, {top:%Y-%m-%d %H:%M:%S} UTC)"


_COUNT = Limit(0, MAX_CPUS, "cores")
_MEM = Limit(0, MAX_BYTES, "bytes (1 EiB)")
_TIME = Limit(EARLIEST, LATEST, until_now=True)
# job and step columns (the same name means the same thing in both tables)
RECORD: dict[str, Limit] = {
    "ncpus": _COUNT, "ntasks": Limit(0, MAX_CPUS, "tasks"), "nnodes": Limit(0, MAX_NODES, "nodes"),
    "ngpus": Limit(0, MAX_GPUS, "GPUs"), "billing": Limit(0, MAX_BILLING, "billing units"),
    "gpu_util_tres": Limit(0, 100 * MAX_GPUS, "% summed over GPUs"),
    **{c: _MEM for c in ("mem_req_bytes", "mem_alloc_bytes", "mem_peak_bytes", "max_rss_bytes", "ave_rss_bytes",
                         "max_vmsize_bytes", "mem_usage_tot_bytes", "gpu_mem_tres_bytes")},
    "elapsed_s": Limit(0, MAX_SECONDS, "s (100 years)"), "timelimit_s": Limit(0, MAX_SECONDS, "s (100 years)"),
    **{c: Limit(0, MAX_CPU_SECONDS, "core-seconds") for c in ("cpu_time_s", "user_cpu_s", "system_cpu_s")},
    "uid": Limit(0, MAX_UID), "cancelled_by_uid": Limit(0, MAX_UID),
    "restarts": Limit(0, MAX_INT32), "het_offset": Limit(0, MAX_INT32),
    **{c: _TIME for c in ("submit_time", "eligible_time", "start_time", "end_time")},
}
# sample columns; util_pct of a GPU (any device but 'cpu') is at most 100
GPU_UTIL_MAX = 100
SAMPLE: dict[str, Limit] = {
    "util_pct": Limit(0, 100 * MAX_HOST_CPUS, "% (all of a host's CPUs busy)"),
    "sm_active_pct": Limit(0, 100, "%"),
    "mem_used_bytes": _MEM, "mem_total_bytes": _MEM, "gpu_index": Limit(0, 65535),
    "power_w": Limit(0, MAX_POWER_W, "W"), "energy_j": Limit(0, MAX_POWER_W * MAX_SECONDS, "J"),
    "sm_clock_mhz": Limit(0, MAX_CLOCK_MHZ, "MHz"), "temperature_c": Limit(-273.15, 250, "°C"),
    "time": _TIME,
}


def _num(v: float) -> str:
    """A bound as text, exact (SQL reads it back): 1152921504606846976, 1e+12, -273.15."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 or isinstance(v, int) else repr(float(v))


def _problem(value, lim: Limit) -> Optional[str]:
    """Why value is outside lim, or None."""
    if isinstance(value, datetime):
        if value < lim.lo:
            return f"{value} is before {lim.lo:%Y-%m-%d}"
        top = _top(lim)
        if value >= top:
            return f"{value} {_future(top)}" if lim.until_now else f"{value} is after {top:%Y-%m-%d}"
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if value < 0 and lim.lo == 0:
        return f"{value} is negative"
    if value < lim.lo:
        return f"{value} is below {_num(lim.lo)}{' ' + lim.what if lim.what else ''}"
    if value > lim.hi:
        return f"{value} is above the limit of {_num(lim.hi)}{' ' + lim.what if lim.what else ''}"
    return None


def check(rec: dict, limits: dict[str, Limit] = RECORD) -> None:
    """Raise ValueError naming the first column of rec outside its limits."""
    for col, lim in limits.items():
        v = rec.get(col)
        if v is None or isinstance(v, bool):
            continue
        why = _problem(v, lim)
        if why:
            raise OutOfLimits(f"{col}: {why}")


def check_tres_value(key: str, value: str) -> None:
    """A TRES item kept as text ('cpu=4', 'mem=4G', 'cpu=00:01:00'): never negative or inf/nan."""
    v = value.strip()
    if v.startswith("-"):
        raise ValueError(f"TRES {key}={value} is negative")
    if v.lstrip("+").lower() in ("inf", "infinity", "nan"):
        raise ValueError(f"TRES {key}={value} is not a finite number")


# the same test as a regex over a TRES string, for the column-wise reader: a match goes line by line
TRES_SUSPECT = r"=\s*(?:-|\+?(?i:inf|infinity|nan)\s*(?:,|$))"


def _violation(e: pl.Expr, lim: Limit, hi: Optional[pl.Expr] = None, floats: bool = True) -> pl.Expr:
    top = pl.lit(_top(lim)) if hi is None else hi
    if isinstance(lim.lo, datetime):
        return (e < pl.lit(lim.lo)) | (e >= top)
    out = (e < lim.lo) | (e > top)
    if floats:   # NaN compares false with everything in polars
        out = out | e.cast(pl.Float64).is_nan() | e.cast(pl.Float64).is_infinite()
    return out


def out_of_range(columns: dict[str, pl.DataType], limits: dict[str, Limit] = RECORD) -> pl.Expr:
    """True where any of these columns (name -> dtype; those with limits) is outside them; NULLs pass."""
    conds = [_violation(pl.col(c), limits[c], floats=dtype.is_float()).fill_null(False)
             for c, dtype in columns.items() if c in limits]
    return pl.any_horizontal(conds) if conds else pl.lit(False)


def sample_reasons(values: dict[str, pl.Expr], gpu: pl.Expr | bool) -> list[tuple[pl.Expr, pl.Expr]]:
    """(condition, reason) per sample column given (name -> value expression), worded as check()
    words them; gpu says which rows are GPUs (their util_pct is at most 100)."""
    out = []
    gpu = pl.lit(gpu) if isinstance(gpu, bool) else gpu
    for col, e in values.items():
        lim = SAMPLE.get(col)
        if lim is None:
            continue
        what = f" {lim.what}" if lim.what else ""
        if isinstance(lim.lo, datetime):
            top = _top(lim)
            late = _future(top) if lim.until_now else f"is after {top:%Y-%m-%d}"
            why = pl.when(e < pl.lit(lim.lo)).then(pl.lit(f"is before {lim.lo:%Y-%m-%d}")).otherwise(pl.lit(late))
            out.append((_violation(e, lim, pl.lit(top)).fill_null(False),
                        pl.format(f"{col}: {{}} {{}}", e.cast(pl.String), why)))
            continue
        above = pl.lit(f"above the limit of {_num(lim.hi)}{what}")
        hi = None
        if col == "util_pct":
            hi = pl.when(gpu).then(pl.lit(float(GPU_UTIL_MAX))).otherwise(pl.lit(float(lim.hi)))
            above = pl.when(gpu).then(pl.lit(f"above {GPU_UTIL_MAX} (a GPU's utilisation)")).otherwise(above)
        f = e.cast(pl.Float64)
        problem = (pl.when(f.is_nan() | f.is_infinite()).then(pl.lit("not a finite number"))
                   .when(e < 0).then(pl.lit("negative") if lim.lo == 0 else pl.lit(f"below {_num(lim.lo)}{what}"))
                   .when(e < lim.lo).then(pl.lit(f"below {_num(lim.lo)}{what}"))
                   .otherwise(above))
        out.append((_violation(e, lim, hi).fill_null(False), pl.format(f"{col}: {{}} is {{}}", e.cast(pl.String), problem)))
    return out


def sample_sql_ok() -> str:
    """SQL: true where a sample row's values (named as in table sample) are all within limits."""
    terms = []
    for col, lim in SAMPLE.items():
        c = f'"{col}"'
        if isinstance(lim.lo, datetime):
            terms.append(f"({c} >= TIMESTAMP '{lim.lo:%Y-%m-%d}' AND {c} < TIMESTAMP '{_top(lim):%Y-%m-%d %H:%M:%S}')")
            continue
        hi = _num(lim.hi) if col != "util_pct" else f"(CASE WHEN device = 'cpu' THEN {_num(lim.hi)} ELSE {GPU_UTIL_MAX} END)"
        # NaN sorts above every number in DuckDB, so the upper bound also refuses it
        terms.append(f"coalesce({c} >= {_num(lim.lo)} AND {c} <= {hi}, true)")
    return " AND ".join(terms)
