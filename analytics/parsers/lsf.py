"""LSF lsb.acct JOB_FINISH records -> job rows (source lsf).

A record is blank-separated fields, strings in double quotes with "" for a quote inside; a quoted
field may hold a newline, so a record ends at the first newline outside quotes. One record = one
input row (its first line is the line number). The variable-length parts are walked by their
counts: numAskedHosts + hosts, numExHosts + hosts (`16*host` = 16 slots), submitEXT (n + n
key/value pairs), numHostRusage (n entries of hostname mem swap utime stime [+ more in later
versions: the entry width is found from where the host names are). Records of versions 5.1 to
10.x end at different fields; the fields read after maxRSwap are optional.
Mapping (unavailable values "", 0 and -1 become NULL, the raw value kept in null_reasons; another
negative time, size or count rejects the record, as values beyond analytics/limits.py do):
  jobId [+ '[idx]' when idx > 0]     -> job_id_raw / job_id; array_job_id, array_task_id
  userName, queue, projectName, jobName -> user, partition, account, job_name
  submitTime, startTime, eventTime   -> submit_time, start_time, end_time (UTC epochs)
  runTime (else end - start)         -> elapsed_s;  runLimit -> timelimit_s
  execHosts slots (else numProcessors) -> ncpus; distinct hosts -> nnodes, node_list
  maxRMem (KB)                       -> mem_peak_bytes;  ru_utime + ru_stime -> cpu_time_s
  exitStatus (a wait status)         -> exit_code 'code:signal' (65280 -> '255:0', 9 -> '0:9')
  jStatus 64 DONE -> COMPLETED; 32 EXIT -> by exitInfo: 5 TERM_RUNLIMIT -> TIMEOUT, 8/9/14/15
  (owner/admin kill) -> CANCELLED, 16 TERM_MEMLIMIT -> OUT_OF_MEMORY, 1 TERM_PREEMPT -> PREEMPTED,
  else FAILED (never started and killed -> CANCELLED)
  GPUs: `ngpus_physical=N` in resReq / effectiveResReq / submitEXT values, or `-gpu "num=N"` in
  those or in the job script (#BSUB -gpu); N is per host, so ngpus = N x nnodes
Other events (JOB_RESIZE, EVENT_ADRSV_FINISH) and '#' lines are dropped and counted in a note.
Cluster: opts.cluster, else "default" (lsb.acct names none).
"""
from __future__ import annotations

import datetime as dt
import json
import math
import pathlib
import re
from collections import Counter
from typing import Optional

import polars as pl

from jobsight.analytics import limits
from jobsight.analytics.records import ParseOptions, ParseResult, Reject, field_value

FORMAT = "lsf"
SOURCE = "lsf"
MAX_RECORD_LINES = 2000     # a quote left open this long is a broken record, not a script

_TOKEN = re.compile(r'"((?:[^"]|"")*)"|([^\s"]+)')
_ALNUM = re.compile(r"[0-9A-Za-z]")
_NGPUS = re.compile(r"ngpus(?:_physical)?\s*=\s*(\d+)")
_GPUOPT = re.compile(r"-gpu\s+\"?[^\"\n]*?\bnum=(\d+)")
_EPOCH0 = dt.datetime(1970, 1, 1)

SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String, "array_job_id": pl.String,
    "array_task_id": pl.String, "job_name": pl.String, "user": pl.String, "account": pl.String,
    "partition": pl.String, "state": pl.String, "exit_code": pl.String, "submit_time": pl.Datetime("us"),
    "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"), "elapsed_s": pl.Int64,
    "timelimit_s": pl.Int64, "ncpus": pl.Int64, "nnodes": pl.Int64, "ngpus": pl.Int64,
    "mem_peak_bytes": pl.Int64, "cpu_time_s": pl.Float64, "node_list": pl.String,
    "null_reasons": pl.String, "source": pl.String,
}
_RUSAGE = ("ru_utime", "ru_stime", "ru_maxrss", "ru_ixrss", "ru_ismrss", "ru_idrss", "ru_isrss", "ru_minflt",
           "ru_majflt", "ru_nswap", "ru_inblock", "ru_oublock", "ru_ioch", "ru_msgsnd", "ru_msgrcv",
           "ru_nsignals", "ru_nvcsw", "ru_nivcsw", "ru_exutime")
_AFTER_RUSAGE = ("mailUser", "projectName", "exitStatus", "maxNumProcessors", "loginShell", "timeEvent", "idx",
                 "maxRMem", "maxRSwap")
_OPTIONAL = ("inFileSpool", "commandSpool", "rsvId", "sla", "exceptMask", "additionalInfo", "exitInfo",
             "warningAction", "warningTimePeriod", "chargedSAAP", "licenseProject", "app", "postExecCmd",
             "runtimeEstimation", "jgroup", "requeueEValues", "options2", "resizeNotifyCmd", "lastResizeTime",
             "rsvId2", "jobDescription")
_AFTER_HOSTRUSAGE = ("runLimit", "options3", "avgMem", "effectiveResReq", "srcCluster", "srcJobId", "dstCluster",
                     "dstJobId", "forwardTime", "flow_id", "acJobWaitTime", "totalProvisionTime", "outdir", "runTime")
_HEAD = ("event", "version", "eventTime", "jobId", "userId", "options", "numProcessors", "submitTime", "beginTime",
         "termTime", "startTime", "userName", "queue", "resReq", "dependCond", "preExecCmd", "fromHost", "cwd",
         "inFile", "outFile", "errFile", "jobFile")
_TERM = {5: "TIMEOUT", 8: "CANCELLED", 9: "CANCELLED", 14: "CANCELLED", 15: "CANCELLED", 16: "OUT_OF_MEMORY",
         1: "PREEMPTED"}


def sniff(head: str, path: pathlib.Path) -> bool:
    lines = [ln for ln in head.splitlines() if ln.strip() and not ln.startswith("#")]
    return bool(lines) and lines[0].startswith('"JOB_FINISH" "') or any(
        ln.startswith(('"JOB_FINISH" "', '"JOB_RESIZE" "', '"EVENT_ADRSV_FINISH" "')) for ln in lines[:5])


def tokenize(text: str) -> list[tuple[str, bool]]:
    """Record text -> [(value, was_quoted)]; "" inside a quoted field is one quote."""
    # findall gives (quoted, bare); a bare word is never empty, so an empty one marks a quoted field
    return [(w, False) if w else ((q.replace('""', '"') if '""' in q else q), True) for q, w in _TOKEN.findall(text)]


def records(lines: list[str]):
    """Yield (line_no, text, error) per record; error says why a record could not be delimited."""
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.startswith("#"):
            yield i + 1, line, "comment"
            i += 1
            continue
        buf, j = line, i
        while buf.count('"') % 2 and j + 1 < n and j - i < MAX_RECORD_LINES:
            j += 1
            buf += "\n" + lines[j]
        if buf.count('"') % 2:
            yield i + 1, line, "a quoted field is never closed"
            i += 1
            continue
        yield i + 1, buf, None
        i = j + 1


class _Walk:
    def __init__(self, toks):
        self.toks, self.pos = toks, 0

    def take(self, name: str) -> str:
        if self.pos >= len(self.toks):
            raise ValueError(f"record ends before {name} (field {self.pos + 1}): truncated")
        v = self.toks[self.pos][0]
        self.pos += 1
        return v

    def count(self, name: str) -> int:
        v = self.take(name)
        if not re.fullmatch(r"\d+", v):
            raise ValueError(f"{name}={v!r} is not a count (field {self.pos})")
        return int(v)

    def left(self) -> int:
        return len(self.toks) - self.pos


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(text)
    return v


def _num(f: dict, key: str) -> Optional[float]:
    return field_value(f, key, _finite, "a finite number")


def _nonneg(f: dict, key: str) -> Optional[float]:
    """A count, size or time: -1 is LSF's "unavailable" (the callers make it NULL); below that, the reason."""
    v = _num(f, key)
    if v is not None and v < 0 and v != -1:
        raise ValueError(f"{key}={f[key]!r} is negative")
    return v


def _hostrusage_width(toks, start: int, n: int) -> int:
    """Width of a hostRusage entry: 5 (hostname mem swap utime stime) in the manual, 6 in 9.x/10.x
    files. The right width puts a host name at every entry start and a number right after."""
    for w in (5, 6, 7, 8):
        end = start + n * w
        if end > len(toks):
            break
        if all(not re.fullmatch(r"-?[\d.]+", toks[start + k * w][0]) for k in range(n)) and \
                all(re.fullmatch(r"-?[\d.]+", toks[start + k * w + 1][0]) for k in range(n)) and \
                (end == len(toks) or re.fullmatch(r"-?\d+", toks[end][0])):
            return w
    raise ValueError(f"numHostRusage={n}: host entries not found")


def walk(toks: list[tuple[str, bool]], notes: Counter) -> dict:
    w = _Walk(toks)
    f: dict = {k: w.take(k) for k in _HEAD}
    # "02" where "0 2" was meant (a blank lost by hand-editing): numAskedHosts 0, numExHosts 2
    if w.pos < len(toks) and re.fullmatch(r"0\d+", toks[w.pos][0]) and not toks[w.pos][1]:
        v = toks[w.pos][0]
        toks[w.pos:w.pos + 1] = [("0", False), (v[1:], False)]
        notes[f"numAskedHosts/numExHosts written together as {v!r}: read as 0 and {v[1:]}"] += 1
    f["askedHosts"] = [w.take("askedHosts") for _ in range(w.count("numAskedHosts"))]
    f["execHosts"] = [w.take("execHosts") for _ in range(w.count("numExHosts"))]
    for k in ("jStatus", "hostFactor", "jobName", "command") + _RUSAGE + _AFTER_RUSAGE:
        f[k] = w.take(k)
    for k in _OPTIONAL:
        if not w.left():
            return f
        f[k] = w.take(k)
    if not w.left():
        return f
    n = w.count("submitEXT")
    f["submitEXT"] = {}
    for _ in range(n):
        key = w.take("submitEXT key")
        f["submitEXT"][key] = w.take("submitEXT value")
    if not w.left():
        return f
    n = w.count("numHostRusage")
    if n:
        width = _hostrusage_width(toks, w.pos, n)
        w.pos += n * width
    for k in _AFTER_HOSTRUSAGE:
        if not w.left():
            return f
        f[k] = w.take(k)
    return f


def _epoch(f: dict, key: str, nulls: dict) -> Optional[dt.datetime]:
    v = _nonneg(f, key)
    if v is None or v <= 0:
        if key in f:
            nulls[_COL.get(key, key)] = f[key]
        return None
    return _EPOCH0 + dt.timedelta(seconds=int(v))


_COL = {"startTime": "start_time", "submitTime": "submit_time", "eventTime": "end_time"}


def expand_hosts(hosts: list[str]) -> tuple[int, list[str]]:
    """['16*h1', 'h2', 'h2'] -> (18, ['h1', 'h2'])."""
    slots, seen = 0, []
    for h in hosts:
        n, star, name = h.partition("*")
        if star and n.isdigit():
            slots += int(n)
        else:
            name, slots = h, slots + 1
        if name not in seen:
            seen.append(name)
    return slots, seen


def gpus_per_host(f: dict) -> Optional[int]:
    texts = [f.get("resReq") or "", f.get("effectiveResReq") or ""] + list((f.get("submitEXT") or {}).values())
    for t in texts:
        m = _NGPUS.search(t) or _GPUOPT.search(t)
        if m:
            return int(m.group(1))
    m = re.search(r"#BSUB\s+-gpu\s+\"?[^\";\n]*?\bnum=(\d+)", f.get("command") or "")
    return int(m.group(1)) if m else None


def row_of(f: dict, cluster: str) -> dict:
    if f["event"] != "JOB_FINISH":
        raise ValueError(f"not a JOB_FINISH record: {f['event']!r}")
    nulls: dict[str, str] = {}
    job = f["jobId"]
    if not job.isdigit():
        raise ValueError(f"jobId={job!r} is not a number")
    idx = _num(f, "idx")
    raw = f"{job}[{int(idx)}]" if idx and idx > 0 else job
    row: dict = {"cluster": cluster, "job_id": raw, "job_id_raw": raw, "source": SOURCE}
    if raw != job:
        row.update(array_job_id=job, array_task_id=str(int(idx)))
    row["user"] = f["userName"] or None
    row["partition"] = f["queue"] or None
    row["account"] = f.get("projectName") or None
    row["job_name"] = f["jobName"] or None
    row["submit_time"] = _epoch(f, "submitTime", nulls)
    row["start_time"] = _epoch(f, "startTime", nulls)
    row["end_time"] = _epoch(f, "eventTime", nulls)
    if row["start_time"] and row["end_time"] and row["end_time"] < row["start_time"]:
        raise ValueError(f"eventTime ({f['eventTime']}) before startTime ({f['startTime']})")
    run = _nonneg(f, "runTime")
    if run is not None and run >= 0 and row["start_time"]:
        row["elapsed_s"] = int(run)
    elif row["start_time"] and row["end_time"]:
        row["elapsed_s"] = int((row["end_time"] - row["start_time"]).total_seconds())
    elif row["end_time"]:
        row["elapsed_s"] = 0          # never started
    limit = _nonneg(f, "runLimit")
    if limit is not None and limit > 0:
        row["timelimit_s"] = int(limit)
    elif "runLimit" in f:
        nulls["timelimit_s"] = f["runLimit"]
    slots, hosts = expand_hosts(f["execHosts"])
    nproc = _nonneg(f, "numProcessors")
    row["ncpus"] = slots or (int(nproc) if nproc and nproc > 0 else None)
    row["nnodes"] = len(hosts) or None
    row["node_list"] = ",".join(hosts) or None
    per_host = gpus_per_host(f)
    row["ngpus"] = per_host * (len(hosts) or 1) if per_host is not None else None
    mem = _nonneg(f, "maxRMem")
    if mem is not None and mem > 0:
        row["mem_peak_bytes"] = int(mem) * 1024
    else:
        nulls["mem_peak_bytes"] = f["maxRMem"]
    ut, st = _nonneg(f, "ru_utime"), _nonneg(f, "ru_stime")
    parts = [x for x in (ut, st) if x is not None and x >= 0]
    if parts:
        row["cpu_time_s"] = round(sum(parts), 6)
    else:
        nulls["cpu_time_s"] = f"{f['ru_utime']} {f['ru_stime']}"
    status = _num(f, "exitStatus")
    if status is None or status < 0:
        raise ValueError(f"exitStatus={f['exitStatus']!r} is not a wait status")
    status = int(status)
    row["exit_code"] = f"{(status >> 8) & 0xff}:{status & 0x7f}"
    jstat = _num(f, "jStatus")
    if jstat is None:
        raise ValueError("jStatus missing")
    jstat = int(jstat)
    if jstat & 64:
        row["state"] = "COMPLETED"
    elif jstat & 32:
        info = _num(f, "exitInfo")
        state = _TERM.get(int(info), "FAILED") if info is not None else "FAILED"
        if row["start_time"] is None and state == "FAILED":
            state = "CANCELLED"
        row["state"] = state
    else:
        raise ValueError(f"jStatus={jstat} is neither DONE (64) nor EXIT (32): fields out of step?")
    hf = f.get("hostFactor")
    try:
        float(hf)
    except (TypeError, ValueError):
        raise ValueError(f"hostFactor={hf!r} is not a number: fields out of step") from None
    row["null_reasons"] = json.dumps(nulls) if nulls else None
    return row


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    cluster = opts.cluster or "default"
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    notes: Counter = Counter()
    other: Counter = Counter()
    comments = 0
    rows = []
    for line_no, text, err in records(lines):
        result.rows_in += 1
        if err == "comment":
            comments += 1
            continue
        if err:
            result.rejects.append(Reject(line_no, f"lsb.acct record: {err}", text[:1000]))
            continue
        toks = tokenize(text)
        if not toks or not toks[0][1]:
            result.rejects.append(Reject(line_no, "not an lsb.acct record (does not start with a quoted event name)", text[:1000]))
            continue
        stray = [v for v, quoted in toks if not quoted and not v[0].isalnum() and not _ALNUM.search(v)]
        if stray:   # LSF writes no unquoted token without a letter or digit: stray bytes (lsb.acct gl-26)
            toks = [t for t in toks if t[1] or _ALNUM.search(t[0])]
            notes[f"stray unquoted bytes {' '.join(stray)!r} removed"] += 1
        if toks[0][0] != "JOB_FINISH":
            other[toks[0][0]] += 1
            continue
        try:
            row = row_of(walk(toks, notes), cluster)
            limits.check(row)
            rows.append(row)
        except (ValueError, KeyError, OverflowError) as exc:
            result.rejects.append(Reject(line_no, f"JOB_FINISH: {exc}", text[:1000]))
    result.dropped = comments + sum(other.values())
    if comments:
        result.notes.append(f"{comments} comment line(s) ('#') skipped")
    for ev, n in sorted(other.items()):
        result.notes.append(f"{n} {ev} record(s) skipped: only JOB_FINISH records describe finished jobs")
    result.notes.extend(f"{n} record(s): {what}" for what, n in notes.items())
    if rows:
        result.jobs = pl.DataFrame({c: pl.Series(c, [r.get(c) for r in rows], dtype=t, strict=False)
                                    for c, t in SCHEMA.items()})
    return result
