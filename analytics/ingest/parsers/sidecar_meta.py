"""A sidecar CSV's optional `<stem>.meta.json` (collector/writer.py writes it): read bounded
(lengths.MAX_META_BYTES), only from inside the CSV's folder and from its owner or a trusted user,
each key checked for its type; and its sidecar_run row."""
from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Optional

import polars as pl

from jobsight.analytics.ingest import lengths
from jobsight.analytics.ingest.trust import meta_refusal
from jobsight.analytics.ingest.walk import open_regular
from jobsight.collector.csv_schema import META_SUFFIX

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"   # the sidecar's times, here and in the CSV (sidecar_csv)


# Metadata keys jobsight stores, by the type the sidecar writes. A key of another type is left
# out with a note (never stringified: a host "{'a': 1}" would become a key of its own).
_META_TEXT = ("cluster", "host", "scheduler", "cpu_method", "driver_version", "nvml_version", "started_at")
_META_MAX_TEXT = 1000
_INT32_MAX = 2**31 - 1


def _meta_problem(key: str, value) -> Optional[str]:
    """Why this metadata value cannot be used, or None when it can."""
    if value is None:
        return None
    if key == "job_id":
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return f"not a string: {_short(value)}"
        value = str(value)
    if key in _META_TEXT or key == "job_id":
        if not isinstance(value, str):
            return f"not a string: {_short(value)}"
        if len(value) > _META_MAX_TEXT:
            return f"longer than {_META_MAX_TEXT} characters ({len(value)})"
        if "\x00" in value:
            return "contains a NUL character"
        if key == "started_at" and pl.Series([value]).str.to_datetime(TIME_FORMAT, time_unit="us", strict=False)[0] is None:
            return f"not an ISO-8601 UTC time: {_short(value)}"
    elif key == "interval_s":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"not a number of seconds: {_short(value)}"
    elif key == "alloc_cores":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
            return f"not a core count: {_short(value)}"
    elif key == "gpus":
        if not isinstance(value, list):
            return f"not a list: {_short(value)}"
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_meta(path: pathlib.Path, notes: list[str]) -> Optional[dict]:
    """The `<stem>.meta.json` beside the CSV, with unusable keys left out (one note each); None
    when absent or unusable (a note says why). The CSV is ingested either way. Read only as a
    regular file inside the CSV's folder (never a FIFO or a link out of it: open_regular), and only
    when owned by the CSV's owner or a trusted user: it names the job of the CSV's rows."""
    meta_path = path.with_name(path.name[: -len(path.suffix)] + META_SUFFIX) if path.suffix else path.with_name(path.name + META_SUFFIX)
    folder, real = os.path.realpath(meta_path.parent), os.path.realpath(meta_path)
    if os.path.commonpath([folder, real]) != folder:
        notes.append(f"{meta_path.name}: metadata ignored (symlink to {real}, outside the CSV's folder)")
        return None
    try:
        fd = open_regular(meta_path, within=folder)   # and checked again on what was opened
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.append(f"{meta_path.name}: metadata ignored ({str(exc).removeprefix(f'{meta_path}: ')})")
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            refusal = meta_refusal(os.fstat(fh.fileno()), os.stat(path))
            if refusal:
                notes.append(f"{meta_path.name}: metadata ignored ({refusal})")
                return None
            raw = fh.read(lengths.MAX_META_BYTES + 1)   # never more: its size decides, not its content
            if len(raw) > lengths.MAX_META_BYTES:
                notes.append(f"{meta_path.name}: metadata ignored (larger than the limit of "
                             f"{lengths.MAX_META_BYTES:,} bytes)")
                return None
            text = raw.decode("utf-8")
        meta = json.loads(text)
        if not isinstance(meta, dict):
            raise ValueError("top level is not an object")
    except (OSError, ValueError, RecursionError) as exc:
        notes.append(f"{meta_path.name}: metadata ignored ({exc})")
        return None
    for key in ("job_id", "interval_s", "alloc_cores", "gpus") + _META_TEXT:
        problem = _meta_problem(key, meta.get(key))
        if problem:
            notes.append(f"{meta_path.name}: {key} ignored: {problem}")
            del meta[key]
    if "job_id" in meta and meta["job_id"] is not None:
        meta["job_id"] = str(meta["job_id"])
    meta["_text"] = text
    return meta


def meta_frame(meta: dict, path: pathlib.Path, cluster: str, job_id: Optional[str], host: Optional[str]) -> Optional[pl.DataFrame]:
    """The sidecar_run row (keys checked by _read_meta). Identity: the metadata's, else the first
    stored sample's."""
    job = meta.get("job_id") or job_id
    host = meta.get("host") or host
    if not job or not host:
        return None
    started = meta.get("started_at")
    started_ts = None
    if started is not None:
        started_ts = pl.Series([started]).str.to_datetime(TIME_FORMAT, time_unit="us", strict=False)[0]
    gpus = meta.get("gpus")
    return pl.DataFrame(
        {
            "cluster": [meta.get("cluster") or cluster], "job_id_raw": [job], "host": [host],
            "started_at": [started_ts], "interval_s": [None if meta.get("interval_s") is None else float(meta["interval_s"])],
            "scheduler": [meta.get("scheduler")], "cpu_method": [meta.get("cpu_method")],
            "alloc_cores": [meta.get("alloc_cores")],
            "gpus": [json.dumps(gpus) if gpus is not None else None],
            "driver_version": [meta.get("driver_version")], "nvml_version": [meta.get("nvml_version")],
            "metadata": [meta["_text"]], "source_file": [str(path)],
        },
        schema={"cluster": pl.String, "job_id_raw": pl.String, "host": pl.String, "started_at": pl.Datetime("us"),
                "interval_s": pl.Float64, "scheduler": pl.String, "cpu_method": pl.String, "alloc_cores": pl.Int32,
                "gpus": pl.String, "driver_version": pl.String, "nvml_version": pl.String,
                "metadata": pl.String, "source_file": pl.String},
    )
