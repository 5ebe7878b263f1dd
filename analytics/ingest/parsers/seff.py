"""`seff JOBID` text reports (Slurm contribs/seff), one or many per file -> job rows (source slurm-seff).

A report starts at a `Job ID:` line; everything up to the next one belongs to it, so several
reports pasted into one file (with markdown fences, '---' or comments between them) are fine.
Recognised lines (old and new seff wording):
  Job ID: 123                      -> job_id_raw (seff prints the raw id)
  Array Job ID: 120_3              -> job_id as printed, array_job_id, array_task_id
  Cluster: / User/Group: u/g       -> cluster, user, group
  State: COMPLETED (exit code 0)   -> state; 'RUNNING' / 'PENDING' have no exit code
  Cores: 1 | Nodes: 2 + Cores per node: 4
  CPU Utilized: 1-02:03:04         -> cpu_time_s
  CPU Efficiency: 35.68% of 00:07:20 core-walltime
  Job Wall-clock time: 00:03:40    -> elapsed_s
  Memory Utilized: 137.64 MB [(estimated maximum)]  -> mem_peak_bytes
  Memory Efficiency: 1.71% of 7.84 GB (3.92 GB/core) -> mem_alloc_bytes
ncpus: seff prints core-walltime = elapsed x ncpus, so ncpus = core-walltime / wall-clock when the
wall-clock time is not zero (exact), else nodes x cores per node (seff truncates that division).
Memory: seff's 'KB/MB/GB/TB' are powers of 1024 (its kbytes2str divides by 1024), so
'1.23 GB' = 1.23 x 2^30 bytes; the value is rounded to 2 decimals by seff, so it is within 0.5 %.
The exit code: seff prints only the return code (exit status >> 8), not the signal, so exit_code is
left NULL and the printed code kept in null_reasons ({"exit_code": "exit code 0 (seff omits the signal)"}).
Also read: jobinfo style reports ('Key   : value', recognised by 'Used walltime' or 'Number of
Nodes'), whose times are local (``opts.timezone``), in two variants:
  hb-jobinfo (RUG): 'Nodes' is the node list, 'Number of Nodes' the count, 'Cores', 'Submit',
  'Start', 'End', 'Total memory reserved', 'Maximum memory used', and the GPU lines 'Requested
  GPUs : 2', 'Allocated GPUs : a100=2', 'Max GPU utilization : 0%', 'Max GPU memory used : 1.2G'
  (the job-level GPU figures, stored as Slurm's gres/gpuutil and gres/gpumem are);
  USC CARC jobinfo: 'Nodes' is the count and 'Nodelist' the list, 'CPUs', 'Submit time', 'Start
  time', 'End time', 'Account', 'Exit code', 'Reserved memory', 'Max memory used'.
A state 'CANCELLED by user' (a name, not a uid) is CANCELLED with who in null_reasons.
rows_in = number of reports; a report that cannot be read is one Reject at its `Job ID:` line. A line
longer than lengths.MAX_LINE_BYTES is skipped unread: the report it is in is one Reject at that line
(a report read without one of its lines could be stored wrong); before the first report it is a
rejected row of its own.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import pathlib
import re
import zoneinfo
from collections import Counter
from typing import Iterator, Optional, Union

import polars as pl

from jobsight.analytics.ingest import lengths, slurm_values
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject
from jobsight.analytics.ingest.units import parse_duration, parse_mem, parse_state

FORMAT = "seff"
SOURCE = "slurm-seff"

_START = re.compile(r"^\s*Job ID\s*:\s*(\S.*?)\s*$")
_KV = re.compile(r"^\s*([A-Za-z%*/()][A-Za-z0-9 %*/(),._-]*?)\s*:\s?(.*?)\s*$")
_NUM = r"(\d+(?:[.,]\d+)?)"
_MEM = re.compile(r"^" + _NUM + r"\s*([KMGTPE]?)i?B?\b", re.IGNORECASE)
_STATE = re.compile(r"^(.*?)\s*(?:\(exit code (\d+)\))?$")
_EFF = re.compile(r"^" + _NUM + r"\s*%\s+of\s+(.+?)(?:\s+core-walltime)?(?:\s+\((.+)\))?$")
_JOBID = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]*\]))?(?:\+(\d+))?$")


def sniff(head: str, path: pathlib.Path) -> bool:
    starts = [ln for ln in head.splitlines() if _START.match(ln)]
    if not starts:
        return False
    return any(k in head for k in ("CPU Utilized:", "User/Group:", "Memory Utilized:", "Used walltime", "Job Wall-clock time:"))


def _mem(text: str) -> int:
    """'137.64 MB' -> bytes (powers of 1024); '258.34M' (jobinfo) too."""
    m = _MEM.match(text.strip())
    if not m:
        raise ValueError(f"not a memory size: {text!r}")
    num, unit = m.groups()
    return parse_mem(num.replace(",", ".") + unit.upper())


def _num(text: str) -> float:
    v = float(text.replace(",", "."))
    if not math.isfinite(v):   # 400 digits
        raise ValueError(f"not a finite number: {text.strip()[:40]!r}")
    return v


def _lines(path: pathlib.Path) -> Iterator[Union[tuple[int, str], lengths.LongLine]]:
    """(line number, text) of each line, read in blocks; a lengths.LongLine for a line longer than
    lengths.MAX_LINE_BYTES, which is skipped unread."""
    with open(path, "rb") as fh:
        for item in lengths.bounded_lines(fh):
            if isinstance(item, lengths.LongLine):
                yield item
                continue
            text = item.data.decode("utf-8", errors="replace")
            for no, line in enumerate(text.removesuffix("\n").split("\n"), item.first):
                yield no, line.removesuffix("\r")


def _reports(path: pathlib.Path) -> Iterator[tuple[int, list[str], Optional[lengths.LongLine]]]:
    """(number of its `Job ID:` line, its lines, its first line too long to read or None) per report,
    as read; a line too long before the first report is a row of its own: (its number, [], it)."""
    start, block, long = None, [], None
    for item in _lines(path):
        if isinstance(item, lengths.LongLine):
            if start is None:
                yield item.line_no, [], item
            elif long is None:
                long = item
            continue
        no, line = item
        if _START.match(line):
            if start is not None:
                yield start, block, long
            start, block, long = no, [line], None
        elif start is not None:
            block.append(line)
    if start is not None:
        yield start, block, long


def _fields(block: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block:
        m = _KV.match(line)
        if m and m.group(1).strip() not in out:
            out[m.group(1).strip()] = m.group(2)
    return out


def _local_to_utc(text: str, zone: Optional[str]) -> Optional[dt.datetime]:
    if not text or text.strip() in ("--", "Unknown", "None"):
        return None
    t = dt.datetime.fromisoformat(text.strip())
    if zone:
        t = t.replace(tzinfo=zoneinfo.ZoneInfo(zone))
    else:
        t = t.astimezone()   # this machine's zone
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None)


_BY_NAME = re.compile(r"^\s*([A-Za-z_]+)\+?\s+by\s+(\S+)\s*$")


def _state(text: str, nulls: dict[str, str]) -> tuple[Optional[str], Optional[int]]:
    """'CANCELLED by 1234' -> ('CANCELLED', 1234); 'CANCELLED by user' -> CANCELLED, who in nulls."""
    m = _BY_NAME.match(text)
    if m and not m.group(2).isdigit():
        nulls["cancelled_by_uid"] = f"by {m.group(2)}"
        return m.group(1).upper(), None
    return parse_state(text)


def _seff_row(f: dict[str, str], cluster_default: str) -> dict:
    nulls: dict[str, str] = {}
    job_raw = f["Job ID"].strip()
    if not _JOBID.match(job_raw):
        raise ValueError(f"not a job id: {job_raw!r}")
    row: dict = {"job_id_raw": job_raw, "job_id": job_raw}
    arr = f.get("Array Job ID")
    if arr:
        m = _JOBID.match(arr.strip())
        if not m or not m.group(2):
            raise ValueError(f"not an array job id: {arr!r}")
        row.update(job_id=arr.strip(), array_job_id=m.group(1), array_task_id=m.group(2))
    row["cluster"] = (f.get("Cluster") or "").strip() or cluster_default
    ug = f.get("User/Group")
    if ug:
        user, _, group = ug.partition("/")
        row["user"], row["group"] = user.strip() or None, group.strip() or None
    st = f.get("State")
    if st:
        m = _STATE.match(st.strip())
        row["state"], row["cancelled_by_uid"] = _state(m.group(1), nulls)
        if m.group(2) is not None:
            nulls["exit_code"] = f"exit code {m.group(2)} (seff omits the signal)"
    if "Cores" in f:
        row["ncpus"] = int(_num(f["Cores"]))
        row["nnodes"] = 1
    if "Nodes" in f:
        row["nnodes"] = int(_num(f["Nodes"]))
    cpn = int(_num(f["Cores per node"])) if "Cores per node" in f else None
    if "CPU Utilized" in f:
        row["cpu_time_s"] = parse_duration(f["CPU Utilized"])
    if "Job Wall-clock time" in f:
        row["elapsed_s"] = int(parse_duration(f["Job Wall-clock time"]))
    core_wall = None
    if "CPU Efficiency" in f:
        m = _EFF.match(f["CPU Efficiency"].strip())
        if not m:
            raise ValueError(f"CPU Efficiency not understood: {f['CPU Efficiency']!r}")
        core_wall = parse_duration(m.group(2))
    if row.get("ncpus") is None:
        if core_wall is not None and row.get("elapsed_s"):
            row["ncpus"] = int(round(core_wall / row["elapsed_s"]))
        elif cpn is not None:
            row["ncpus"] = cpn * (row.get("nnodes") or 1)
    if "Memory Utilized" in f:
        row["mem_peak_bytes"] = _mem(f["Memory Utilized"])
    if "Memory Efficiency" in f:
        m = _EFF.match(f["Memory Efficiency"].strip())
        if not m:
            raise ValueError(f"Memory Efficiency not understood: {f['Memory Efficiency']!r}")
        alloc = _mem(m.group(2))
        if alloc:
            row["mem_alloc_bytes"] = alloc
        else:   # seff prints 0.00 MB when the job has no memory TRES
            nulls["mem_alloc_bytes"] = m.group(2)
    row["_nulls"] = nulls
    return row


def _jobinfo_row(f: dict[str, str], cluster_default: str, zone: Optional[str]) -> dict:
    """A jobinfo 'Key   : value' report: hb-jobinfo or USC's (module docstring)."""
    printed = f["Job ID"].strip()
    m = _JOBID.match(printed)
    if not m:
        raise ValueError(f"not a job id: {printed!r}")
    nulls: dict[str, str] = {}
    row: dict = {"job_id": printed, "job_id_raw": printed, "_nulls": nulls}
    if m.group(2):
        row.update(array_job_id=m.group(1), array_task_id=m.group(2))

    def val(*keys):
        for key in keys:
            v = (f.get(key) or "").strip()
            if v not in ("", "--"):
                return v
        return None

    def count(key):
        v = val(key)
        if v is not None and not v.isdigit():
            raise ValueError(f"{key} {v!r} is not a count")
        return None if v is None else int(v)

    row["cluster"] = val("Cluster") or cluster_default
    row["job_name"], row["user"], row["partition"] = val("Name", "Job name"), val("User"), val("Partition")
    row["account"] = val("Account")
    if "Nodelist" in f:                        # USC: Nodes is the count, Nodelist the list
        row["node_list"], row["nnodes"] = val("Nodelist"), count("Nodes")
    else:                                      # hb-jobinfo: Nodes is the list
        row["node_list"], row["nnodes"] = val("Nodes"), count("Number of Nodes")
    row["ncpus"] = count("Cores") if "Cores" in f else count("CPUs")
    row["ntasks"] = count("Number of Tasks")
    if val("State"):
        row["state"], row["cancelled_by_uid"] = _state(val("State"), nulls)
    if val("Exit code"):
        code = val("Exit code")
        if not re.fullmatch(r"\d+:\d+", code):
            raise ValueError(f"Exit code {code!r} is not code:signal")
        row["exit_code"] = code
    for keys, col in ((("Submit", "Submit time"), "submit_time"), (("Start", "Start time"), "start_time"),
                      (("End", "End time"), "end_time")):
        if val(*keys):
            row[col] = _local_to_utc(val(*keys), zone)
    if val("Reserved walltime"):
        row["timelimit_s"] = int(parse_duration(val("Reserved walltime")))
    if val("Used walltime"):
        row["elapsed_s"] = int(parse_duration(val("Used walltime")))
    if val("Used CPU time"):
        row["cpu_time_s"] = parse_duration(val("Used CPU time").split("(")[0].strip())
    if val("Total memory reserved", "Reserved memory"):
        row["mem_req_bytes"] = _mem(val("Total memory reserved", "Reserved memory"))
    if val("Maximum memory used", "Max memory used"):
        row["mem_peak_bytes"] = _mem(val("Maximum memory used", "Max memory used"))
    _gpus(row, val)
    return row


def _gpus(row: dict, val) -> None:
    """hb-jobinfo's GPU lines: 'Allocated GPUs : a100=2' (type=count, ...), else 'Requested GPUs : 2';
    'Max GPU utilization : 0%' and 'Max GPU memory used : 1.2G' are the job's GPU figures."""
    alloc, req = val("Allocated GPUs"), val("Requested GPUs")
    if alloc:
        total, gtype = 0, None
        for part in alloc.split(","):
            name, eq, n = part.strip().rpartition("=")
            if not n.strip().isdigit():
                raise ValueError(f"Allocated GPUs {alloc!r} is not type=count")
            total += int(n)
            gtype = gtype or (name.strip() if eq and name.strip() else None)
        row["ngpus"], row["gpu_type"] = total, gtype
    elif req:
        if not req.isdigit():
            raise ValueError(f"Requested GPUs {req!r} is not a count")
        row["ngpus"] = int(req)
    util = val("Max GPU utilization")
    if util:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", util)
        if not m:
            raise ValueError(f"Max GPU utilization {util!r} is not a percentage")
        row["gpu_util_tres"] = float(m.group(1))
    if val("Max GPU memory used"):
        row["gpu_mem_tres_bytes"] = _mem(val("Max GPU memory used"))


SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String, "array_job_id": pl.String,
    "array_task_id": pl.String, "job_name": pl.String, "user": pl.String, "group": pl.String,
    "account": pl.String, "partition": pl.String, "state": pl.String, "cancelled_by_uid": pl.Int64,
    "exit_code": pl.String,
    "submit_time": pl.Datetime("us"), "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"),
    "elapsed_s": pl.Int64, "timelimit_s": pl.Int64, "ncpus": pl.Int64, "nnodes": pl.Int64, "ntasks": pl.Int64,
    "mem_req_bytes": pl.Int64, "mem_alloc_bytes": pl.Int64, "mem_peak_bytes": pl.Int64, "cpu_time_s": pl.Float64,
    "ngpus": pl.Int64, "gpu_type": pl.String, "gpu_util_tres": pl.Float64, "gpu_mem_tres_bytes": pl.Int64,
    "node_list": pl.String, "null_reasons": pl.String, "source": pl.String,
}


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    cluster_default = opts.cluster or "default"
    rows = []
    tally: Counter = Counter()
    for line_no, block, long in _reports(path):
        result.rows_in += 1
        if long is not None:   # a report missing a line would be stored wrong: the whole report goes
            whose = f": the seff report of line {line_no} not stored" if block else ""
            result.rejects.append(Reject(long.line_no, long.reason() + whose, "\n".join(block)[:1000] or None))
            continue
        fields = _fields(block)
        try:
            if "Used walltime" in fields or "Number of Nodes" in fields:
                row = _jobinfo_row(fields, cluster_default, opts.timezone)
            else:
                row = _seff_row(fields, cluster_default)
            row["source"] = SOURCE
            nulls = row.pop("_nulls")
            slurm_values.settle(row, nulls, tally)
            row["null_reasons"] = json.dumps(nulls) if nulls else None
            rows.append(row)
        except (ValueError, KeyError, TypeError, OverflowError, zoneinfo.ZoneInfoNotFoundError) as exc:
            result.rejects.append(Reject(line_no, f"seff report: {exc}", "\n".join(block)[:1000]))
    slurm_values.report_tally(result, path.name, tally)
    if rows:
        result.jobs = pl.DataFrame({c: pl.Series(c, [r.get(c) for r in rows], dtype=t, strict=False) for c, t in SCHEMA.items()})
    return result
