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
  :func:`parse_line`, which either recovers them (a job name containing the delimiter) or rejects
  them with the reason. Both paths give the same values for the same line.
- '#' lines are comments: counted in ``dropped`` and named in a note. Blank lines and headers are
  not rows.
Timestamps without an offset are local time of the zone given (--timezone, default this
machine's) and are stored in UTC; all-digit timestamps are Unix epochs.
"""
from __future__ import annotations

import json
import math
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from jobsight.analytics import units
from jobsight.analytics.records import ParseOptions, ParseResult, Reject
from jobsight.analytics.timezones import local_zone_name

FORMAT = "sacct"
SOURCE = "slurm-sacct"
ON_PIECE = True  # parse() takes on_piece: the loader inserts each block while the next is parsed

XDMOD_COLUMNS = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
                 "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname").split(",")
# aws-samples/hpc-cost-simulator SlurmLogParser SLURM_ACCT_FIELDS (Partition appended in newer dumps)
AWS_COLUMNS = ("state,jobid,reqcpus,reqmem,reqnodes,constraints,submit,eligible,start,elapsed,suspended,end,"
               "exitcode,derivedexitcode,allocnodes,ncpus,maxdiskread,maxdiskwrite,maxpages,maxrss,maxvmsize,"
               "cputime,usercpu,systemcpu,totalcpu").split(",")

# sacct column (lower case) -> (kind, output column). Columns not listed are read and ignored.
COLUMNS: dict[str, tuple[str, str]] = {
    "jobid": ("jobid", "job_id"), "jobidraw": ("jobidraw", "job_id_raw"), "cluster": ("str", "cluster"),
    "jobname": ("str", "name"), "user": ("str", "user"), "uid": ("int", "uid"), "group": ("str", "group"),
    "account": ("str", "account"), "partition": ("str", "partition"), "qos": ("str", "qos"),
    "state": ("state", "state"), "exitcode": ("str", "exit_code"),
    "submit": ("time", "submit_time"), "eligible": ("time", "eligible_time"),
    "start": ("time", "start_time"), "end": ("time", "end_time"),
    "elapsed": ("dur", "elapsed_s"), "elapsedraw": ("int", "elapsed_s"),
    "timelimit": ("dur", "timelimit_s"), "timelimitraw": ("minutes", "timelimit_s"),
    "ncpus": ("int", "ncpus"), "alloccpus": ("int", "ncpus"), "reqcpus": ("int", "_reqcpus"),
    "nnodes": ("int", "nnodes"), "allocnodes": ("int", "nnodes"), "ntasks": ("int", "ntasks"),
    "reqmem": ("reqmem", "mem_req_bytes"), "reqtres": ("tres", "req_tres"), "alloctres": ("tres", "alloc_tres"),
    "nodelist": ("nodes", "node_list"), "totalcpu": ("dur", "cpu_time_s"),
    "usercpu": ("dur", "user_cpu_s"), "systemcpu": ("dur", "system_cpu_s"),
    "cputimeraw": ("int", "_cputimeraw"),  # allocation (elapsed x cpus), not use: validated, not stored
    "maxrss": ("mem", "max_rss_bytes"), "averss": ("mem", "ave_rss_bytes"), "maxvmsize": ("mem", "max_vmsize_bytes"),
    "tresusageintot": ("tres", "tres_usage_in_tot"), "tresusageinmax": ("tres", "tres_usage_in_max"),
    "tresusageinave": ("tres", "tres_usage_in_ave"), "restarts": ("int", "restarts"),
}
# Columns whose text is chosen by users and may contain the delimiter.
FREE_TEXT = {"jobname", "comment", "admincomment", "systemcomment", "constraints", "wckey", "workdir",
             "submitline", "reason", "extra", "container"}
FINAL_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                          "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "REVOKED"})

OUT_SCHEMA: dict[str, pl.DataType] = {
    "_line": pl.Int64, "_kind": pl.String, "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String,
    "step_id": pl.String, "array_job_id": pl.String, "array_task_id": pl.String, "het_job_id": pl.String,
    "het_offset": pl.Int32, "name": pl.String, "user": pl.String, "uid": pl.Int64, "group": pl.String,
    "account": pl.String, "partition": pl.String, "qos": pl.String, "state": pl.String,
    "cancelled_by_uid": pl.Int64, "exit_code": pl.String, "submit_time": pl.Datetime("us"),
    "eligible_time": pl.Datetime("us"), "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"),
    "elapsed_s": pl.Int64, "timelimit_s": pl.Int64, "ncpus": pl.Int64, "nnodes": pl.Int64, "ntasks": pl.Int64,
    "ngpus": pl.Int64, "gpu_type": pl.String, "mem_req_bytes": pl.Int64, "mem_alloc_bytes": pl.Int64,
    "cpu_time_s": pl.Float64, "user_cpu_s": pl.Float64, "system_cpu_s": pl.Float64, "billing": pl.Float64,
    "alloc_tres": pl.String, "req_tres": pl.String, "max_rss_bytes": pl.Int64, "ave_rss_bytes": pl.Int64,
    "max_vmsize_bytes": pl.Int64, "mem_usage_tot_bytes": pl.Int64, "gpu_util_tres": pl.Float64,
    "gpu_mem_tres_bytes": pl.Int64, "tres_usage_in_tot": pl.String, "tres_usage_in_max": pl.String,
    "tres_usage_in_ave": pl.String, "node_list": pl.String, "restarts": pl.Int32, "null_reasons": pl.String,
    "source": pl.String,
}
JOB_COLS = ["cluster", "job_id", "job_id_raw", "array_job_id", "array_task_id", "het_job_id", "het_offset",
            "job_name", "user", "uid", "group", "account", "partition", "qos", "state", "cancelled_by_uid",
            "exit_code", "submit_time", "eligible_time", "start_time", "end_time", "elapsed_s", "timelimit_s",
            "ncpus", "nnodes", "ntasks", "ngpus", "gpu_type", "mem_req_bytes", "mem_alloc_bytes", "cpu_time_s",
            "billing", "alloc_tres", "req_tres", "gpu_util_tres", "gpu_mem_tres_bytes", "node_list", "restarts",
            "null_reasons", "source"]
STEP_COLS = ["cluster", "job_id_raw", "step_id", "job_id", "step_name", "state", "cancelled_by_uid", "exit_code",
             "start_time", "end_time", "elapsed_s", "ncpus", "nnodes", "ntasks", "cpu_time_s", "user_cpu_s",
             "system_cpu_s", "max_rss_bytes", "ave_rss_bytes", "max_vmsize_bytes", "mem_usage_tot_bytes",
             "gpu_util_tres", "gpu_mem_tres_bytes", "tres_usage_in_tot", "tres_usage_in_max", "tres_usage_in_ave",
             "node_list", "null_reasons", "source"]

JOBID_RE = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]*\]))?(?:\+(\d+))?(?:\.([A-Za-z0-9_]+(?:\+\d+)?))?$")
_HEADER_RE = re.compile(r"^[A-Za-z][A-Za-z_]*(?:(?:\||☃|\^\|\^)[A-Za-z_]*)+$")
_MEM_FAST = r"^(\d+(?:\.\d+)?)([KMGTP]?)$"
_REQMEM_FAST = r"^(\d+(?:\.\d+)?)([KMGTP]?)([cn]?)$"
_BLOCK_BYTES = 16 << 20
PIPELINE = 2   # blocks converted at once (threads); more only holds more blocks in memory on 2 cores
FAST_PATH = True   # tests switch it off to check both paths give the same rows
TRAILING = "#trailing"  # pseudo-column for the empty field after a --parsable trailing delimiter
_NULL_WORDS = sorted(units.NULL_WORDS - {""})


# ----------------------------------------------------------------------------------------------
# time zones

def resolve_zone(name: Optional[str]) -> str:
    name = name or local_zone_name()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (use an IANA name such as Europe/Amsterdam or UTC)") from None
    return "UTC" if name in ("Etc/UTC", "UTC", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu") else name


# ----------------------------------------------------------------------------------------------
# detection

def _delimiter(head: str) -> str:
    for line in head.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if "☃" in line:
            return "☃"
        if "^|^" in line:
            return "^|^"
        if "|" in line:
            return "|"
    return "|"


def sniff(head: str, path: Path) -> bool:
    seen = 0
    for line in head.splitlines():
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        seen += 1
        if seen > 50:
            break
        if _is_header(line):
            return True
        delim = "☃" if "☃" in line else "^|^" if "^|^" in line else "|"
        fields = line.split(delim)
        if len(fields) >= 3 and any(JOBID_RE.match(f.strip()) and not f.strip().isdigit() or
                                    (f.strip().isdigit() and i < 2) for i, f in enumerate(fields[:5])):
            return True
    return False


def _is_header(line: str) -> bool:
    if not _HEADER_RE.match(line):
        return False
    names = {n.lower() for n in re.split(r"\^\|\^|\||☃", line)}
    return bool(names & {"jobid", "jobidraw"})


def _header_columns(line: str, delim: str) -> list[str]:
    cols = [c.strip().lower() for c in line.split(delim)]
    if cols and cols[-1] == "":  # --parsable ends the header and every line with the delimiter
        cols[-1] = TRAILING
    seen: set[str] = set()
    for i, c in enumerate(cols):  # a repeated column name: the first one counts
        if c in seen:
            cols[i] = f"{c}#{i}"
        seen.add(c)
    return cols


# ----------------------------------------------------------------------------------------------
# per-line path (reference semantics; also used for every line the fast path cannot take)

@dataclass
class _Ctx:
    tz: str
    cluster: Optional[str]
    delim: str


def _to_utc(text: str, tz: str) -> Optional[datetime]:
    t = text.strip()
    if t.isdigit():
        return datetime.fromtimestamp(int(t), tz=timezone.utc).replace(tzinfo=None)
    try:
        naive = datetime.strptime(t, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise ValueError(f"not a timestamp: {text!r}") from None
    if tz == "UTC":
        return naive
    zone = ZoneInfo(tz)
    aware = naive.replace(tzinfo=zone, fold=0)
    back = aware.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None)
    if back != naive:
        raise ValueError(f"local time {text!r} does not exist in {tz} (daylight-saving gap)")
    return aware.astimezone(timezone.utc).replace(tzinfo=None)


def _split_id(job_id_text: str) -> dict:
    m = JOBID_RE.match(job_id_text.strip())
    if not m:
        raise ValueError(f"not a job id: {job_id_text!r}")
    base, task, het, step = m.groups()
    printed = job_id_text.strip().split(".", 1)[0]
    return {"job_id": printed, "step_id": step, "array_job_id": base if task else None, "array_task_id": task,
            "het_job_id": base if het else None, "het_offset": int(het) if het else None}


TRES_PARSED = ("alloc_tres", "req_tres", "tres_usage_in_tot")  # the others are kept as text only


def _tres_values(text: str, target: str, rec: dict) -> None:
    if target not in TRES_PARSED:
        return
    tres = units.parse_tres(text)
    if target == "alloc_tres" or target == "req_tres":
        gpus, gtype = units.tres_gpus(tres)
        if target == "alloc_tres":
            rec["_alloc_gpus"], rec["_alloc_gtype"] = gpus, gtype
            rec["billing"] = float(tres["billing"]) if "billing" in tres else None
            rec["mem_alloc_bytes"] = units.parse_mem(tres["mem"]) if "mem" in tres else None
        else:
            rec["_req_gpus"], rec["_req_gtype"] = gpus, gtype
    elif target == "tres_usage_in_tot":
        rec["mem_usage_tot_bytes"] = units.parse_mem(tres["mem"]) if "mem" in tres else None
        rec["gpu_util_tres"] = float(tres["gres/gpuutil"]) if "gres/gpuutil" in tres else None
        rec["gpu_mem_tres_bytes"] = units.parse_mem(tres["gres/gpumem"]) if "gres/gpumem" in tres else None


def parse_line(cols: list[str], fields: list[str], line_no: int, ctx: _Ctx) -> dict:
    """One data line -> an OUT_SCHEMA record. Raises ValueError with the reason to reject it."""
    n = len(cols)
    if cols[-1] == TRAILING:
        if len(fields) == n - 1:
            fields = fields + [""]  # this line lacks the trailing delimiter the header had
        elif fields[-1] != "":
            raise ValueError("the header ends with the delimiter (--parsable) but this line does not")
    elif len(fields) == n + 1 and fields[-1] == "":
        fields = fields[:-1]  # --parsable: trailing delimiter
    if len(fields) > n:
        free = [i for i, c in enumerate(cols) if c in FREE_TEXT]
        if len(free) == 1 and cols[free[0]] == "jobname":
            k, extra = free[0], len(fields) - n
            fields = fields[:k] + [ctx.delim.join(fields[k:k + extra + 1])] + fields[k + extra + 1:]
        else:
            why = ("no JobName column to absorb them" if not free else
                   "more than one free-text column (" + ", ".join(cols[i] for i in free) + ") could hold them")
            raise ValueError(f"{len(fields)} fields where the columns are {n}: the extra delimiters cannot be "
                             f"placed ({why})")
    elif len(fields) < n:
        raise ValueError(f"{len(fields)} fields where the columns are {n} (truncated line?)")
    rec: dict = {"_line": line_no, "source": SOURCE}
    reasons: dict[str, str] = {}
    raw = dict(zip(cols, fields))
    for col, text in raw.items():
        spec = COLUMNS.get(col)
        if spec is None:
            continue
        kind, target = spec
        t = text.strip()
        try:
            if kind in ("jobid", "jobidraw"):
                continue
            if kind == "str":
                rec[target] = text or None   # as printed: a name may start or end with spaces
            elif kind == "state":
                rec["state"], rec["cancelled_by_uid"] = units.parse_state(t)
            elif kind == "nodes":
                if t.lower() in ("none assigned",) or units.is_null_word(t):
                    rec[target] = None
                    if t:
                        reasons[target] = t
                else:
                    rec[target] = t
            elif units.is_null_word(t):
                if t and not target.startswith("_"):
                    reasons[target] = t
                rec.setdefault(target, None)
            elif kind == "int":
                v = units.parse_int(t)
                if v < 0:
                    raise ValueError(f"negative count: {t!r}")
                rec[target] = v
            elif kind == "minutes":
                v = units.parse_int(t)
                if v < 0:
                    raise ValueError(f"negative minutes: {t!r}")
                rec[target] = v * 60
            elif kind == "dur":
                v = units.parse_duration(t)
                if v is not None and not math.isfinite(v):
                    raise ValueError(f"not a duration: {t!r}")
                rec[target] = int(round(v)) if target in ("elapsed_s", "timelimit_s") else v
            elif kind == "time":
                rec[target] = _to_utc(t, ctx.tz)
            elif kind == "mem":
                rec[target] = units.parse_mem(t)
            elif kind == "reqmem":
                rec[target] = None  # resolved below, needs ncpus / nnodes
            elif kind == "tres":
                rec[target] = t
                _tres_values(t, target, rec)
        except ValueError as exc:
            raise ValueError(f"column {col}: {exc}") from None
    # job id structure
    id_text = raw.get("jobid", "").strip()
    raw_text = raw.get("jobidraw", "").strip()
    if not id_text and not raw_text:
        raise ValueError("no JobID or JobIDRaw value" if ("jobid" in raw or "jobidraw" in raw)
                         else "the columns include neither JobID nor JobIDRaw")
    ids = _split_id(id_text or raw_text)
    if raw_text:
        raw_ids = _split_id(raw_text)
        if (raw_ids["step_id"] or None) != (ids["step_id"] or None):
            raise ValueError(f"JobID {id_text!r} and JobIDRaw {raw_text!r} name different steps")
        job_id_raw = raw_ids["job_id"]
    else:
        job_id_raw = ids["job_id"]
    rec.update(ids)
    rec["job_id_raw"] = job_id_raw
    rec["_kind"] = "step" if ids["step_id"] else "job"
    rec["cluster"] = rec.get("cluster") or ctx.cluster or "default"
    # ReqMem needs the CPU count (per-core 'c') and node count (per-node 'n')
    if "reqmem" in raw:
        t = raw["reqmem"].strip()
        if not units.is_null_word(t):
            ncpus = rec.get("ncpus") or rec.get("_reqcpus")
            try:
                rec["mem_req_bytes"] = units.parse_reqmem(t, ncpus, rec.get("nnodes"))
            except ValueError as exc:
                raise ValueError(f"column reqmem: {exc}") from None
            if rec["mem_req_bytes"] is None:
                reasons["mem_req_bytes"] = t  # '0n' / '0c': all of the node's memory
        elif t:
            reasons["mem_req_bytes"] = t
    rec["ngpus"] = rec.get("_alloc_gpus") if rec.get("_alloc_gpus") is not None else rec.get("_req_gpus")
    rec["gpu_type"] = rec.get("_alloc_gtype") or rec.get("_req_gtype")
    if rec.get("start_time") and rec.get("end_time") and rec["end_time"] < rec["start_time"]:
        raise ValueError(f"End {raw.get('end')!r} is before Start {raw.get('start')!r}")
    rec["null_reasons"] = json.dumps(reasons) if reasons else None
    out = {k: rec.get(k) for k in OUT_SCHEMA}
    for k, v in out.items():
        if isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63 or isinstance(v, float) and v != v:
            raise ValueError(f"{k}: value out of range: {v!r}")
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            raise ValueError(f"{k}: value out of range: {v!r}")
    if out["het_offset"] is not None and not 0 <= out["het_offset"] < 2 ** 31:
        raise ValueError(f"het offset out of range: {out['het_offset']}")
    return out


# ----------------------------------------------------------------------------------------------
# fast path (column-wise); rows it cannot take get _bad = True and go to parse_line

# The spellings sacct prints; other casings miss the fast path and are decided per line.
_NULL_SPELLINGS = sorted({v for w in units.NULL_WORDS for v in (w, w.upper(), w.capitalize(), w.title())}
                         | {"Partition_Limit", "UNLIMITED", "Unknown", "None", "N/A", "INVALID"})


def _is_null_word(c: pl.Expr) -> pl.Expr:
    return c.is_null() | c.is_in(_NULL_SPELLINGS)


_POW_KEYS, _POW_VALS = ["", "K", "M", "G", "T", "P"], [0, 1, 2, 3, 4, 5]


# Capture groups are ~10x slower than plain matching in polars, so values are cut out with
# literal splits / slices and only validated with capture-free regexes.
_MEM_OK = r"^[0-9]+(?:\.[0-9]+)?[KMGTP]?$"
_REQMEM_OK = r"^[0-9]+(?:\.[0-9]+)?[KMGTP]?[cn]?$"
_DUR_OK = r"^(?:[0-9]+-)?(?:[0-9]+:){0,2}[0-9]+(?:\.[0-9]+)?$"
_STATE_OK = r"^[A-Za-z_]+\+?(?: by [0-9]+)?$"
_JOBID_OK = r"^[0-9]+(?:_(?:[0-9]+|\[[^\]]*\]))?(?:\+[0-9]+)?(?:\.[A-Za-z0-9_]+(?:\+[0-9]+)?)?$"


def _mem_value(c: pl.Expr) -> pl.Expr:
    """'438.50M' -> bytes; null unless the text matches _MEM_OK (checked by the caller)."""
    last = c.str.slice(-1)
    power = last.replace_strict(_POW_KEYS[1:], _POW_VALS[1:], default=0, return_dtype=pl.Int64)
    num = c.str.strip_chars_end("KMGTP").cast(pl.Float64, strict=False)
    return (num * pl.lit(1024.0).pow(power)).round(0).cast(pl.Int64, strict=False)


def _tres_item(c: pl.Expr, key: str) -> pl.Expr:
    """Value of key in ',k=v,k=v' (c must start with ','), or null."""
    needle = "," + key + "="
    pos = c.str.find(needle, literal=True)
    rest = c.str.slice(pos + len(needle))
    return pl.when(pos.is_not_null()).then(rest.str.split_exact(",", 1).struct.field("field_0"))


class _Stages:
    """Column-wise conversion in materialised stages, so no regex runs twice on a column."""

    def __init__(self):
        self.s1: dict[str, pl.Expr] = {}   # regex / parse primitives
        self.s1b: dict[str, pl.Expr] = {}  # primitives of primitives
        self.s2: dict[str, pl.Expr] = {}   # values from primitives
        self.bad: list[pl.Expr] = []       # evaluated after s2
        self.reasons: list[pl.Expr] = []   # evaluated after s2
        self.no_gpu: set[str] = set()      # TRES fields no value of which names a gres/gpu* item


def _src(name: str) -> pl.Expr:
    """The text of a field; output columns may share its name."""
    return pl.col("__s_" + name)


_DEDUP_KINDS = ("tres", "state", "dur", "mem", "nodes")   # per-value conversions worth doing once per distinct value
DEDUP_MIN_ROWS, DEDUP_MAX_SHARE = 4096, 0.25   # ... in blocks this big, for fields with at most this share distinct


def _nullable(st: "_Stages", col: str, target: str, value: pl.Expr, nonneg: bool = False) -> None:
    """value (over stage-1 columns) -> target; a non-null-word text giving no value is bad."""
    isnull = "__n_" + col
    st.s1[isnull] = _is_null_word(_src(col))
    st.s2[target] = pl.when(pl.col(isnull)).then(None).otherwise(value)
    cond = ~pl.col(isnull) & pl.col(target).is_null()
    if nonneg:
        cond = cond | (pl.col(target) < 0).fill_null(False)
    st.bad.append(cond)
    if not target.startswith("_"):
        st.reasons.append((pl.col(isnull) & (_src(col) != ""), pl.format('"{}": "{}"', pl.lit(target), _src(col))))


def _convert_column(st: "_Stages", col: str, kind: str, target: str, ctx: _Ctx) -> None:
    """The stage expressions turning field `col` (its text in _src(col)) into its output columns."""
    src, tmp = _src, "__"
    def nullable(*a, **k):
        return _nullable(st, *a, **k)
    c = src(col)
    g = tmp + "g_" + col
    if kind == "str":
        st.s2[target] = pl.when(c != "").then(c)
    elif kind == "state":
        st.s1[g + "ok"] = c.str.contains(_STATE_OK)
        st.s1[g] = c.str.split_exact(" by ", 1)
        st.s2["state"] = pl.when(pl.col(g + "ok")).then(
            pl.col(g).struct.field("field_0").str.strip_chars_end("+").str.to_uppercase())
        st.s2["cancelled_by_uid"] = pl.when(pl.col(g + "ok")).then(
            pl.col(g).struct.field("field_1").cast(pl.Int64, strict=False))
        st.bad.append((c != "") & ~pl.col(g + "ok"))
    elif kind == "nodes":
        n = tmp + "n_" + col
        st.s1[n] = (c == "") | c.str.to_lowercase().is_in(_NULL_WORDS + ["none assigned"])
        st.s2[target] = pl.when(~pl.col(n)).then(c)
        st.reasons.append((pl.col(n) & (c != ""), pl.format('"{}": "{}"', pl.lit(target), c)))
    elif kind in ("int", "minutes"):
        st.s1[g] = c.cast(pl.Int64, strict=False)
        nullable(col, target, pl.col(g) * 60 if kind == "minutes" else pl.col(g), nonneg=True)
    elif kind == "dur":
        # [D-]a[:b[:c]] -> fields after turning the day dash into ':'; which is which depends
        # on the dash and the count, exactly as units.parse_duration reads them
        st.s1[g + "ok"] = c.str.contains(_DUR_OK)
        st.s1[g + "d"] = c.str.contains("-", literal=True)
        st.s1[g] = c.str.replace("-", ":", literal=True).str.split_exact(":", 3)
        for k in range(4):
            st.s1b[f"{g}f{k}"] = pl.col(g).struct.field(f"field_{k}").cast(pl.Float64, strict=False)
        st.s1b[g + "n"] = pl.sum_horizontal([pl.col(g).struct.field(f"field_{k}").is_not_null().cast(pl.Int8)
                                              for k in range(4)])
        f = [pl.col(f"{g}f{k}") for k in range(4)]
        dash = pl.col(g + "d")
        n = pl.col(g + "n")
        zero = pl.lit(0.0)
        d = pl.when(dash).then(f[0]).otherwise(zero)
        h = (pl.when(dash & (n == 4)).then(f[1]).when(dash & (n == 3)).then(f[1])
             .when(~dash & (n == 3)).then(f[0]).otherwise(zero))
        m = (pl.when(dash & (n == 4)).then(f[2]).when(dash & (n == 3)).then(f[2])
             .when(~dash & (n == 3)).then(f[1]).when(~dash & (n == 2)).then(f[0]).otherwise(zero))
        s = (pl.when(dash & (n == 4)).then(f[3]).when(~dash & (n == 3)).then(f[2])
             .when(~dash & (n == 2)).then(f[1]).when(~dash & (n == 1)).then(f[0]).otherwise(zero))
        fits = pl.col(g + "ok") & pl.when(dash).then(n >= 3).otherwise(n >= 1)
        v = pl.when(fits & (m < 60) & (s < 60) & (~dash | (h < 24)) | (fits & ~dash & (n == 1))).then(
            d * 86400 + h * 3600 + m * 60 + s)
        nullable(col, target, v.round(0).cast(pl.Int64, strict=False) if target in ("elapsed_s", "timelimit_s") else v)
    elif kind == "time":
        local = c.str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S", strict=False)
        if ctx.tz != "UTC":
            local = (local.dt.replace_time_zone(ctx.tz, ambiguous="earliest", non_existent="null")
                     .dt.convert_time_zone("UTC").dt.replace_time_zone(None))
        st.s1[g] = local
        st.s1[g + "e"] = c.cast(pl.Int64, strict=False)
        epoch = pl.from_epoch(pl.col(g + "e"), time_unit="s").cast(pl.Datetime("us"))
        nullable(col, target, pl.coalesce(epoch, pl.col(g)))
    elif kind == "mem":
        st.s1[g] = c.str.contains(_MEM_OK)
        nullable(col, target, pl.when(pl.col(g)).then(_mem_value(c)))
    elif kind == "tres":
        st.s2[target] = pl.when(c != "").then(c)
        raw_tres = c
        c = pl.concat_str([pl.lit(","), c])  # anchor: every item starts with ','
        no_gpu = col in st.no_gpu   # then every gres/gpu* item is null: not looked for row by row
        def item(key, c=c, no_gpu=no_gpu):
            return pl.lit(None, pl.String) if no_gpu and key.startswith("gres/gpu") else _tres_item(c, key)
        # anything not a plain 'k=v,k=v' list goes to the per-line path for its reason
        if target in TRES_PARSED:
            st.s1[g + "v"] = (raw_tres != "") & ~raw_tres.str.contains(r"^[^=,]+=[^=,]*(?:,[^=,]+=[^=,]*)*$")
            st.bad.append(pl.col(g + "v"))
        if target == "alloc_tres":
            st.s1[g + "b"] = item("billing")
            st.s1[g + "mt"] = item("mem")
            st.s2["billing"] = pl.col(g + "b").cast(pl.Float64, strict=False)
            st.s2["mem_alloc_bytes"] = pl.when(pl.col(g + "mt").str.contains(_MEM_OK)).then(_mem_value(pl.col(g + "mt")))
            st.bad.append(pl.col(g + "b").is_not_null() & pl.col("billing").is_null())
            st.bad.append(pl.col(g + "mt").is_not_null() & pl.col("mem_alloc_bytes").is_null())
        if target in ("alloc_tres", "req_tres"):
            st.s1[g + "p"] = item("gres/gpu")
            # one typed entry ('gres/gpu:a100=2') is cut out here; several go to the per-line path
            pos = c.str.find(",gres/gpu:", literal=True)
            st.s1[g + "tn"] = pl.lit(0) if no_gpu else c.str.count_matches(",gres/gpu:", literal=True)
            st.s1[g + "ts"] = pl.lit(None, pl.String) if no_gpu else pl.when(pos.is_not_null()).then(
                c.str.slice(pos + len(",gres/gpu:")).str.split_exact(",", 1).struct.field("field_0"))
            st.s1b[g + "ty"] = pl.col(g + "ts").str.split_exact("=", 1)
            plain = pl.col(g + "p").cast(pl.Int64, strict=False)
            typed = pl.col(g + "ty").struct.field("field_1").cast(pl.Int64, strict=False)
            st.s2["_gpus_" + target] = pl.coalesce(plain, pl.when(typed > 0).then(typed))
            st.s2["_gtype_" + target] = pl.col(g + "ty").struct.field("field_0")
            st.bad.append((pl.col(g + "tn") > 1) | (pl.col(g + "ts").is_not_null() & typed.is_null()))
            st.bad.append(pl.col(g + "p").is_not_null() & pl.col(g + "p").cast(pl.Int64, strict=False).is_null())
        if target == "tres_usage_in_tot":
            for key, out in (("mem", "mem_usage_tot_bytes"), ("gres/gpumem", "gpu_mem_tres_bytes")):
                st.s1[g + out] = item(key)
                st.s2[out] = pl.when(pl.col(g + out).str.contains(_MEM_OK)).then(_mem_value(pl.col(g + out)))
                st.bad.append(pl.col(g + out).is_not_null() & pl.col(out).is_null())
            st.s1[g + "u"] = item("gres/gpuutil")
            st.s2["gpu_util_tres"] = pl.col(g + "u").cast(pl.Float64, strict=False)
            st.bad.append(pl.col(g + "u").is_not_null() & pl.col("gpu_util_tres").is_null())


def _convert_distinct(df: pl.DataFrame, col: str, kind: str, target: str, ctx: _Ctx,
                      st: "_Stages") -> Optional[pl.DataFrame]:
    """Convert field `col` once per distinct text and join the outputs back (TRES strings, states,
    time limits, ReqMem-free memory sizes repeat a lot in a dump): df with the output columns, and
    st given its bad / reason conditions as columns. None where the values hardly repeat."""
    name = "__s_" + col
    if df.height < DEDUP_MIN_ROWS or df.head(2048)[name].n_unique() > 2048 * DEDUP_MAX_SHARE:
        return None
    distinct = df.select(pl.col(name).unique())
    if distinct.height > df.height * DEDUP_MAX_SHARE:
        return None
    sub = _Stages()
    _convert_column(sub, col, kind, target, ctx)
    conv = distinct.with_columns(**sub.s1).with_columns(**sub.s1b).with_columns(**sub.s2)
    bad, why = f"__bad_{col}", [f"__why_{col}_{k}" for k in range(len(sub.reasons))]
    conv = conv.select(pl.col(name), *[pl.col(o) for o in sub.s2],
                       (pl.any_horizontal(sub.bad) if sub.bad else pl.lit(False)).alias(bad),
                       *[pl.when(cond).then(text).alias(w) for (cond, text), w in zip(sub.reasons, why)])
    st.bad.append(pl.col(bad))
    st.reasons.extend((pl.col(w).is_not_null(), pl.col(w)) for w in why)
    return _beside(df, name, conv)


def _beside(df: pl.DataFrame, key: str, conv: pl.DataFrame) -> pl.DataFrame:
    """df with conv's columns for each row's df[key] (conv has one row per distinct key): joined on
    the key alone, not gathering every column of df again."""
    back = df.select(key).join(conv, on=key, how="left", nulls_equal=True, maintain_order="left")
    return df.hstack(back.drop(key).get_columns())


def _fast_frame(df: pl.DataFrame, cols: list[str], ctx: _Ctx) -> pl.DataFrame:
    """Stripped string columns named after sacct fields (+ _line) -> OUT_SCHEMA columns + _bad."""
    st = _Stages()
    present = set(cols)
    src = _src
    df = df.rename({c: "__s_" + c for c in df.columns if c != "_line"})
    targets = [COLUMNS[c][1] for c in dict.fromkeys(cols) if c in COLUMNS]
    for col in dict.fromkeys(cols):
        spec = COLUMNS.get(col)
        if spec is None:
            continue
        kind, target = spec
        if kind in _DEDUP_KINDS and targets.count(target) == 1:
            done = _convert_distinct(df, col, kind, target, ctx, st)
            if done is not None:
                df = done
                continue
        if kind == "tres" and target in TRES_PARSED and not df["__s_" + col].str.contains("gres/gpu", literal=True).any():
            st.no_gpu.add(col)
        _convert_column(st, col, kind, target, ctx)
    # ids
    id_col = "jobid" if "jobid" in present else "jobidraw"
    st.s1["__idok"] = src(id_col).str.contains(_JOBID_OK)
    st.s1["__id"] = src(id_col).str.split_exact(".", 1)
    printed = pl.col("__id").struct.field("field_0")
    step = pl.when(pl.col("__idok")).then(pl.col("__id").struct.field("field_1"))
    st.s1b["__het"] = printed.str.split_exact("+", 1)
    st.s1b["__arr"] = printed.str.split_exact("_", 1)
    base = pl.when(pl.col("__idok")).then(pl.col("__het").struct.field("field_0").str.split_exact("_", 1).struct.field("field_0"))
    task = pl.col("__arr").struct.field("field_1").str.split_exact("+", 1).struct.field("field_0")
    het = pl.col("__het").struct.field("field_1")
    st.s2["job_id"] = printed
    st.s2["step_id"] = step
    st.s2["array_job_id"] = pl.when(task.is_not_null()).then(base)
    st.s2["array_task_id"] = task
    st.s2["het_job_id"] = pl.when(het.is_not_null()).then(base)
    st.s2["het_offset"] = pl.when(pl.col("__idok")).then(het.cast(pl.Int32, strict=False))
    st.bad.append(base.is_null() | (het.is_not_null() & pl.col("het_offset").is_null()))
    # a JobIDRaw equal to JobID on every row (no arrays, no het jobs) says nothing more: not read again
    if "jobidraw" in present and id_col == "jobid" and not (df["__s_jobidraw"] == df["__s_jobid"]).all():
        raw = src("jobidraw")
        st.s1["__rawok"] = raw.str.contains(_JOBID_OK)
        st.s1["__raw"] = raw.str.split_exact(".", 1)
        # empty JobIDRaw falls back to the printed id; a malformed one or a step mismatch -> per-line path
        st.bad.append((raw != "") & (~pl.col("__rawok") |
                                     (pl.col("__raw").struct.field("field_1").fill_null("") != step.fill_null(""))))
        st.s2["job_id_raw"] = pl.when(raw != "").then(pl.col("__raw").struct.field("field_0")).otherwise(printed)
    else:
        st.s2["job_id_raw"] = printed
    w = df.with_columns(**st.s1)
    w = w.with_columns(**st.s1b)
    w = w.with_columns(**st.s2)
    if "reqmem" in present:
        # ReqMem needs ncpus / nnodes, so it is resolved after the values above
        # the text's parts, once per distinct ReqMem text (a dump repeats a few dozen)
        rm = src("reqmem")
        core = rm.str.strip_chars_end("cn")
        parts = (w.select(rm.unique()).with_columns(__rmok=rm.str.contains(_REQMEM_OK), __rmn=_is_null_word(rm))
                 .with_columns(__rmper=pl.when(pl.col("__rmok")).then(rm.str.slice(-1))
                               .replace_strict(["c", "n"], ["c", "n"], default=""),
                               __rmnum=pl.when(pl.col("__rmok")).then(core.str.strip_chars_end("KMGTP")
                                                                      .cast(pl.Float64, strict=False)),
                               __rmpow=core.str.slice(-1).replace_strict(_POW_KEYS[1:], _POW_VALS[1:], default=2,
                                                                         return_dtype=pl.Int64)))  # bare = MiB
        w = _beside(w, "__s_reqmem", parts)
        per, num, power = pl.col("__rmper"), pl.col("__rmnum"), pl.col("__rmpow")
        cpus = pl.coalesce([e for e in (pl.when(pl.col("ncpus") > 0).then(pl.col("ncpus")) if "ncpus" in w.columns else None,
                                        pl.col("_reqcpus") if "_reqcpus" in w.columns else None) if e is not None]
                           + [pl.lit(None, pl.Int64)])
        nodes = pl.col("nnodes").fill_null(1) if "nnodes" in w.columns else pl.lit(1)
        nodes = pl.when(nodes > 0).then(nodes).otherwise(1)
        val = num * pl.lit(1024.0).pow(power)
        val = pl.when(per == "c").then(val * cpus).when(per == "n").then(val * nodes).otherwise(val)
        isnull, zero = pl.col("__rmn"), num == 0
        w = w.with_columns(mem_req_bytes=pl.when(isnull | zero).then(None).otherwise(val.round(0).cast(pl.Int64, strict=False)))
        st.bad.append(~isnull & (num.is_null() | ((per == "c") & cpus.is_null() & ~zero)))
        st.reasons.append(((isnull | zero).fill_null(False) & (src("reqmem") != ""),
                           pl.format('"mem_req_bytes": "{}"', src("reqmem"))))
    if "start_time" in w.columns and "end_time" in w.columns:
        st.bad.append((pl.col("end_time") < pl.col("start_time")).fill_null(False))
    def opt(name, dtype):
        return pl.col(name) if name in w.columns else pl.lit(None, dtype)
    w = w.with_columns(
        _bad=pl.any_horizontal(st.bad),
        _why=pl.any_horizontal([cond for cond, _ in st.reasons]) if st.reasons else pl.lit(False),
        _kind=pl.when(pl.col("step_id").is_not_null()).then(pl.lit("step")).otherwise(pl.lit("job")),
        cluster=pl.coalesce(opt("cluster", pl.String), pl.lit(ctx.cluster or "default")),
        ngpus=pl.coalesce(opt("_gpus_alloc_tres", pl.Int64), opt("_gpus_req_tres", pl.Int64)),
        gpu_type=pl.coalesce(opt("_gtype_alloc_tres", pl.String), opt("_gtype_req_tres", pl.String)),
        source=pl.lit(SOURCE),
    )
    # null_reasons only for the rows that have one (string building is the costly part), filtering
    # only the columns it reads (lazy: projection pushdown)
    reasons = pl.repeat(None, w.height, dtype=pl.String, eager=True).alias("null_reasons")
    if st.reasons:
        text = pl.concat_str([pl.when(cond).then(t) for cond, t in st.reasons], separator=", ", ignore_nulls=True)
        why = (w.lazy().with_row_index("__i").filter(pl.col("_why"))
               .select("__i", pl.concat_str([pl.lit("{"), text, pl.lit("}")]).alias("v")).collect())
        if why.height:
            reasons = reasons.scatter(why["__i"], why["v"])
    w = w.with_columns(reasons)
    return _conform(w, keep_bad=True)


def _conform(df: pl.DataFrame, keep_bad: bool = False) -> pl.DataFrame:
    cols = [pl.col(k).cast(t) if k in df.columns else pl.lit(None, t).alias(k) for k, t in OUT_SCHEMA.items()]
    if keep_bad:
        cols.append(pl.col("_bad"))
    return df.select(cols)


# ----------------------------------------------------------------------------------------------
# reading

def _iter_blocks(path: Path):
    """(first line number, text) for blocks cut at newlines."""
    line_no = 1
    with open(path, "rb") as fh:
        rest = fh.read(3)
        if rest == b"\xef\xbb\xbf":   # a UTF-8 byte order mark (Windows editors) is not part of the header line
            rest = b""
        while True:
            chunk = fh.read(_BLOCK_BYTES)
            if not chunk:
                break
            data = rest + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            block, rest = data[:cut], data[cut + 1:]
            yield line_no, block.decode("utf-8", errors="replace")
            line_no += block.count(b"\n") + 1
    if rest:
        yield line_no, rest.decode("utf-8", errors="replace")


@dataclass
class _Layout:
    cols: Optional[list[str]]   # None: unknown (headerless without --columns)
    origin: str                 # 'header line N' | '--columns' | 'guess'


def _sections(first: int, text: str, layout: _Layout, ctx: _Ctx) -> tuple[list, int, _Layout]:
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
    headers = lines.filter(pl.col("text").str.contains(_HEADER_RE.pattern))
    headers = headers.filter(pl.col("text").str.to_lowercase().str.contains(r"(?:^|\||☃|\^)jobid(?:raw)?(?:$|\||☃|\^)"))
    # sections between header lines, each with its own column set
    bounds = headers["_line"].to_list()
    htexts = headers["text"].to_list()
    data = lines.filter(~pl.col("_line").is_in(headers["_line"].implode())) if headers.height else lines
    out = []
    for i, start in enumerate([None] + bounds):
        if start is not None:
            layout = _Layout(_header_columns(htexts[i - 1], ctx.delim), f"header line {start}")
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
    slow: list = field(default_factory=list)      # lines for the per-line path, as in parse()
    guessed: dict = field(default_factory=dict)   # layout name -> (lines, columns)


def _convert_block(sections: list, ctx: _Ctx) -> _Converted:
    """A block's sections -> their rows split into jobs and steps (run in a pipeline thread)."""
    out, typed, guessed, guessed_cols = _Converted(), [], {}, {}
    for sec, layout in sections:
        _section(sec, layout, ctx, typed, out.slow, guessed, guessed_cols)
    out.pieces = [_split_kinds(rows) for rows in typed]
    out.guessed = {name: (n, guessed_cols[name]) for name, n in guessed.items()}
    return out


def parse(path: Path, opts: ParseOptions,
          on_piece: Optional[Callable[[pl.DataFrame, pl.DataFrame], None]] = None) -> ParseResult:
    """The whole file's rows. on_piece(jobs, steps), if given, is also handed each block's rows as
    soon as they are converted (the loader inserts them while the next block is parsed); the pieces
    together are exactly result.jobs / result.steps, in another order."""
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(65536).decode("utf-8", errors="replace")
    ctx = _Ctx(tz=resolve_zone(opts.timezone), cluster=opts.cluster, delim=_delimiter(head))
    result = ParseResult(format=FORMAT)
    layout = (_Layout(_header_columns(ctx.delim.join(opts.columns), ctx.delim), "--columns") if opts.columns
              else _Layout(None, "guess"))
    frames = _Frames(on_piece)
    slow: list[tuple[int, str, Optional[list[str]]]] = []  # (line_no, text, cols or None=guess)
    comments = 0
    guessed: dict[str, int] = {}
    guessed_cols: dict[str, list[str]] = {}
    # Blocks are split into sections (lines + column layout) here, in order, as a header line may
    # change the layout for the blocks after it; the sections' conversion, the costly part, runs in
    # PIPELINE threads (polars releases the GIL) and is collected in block order, so the results and
    # the on_piece calls (one at a time, from this thread) are as if the blocks were done in turn.
    pending: deque = deque()

    def collect() -> None:
        out = pending.popleft().result()
        for job_rows, step_rows in out.pieces:
            frames.add(job_rows, step_rows)
        slow.extend(out.slow)
        for name, (n, cols) in out.guessed.items():
            guessed[name] = guessed.get(name, 0) + n
            guessed_cols[name] = cols

    with ThreadPoolExecutor(max_workers=PIPELINE, thread_name_prefix="jobsight-sacct") as pool:
        try:
            for first, text in _iter_blocks(path):
                sections, ncom, layout = _sections(first, text, layout, ctx)
                comments += ncom
                result.rows_in += sum(sec.height for sec, _ in sections)
                pending.append(pool.submit(_convert_block, sections, ctx))
                while len(pending) > PIPELINE:
                    collect()
            while pending:
                collect()
        finally:
            for f in pending:
                f.cancel()
    # the odd lines, one by one
    recs = []
    for line_no, text, cols in slow:
        fields = text.split(ctx.delim)
        try:
            if cols is None:
                try:
                    cols = _guess_columns(fields)
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
    result.rejects.sort(key=lambda r: r.line_no or 0)
    result.dropped = comments
    result.rows_in += comments
    if comments:
        result.notes.append(f"{comments} '#' comment line(s) skipped (counted as dropped)")
    for name, n in guessed.items():
        result.notes.append(f"no header: {n} line(s) read as the {name} layout")
    if any("--columns" in r.reason for r in result.rejects):
        result.notes.append("some lines have no header to name their columns: pass --columns")
    return result


def _split_kinds(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parsed rows -> (job rows, step rows), each with only its own columns (+ _line): a 3M-line
    dump would otherwise carry every column for every row until the end."""
    return (rows.filter(pl.col("_kind") == "job").rename({"name": "job_name"}).select(["_line"] + JOB_COLS),
            rows.filter(pl.col("_kind") == "step").rename({"name": "step_name"}).select(["_line"] + STEP_COLS))


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
            self.on_piece(jobs.drop("_line"), steps.drop("_line"))

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


def _split_fields(g: pl.DataFrame, cols: list[str], delim: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Lines -> (those of exactly len(cols) fields as _line, text and one string column per field we
    read; the others as _line, text). One split gives both the fields and the count: a line has n
    fields when field n-1 is there and field n is not. Without a header that says so, a --parsable
    trailing delimiter (n+1 fields, the last empty) is cut off. (polars' CSV reader is no faster here
    on one block, and would drop a leading BOM.)"""
    n = len(cols)
    trailing = cols[-1] != TRAILING   # may a line carry an extra empty field?
    names = [f"__{i}" for i in range(n + 1 + trailing)]
    s = g.select("_line", "text", pl.col("text").str.split_exact(delim, len(names) - 1)
                 .struct.rename_fields(names).alias("_s")).unnest("_s")
    fits = pl.col(f"__{n - 1}").is_not_null() & pl.col(f"__{n}").is_null()
    if trailing:
        cut = (pl.col(f"__{n}") == "").fill_null(False) & pl.col(f"__{n + 1}").is_null()
        if s.select(cut.any()).item():
            s = s.with_columns(text=pl.when(cut).then(pl.col("text").str.strip_suffix(delim)).otherwise(pl.col("text")))
        fits = fits | cut
    s = s.with_columns(_fit=fits)
    want = [i for i, c in enumerate(cols) if c in COLUMNS or c in ("jobid", "jobidraw")]
    fit = s.filter(pl.col("_fit")).select(["_line", "text"] + [pl.col(f"__{i}").alias(cols[i]) for i in want])
    return fit, s.filter(~pl.col("_fit")).select("_line", "text")


def _guess_columns(fields: list[str]) -> list[str]:
    n = len(fields)
    if n and fields[-1] == "":
        n -= 1  # --parsable trailing delimiter
    first = fields[0].strip() if fields else ""
    if n == 26 and first[:1].isdigit():
        return XDMOD_COLUMNS
    if n in (25, 26) and first[:1].isalpha() and JOBID_RE.match(fields[1].strip() if len(fields) > 1 else ""):
        return AWS_COLUMNS + (["partition"] if n == 26 else [])
    raise ValueError(f"no header line and no --columns: cannot tell what the {n} fields are "
                     "(recognised without a header: XDMoD's 26-column and aws-samples' 25/26-column layouts); "
                     "pass --columns")


def _section(sec: pl.DataFrame, layout: _Layout, ctx: _Ctx, frames: list, slow: list, guessed: dict,
             guessed_cols: dict) -> None:
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
        strs, odd = _split_fields(g, cols, ctx.delim)
        for row in odd.iter_rows():
            slow.append((row[0], row[1], cols))
        if strs.height == 0:
            continue
        if not FAST_PATH or not set(cols) & {"jobid", "jobidraw"}:
            for row in strs.select("_line", "text").iter_rows():
                slow.append((row[0], row[1], cols))
            continue
        typed = _fast_frame(strs.drop("text"), cols, ctx)
        badlines = typed.select(pl.col("_line").filter(pl.col("_bad"))).to_series()
        if badlines.len():
            for row in strs.filter(pl.col("_line").is_in(badlines.implode())).select("_line", "text").iter_rows():
                slow.append((row[0], row[1], cols))
            typed = typed.filter(~pl.col("_bad"))
        frames.append(typed)
