"""`sacct --parsable2` (and `--parsable`, `--delimiter=X`) text output -> job and step rows.

How a file is read:
- Lines are read in blocks and split on the delimiter with polars. A header line (field names, one
  of them JobID or JobIDRaw) sets the column set for the lines after it; a file may hold several
  sections with different headers. Without a header the columns come from ``--columns``; failing
  that, XDMoD's 26-column `--allocations --duplicates` layout and the 25/26-column layout of
  aws-samples/hpc-cost-simulator are recognised by field count and the first field.
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
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from analytics import units
from analytics.records import ParseOptions, ParseResult, Reject

FORMAT = "sacct"
SOURCE = "slurm-sacct"

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
_BLOCK_BYTES = 64 << 20
FAST_PATH = True  # tests switch it off to check both paths give the same rows
_NULL_WORDS = sorted(units.NULL_WORDS - {""})


# ----------------------------------------------------------------------------------------------
# time zones

def local_zone_name() -> str:
    """IANA name of this machine's zone: $TZ, /etc/localtime's target, /etc/timezone, else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        try:
            ZoneInfo(tz)
            return tz
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    try:
        return Path("/etc/timezone").read_text().strip() or "UTC"
    except OSError:
        return "UTC"


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
    if cols and cols[-1] == "":  # --parsable ends the header with the delimiter too
        cols = cols[:-1]
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


def _tres_values(text: str, target: str, rec: dict) -> None:
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
    if len(fields) == n + 1 and fields[-1] == "":
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
                rec[target] = t or None
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
    return {k: rec.get(k) for k in OUT_SCHEMA}


# ----------------------------------------------------------------------------------------------
# fast path (column-wise); rows it cannot take get _bad = True and go to parse_line

def _is_null_word(c: pl.Expr) -> pl.Expr:
    return c.is_null() | c.str.strip_chars().str.to_lowercase().is_in(list(units.NULL_WORDS))


def _word_reason(c: pl.Expr, target: str) -> pl.Expr:
    s = c.str.strip_chars()
    return pl.when(s.str.to_lowercase().is_in(_NULL_WORDS)).then(pl.format('"{}": "{}"', pl.lit(target), s))


def _mem_expr(c: pl.Expr) -> pl.Expr:
    g = c.str.strip_chars().str.extract_groups(_MEM_FAST)
    power = g.struct.field("2").replace_strict(["", "K", "M", "G", "T", "P"], [0, 1, 2, 3, 4, 5],
                                               default=None, return_dtype=pl.Int64)
    return (g.struct.field("1").cast(pl.Float64, strict=False) * pl.lit(1024.0).pow(power)).round(0).cast(pl.Int64)


def _dur_expr(c: pl.Expr) -> pl.Expr:
    s = c.str.strip_chars()
    g3 = s.str.extract_groups(r"^(?:(\d+)-)?(\d+):(\d\d?):(\d\d?(?:\.\d+)?)$")
    d = g3.struct.field("1").cast(pl.Float64, strict=False)
    h = g3.struct.field("2").cast(pl.Float64, strict=False)
    m = g3.struct.field("3").cast(pl.Float64, strict=False)
    sec = g3.struct.field("4").cast(pl.Float64, strict=False)
    v3 = pl.when((m < 60) & (sec < 60) & (d.is_null() | (h < 24))).then(d.fill_null(0) * 86400 + h * 3600 + m * 60 + sec)
    g2 = s.str.extract_groups(r"^(\d+):(\d\d?(?:\.\d+)?)$")
    m2 = g2.struct.field("1").cast(pl.Float64, strict=False)
    s2 = g2.struct.field("2").cast(pl.Float64, strict=False)
    v2 = pl.when((m2 < 60) & (s2 < 60)).then(m2 * 60 + s2)
    v1 = pl.when(s.str.contains(r"^\d+(?:\.\d+)?$")).then(s.cast(pl.Float64, strict=False))
    return pl.coalesce(v3, v2, v1)


def _time_expr(c: pl.Expr, tz: str) -> pl.Expr:
    s = c.str.strip_chars()
    local = s.str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S", strict=False)
    if tz != "UTC":
        local = (local.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
                 .dt.convert_time_zone("UTC").dt.replace_time_zone(None))
    epoch = pl.when(s.str.contains(r"^\d+$")).then(
        pl.from_epoch(s.cast(pl.Int64, strict=False), time_unit="s").cast(pl.Datetime("us")))
    return pl.coalesce(epoch, local)


def _tres_item(c: pl.Expr, key: str, value_re: str = r"([^,]*)") -> pl.Expr:
    return c.str.extract(r"(?:^|,)" + re.escape(key) + "=" + value_re + r"(?:,|$)", 1)


def _fast_frame(df: pl.DataFrame, cols: list[str], ctx: _Ctx) -> pl.DataFrame:
    """String columns named after sacct fields (+ _line) -> OUT_SCHEMA columns + _bad."""
    exprs: dict[str, pl.Expr] = {}
    bad: list[pl.Expr] = []
    reasons: list[pl.Expr] = []
    present = set(cols)

    def ok_or_bad(raw: pl.Expr, parsed: pl.Expr, target: str, nonneg: bool = False) -> pl.Expr:
        isnull = _is_null_word(raw)
        cond = ~isnull & parsed.is_null()
        if nonneg:
            cond = cond | (parsed < 0).fill_null(False)
        bad.append(cond)
        if not target.startswith("_"):
            reasons.append(_word_reason(raw, target))
        return pl.when(isnull).then(None).otherwise(parsed)

    for col in cols:
        spec = COLUMNS.get(col)
        if spec is None:
            continue
        kind, target = spec
        c = pl.col(col)
        s = c.str.strip_chars()
        if kind == "str":
            exprs[target] = pl.when(s != "").then(s)
        elif kind == "state":
            g = s.str.extract_groups(r"^([A-Za-z_]+)\+?(?:\s+by\s+(\d+))?$")
            st = g.struct.field("1").str.to_uppercase()
            bad.append((s != "") & st.is_null())
            exprs["state"] = st
            exprs["cancelled_by_uid"] = g.struct.field("2").cast(pl.Int64, strict=False)
        elif kind == "nodes":
            isnull = (s == "") | s.str.to_lowercase().is_in(_NULL_WORDS + ["none assigned"])
            reasons.append(pl.when(isnull & (s != "")).then(pl.format('"{}": "{}"', pl.lit(target), s)))
            exprs[target] = pl.when(~isnull).then(s)
        elif kind == "int":
            exprs[target] = ok_or_bad(c, s.cast(pl.Int64, strict=False), target.lstrip("_"), nonneg=True)
        elif kind == "minutes":
            exprs[target] = ok_or_bad(c, s.cast(pl.Int64, strict=False), target, nonneg=True) * 60
        elif kind == "dur":
            v = ok_or_bad(c, _dur_expr(c), target)
            exprs[target] = v.round(0).cast(pl.Int64) if target in ("elapsed_s", "timelimit_s") else v
        elif kind == "time":
            exprs[target] = ok_or_bad(c, _time_expr(c, ctx.tz), target)
        elif kind == "mem":
            exprs[target] = ok_or_bad(c, _mem_expr(c), target)
        elif kind == "tres":
            exprs[target] = pl.when(s != "").then(s)
            # anything not a plain 'k=v,k=v' list goes to the per-line path for its reason
            bad.append((s != "") & ~s.str.contains(r"^[^=,]+=[^=,]*(?:,[^=,]+=[^=,]*)*$"))
            if target == "alloc_tres":
                exprs["billing"] = _tres_item(s, "billing").cast(pl.Float64, strict=False)
                bad.append(_tres_item(s, "billing").is_not_null() & exprs["billing"].is_null())
                mem_txt = _tres_item(s, "mem")
                exprs["mem_alloc_bytes"] = _mem_expr(mem_txt)
                bad.append(mem_txt.is_not_null() & exprs["mem_alloc_bytes"].is_null())
            if target in ("alloc_tres", "req_tres"):
                plain = _tres_item(s, "gres/gpu").cast(pl.Int64, strict=False)
                typed = s.str.extract_all(r"(?:^|,)gres/gpu:[^=,]+=\d+")
                typed_sum = typed.list.eval(pl.element().str.extract(r"=(\d+)$", 1).cast(pl.Int64)).list.sum()
                gtype = s.str.extract(r"(?:^|,)gres/gpu:([^=,]+)=", 1)
                bad.append(_tres_item(s, "gres/gpu").is_not_null() & plain.is_null())
                exprs["_gpus_" + target] = pl.coalesce(plain, pl.when(typed_sum > 0).then(typed_sum))
                exprs["_gtype_" + target] = gtype
            if target == "tres_usage_in_tot":
                for key, out, conv in (("mem", "mem_usage_tot_bytes", _mem_expr),
                                       ("gres/gpumem", "gpu_mem_tres_bytes", _mem_expr),
                                       ("gres/gpuutil", "gpu_util_tres", lambda e: e.cast(pl.Float64, strict=False))):
                    txt = _tres_item(s, key)
                    exprs[out] = conv(txt)
                    bad.append(txt.is_not_null() & exprs[out].is_null())
    # ids
    id_col = "jobid" if "jobid" in present else "jobidraw"
    idg = pl.col(id_col).str.strip_chars().str.extract_groups(JOBID_RE.pattern)
    base, task, het, step = (idg.struct.field(k) for k in ("1", "2", "3", "4"))
    printed = pl.col(id_col).str.strip_chars().str.split(".").list.first()
    bad.append(base.is_null())
    exprs["job_id"] = printed
    exprs["step_id"] = step
    exprs["array_job_id"] = pl.when(task.is_not_null()).then(base)
    exprs["array_task_id"] = task
    exprs["het_job_id"] = pl.when(het.is_not_null()).then(base)
    exprs["het_offset"] = het.cast(pl.Int32)
    if "jobidraw" in present and id_col == "jobid":
        rawg = pl.col("jobidraw").str.strip_chars()
        raw_ok = rawg.str.extract_groups(JOBID_RE.pattern)
        # empty JobIDRaw falls back to the printed id; a malformed one or a step mismatch -> per-line path
        bad.append((rawg != "") & (raw_ok.struct.field("1").is_null() |
                                   (raw_ok.struct.field("4").fill_null("") != step.fill_null(""))))
        exprs["job_id_raw"] = pl.when(rawg != "").then(rawg.str.split(".").list.first()).otherwise(printed)
    else:
        exprs["job_id_raw"] = printed
    if not present & {"jobid", "jobidraw"}:
        raise AssertionError("fast path needs an id column")
    bad.append(pl.col(id_col).str.strip_chars() == "")

    out = df.select(pl.col("_line"), **exprs, _bad=pl.any_horizontal(bad) if bad else pl.lit(False),
                    _reasons=pl.concat_str(reasons, separator=", ", ignore_nulls=True).replace("", None)
                    if reasons else pl.lit(None, pl.String),
                    **({"_reqmem": pl.col("reqmem").str.strip_chars()} if "reqmem" in present else {}))
    # ReqMem needs ncpus / nnodes, so it is resolved after the first pass
    if "reqmem" in present:
        g = pl.col("_reqmem").str.extract_groups(_REQMEM_FAST)
        num = g.struct.field("1").cast(pl.Float64, strict=False)
        power = g.struct.field("2").replace_strict(["", "K", "M", "G", "T", "P"], [2, 1, 2, 3, 4, 5],
                                                   default=None, return_dtype=pl.Int64)
        power = pl.when(g.struct.field("2") == "").then(2).otherwise(power)  # bare number = MiB
        per = g.struct.field("3")
        cpus = pl.coalesce([e for e in (pl.when(pl.col("ncpus") > 0).then(pl.col("ncpus")) if "ncpus" in out.columns else None,
                                        pl.col("_reqcpus") if "_reqcpus" in out.columns else None) if e is not None]
                           + [pl.lit(None, pl.Int64)])
        nodes = pl.col("nnodes").fill_null(1) if "nnodes" in out.columns else pl.lit(1)
        nodes = pl.when(nodes > 0).then(nodes).otherwise(1)
        val = num * pl.lit(1024.0).pow(power)
        val = pl.when(per == "c").then(val * cpus).when(per == "n").then(val * nodes).otherwise(val)
        isnull = _is_null_word(pl.col("_reqmem"))
        zero = num == 0
        out = out.with_columns(
            mem_req_bytes=pl.when(isnull | zero).then(None).otherwise(val.round(0).cast(pl.Int64)),
            _bad=pl.col("_bad") | (~isnull & (num.is_null() | ((per == "c") & cpus.is_null() & ~zero))),
            _reasons=pl.concat_str([pl.col("_reasons"),
                                    pl.when((isnull | zero) & (pl.col("_reqmem") != "")).then(
                                        pl.format('"mem_req_bytes": "{}"', pl.col("_reqmem")))],
                                   separator=", ", ignore_nulls=True),
        )
    if "start_time" in out.columns and "end_time" in out.columns:
        out = out.with_columns(_bad=pl.col("_bad") | (pl.col("end_time") < pl.col("start_time")).fill_null(False))
    gpus_a, gpus_r = pl.col("_gpus_alloc_tres") if "_gpus_alloc_tres" in out.columns else None, \
        pl.col("_gpus_req_tres") if "_gpus_req_tres" in out.columns else None
    gt_a, gt_r = pl.col("_gtype_alloc_tres") if "_gtype_alloc_tres" in out.columns else None, \
        pl.col("_gtype_req_tres") if "_gtype_req_tres" in out.columns else None
    cluster = pl.col("cluster") if "cluster" in out.columns else pl.lit(None, pl.String)
    out = out.with_columns(
        _kind=pl.when(pl.col("step_id").is_not_null()).then(pl.lit("step")).otherwise(pl.lit("job")),
        cluster=pl.coalesce(cluster, pl.lit(ctx.cluster or "default")),
        ngpus=pl.coalesce([e for e in (gpus_a, gpus_r) if e is not None] + [pl.lit(None, pl.Int64)]),
        gpu_type=pl.coalesce([e for e in (gt_a, gt_r) if e is not None] + [pl.lit(None, pl.String)]),
        null_reasons=pl.when(pl.col("_reasons") != "").then(pl.concat_str([pl.lit("{"), pl.col("_reasons"), pl.lit("}")])),
        source=pl.lit(SOURCE),
    )
    return _conform(out, keep_bad=True)


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
    rest = b""
    with open(path, "rb") as fh:
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


def parse(path: Path, opts: ParseOptions) -> ParseResult:
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(65536).decode("utf-8", errors="replace")
    ctx = _Ctx(tz=resolve_zone(opts.timezone), cluster=opts.cluster, delim=_delimiter(head))
    result = ParseResult(format=FORMAT)
    layout = _Layout([c.strip().lower() for c in opts.columns], "--columns") if opts.columns else _Layout(None, "guess")
    frames: list[pl.DataFrame] = []
    slow: list[tuple[int, str, Optional[list[str]]]] = []  # (line_no, text, cols or None=guess)
    comments = 0
    guessed: dict[str, int] = {}
    guessed_cols: dict[str, list[str]] = {}
    for first, text in _iter_blocks(path):
        lines = pl.DataFrame({"text": pl.Series([text]).str.split("\n").explode()}).with_row_index("_line", offset=first)
        lines = lines.with_columns(pl.col("_line").cast(pl.Int64), pl.col("text").str.strip_suffix("\r"))
        lines = lines.filter(pl.col("text").str.strip_chars() != "")
        is_comment = pl.col("text").str.starts_with("#")
        is_header = pl.col("text").str.contains(_HEADER_RE.pattern) & pl.col("text").str.to_lowercase().str.contains(
            r"(?:^|\||☃|\^)jobid(?:raw)?(?:$|\||☃|\^)")
        lines = lines.with_columns(_c=is_comment, _h=is_header & ~is_comment)
        comments += int(lines["_c"].sum())
        lines = lines.filter(~pl.col("_c"))
        headers = lines.filter(pl.col("_h"))
        # sections between header lines, each with its own column set
        bounds = headers["_line"].to_list()
        htexts = headers["text"].to_list()
        data = lines.filter(~pl.col("_h")).select("_line", "text")
        starts = [None] + bounds
        for i, start in enumerate(starts):
            if start is not None:
                layout = _Layout(_header_columns(htexts[i - 1], ctx.delim), f"header line {start}")
            end = bounds[i] if i < len(bounds) else None
            sec = data
            if start is not None:
                sec = sec.filter(pl.col("_line") > start)
            if end is not None:
                sec = sec.filter(pl.col("_line") < end)
            if sec.height == 0:
                continue
            result.rows_in += sec.height
            _section(sec, layout, ctx, frames, slow, guessed, guessed_cols)
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
    allrows = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=OUT_SCHEMA)
    allrows = allrows.sort("_line")
    jobs = allrows.filter(pl.col("_kind") == "job").rename({"name": "job_name"}).select(JOB_COLS)
    steps = allrows.filter(pl.col("_kind") == "step").rename({"name": "step_name"}).select(STEP_COLS)
    result.jobs, result.steps = jobs, steps
    result.rejects.sort(key=lambda r: r.line_no or 0)
    result.dropped = comments
    result.rows_in += comments
    if comments:
        result.notes.append(f"{comments} '#' comment line(s) skipped (counted as dropped)")
    for name, n in guessed.items():
        result.notes.append(f"no header: {n} line(s) read as the {name} layout")
    if not result.rejects:
        pass
    elif any("--columns" in r.reason for r in result.rejects):
        result.notes.append("some lines have no header to name their columns: pass --columns")
    return result


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
    fields = sec.with_columns(_f=pl.col("text").str.split(ctx.delim))
    fields = fields.with_columns(_n=pl.col("_f").list.len())
    # --parsable trailing delimiter: drop the last (empty) field
    if layout.cols is not None:
        groups = [(layout.cols, layout.origin, fields)]
    else:
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
    for cols, origin, g in groups:
        if g.height == 0:
            continue
        n = len(cols)
        g = g.with_columns(_f=pl.when((pl.col("_n") == n + 1) & (pl.col("_f").list.last() == ""))
                           .then(pl.col("_f").list.slice(0, n)).otherwise(pl.col("_f")))
        g = g.with_columns(_n=pl.col("_f").list.len())
        fit = g.filter(pl.col("_n") == n)
        odd = g.filter(pl.col("_n") != n)
        for row in odd.select("_line", "text").iter_rows():
            slow.append((row[0], row[1], cols))
        if fit.height == 0:
            continue
        if not FAST_PATH or not set(cols) & {"jobid", "jobidraw"}:
            for row in fit.select("_line", "text").iter_rows():
                slow.append((row[0], row[1], cols))
            continue
        strs = fit.select(pl.col("_line"), pl.col("text"),
                          *[pl.col("_f").list.get(i).alias(c) for i, c in enumerate(cols)
                            if c in COLUMNS or c in ("jobid", "jobidraw")])
        typed = _fast_frame(strs, cols, ctx)
        badlines = typed.filter(pl.col("_bad"))["_line"]
        if badlines.len():
            for row in strs.filter(pl.col("_line").is_in(badlines.implode())).select("_line", "text").iter_rows():
                slow.append((row[0], row[1], cols))
            typed = typed.filter(~pl.col("_bad"))
        frames.append(typed.drop("_bad"))
