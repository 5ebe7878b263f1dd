"""`sacct --json` (and slurmrestd /slurmdb/.../jobs responses, same job schema) -> job and step rows.

Covers openapi/dbv0.0.37-38 (Slurm 21.08-22.05) and data_parser v0.0.39-v0.0.44 (23.02-25.11).
The shapes that differ across versions are normalised by small helpers:
- numbers: plain ints (dbv0.0.38) or ``{set, infinite, number}`` structs (v0.0.39+);
  unset -> NULL, infinite -> NULL with the reason kept in ``null_reasons``;
- ``state.current`` / step ``state``: a string (<= v0.0.39) or a list of flags (v0.0.40+): the first
  entry is the base state;
- ``exit_code``: ``{status, return_code, signal: {signal_id|id, name}}`` -> 'code:signal';
- step id: ``step.id`` "123.batch" (v0.0.39+), or ``step.id`` "batch" with ``step.job_id``
  (dbv0.0.38), or a ``{job_id, step_id}`` object; numeric special ids map to batch/extern/interactive.
Units: job ``tres.allocated`` / ``tres.requested`` mem counts are MiB; step usage TRES (``tres.requested``
= TRESUsageIn, ``tres.consumed`` = TRESUsageOut) mem/vmem/gres/gpumem counts are bytes; time.limit is
minutes; times are Unix epochs (0 = unset).
rows_in = jobs + steps. A job that cannot be read is rejected with line_no = its 1-based index in
``jobs`` (its steps are rejected with it); a bad step is rejected alone with its job's index.
A document larger than lengths.MAX_JSON_BYTES is not read: one row, rejected with the reason.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import pathlib
import re
from collections import Counter
from typing import Any, Optional

import polars as pl

from jobsight.analytics.ingest import lengths, limits, slurm_values
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject
from jobsight.analytics.ingest.units import tres_gpus

FORMAT = "sacct-json"
SOURCE = "slurm-sacct-json"
_MIB = 1024 ** 2
_NO_VAL = 0xFFFFFFFE            # Slurm NO_VAL / INFINITE as plain ints in dbv0.0.38
_SPECIAL_STEPS = {0xFFFFFFFB: "batch", 0xFFFFFFFC: "extern", 0xFFFFFFFA: "interactive", 0xFFFFFFFD: "pending"}


class _Null:
    """A number that is absent for a reason (infinite, unset)."""

    def __init__(self, why: str):
        self.why = why


def _num(value: Any, markers: bool = True) -> Any:
    """int/float, None (absent) or _Null(reason) from a plain number or a {set, infinite, number}
    struct; a Slurm marker or a sum of markers (slurm_values.marker) is _Null too, unless markers
    is False (times, whose negative values are refused by the caller)."""
    if type(value) is int and 0 <= value < _NO_VAL:   # the common case, first
        return value
    if isinstance(value, dict):
        if value.get("infinite"):
            return _Null("INFINITE")
        if not value.get("set", True):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):   # 1e999, Infinity, NaN
            raise ValueError(f"not a finite number: {value!r}")
        what = slurm_values.marker(value) if markers else None
        if what is not None:
            return _Null(what)
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"not a number: {value!r}")


def _plain(value: Any, markers: bool = True) -> Optional[float]:
    v = _num(value, markers)
    return None if v is None or isinstance(v, _Null) else v


_LATEST = (limits.LATEST - limits.EARLIEST).total_seconds()


def _epoch(value: Any, name: str) -> Optional[dt.datetime]:
    """Unix time -> naive UTC; 0 is unset (None). Before 1970 or after the limit: the reason."""
    v = _plain(value, markers=False)
    if not v or v in (-1, -2):     # 0, NO_VAL, INFINITE: not set
        return None
    if v < 0:
        raise ValueError(f"time.{name} {v} is before 1970-01-01")
    if v >= _LATEST:
        raise ValueError(f"time.{name} {v} is after {limits.LATEST:%Y-%m-%d}")
    return dt.datetime.fromtimestamp(v, dt.timezone.utc).replace(tzinfo=None)


def _first_state(value: Any) -> Optional[str]:
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"state is not a string or list: {value!r}")
    return value.strip().upper()


def _exit_code(ec: Any) -> Optional[str]:
    if ec is None:
        return None
    if not isinstance(ec, dict):
        v = _plain(ec)
        return None if v is None else f"{int(v)}:0"
    rc = _plain(ec.get("return_code"))
    sig = ec.get("signal") or {}
    sig_id = _plain(sig.get("id", sig.get("signal_id"))) if isinstance(sig, dict) else None
    if rc is None and sig_id is None:
        return None
    return f"{int(rc or 0)}:{int(sig_id or 0)}"


def _cpu_seconds(t: Any) -> Optional[float]:
    if not isinstance(t, dict):
        return None
    s, us = _plain(t.get("seconds")), _plain(t.get("microseconds"))
    if s is None and us is None:
        return None
    return float(s or 0) + float(us or 0) / 1e6


def _tres_items(items: Any, found: Optional[set] = None) -> list[tuple[str, float]]:
    """[{type, name, count}] -> [('gres/gpu:a100', 1), ('mem', 512), ...], leaving out absent counts,
    Slurm's markers and their sums (an unset energy: -2, -8, 9223372036854775806) and counts that
    cannot be true (inf, nan): such an item is unknown, added to found as (field, kind), and the row
    is kept."""
    out = []
    if not items:
        return out
    if not isinstance(items, list):
        raise ValueError("TRES is not a list")
    for it in items:
        if not isinstance(it, dict) or "type" not in it:
            raise ValueError(f"TRES item without a type: {it!r}")
        key = it["type"] + (f"/{it['name']}" if it.get("name") else "")
        try:
            count = _num(it.get("count"))
            kind = "marker"
        except ValueError:
            count, kind = _Null("impossible"), "impossible"
        if isinstance(count, _Null) and found is not None:
            found.add((f"TRES {key}", kind))
        if count is None or isinstance(count, _Null):
            continue
        out.append((key, count))
    return out


def _tres_string(items: list[tuple[str, float]], mem_unit: str = "") -> Optional[str]:
    if not items:
        return None
    parts = []
    for key, count in items:
        c = int(count) if float(count).is_integer() else count
        parts.append(f"{key}={c}{mem_unit if key == 'mem' else ''}")
    return ",".join(parts)


def _get(items: list[tuple[str, float]], key: str) -> Optional[float]:
    for k, c in items:
        if k == key:
            return c
    return None


def _step_id(step: dict, job_raw: str) -> str:
    sid = step.get("step") or {}
    if not isinstance(sid, dict):
        raise ValueError("step.step is not an object")
    ident = sid.get("id")
    if isinstance(ident, dict):                 # {job_id, step_id[, step_het_component]}
        ident = ident.get("step_id")
    if isinstance(ident, (int, float)) and not isinstance(ident, bool):
        return _SPECIAL_STEPS.get(int(ident), str(int(ident)))
    if not isinstance(ident, str) or not ident:
        raise ValueError(f"step without an id: {sid!r}")
    if "." in ident:                            # "123.batch", "123_4.0", "17+0.batch"
        ident = ident.split(".", 1)[1]
    if ident.isdigit() and int(ident) in _SPECIAL_STEPS:
        ident = _SPECIAL_STEPS[int(ident)]
    return ident


def _printed_id(job: dict, job_raw: str) -> tuple[str, Optional[str], Optional[str], Optional[str], Optional[int]]:
    """(JobID as sacct prints it, array_job_id, array_task_id, het_job_id, het_offset)."""
    arr = job.get("array") or {}
    het = job.get("het") or {}
    a_job = _plain(arr.get("job_id")) if isinstance(arr, dict) else None
    a_task = _num(arr.get("task_id")) if isinstance(arr, dict) else None
    a_task_str = arr.get("task") if isinstance(arr, dict) else None
    h_job = _plain(het.get("job_id")) if isinstance(het, dict) else None
    h_off = _num(het.get("job_offset")) if isinstance(het, dict) else None
    if a_job:
        if isinstance(a_task, (int, float)):
            return f"{int(a_job)}_{int(a_task)}", str(int(a_job)), str(int(a_task)), None, None
        if a_task_str:
            task = f"[{a_task_str}]" if not a_task_str.startswith("[") else a_task_str
            return f"{int(a_job)}_{task}", str(int(a_job)), task, None, None
        return job_raw, str(int(a_job)), None, None, None
    if h_job and isinstance(h_off, (int, float)):
        return f"{int(h_job)}+{int(h_off)}", None, None, str(int(h_job)), int(h_off)
    return job_raw, None, None, None, None


def _usage(tres: dict, side: str, stat: str, found: set) -> list[tuple[str, float]]:
    part = tres.get(side) if isinstance(tres, dict) else None
    if not isinstance(part, dict):
        return []
    return _tres_items(part.get(stat), found)


def _failed_exit_code(state: Optional[str], exit_code: Optional[str], nulls: dict[str, str]) -> Optional[str]:
    """Slurm 22.05 (dbv0.0.38) reports the return code of a job or step that exited non-zero as
    SUCCESS/0 (sacct text said 3:0 for the same job): NULL with the reason rather than a wrong 0:0."""
    if state == "FAILED" and exit_code == "0:0":
        nulls["exit_code"] = "JSON says 0:0 for a FAILED record (return code lost)"
        return None
    return exit_code


def _step_row(step: dict, job_raw: str, job_printed: str, cluster: str, tally: Counter) -> dict:
    if not isinstance(step, dict):
        raise ValueError("step is not an object")
    t = step.get("time") or {}
    nulls: dict[str, str] = {}
    tres = step.get("tres") or {}
    found: set = set()
    alloc = _tres_items(tres.get("allocated"), found) if isinstance(tres, dict) else []
    in_tot, in_max, in_ave = (_usage(tres, "requested", s, found) for s in ("total", "max", "average"))
    tally.update(found)
    nodes = step.get("nodes") or {}
    tasks = step.get("tasks") or {}
    sid = step.get("step") or {}
    elapsed = _num(t.get("elapsed"))
    row = {
        "cluster": cluster, "job_id_raw": job_raw, "step_id": _step_id(step, job_raw), "job_id": job_printed,
        "step_name": sid.get("name") if isinstance(sid, dict) else None,
        "state": _first_state(step.get("state")),
        "exit_code": _failed_exit_code(_first_state(step.get("state")), _exit_code(step.get("exit_code")), nulls),
        "start_time": _epoch(t.get("start"), "start"), "end_time": _epoch(t.get("end"), "end"),
        "elapsed_s": None if elapsed is None or isinstance(elapsed, _Null) else int(elapsed),
        "ncpus": _get(alloc, "cpu"), "nnodes": _plain(nodes.get("count")) if isinstance(nodes, dict) else None,
        "ntasks": _plain(tasks.get("count")) if isinstance(tasks, dict) else None,
        "cpu_time_s": _cpu_seconds(t.get("total")), "user_cpu_s": _cpu_seconds(t.get("user")),
        "system_cpu_s": _cpu_seconds(t.get("system")),
        "max_rss_bytes": _get(in_max, "mem"), "ave_rss_bytes": _get(in_ave, "mem"),
        "max_vmsize_bytes": _get(in_max, "vmem"), "mem_usage_tot_bytes": _get(in_tot, "mem"),
        "gpu_util_tres": _get(in_tot, "gres/gpuutil"), "gpu_mem_tres_bytes": _get(in_tot, "gres/gpumem"),
        "tres_usage_in_tot": _tres_string(in_tot), "tres_usage_in_max": _tres_string(in_max),
        "tres_usage_in_ave": _tres_string(in_ave),
        "node_list": nodes.get("range") if isinstance(nodes, dict) else None,
        "source": SOURCE,
    }
    if row["end_time"] is None and t.get("end") is not None:
        nulls["end_time"] = "0 (not ended)"
    slurm_values.settle(row, nulls, tally)
    row["null_reasons"] = json.dumps(nulls) if nulls else None
    return row


def _job_row(job: dict, cluster_default: str, steps: list[dict], tally: Counter) -> dict:
    if not isinstance(job, dict):
        raise ValueError("job is not an object")
    if job.get("job_id") is None:
        raise ValueError("job without job_id")
    if "state" not in job and "time" not in job:
        raise ValueError("not a sacct job record (no 'state' or 'time'; squeue/scontrol --json output?)")
    raw_id = _plain(job.get("job_id"))
    if raw_id is None:
        raise ValueError(f"job_id is not a number: {job.get('job_id')!r}")
    job_raw = str(int(raw_id))
    printed, a_job, a_task, h_job, h_off = _printed_id(job, job_raw)
    t = job.get("time") or {}
    if not isinstance(t, dict):
        raise ValueError("time is not an object")
    tres = job.get("tres") or {}
    found: set = set()
    alloc = _tres_items(tres.get("allocated"), found) if isinstance(tres, dict) else []
    req = _tres_items(tres.get("requested"), found) if isinstance(tres, dict) else []
    tally.update(found)
    nulls: dict[str, str] = {}
    limit = _num(t.get("limit"))
    timelimit_s = None
    if isinstance(limit, _Null):
        nulls["timelimit_s"] = "UNLIMITED" if limit.why == "INFINITE" else limit.why
    elif limit is not None:
        timelimit_s = int(limit) * 60
    elapsed = _plain(t.get("elapsed"))
    gtres = {k: str(c) for k, c in (alloc or req)
             if k.startswith("gres/gpu") and k not in ("gres/gpuutil", "gres/gpumem")}
    ngpus, gpu_type = tres_gpus(gtres)
    ncpus = _get(alloc, "cpu")
    if ncpus is None:                     # pending: sacct's NCPUS shows the request
        ncpus = _get(req, "cpu")
    if ncpus is None:
        req_block = job.get("required") or {}
        ncpus = (_plain(req_block.get("CPUs")) or None) if isinstance(req_block, dict) else None  # 0 = unknown
    nnodes = _get(alloc, "node")
    if nnodes is None:
        nnodes = _plain(job.get("allocation_nodes")) or _get(req, "node")
    mem_alloc = _get(alloc, "mem")
    mem_req = _get(req, "mem")
    # Job usage comes from its steps, as seff and sacct's job line do.
    step_cpu = [s["cpu_time_s"] for s in steps if s.get("cpu_time_s") is not None]
    cpu_time = sum(step_cpu) if steps else _cpu_seconds(t.get("total"))
    if not steps and cpu_time == 0:
        # sacct -X --json fetches no steps and reads the job's usage as 0: not measured, not idle
        cpu_time = None
        nulls["cpu_time_s"] = "0 without steps (sacct -X): not measured"
    peaks = [s for s in steps if s.get("mem_usage_tot_bytes") is not None]
    top = max(peaks, key=lambda s: s["mem_usage_tot_bytes"]) if peaks else None
    gutil = [s["gpu_util_tres"] for s in steps if s.get("gpu_util_tres") is not None]
    gmem = [s["gpu_mem_tres_bytes"] for s in steps if s.get("gpu_mem_tres_bytes") is not None]
    state = job.get("state") or {}
    if t.get("end") is not None and _epoch(t.get("end"), "end") is None:
        nulls["end_time"] = "0 (not ended)"
    if t.get("start") is not None and _epoch(t.get("start"), "start") is None:
        nulls["start_time"] = "0 (not started)"
    if "limit" in t and t["limit"] is None:
        nulls["timelimit_s"] = "UNLIMITED"          # dbv0.0.38 prints INFINITE as null (sacct text: UNLIMITED)
    job_state = _first_state(state.get("current") if isinstance(state, dict) else state)
    exit_code = _failed_exit_code(job_state, _exit_code(job.get("exit_code")), nulls)
    node_list = job.get("nodes")
    if isinstance(node_list, str) and node_list.strip().lower() in ("none assigned", "none", "(null)", ""):
        if node_list.strip():
            nulls["node_list"] = node_list  # a job that never ran has no nodes, as in sacct text
        node_list = None
    killer = job.get("kill_request_user")
    if isinstance(killer, str) and killer and job_state == "CANCELLED":
        nulls["cancelled_by_uid"] = killer         # a user name here, not the uid sacct text prints
    row = {
        "cluster": job.get("cluster") or cluster_default, "job_id": printed, "job_id_raw": job_raw,
        "array_job_id": a_job, "array_task_id": a_task, "het_job_id": h_job, "het_offset": h_off,
        "job_name": job.get("name"), "user": job.get("user"), "group": job.get("group"),
        "account": job.get("account"), "partition": job.get("partition"), "qos": job.get("qos"),
        "state": job_state, "exit_code": exit_code,
        "submit_time": _epoch(t.get("submission"), "submission"), "eligible_time": _epoch(t.get("eligible"), "eligible"),
        "start_time": _epoch(t.get("start"), "start"), "end_time": _epoch(t.get("end"), "end"),
        "elapsed_s": None if elapsed is None else int(elapsed), "timelimit_s": timelimit_s,
        "ncpus": ncpus, "nnodes": nnodes, "ngpus": ngpus, "gpu_type": gpu_type,
        "mem_req_bytes": None if mem_req is None else int(mem_req * _MIB),
        "mem_alloc_bytes": None if mem_alloc is None else int(mem_alloc * _MIB),
        "mem_peak_bytes": top["mem_usage_tot_bytes"] if top else None,
        "cpu_time_s": cpu_time, "billing": _get(alloc, "billing"),
        "alloc_tres": _tres_string(alloc, "M"), "req_tres": _tres_string(req, "M"),
        "gpu_util_tres": max(gutil) if gutil else None, "gpu_mem_tres_bytes": max(gmem) if gmem else None,
        "node_list": node_list, "restarts": _plain(job.get("restart_cnt")),
        "source": SOURCE,
    }
    slurm_values.settle(row, nulls, tally)
    row["null_reasons"] = json.dumps(nulls) if nulls else None
    return row


JOB_SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String, "array_job_id": pl.String,
    "array_task_id": pl.String, "het_job_id": pl.String, "het_offset": pl.Int32, "job_name": pl.String,
    "user": pl.String, "group": pl.String, "account": pl.String, "partition": pl.String, "qos": pl.String,
    "state": pl.String, "exit_code": pl.String, "submit_time": pl.Datetime("us"),
    "eligible_time": pl.Datetime("us"), "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"),
    "elapsed_s": pl.Int64, "timelimit_s": pl.Int64, "ncpus": pl.Int64, "nnodes": pl.Int64,
    "ngpus": pl.Int64, "gpu_type": pl.String, "mem_req_bytes": pl.Int64, "mem_alloc_bytes": pl.Int64,
    "mem_peak_bytes": pl.Int64, "cpu_time_s": pl.Float64, "billing": pl.Float64, "alloc_tres": pl.String,
    "req_tres": pl.String, "gpu_util_tres": pl.Float64, "gpu_mem_tres_bytes": pl.Int64,
    "node_list": pl.String, "restarts": pl.Int32, "null_reasons": pl.String, "source": pl.String,
}
STEP_SCHEMA = {
    "cluster": pl.String, "job_id_raw": pl.String, "step_id": pl.String, "job_id": pl.String,
    "step_name": pl.String, "state": pl.String, "exit_code": pl.String, "start_time": pl.Datetime("us"),
    "end_time": pl.Datetime("us"), "elapsed_s": pl.Int64, "ncpus": pl.Int64, "nnodes": pl.Int64,
    "ntasks": pl.Int64, "cpu_time_s": pl.Float64, "user_cpu_s": pl.Float64, "system_cpu_s": pl.Float64,
    "max_rss_bytes": pl.Int64, "ave_rss_bytes": pl.Int64, "max_vmsize_bytes": pl.Int64,
    "mem_usage_tot_bytes": pl.Int64, "gpu_util_tres": pl.Float64, "gpu_mem_tres_bytes": pl.Int64,
    "tres_usage_in_tot": pl.String, "tres_usage_in_max": pl.String, "tres_usage_in_ave": pl.String,
    "node_list": pl.String, "null_reasons": pl.String, "source": pl.String,
}


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    cols = {}
    for name, dtype in schema.items():
        values = [r.get(name) for r in rows]
        if dtype in (pl.Int64, pl.Int32):
            values = [None if v is None else int(v) for v in values]
        elif dtype == pl.Float64:
            values = [None if v is None else float(v) for v in values]
        cols[name] = pl.Series(name, values, dtype=dtype, strict=False)
    return pl.DataFrame(cols)


def sniff(head: str, path: pathlib.Path) -> bool:
    s = head.lstrip("\ufeff \t\r\n")
    return s.startswith("{") and '"jobs"' in head and ('"job_id"' in head or '"meta"' in head)


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    with open(path, "rb") as fh:   # one document, parsed whole: never more than the limit is read
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(lengths.MAX_JSON_BYTES + 1) if size <= lengths.MAX_JSON_BYTES else b""
    if size > lengths.MAX_JSON_BYTES or len(data) > lengths.MAX_JSON_BYTES:
        result.rows_in = 1
        result.rejects.append(Reject(1, f"a sacct --json document of {max(size, len(data)):,} bytes, larger than the "
                                        f"limit of {lengths.MAX_JSON_BYTES:,}: not read (split it with sacct -S/-E, "
                                        "or use sacct --parsable2, read in blocks)", None))
        return result
    text = data.decode("utf-8", errors="replace")
    del data
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        result.rows_in = 1
        result.rejects.append(Reject(exc.lineno, f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})", text[:1000]))
        return result
    except (ValueError, RecursionError) as exc:   # a number over 4300 digits, nesting too deep
        result.rows_in = 1
        result.rejects.append(Reject(1, f"not usable JSON: {str(exc)[:200]}", text[:1000]))
        return result
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        result.rows_in = 1
        result.rejects.append(Reject(1, "no 'jobs' list at the top level: not sacct --json output", text[:1000]))
        return result
    meta = doc.get("meta") or {}
    plugin = meta.get("plugin") if isinstance(meta, dict) else None
    ptype = str(plugin.get("type") or "") if isinstance(plugin, dict) else ""
    if "slurmctld" in ptype or re.fullmatch(r"openapi/v0\.0\.\d+", ptype):
        # squeue/scontrol --json: live controller state, not accounting; a different job schema
        result.rows_in = 1
        result.rejects.append(Reject(1, f"JSON from the controller ({ptype}: squeue/scontrol --json), not sacct --json", text[:1000]))
        return result
    if isinstance(plugin, dict):
        result.notes.append(f"Slurm JSON {plugin.get('data_parser') or plugin.get('type') or '?'}")
    meta_cluster = None
    if isinstance(meta, dict):
        sl = meta.get("slurm") or meta.get("Slurm") or {}
        meta_cluster = sl.get("cluster") if isinstance(sl, dict) else None
    cluster_default = opts.cluster or meta_cluster or "default"
    job_rows, step_rows = [], []
    tally: Counter = Counter()
    for index, job in enumerate(jobs, start=1):
        steps = job.get("steps") if isinstance(job, dict) else None
        steps = steps if isinstance(steps, list) else []
        result.rows_in += 1 + len(steps)
        try:
            job_raw = str(int(_plain(job.get("job_id")))) if isinstance(job, dict) and _plain(job.get("job_id")) is not None else None
            cluster = (job.get("cluster") if isinstance(job, dict) else None) or cluster_default
            printed = _printed_id(job, job_raw)[0] if job_raw else None
            good_steps = []
            for k, step in enumerate(steps, start=1):
                try:
                    if job_raw is None:
                        raise ValueError("its job has no job_id")
                    good_steps.append(_step_row(step, job_raw, printed, cluster, tally))
                except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
                    result.rejects.append(Reject(index, f"job {index} step {k}: {exc}", json.dumps(step)[:1000]))
            job_rows.append(_job_row(job, cluster_default, good_steps, tally))
            step_rows.extend(good_steps)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # Steps already rejected stay rejected; the others go down with their job.
            already = sum(1 for r in result.rejects if r.line_no == index)
            result.rejects.append(Reject(index, f"job {index}: {exc}", json.dumps(job)[:1000]))
            for _ in range(len(steps) - already):
                result.rejects.append(Reject(index, f"job {index}: step of a rejected job", None))
    slurm_values.report_tally(result, path.name, tally)
    if job_rows:
        result.jobs = _frame(job_rows, JOB_SCHEMA)
    if step_rows:
        result.steps = _frame(step_rows, STEP_SCHEMA)
    return result
