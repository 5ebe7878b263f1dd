"""The per-line reader: one sacct text line -> one output record, or the reason to reject it. It
holds the reference semantics; the column-wise conversion must give the same values."""
from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime, timezone
from typing import Optional
from zoneinfo import ZoneInfo

from jobsight.analytics.ingest import limits, slurm_values, timezones, units
from jobsight.analytics.ingest.parsers.sacct_format import (
    COLUMNS,
    CPU_TIME_FROM,
    DERIVED_CPUS,
    DERIVED_GPUS,
    ELAPSED_FROM,
    FREE_TEXT,
    JOBID_RE,
    OUT_SCHEMA,
    SOURCE,
    TRAILING,
    TRES_PARSED,
    Ctx,
    derives,
)


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


def _known_tres(text: str, found: set) -> str:
    """A TRES string without its items whose value is a Slurm marker or cannot be true (energy=-8,
    energy=18446744073709551614, billing=inf): those are unknown, added to found as (field, kind)."""
    keep = []
    for item in text.split(","):
        key, _, value = item.partition("=")
        kind = slurm_values.tres_item(key, value)
        if kind is None:
            keep.append(item)
        else:
            found.add((f"TRES {key.strip()}", kind))
    return ",".join(keep)


def _tres_values(text: str, target: str, rec: dict) -> None:
    if target not in TRES_PARSED:
        return
    tres = units.parse_tres(text)
    if target == "alloc_tres" or target == "req_tres":
        gpus, gtype = units.tres_gpus(tres)
        cpu = tres.get("cpu", "")
        rec["_cpu_" + target] = int(cpu) if cpu.isascii() and cpu.isdigit() else None   # only ever a derived core count
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


def parse_line(cols: list[str], fields: list[str], line_no: int, ctx: Ctx) -> dict:
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
        return _placed(cols, fields, line_no, ctx)
    if len(fields) < n:
        raise ValueError(f"{len(fields)} fields where the columns are {n} (truncated line?)")
    return _record(cols, fields, line_no, ctx)


_SHOWN = {"jobname": "JobName", "workdir": "WorkDir", "comment": "Comment", "submitline": "SubmitLine",
          "constraints": "Constraints", "admincomment": "AdminComment", "systemcomment": "SystemComment",
          "wckey": "WCKey", "reason": "Reason", "extra": "Extra", "container": "Container"}   # sacct's spelling
MAX_PLACEMENTS = 5000   # ways to share the extra fields among the free-text columns worth trying


def _shares(extra: int, k: int):
    """Every way to give `extra` fields to k columns, all to the first column first."""
    if k == 1:
        yield (extra,)
        return
    for first in range(extra, -1, -1):
        for rest in _shares(extra - first, k - 1):
            yield (first, *rest)


def _placed(cols: list[str], fields: list[str], line_no: int, ctx: Ctx) -> dict:
    """A line with more fields than columns: sacct does not escape the delimiter in free text (a
    job name, a WorkDir, a comment). Each way of giving the extra fields back to the free-text
    columns is tried; the one where every typed column parses is the record. None or several: the
    line is rejected with that reason. Only the rare too-long lines come here, one at a time."""
    n, extra = len(cols), len(fields) - len(cols)
    head = f"{len(fields)} fields where the columns are {n}: the extra delimiters cannot be placed"
    free = [i for i, c in enumerate(cols) if c in FREE_TEXT]
    if not free:
        raise ValueError(f"{head} (no free-text column such as JobName to absorb them)")
    shown = [_SHOWN.get(cols[i], cols[i]) for i in free]
    names = ", ".join(shown)
    strict: list[tuple[tuple[int, ...], dict]] = []   # every column parses and looks right
    loose: list[tuple[tuple[int, ...], dict]] = []    # every column parses
    first_error: Optional[str] = None
    for tried, share in enumerate(_shares(extra, len(free))):
        if tried >= MAX_PLACEMENTS:
            raise ValueError(f"{head} (more than {MAX_PLACEMENTS} ways to share {extra} among {names})")
        placed, at = [], 0
        for i in range(n):
            take = share[free.index(i)] if i in free else 0
            placed.append(ctx.delim.join(fields[at:at + take + 1]))
            at += take + 1
        try:
            rec = _record(cols, placed, line_no, ctx)
        except ValueError as exc:
            first_error = first_error or str(exc)
            continue
        loose.append((share, rec))
        if _looks_right(cols, placed):
            strict.append((share, rec))
            if len(strict) > 1:
                break
    # a placement whose names and WorkDir look right wins; failing that, one that merely parses
    # (a site's odd user name must not lose a line that has only one way to read)
    for found in (strict, loose):
        if len(found) == 1:
            return found[0][1]
        if len(found) > 1:
            ways = "; ".join(", ".join(f"{c} +{k}" for c, k in zip(shown, sh) if k) for sh, _ in found[:2])
            raise ValueError(f"{head} (more than one placement parses: {ways})")
    raise ValueError(f"{head} (no way of putting them in {names} lets every column parse; "
                     f"with all in {shown[0]}: {first_error})")


_SUBMITTERS = ("sbatch", "srun", "salloc")
_NAME_COLUMNS = ("user", "group", "account", "qos", "partition", "nodelist")


def _looks_right(cols: list[str], fields: list[str]) -> bool:
    """Text columns that parse whatever they hold, checked for what Slurm puts there: WorkDir is an
    absolute path; SubmitLine starts with the submitting command (sbatch, srun, salloc); user, group,
    account, QOS, partition and node names have no spaces, '/' or '='; a state (which parses as any
    word, for states a newer Slurm adds) is in capitals, as sacct prints it."""
    for col, text in zip(cols, fields):
        if col == "state" and text.strip() and not text.split()[0].rstrip("+").isupper():
            return False
        if col == "workdir" and text.strip() and not text.startswith("/"):
            return False
        if col == "submitline" and text.strip() and text.split()[0].rsplit("/", 1)[-1] not in _SUBMITTERS:
            return False
        if col in _NAME_COLUMNS and text.strip() != "None assigned" and any(ch.isspace() or ch in "/=" for ch in text.strip()):
            return False
    return True


def _impossible(rec: dict, reasons: dict, found: set, target: str, why: str) -> None:
    """A size or count beyond the limits in a field that does not place the row: NULL, with why."""
    rec[target] = None
    reasons[target] = f"impossible: {why}"
    found.add((target, "impossible"))


def _derive(present: set, rec: dict) -> dict[str, str]:
    """Fill what the column set lacks from the columns it has (sacct_format.derives); returns
    {column: where it came from} for the values filled."""
    why: dict[str, str] = {}
    todo = derives(present)
    if todo["ncpus"]:
        for col, key, text in DERIVED_CPUS:
            if col in present and (rec.get(key) or 0) > 0:
                rec["ncpus"], why["ncpus"] = rec[key], text
                break
    if todo["cpu_time_s"] and rec.get("user_cpu_s") is not None and rec.get("system_cpu_s") is not None:
        rec["cpu_time_s"], why["cpu_time_s"] = rec["user_cpu_s"] + rec["system_cpu_s"], CPU_TIME_FROM
    if todo["elapsed_s"] and rec.get("start_time") and rec.get("end_time"):
        rec["elapsed_s"] = int((rec["end_time"] - rec["start_time"]).total_seconds())
        why["elapsed_s"] = ELAPSED_FROM
    if rec.get("ngpus") is None:
        for col, key, text in DERIVED_GPUS:
            count, gtype = rec.get(key) or (None, None)
            if col in present and count is not None:
                rec["ngpus"], rec["gpu_type"], why["ngpus"] = count, rec.get("gpu_type") or gtype, text
                break
    return why


def _record(cols: list[str], fields: list[str], line_no: int, ctx: Ctx) -> dict:
    """The record of a line with exactly one field per column."""
    rec: dict = {"_line": line_no, "source": SOURCE}
    reasons: dict[str, str] = {}
    found: set = set()
    raw = dict(zip(cols, fields))
    local: set = set()   # time columns read as local time of ctx.tz
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
            elif kind in ("int", "minutes"):
                v = units.parse_int(t)
                what = slurm_values.marker(v)     # -2, 4294967294: not set; never a count
                rec[target] = None if what else v * 60 if kind == "minutes" else v
                if what and not target.startswith("_"):
                    reasons[target] = slurm_values.reason(target, what)
                    found.add((target, "marker"))
            elif kind == "dur":
                v = units.parse_duration(t)
                if v is not None and not math.isfinite(v):
                    raise ValueError(f"not a duration: {t!r}")
                rec[target] = int(round(v)) if target in ("elapsed_s", "timelimit_s") else v
            elif kind == "time":
                rec[target] = _to_utc(t, ctx.tz)
                if ctx.tz != "UTC" and not t.strip().isdigit():
                    local.add(target)
            elif kind == "mem":
                rec[target] = units.parse_mem(t)
            elif kind == "reqmem":
                rec[target] = None  # resolved below, needs ncpus / nnodes
            elif kind == "gres":
                rec[target] = units.gres_gpus(t)
            elif kind == "tres":
                t = _known_tres(t, found)
                rec[target] = t or None
                _tres_values(t, target, rec)
        except limits.OutOfLimits as exc:
            if target in slurm_values.PLACING:
                raise ValueError(f"column {col}: {exc}") from None
            _impossible(rec, reasons, found, target, f"column {col}: {exc}")
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
            except limits.OutOfLimits as exc:
                _impossible(rec, reasons, found, "mem_req_bytes", f"column reqmem: {exc}")
            except ValueError as exc:
                raise ValueError(f"column reqmem: {exc}") from None
            if rec["mem_req_bytes"] is None and "mem_req_bytes" not in reasons:
                reasons["mem_req_bytes"] = t  # '0n' / '0c': all of the node's memory; NO_VAL
        elif t:
            reasons["mem_req_bytes"] = t
    rec["ngpus"] = rec.get("_alloc_gpus") if rec.get("_alloc_gpus") is not None else rec.get("_req_gpus")
    rec["gpu_type"] = rec.get("_alloc_gtype") or rec.get("_req_gtype")
    if local and (picked := timezones.resolve_fall_back({c: rec[c] for c in local}, ctx.tz, rec.get("elapsed_s"))):
        rec.update(picked)   # a time in the hour the clocks went back: the reading that fits
        ctx.folds.append(line_no)
    if rec.get("start_time") and rec.get("end_time") and rec["end_time"] < rec["start_time"]:
        raise ValueError(f"End {raw.get('end')!r} is before Start {raw.get('start')!r}")
    derived = _derive(set(cols), rec)
    out = {k: rec.get(k) for k in OUT_SCHEMA}
    out["derived"] = json.dumps(derived) if derived else None
    tally: Counter = Counter(found)
    slurm_values.settle(out, reasons, tally)
    out["null_reasons"] = json.dumps(reasons) if reasons else None
    for k, v in out.items():
        if isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63 or isinstance(v, float) and v != v:
            raise ValueError(f"{k}: value out of range: {v!r}")
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            raise ValueError(f"{k}: value out of range: {v!r}")
    if out["het_offset"] is not None and not 0 <= out["het_offset"] < 2 ** 31:
        raise ValueError(f"het offset out of range: {out['het_offset']}")
    ctx.tally.update(tally)
    return out
