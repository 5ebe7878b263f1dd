"""The sacct text format: the columns read and the rows written, delimiter and header-line
detection, and the headerless layouts recognised by field count."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from jobsight.analytics.ingest.timezones import local_zone_name

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
    "allocgres": ("gres", "_alloc_gres"), "reqgres": ("gres", "_req_gres"),   # GPU counts before Slurm 19.05
}
# Values derived from the columns present when the column that holds them is absent, each recorded
# in the row's `derived` ({column: where it came from}). Cores: the first of these that is > 0
# (source column, the reader's value, the text recorded).
DERIVED_CPUS = (("alloctres", "_cpu_alloc_tres", "AllocTRES cpu"), ("reqtres", "_cpu_req_tres", "ReqTRES cpu"),
                ("reqcpus", "_reqcpus", "ReqCPUS"))
DERIVED_GPUS = (("allocgres", "_alloc_gres", "AllocGRES gpu"), ("reqgres", "_req_gres", "ReqGRES gpu"))
CPU_TIME_FROM = "UserCPU + SystemCPU"
ELAPSED_FROM = "End - Start"


def derives(present: set) -> dict[str, bool]:
    """Which values a column set leaves to be derived: cores without NCPUS/AllocCPUS, CPU time
    without TotalCPU, elapsed without Elapsed/ElapsedRaw (GPUs: whenever TRES names none)."""
    return {"ncpus": not present & {"ncpus", "alloccpus"},
            "cpu_time_s": "totalcpu" not in present and {"usercpu", "systemcpu"} <= present,
            "elapsed_s": not present & {"elapsed", "elapsedraw"} and {"start", "end"} <= present}
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
    "derived": pl.String, "source": pl.String,
}
JOB_COLS = ["cluster", "job_id", "job_id_raw", "array_job_id", "array_task_id", "het_job_id", "het_offset",
            "job_name", "user", "uid", "group", "account", "partition", "qos", "state", "cancelled_by_uid",
            "exit_code", "submit_time", "eligible_time", "start_time", "end_time", "elapsed_s", "timelimit_s",
            "ncpus", "nnodes", "ntasks", "ngpus", "gpu_type", "mem_req_bytes", "mem_alloc_bytes", "cpu_time_s",
            "billing", "alloc_tres", "req_tres", "gpu_util_tres", "gpu_mem_tres_bytes", "node_list", "restarts",
            "null_reasons", "derived", "source"]
STEP_COLS = ["cluster", "job_id_raw", "step_id", "job_id", "step_name", "state", "cancelled_by_uid", "exit_code",
             "start_time", "end_time", "elapsed_s", "ncpus", "nnodes", "ntasks", "cpu_time_s", "user_cpu_s",
             "system_cpu_s", "max_rss_bytes", "ave_rss_bytes", "max_vmsize_bytes", "mem_usage_tot_bytes",
             "gpu_util_tres", "gpu_mem_tres_bytes", "tres_usage_in_tot", "tres_usage_in_max", "tres_usage_in_ave",
             "node_list", "null_reasons", "derived", "source"]

JOBID_RE = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]*\]))?(?:\+(\d+))?(?:\.([A-Za-z0-9_]+(?:\+\d+)?))?$")
HEADER_RE = re.compile(r"^[A-Za-z][A-Za-z_]*(?:(?:\||☃|\^\|\^)[A-Za-z_]*)+$")
TRAILING = "#trailing"  # pseudo-column for the empty field after a --parsable trailing delimiter
TRES_PARSED = ("alloc_tres", "req_tres", "tres_usage_in_tot")  # the others are kept as text only


@dataclass
class Ctx:
    """What every line of one file is read with."""
    tz: str
    cluster: Optional[str]
    delim: str
    tally: Counter = field(default_factory=Counter)   # (field, kind) -> rows made NULL (slurm_values)
    folds: list = field(default_factory=list)   # lines with a time in a fall-back hour (timezones.py)


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

def delimiter(head: str) -> str:
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
    if not HEADER_RE.match(line):
        return False
    names = {n.lower() for n in re.split(r"\^\|\^|\||☃", line)}
    return bool(names & {"jobid", "jobidraw"})


def header_columns(line: str, delim: str) -> list[str]:
    cols = [c.strip().lower() for c in line.split(delim)]
    if cols and cols[-1] == "":  # --parsable ends the header and every line with the delimiter
        cols[-1] = TRAILING
    seen: set[str] = set()
    for i, c in enumerate(cols):  # a repeated column name: the first one counts
        if c in seen:
            cols[i] = f"{c}#{i}"
        seen.add(c)
    return cols


def guess_columns(fields: list[str]) -> list[str]:
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

