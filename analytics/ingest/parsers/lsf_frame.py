"""The column-wise half of the LSF reader: walked JOB_FINISH records (lsf.walk's fields, as text)
-> job rows, with polars expressions. A record that fails a check gets the number of the first
check it fails, in the order the rules read the record; its reason is worded in Python for those
few rows only. Numbers in plain decimal form are cast by polars; any other text is read by
float() once per distinct value, so both read a number alike."""
from __future__ import annotations

import datetime as dt
import json
import math
from typing import Callable

import polars as pl

from jobsight.analytics.ingest import limits
from jobsight.analytics.ingest.parsers.line_blocks import map_distinct

_PLAIN = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
NUMBERS = ("eventTime", "numProcessors", "submitTime", "startTime", "jStatus", "hostFactor", "ru_utime", "ru_stime",
           "exitStatus", "idx", "maxRMem", "exitInfo", "runLimit", "runTime")
NONNEG = ("submitTime", "startTime", "eventTime", "runTime", "runLimit", "numProcessors", "maxRMem", "ru_utime", "ru_stime")
EPOCHS = (("submitTime", "submit_time"), ("startTime", "start_time"), ("eventTime", "end_time"))
TERM = {5: "TIMEOUT", 8: "CANCELLED", 9: "CANCELLED", 14: "CANCELLED", 15: "CANCELLED", 16: "OUT_OF_MEMORY",
        1: "PREEMPTED"}
MAX_DATETIME_S = 253402300799
_EPOCH0 = dt.datetime(1970, 1, 1)


def _float(v: str) -> float:
    return float(v)


def _numbers(df: pl.DataFrame) -> pl.DataFrame:
    """_n_<field>: the field's number (inf and nan included), null when absent or empty; _ok_<field>:
    false where the text is not a number float() reads."""
    out = []
    plains = df.select(**{k: pl.col(k).str.contains(_PLAIN) for k in NUMBERS})   # each field's regex run once
    for k in NUMBERS:
        col = pl.col(k)
        plain = pl.lit(plains[k])
        odd = df.select(pl.when(~plain & (col != "")).then(col)).to_series()
        if odd.null_count() == len(odd):
            out += [pl.when(plain).then(col.cast(pl.Float64, strict=False)).alias(f"_n_{k}"),
                    (plain | col.is_null() | (col == "")).alias(f"_ok_{k}")]
            continue
        m = map_distinct(odd, _float, {"v": pl.Float64})
        df = df.with_columns(m["v"].alias(f"_odd_{k}"), m["_error"].is_not_null().alias(f"_bad_{k}"))
        out += [pl.when(plain).then(col.cast(pl.Float64, strict=False)).otherwise(pl.col(f"_odd_{k}")).alias(f"_n_{k}"),
                ~pl.col(f"_bad_{k}").fill_null(False).alias(f"_ok_{k}")]
    return df.with_columns(out)


def _finite_bad(k: str) -> pl.Expr:
    """field_value(..., _finite, 'a finite number') refuses it."""
    n = pl.col(f"_n_{k}")
    return (~pl.col(f"_ok_{k}") | n.is_infinite() | n.is_nan()).fill_null(False)


def _says(k: str, what: str) -> Callable[[dict], str]:
    return lambda r: f"{k}={r[k]!r} is {what}"


def _epoch_text(k: str) -> Callable[[dict], str]:
    def text(r: dict) -> str:
        try:
            _EPOCH0 + dt.timedelta(seconds=int(float(r[k])))
        except (OverflowError, ValueError) as exc:
            return str(exc)
        return f"{k}={r[k]!r} is not an epoch time"
    return text


CHECKS: list[tuple[str, Callable[[dict], str]]] = [
    ("jobId", lambda r: f"jobId={r['jobId']!r} is not a number"),
    ("idx", _says("idx", "not a finite number")),
    *((f"epoch_{k}", _says(k, "not a finite number")) for k, _ in EPOCHS[:1]),
    ("neg_submitTime", _says("submitTime", "negative")), ("range_submitTime", _epoch_text("submitTime")),
    ("epoch_startTime", _says("startTime", "not a finite number")), ("neg_startTime", _says("startTime", "negative")),
    ("range_startTime", _epoch_text("startTime")),
    ("epoch_eventTime", _says("eventTime", "not a finite number")), ("neg_eventTime", _says("eventTime", "negative")),
    ("range_eventTime", _epoch_text("eventTime")),
    ("end_before_start", lambda r: f"eventTime ({r['eventTime']}) before startTime ({r['startTime']})"),
    *((f"{kind}_{k}", _says(k, "not a finite number" if kind == "fin" else "negative"))
      for k in ("runTime", "runLimit", "numProcessors", "maxRMem", "ru_utime", "ru_stime") for kind in ("fin", "neg")),
    ("fin_exitStatus", _says("exitStatus", "not a finite number")),
    ("wait_exitStatus", _says("exitStatus", "not a wait status")),
    ("fin_jStatus", _says("jStatus", "not a finite number")),
    ("missing_jStatus", lambda r: "jStatus missing"),
    ("fin_exitInfo", _says("exitInfo", "not a finite number")),
    ("neither", lambda r: f"jStatus={int(float(r['jStatus']))} is neither DONE (64) nor EXIT (32): fields out of step?"),
    ("hostFactor", lambda r: f"hostFactor={r['hostFactor']!r} is not a number: fields out of step"),
]
_NO = {name: i for i, (name, _) in enumerate(CHECKS)}


def convert(df: pl.DataFrame, cluster: str) -> pl.DataFrame:
    """Walked records (_line, the lsf.WALKED fields, slots, nhosts, hosts, gpus) -> rows of
    lsf.SCHEMA + _line, _check, _raw (the fields, for reasons) and _mem_f."""
    c = pl.col
    df = _numbers(df)
    fail: dict[str, pl.Expr] = {"jobId": ~c("jobId").str.contains(r"^\d+$"), "idx": _finite_bad("idx")}
    given = {}
    for k, col in EPOCHS:
        n = c(f"_n_{k}")
        fail[f"epoch_{k}"] = _finite_bad(k)
        fail[f"neg_{k}"] = (n < 0) & (n != -1)
        given[col] = (n > 0) & (n.cast(pl.Int64, strict=False) <= MAX_DATETIME_S)
        fail[f"range_{k}"] = (n > 0) & ~given[col].fill_null(False)
    times = {col: pl.when(given[col]).then(pl.from_epoch(c(f"_n_{k}").cast(pl.Int64, strict=False), time_unit="s")
                                           .cast(pl.Datetime("us"))) for k, col in EPOCHS}
    start, end = times["start_time"], times["end_time"]
    fail["end_before_start"] = start.is_not_null() & end.is_not_null() & (end < start)
    for k in ("runTime", "runLimit", "numProcessors", "maxRMem", "ru_utime", "ru_stime"):
        fail[f"fin_{k}"] = _finite_bad(k)
        fail[f"neg_{k}"] = (c(f"_n_{k}") < 0) & (c(f"_n_{k}") != -1)
    status, jstat, info = c("_n_exitStatus"), c("_n_jStatus"), c("_n_exitInfo")
    fail["fin_exitStatus"] = _finite_bad("exitStatus")
    fail["wait_exitStatus"] = status.is_null() | (status < 0)
    fail["fin_jStatus"] = _finite_bad("jStatus")
    fail["missing_jStatus"] = jstat.is_null()
    j = jstat.cast(pl.Int64, strict=False)
    done, exited = (j & 64) != 0, (j & 32) != 0
    fail["fin_exitInfo"] = ~done & exited & _finite_bad("exitInfo")
    fail["neither"] = ~done & ~exited
    fail["hostFactor"] = ~c("_ok_hostFactor") | c("hostFactor").is_null() | (c("hostFactor") == "")
    check = pl.coalesce([pl.when(fail[name].fill_null(False)).then(pl.lit(i, dtype=pl.Int32)) for name, i in _NO.items()])

    idx = c("_n_idx")
    arr = (idx > 0).fill_null(False)
    idx_text = idx.cast(pl.Int64, strict=False).cast(pl.String)
    run, limit, nproc, mem = c("_n_runTime"), c("_n_runLimit"), c("_n_numProcessors"), c("_n_maxRMem")
    ut, st = c("_n_ru_utime"), c("_n_ru_stime")
    ut_ok, st_ok = (ut.is_not_null() & (ut >= 0)), (st.is_not_null() & (st >= 0))
    cpu = pl.when(ut_ok | st_ok).then((pl.when(ut_ok).then(ut).otherwise(0.0) + pl.when(st_ok).then(st).otherwise(0.0)).round(6))
    s = status.cast(pl.Int64, strict=False)
    failed = pl.when(info.is_not_null()).then(info.cast(pl.Int64, strict=False).replace_strict(
        TERM, default="FAILED", return_dtype=pl.String)).otherwise(pl.lit("FAILED"))
    state = pl.when(done).then(pl.lit("COMPLETED")).when(exited).then(
        pl.when(start.is_null() & (failed == "FAILED")).then(pl.lit("CANCELLED")).otherwise(failed))
    nulls = {
        "submit_time": pl.when(~given["submit_time"].fill_null(False) & c("submitTime").is_not_null()).then(c("submitTime")),
        "start_time": pl.when(~given["start_time"].fill_null(False) & c("startTime").is_not_null()).then(c("startTime")),
        "end_time": pl.when(~given["end_time"].fill_null(False) & c("eventTime").is_not_null()).then(c("eventTime")),
        "timelimit_s": pl.when(~(limit > 0).fill_null(False) & c("runLimit").is_not_null()).then(c("runLimit")),
        "mem_peak_bytes": pl.when(~(mem > 0).fill_null(False)).then(c("maxRMem")),
        "cpu_time_s": pl.when(~(ut_ok | st_ok)).then(pl.format("{} {}", c("ru_utime"), c("ru_stime"))),
    }
    return df.select(
        "_line", cluster=pl.lit(cluster),
        job_id=pl.when(arr).then(pl.format("{}[{}]", c("jobId"), idx_text)).otherwise(c("jobId")),
        job_id_raw=pl.when(arr).then(pl.format("{}[{}]", c("jobId"), idx_text)).otherwise(c("jobId")),
        array_job_id=pl.when(arr).then(c("jobId")), array_task_id=pl.when(arr).then(idx_text),
        job_name=pl.when(c("jobName") != "").then(c("jobName")), user=pl.when(c("userName") != "").then(c("userName")),
        account=pl.when(c("projectName") != "").then(c("projectName")),
        partition=pl.when(c("queue") != "").then(c("queue")),
        state=state, exit_code=pl.format("{}:{}", (s // 256) % 256, s % 128),
        submit_time=times["submit_time"], start_time=start, end_time=end,
        elapsed_s=pl.when(run.is_not_null() & (run >= 0) & start.is_not_null()).then(run.cast(pl.Int64, strict=False))
        .when(start.is_not_null() & end.is_not_null()).then((end - start).dt.total_seconds())
        .when(end.is_not_null()).then(pl.lit(0, dtype=pl.Int64)),
        timelimit_s=pl.when(limit > 0).then(limit.cast(pl.Int64, strict=False)),
        ncpus=pl.when(c("slots") != 0).then(c("slots")).when(nproc > 0).then(nproc.cast(pl.Int64, strict=False)),
        nnodes=pl.when(c("nhosts") != 0).then(c("nhosts")), node_list=pl.when(c("hosts") != "").then(c("hosts")),
        ngpus=c("gpus") * pl.max_horizontal(c("nhosts"), pl.lit(1)),
        mem_peak_bytes=pl.when((mem > 0) & (mem * 1024 <= limits.MAX_BYTES)).then(mem.cast(pl.Int64, strict=False) * 1024),
        cpu_time_s=cpu, source=pl.lit("lsf"),
        _mem_f=pl.when(mem > 0).then(mem * 1024),
        _nulls=pl.struct(**nulls), _check=check,
        _raw=pl.struct("jobId", *NUMBERS),
    )


_NULLABLE = ("submit_time", "start_time", "end_time", "timelimit_s", "mem_peak_bytes", "cpu_time_s")
_JSON_PLAIN = r"^[ !#-\[\]-~]*$"   # printable ASCII but a quote or backslash: json.dumps keeps it as it is


def null_reasons(rows: pl.DataFrame) -> pl.DataFrame:
    """null_reasons as json.dumps writes them ({"col": "raw text", ...}): formatted column-wise where
    every raw text is printable ASCII without a quote or backslash, by json.dumps for the others."""
    field = pl.col("_nulls").struct.field
    parts = [pl.format('"{}": "{}"', pl.lit(k), field(k)) for k in _NULLABLE]
    plain = pl.all_horizontal([field(k).is_null() | field(k).str.contains(_JSON_PLAIN) for k in _NULLABLE])
    rows = rows.with_columns(
        _plain=plain,
        null_reasons=pl.when(pl.any_horizontal([field(k).is_not_null() for k in _NULLABLE]))
        .then(pl.concat_str([pl.lit("{"), pl.concat_str(parts, separator=", ", ignore_nulls=True), pl.lit("}")])))
    odd = rows.filter(~pl.col("_plain") & pl.col("null_reasons").is_not_null())
    if odd.height:
        texts = {line: json.dumps({k: v for k, v in d.items() if v is not None})
                 for line, d in odd.select("_line", "_nulls").iter_rows()}
        rows = rows.with_columns(null_reasons=pl.when(pl.col("_plain")).then(pl.col("null_reasons"))
                                 .otherwise(pl.col("_line").replace_strict(texts, default=None, return_dtype=pl.String)))
    return rows.drop("_plain", "_nulls")


def exact_mem(maxrmem: str) -> int:
    """maxRMem (KB) in bytes as the record rule reads it, for a value too large for a column."""
    v = float(maxrmem)
    return int(v) * 1024 if math.isfinite(v) else v
