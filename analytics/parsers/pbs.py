"""PBS Pro / OpenPBS / Torque accounting logs (server_priv/accounting/YYYYMMDD) -> job rows (source pbs).

Line: `MM/DD/YYYY HH:MM:SS;<type>;<jobid>;key=value key=value ...`. The record time is the server's
local time (``opts.timezone``, default this machine's zone); ctime/qtime/etime/start/end are UTC
epochs. Every non-blank line is one input row, accounted as follows:
  E (job ended)      -> a final row: COMPLETED (Exit_status 0), FAILED (1..255 or negative JOB_EXEC
                        code), TIMEOUT / CANCELLED (killed by a signal: Exit_status > 256, or the
                        10000 + signal variant; TIMEOUT when walltime used >= the walltime limit)
  S (started)        -> RUNNING row;  Q (queued) -> PENDING row
  D (deleted)        -> CANCELLED row (end = record time) carrying what earlier records of the
                        same job in the file said; the E record that follows a run replaces it
  A, R and the rest  -> dropped (counted, one note per type): A/R say nothing the E record does not
  '#' lines          -> dropped (comments);  unreadable lines -> Reject(line, reason)
Mapping: queue -> partition; account (or project, unless '_pbs_project_default') -> account;
Resource_List.walltime -> timelimit_s; resources_used.walltime -> elapsed_s (else end - start);
resources_used.cput -> cpu_time_s; resources_used.mem -> mem_peak_bytes; Resource_List.mem (else
pmem x ncpus) -> mem_req_bytes. Sizes 'kb/mb/gb/tb' are powers of 1024, a bare number is kB; a
value not in that form (e.g. '12.27M') is NULL with the raw text in null_reasons (XDMoD does the same).
ncpus: resources_used.ncpus, else exec_host slots counted (host/0+host/1, host/0-3, host/0*13),
else total_execution_slots, else the larger of Resource_List.ncpus and nodes x ppn.
GPUs: Resource_List.ngpus, else Torque nodes=N:ppn=M:gpus=G (N x G per '+' part; XDMoD's rule,
also in Resource_List.nodect), else the ngpus of exec_vnode. Resource_List.gpu is not read (XDMoD
ignores it too).
Job ids: `seq.server` -> job_id_raw 'seq'; arrays `123[4].server` -> array_job_id 123, task 4.
Cluster: opts.cluster, else the server's first name label ('6.edge.ccr.buffalo.edu' -> 'edge'),
else "default". A `YYYYMMDD:` prefix (grep over several accounting files) is removed.
"""
from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import zoneinfo
from collections import Counter
from typing import Optional

import polars as pl

from jobsight.analytics import limits
from jobsight.analytics.records import ParseOptions, ParseResult, Reject, field_value
from jobsight.analytics.timezones import local_zone_name
from jobsight.analytics.units import parse_duration, to_bytes

FORMAT = "pbs"
SOURCE = "pbs"

_LINE = re.compile(r"^(?:\d{8}:)?(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2});([A-Za-z]);([^;]*);?(.*)$")
_PAIR = re.compile(r'([A-Za-z_][\w.\-]*)=("[^"]*"|\S*)')
_WORD = re.compile(r'(?:[^\s"]+|"[^"]*")+|"[^"]*$')
_FLAG = re.compile(r"^-[A-Za-z]$")
_JOBID = re.compile(r"^(\d+)(?:\[(\d*)\])?(?:-(\d+))?(?:\.(.+))?$")
_MEM = re.compile(r"^(\d+(?:\.\d+)?)(b|w|kb|mb|gb|tb|pb)?$", re.IGNORECASE)
_MEM_POW = {"b": 0, "kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5}
_SKIP = {"A": "A (aborted by the server) records", "R": "R (rerun) records", "B": "B (reservation) records",
         "F": "F (reservation end) records", "K": "K (reservation removed) records", "k": "k records",
         "L": "L (license) records", "M": "M (moved) records", "P": "P (provisioning) records",
         "T": "T (restarted from checkpoint) records", "U": "U (reservation request) records",
         "Y": "Y (reservation confirmed) records", "C": "C (checkpointed) records", "a": "a (altered) records"}

SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String, "array_job_id": pl.String,
    "array_task_id": pl.String, "job_name": pl.String, "user": pl.String, "group": pl.String,
    "account": pl.String, "partition": pl.String, "state": pl.String, "exit_code": pl.String,
    "submit_time": pl.Datetime("us"), "eligible_time": pl.Datetime("us"), "start_time": pl.Datetime("us"),
    "end_time": pl.Datetime("us"), "elapsed_s": pl.Int64, "timelimit_s": pl.Int64, "ncpus": pl.Int64,
    "nnodes": pl.Int64, "ngpus": pl.Int64, "mem_req_bytes": pl.Int64, "mem_peak_bytes": pl.Int64,
    "cpu_time_s": pl.Float64, "node_list": pl.String, "restarts": pl.Int32, "null_reasons": pl.String,
    "source": pl.String,
}


def sniff(head: str, path: pathlib.Path) -> bool:
    lines = [ln for ln in head.splitlines() if ln.strip() and not ln.startswith("#")][:20]
    return bool(lines) and sum(1 for ln in lines if _LINE.match(ln)) >= max(1, len(lines) // 2)


def split_pairs(text: str) -> dict[str, str]:
    """'user=u Resource_Request_2.0=-L tasks=1:lprocs=1 -L tasks=2 end=5' -> dict.

    A word that is not key=value continues the previous value, and so does a key=value word right
    after an option flag ('-L tasks=...'): Torque's Resource_Request_2.0 holds spaces."""
    out: dict[str, str] = {}
    key = None
    for word in _WORD.findall(text):
        m = _PAIR.fullmatch(word)
        if m and not (key and _FLAG.match(out[key].split(" ")[-1] if out[key] else "")):
            key = m.group(1)
            val = m.group(2)
            out[key] = val[1:-1] if len(val) >= 2 and val[0] == val[-1] == '"' else val
        elif key is not None:
            out[key] = f"{out[key]} {word}" if out[key] else word
        else:
            raise ValueError(f"text before the first key=value: {word!r}")
    return out


def pbs_mem(text: str) -> Optional[int]:
    """'2031040kb' -> bytes (kb = 1024); a bare number is kB; 'w' = 8-byte words."""
    m = _MEM.match(text.strip())
    if not m:
        raise ValueError(f"not a PBS size: {text!r}")
    num, unit = m.groups()
    unit = (unit or "kb").lower()
    if unit == "w":
        return to_bytes(float(num) * 8, text)
    return to_bytes(float(num) * 1024 ** _MEM_POW[unit], text)


def exec_host_slots(text: str) -> tuple[int, list[str]]:
    """'h1/0+h1/1' -> (2, [h1]); 'h/0-3' -> 4; PBS Pro 'c1/0*13' -> 13 (a '*0' counts as 0)."""
    slots, hosts = 0, []
    for part in text.split("+"):
        host, _, cpus = part.partition("/")
        if host and host not in hosts:
            hosts.append(host)
        if not cpus:
            slots += 1
            continue
        if "*" in cpus:
            slots += int(cpus.split("*", 1)[1])
            continue
        for rng in cpus.split(","):
            a, _, b = rng.partition("-")
            slots += (int(b) - int(a) + 1) if b else 1
    return slots, hosts


def nodes_spec(text: str) -> tuple[Optional[int], Optional[int], int]:
    """Torque nodes '2:ppn=16:gpus=2+1:ppn=4' -> (nodes, cores, gpus); a host name counts as 1 node."""
    nodes = cores = 0
    gpus = 0
    known = False
    for part in text.split("+"):
        fields = part.split(":")
        n = int(fields[0]) if fields[0].isdigit() else 1
        ppn = None
        for f in fields[1:]:
            k, _, v = f.partition("=")
            if k == "ppn" and v.isdigit():
                ppn = int(v)
            elif k in ("gpus", "gpu") and v.isdigit():
                gpus += n * int(v)
        nodes += n
        if ppn is not None:
            cores += n * ppn
            known = True
    return nodes or None, (cores if known else None), gpus


def vnode_gpus(text: str) -> int:
    return sum(int(x) for x in re.findall(r"ngpus=(\d+)", text))


def _epoch(fields: dict[str, str], key: str) -> Optional[dt.datetime]:
    v = fields.get(key)
    if v is None or v == "" or v == "0":
        return None
    if not v.isdigit():
        raise ValueError(f"{key}={v!r} is not an epoch time")
    return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(v))


def _duration(fields: dict[str, str], key: str) -> Optional[float]:
    return field_value(fields, key, parse_duration, "a duration")


def _int(fields: dict[str, str], key: str) -> Optional[int]:
    return field_value(fields, key, int, "an integer")


def _exit(status: int, elapsed: Optional[float], limit: Optional[float]) -> tuple[str, str]:
    """Exit_status -> (state, 'code:signal'). 256+N / 10000+N: killed by signal N."""
    sig = None
    if status > 10000:
        sig = status - 10000
    elif status > 256:
        sig = status - 256
    if sig is not None:
        timed_out = elapsed is not None and limit and elapsed >= limit
        return ("TIMEOUT" if timed_out else "CANCELLED"), f"0:{sig}"
    if status == 0:
        return "COMPLETED", "0:0"
    if status < 0:   # JOB_EXEC_* codes: the job did not run to an exit (e.g. -11 = rerun)
        return "FAILED", f"{status}:0"
    return "FAILED", f"{status % 256}:0"


def _record(rtype: str, jobid: str, fields: dict[str, str], rtime: dt.datetime, cluster: Optional[str]) -> dict:
    m = _JOBID.match(jobid.strip())
    if not m:
        raise ValueError(f"not a PBS job id: {jobid!r}")
    seq, idx, idx2, server = m.groups()
    idx = idx if idx not in (None, "") else idx2
    raw = f"{seq}[{idx}]" if idx is not None else seq
    nulls: dict[str, str] = {}
    row: dict = {"job_id": raw, "job_id_raw": raw, "source": SOURCE,
                 "cluster": cluster or (server.split(".")[0] if server else None) or "default"}
    if idx is not None:
        row.update(array_job_id=seq, array_task_id=idx)
    row["user"] = fields.get("user") or None
    row["group"] = fields.get("group") or None
    project = fields.get("project")
    row["account"] = fields.get("account") or (project if project and project != "_pbs_project_default" else None)
    row["job_name"] = fields.get("jobname") or None
    row["partition"] = fields.get("queue") or None
    row["submit_time"] = _epoch(fields, "ctime") or _epoch(fields, "qtime")
    row["eligible_time"] = _epoch(fields, "etime")
    row["start_time"] = _epoch(fields, "start")
    row["end_time"] = _epoch(fields, "end")
    limit = _duration(fields, "Resource_List.walltime")
    row["timelimit_s"] = int(limit) if limit is not None else None
    elapsed = _duration(fields, "resources_used.walltime")
    if elapsed is None and row["start_time"] and row["end_time"]:
        elapsed = (row["end_time"] - row["start_time"]).total_seconds()
    if row["start_time"] and row["end_time"] and row["end_time"] < row["start_time"]:
        raise ValueError(f"end ({fields.get('end')}) before start ({fields.get('start')})")
    row["elapsed_s"] = int(elapsed) if elapsed is not None else None
    row["cpu_time_s"] = _duration(fields, "resources_used.cput")

    slots, hosts = exec_host_slots(fields["exec_host"]) if fields.get("exec_host") else (0, [])
    nodes_n, nodes_cores, nodes_gpus = nodes_spec(fields["Resource_List.nodes"]) if fields.get("Resource_List.nodes") else (None, None, 0)
    rl_ncpus = _int(fields, "Resource_List.ncpus")
    cands = [c for c in (rl_ncpus, nodes_cores) if c]
    row["ncpus"] = (_int(fields, "resources_used.ncpus") or slots or _int(fields, "total_execution_slots")
                    or (max(cands) if cands else None))
    row["node_list"] = ",".join(hosts) or None
    row["nnodes"] = len(hosts) or _int(fields, "unique_node_count") or (
        _int(fields, "Resource_List.nodect") if (fields.get("Resource_List.nodect") or "").isdigit() else None) or nodes_n

    gpus = _int(fields, "Resource_List.ngpus")
    if gpus is None and fields.get("Resource_List.nodes"):
        gpus = nodes_gpus
    if gpus is None and fields.get("Resource_List.nodect") and not fields["Resource_List.nodect"].isdigit():
        gpus = nodes_spec(fields["Resource_List.nodect"])[2]
    if gpus is None and fields.get("exec_vnode"):
        gpus = vnode_gpus(fields["exec_vnode"])
    row["ngpus"] = gpus

    for key, col in (("resources_used.mem", "mem_peak_bytes"), ("Resource_List.mem", "mem_req_bytes")):
        v = fields.get(key)
        if v:
            try:
                row[col] = pbs_mem(v)
            except limits.OutOfLimits as exc:   # a size, but none a machine has: the record is rejected
                raise ValueError(f"{key}: {exc}") from None
            except ValueError:                  # another form ('12.27M'): NULL with the text
                nulls[col] = v
    if row.get("mem_req_bytes") is None and fields.get("Resource_List.pmem") and row["ncpus"]:
        try:
            row["mem_req_bytes"] = pbs_mem(fields["Resource_List.pmem"]) * row["ncpus"]
        except limits.OutOfLimits as exc:
            raise ValueError(f"Resource_List.pmem: {exc}") from None
        except ValueError:
            nulls["mem_req_bytes"] = fields["Resource_List.pmem"]

    run_count = _int(fields, "run_count") or _int(fields, "start_count")
    row["restarts"] = run_count - 1 if run_count else None
    if rtype == "E":
        status = fields.get("Exit_status", fields.get("exit_status"))
        if status is None or status == "":
            nulls["exit_code"] = "no Exit_status"
        else:
            try:
                code = int(status)
            except ValueError:
                raise ValueError(f"Exit_status={status!r} is not an integer") from None
            row["state"], row["exit_code"] = _exit(code, elapsed, limit)
        if row["end_time"] is None:
            row["end_time"] = rtime
    elif rtype == "S":
        row["state"] = "RUNNING"
        row["end_time"] = None
    elif rtype == "Q":
        row["state"] = "PENDING"
        row["submit_time"] = row["submit_time"] or rtime
    elif rtype == "D":
        row["state"] = "CANCELLED"
        row["end_time"] = rtime
    row["null_reasons"] = json.dumps(nulls) if nulls else None
    return row


def _to_utc(groups, zone) -> dt.datetime:
    mo, d, y, hh, mi, ss = (int(g) for g in groups)
    t = dt.datetime(y, mo, d, hh, mi, ss)
    t = t.replace(tzinfo=zone)
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None)


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    zone = zoneinfo.ZoneInfo(opts.timezone or local_zone_name())
    rows: list[dict] = []
    seen: dict[tuple, dict] = {}     # (cluster, job_id_raw) -> the job's last row in this file
    skipped: Counter = Counter()
    comments = 0
    text = path.read_bytes().decode("utf-8", errors="replace")
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        result.rows_in += 1
        if line.startswith("#"):
            comments += 1
            continue
        m = _LINE.match(line.rstrip("\r"))
        if not m:
            result.rejects.append(Reject(line_no, "not a PBS accounting record (MM/DD/YYYY HH:MM:SS;type;jobid;...)", line[:1000]))
            continue
        rtype, jobid, rest = m.group(7), m.group(8), m.group(9)
        if rtype not in ("E", "S", "Q", "D"):
            skipped[rtype] += 1
            continue
        try:
            fields = split_pairs(rest)
            rtime = _to_utc(m.groups()[:6], zone)
            row = _record(rtype, jobid, fields, rtime, opts.cluster)
            key = (row["cluster"], row["job_id_raw"])
            if rtype == "D" and key in seen:
                # a deletion record names only the requestor: keep what earlier records said
                row = {**seen[key], "state": "CANCELLED", "exit_code": None, "end_time": rtime}
            limits.check(row)
            seen[key] = row
            rows.append(row)
        except (ValueError, KeyError, OverflowError) as exc:
            result.rejects.append(Reject(line_no, f"PBS {rtype} record {jobid}: {exc}", line[:1000]))
    result.dropped = comments + sum(skipped.values())
    if comments:
        result.notes.append(f"{comments} comment line(s) ('#') skipped")
    for rtype, n in sorted(skipped.items()):
        what = _SKIP.get(rtype, f"{rtype} records")
        result.notes.append(f"{n} {what} skipped: the job's E record carries its outcome")
    if rows:
        result.jobs = pl.DataFrame({c: pl.Series(c, [r.get(c) for r in rows], dtype=t, strict=False)
                                    for c, t in SCHEMA.items()})
    return result
