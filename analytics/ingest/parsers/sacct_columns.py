"""The column-wise reader: a block's lines of one column set, split into fields and converted with
polars expressions. Rows it cannot take get _bad = True and go to the per-line reader."""
from __future__ import annotations

from typing import Optional

import polars as pl

from jobsight.analytics.ingest import limits, slurm_values, units
from jobsight.analytics.ingest.parsers.sacct_format import (
    COLUMNS,
    CPU_TIME_FROM,
    DERIVED_CPUS,
    DERIVED_GPUS,
    ELAPSED_FROM,
    OUT_SCHEMA,
    SOURCE,
    TRAILING,
    TRES_PARSED,
    Ctx,
    derives,
)

_NULL_WORDS = sorted(units.NULL_WORDS - {""})

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
        self.reasons: list[tuple] = []     # (target, condition, '"target": "text"'), evaluated after s2
        self.no_gpu: set[str] = set()      # TRES fields no value of which names a gres/gpu* item
        self.want_cpu = False              # read TRES cpu=N (the cores are derived from it)


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
        st.reasons.append((target, pl.col(isnull) & (_src(col) != ""), pl.format('"{}": "{}"', pl.lit(target), _src(col))))


def _convert_column(st: "_Stages", col: str, kind: str, target: str, ctx: Ctx) -> None:
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
        st.reasons.append((target, pl.col(n) & (c != ""), pl.format('"{}": "{}"', pl.lit(target), c)))
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
            # a time in the hour the clocks go back occurs twice: the per-line reader picks the reading
            st.bad.append(local.dt.replace_time_zone(ctx.tz, ambiguous="null", non_existent="null").is_null()
                          & local.dt.replace_time_zone(ctx.tz, ambiguous="earliest", non_existent="null").is_not_null())
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
        st.bad.append(c.str.contains(limits.TRES_SUSPECT).fill_null(False))   # negative, inf, nan items
        st.bad.append(c.str.contains(slurm_values.TRES_MARKER_SUSPECT).fill_null(False))   # markers
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
        if target in ("alloc_tres", "req_tres") and st.want_cpu:
            st.s1[g + "c"] = item("cpu")
            st.s2["_cpu_" + target] = pl.when(pl.col(g + "c").str.contains(r"^[0-9]+$")).then(
                pl.col(g + "c").cast(pl.Int64, strict=False))
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


def _convert_distinct(df: pl.DataFrame, col: str, kind: str, target: str, ctx: Ctx,
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
    sub.want_cpu = st.want_cpu
    _convert_column(sub, col, kind, target, ctx)
    conv = distinct.with_columns(**sub.s1).with_columns(**sub.s1b).with_columns(**sub.s2)
    bad, why = f"__bad_{col}", [f"__why_{col}_{k}" for k in range(len(sub.reasons))]
    conv = conv.select(pl.col(name), *[pl.col(o) for o in sub.s2],
                       (pl.any_horizontal(sub.bad) if sub.bad else pl.lit(False)).alias(bad),
                       *[pl.when(cond).then(text).alias(w) for (_, cond, text), w in zip(sub.reasons, why)])
    st.bad.append(pl.col(bad))
    st.reasons.extend((target, pl.col(w).is_not_null(), pl.col(w)) for (target, _, _), w in zip(sub.reasons, why))
    return _beside(df, name, conv)


def _beside(df: pl.DataFrame, key: str, conv: pl.DataFrame) -> pl.DataFrame:
    """df with conv's columns for each row's df[key] (conv has one row per distinct key): joined on
    the key alone, not gathering every column of df again."""
    back = df.select(key).join(conv, on=key, how="left", nulls_equal=True, maintain_order="left")
    return df.hstack(back.drop(key).get_columns())


def _gres_beside(df: pl.DataFrame, col: str, target: str, st: _Stages) -> pl.DataFrame:
    """AllocGRES / ReqGRES -> GPU count and type, read by units.gres_gpus once per distinct text (a
    dump holds a handful); a text it refuses sends the row to the per-line reader for the reason."""
    name = "__s_" + col
    texts = df[name].unique().to_list()
    counts, types, bad = [], [], []
    for t in texts:
        try:
            n, gtype = (None, None) if t is None or units.is_null_word(t) else units.gres_gpus(t)
        except ValueError:
            n, gtype = None, None
            bad.append(t)
        counts.append(n)
        types.append(gtype)
    conv = pl.DataFrame({name: texts, "_gpus" + target: counts, "_gtype" + target: types},
                        schema={name: pl.String, "_gpus" + target: pl.Int64, "_gtype" + target: pl.String})
    st.bad.append(pl.col(name).is_in(bad))
    return _beside(df, name, conv)


def _derived(w: pl.DataFrame, present: set) -> pl.DataFrame:
    """The values the column set lacks, from the columns it has, and `derived` naming where each
    came from: as sacct_lines._derive does, column-wise."""
    todo = derives(present)
    found: list[tuple[str, pl.Expr, pl.Expr]] = []   # (column, value, text of where it came from)
    if todo["ncpus"]:
        cands = [(pl.col(key), text) for col, key, text in DERIVED_CPUS if col in present and key in w.columns]
        if cands:
            val = pl.coalesce([pl.when(v > 0).then(v) for v, _ in cands])
            src = pl.coalesce([pl.when(v > 0).then(pl.lit(text)) for v, text in cands])
            found.append(("ncpus", val, src))
    if todo["cpu_time_s"]:
        val = pl.col("user_cpu_s") + pl.col("system_cpu_s")
        found.append(("cpu_time_s", val, pl.when(val.is_not_null()).then(pl.lit(CPU_TIME_FROM))))
    if todo["elapsed_s"]:
        val = (pl.col("end_time") - pl.col("start_time")).dt.total_seconds()
        found.append(("elapsed_s", val, pl.when(val.is_not_null()).then(pl.lit(ELAPSED_FROM))))
    gres = [(key, text) for col, key, text in DERIVED_GPUS if col in present]
    if gres:
        counts = [pl.col("_gpus" + key) for key, _ in gres]
        src = pl.when(pl.col("ngpus").is_null()).then(
            pl.coalesce([pl.when(n.is_not_null()).then(pl.lit(text)) for n, (_, text) in zip(counts, gres)]))
        w = w.with_columns(__gsrc=src)
        gtype = pl.coalesce([pl.when(pl.col("__gsrc") == text).then(pl.col("_gtype" + key)) for key, text in gres])
        w = w.with_columns(ngpus=pl.coalesce(pl.col("ngpus"), *counts),
                           gpu_type=pl.when(pl.col("__gsrc").is_not_null()).then(
                               pl.coalesce(pl.col("gpu_type"), gtype)).otherwise(pl.col("gpu_type")))
        found.append(("ngpus", pl.col("ngpus"), pl.col("__gsrc")))
    if not found:
        return w.with_columns(derived=pl.lit(None, pl.String))
    w = w.with_columns(**{f"__d_{c}": src for c, _, src in found})
    w = w.with_columns(**{c: val for c, val, _ in found if c != "ngpus"})   # ngpus is filled above
    parts = [pl.format('"{}": "{}"', pl.lit(c), pl.col(f"__d_{c}")) for c, _, _ in found]
    text = pl.concat_str(parts, separator=", ", ignore_nulls=True)
    return w.with_columns(derived=pl.when(text != "").then(pl.concat_str([pl.lit("{"), text, pl.lit("}")])))


def fast_frame(df: pl.DataFrame, cols: list[str], ctx: Ctx) -> pl.DataFrame:
    """Stripped string columns named after sacct fields (+ _line) -> OUT_SCHEMA columns + _bad."""
    st = _Stages()
    present = set(cols)
    st.want_cpu = derives(present)["ncpus"]
    src = _src
    df = df.rename({c: "__s_" + c for c in df.columns if c != "_line"})
    targets = [COLUMNS[c][1] for c in dict.fromkeys(cols) if c in COLUMNS]
    for col in dict.fromkeys(cols):
        spec = COLUMNS.get(col)
        if spec is None:
            continue
        kind, target = spec
        if kind == "gres":
            df = _gres_beside(df, col, target, st)
            continue
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
        noval = (num * pl.lit(1024.0).pow(power - 2)).is_between(*units.NO_VAL_MIB).fill_null(False)   # units.py
        unknown = isnull | zero | noval
        w = w.with_columns(mem_req_bytes=pl.when(unknown).then(None).otherwise(val.round(0).cast(pl.Int64, strict=False)))
        st.bad.append(~isnull & ~noval & (num.is_null() | ((per == "c") & cpus.is_null() & ~zero)
                                          | (~zero & pl.col("mem_req_bytes").is_null())))   # overflowed Int64
        st.reasons.append(("mem_req_bytes", unknown.fill_null(False) & (src("reqmem") != ""),
                           pl.format('"mem_req_bytes": "{}"', src("reqmem"))))
    if "start_time" in w.columns and "end_time" in w.columns:
        st.bad.append((pl.col("end_time") < pl.col("start_time")).fill_null(False))
    def opt(name, dtype):
        return pl.col(name) if name in w.columns else pl.lit(None, dtype)
    w = w.with_columns(
        _bad=pl.any_horizontal(st.bad),
        _why=pl.any_horizontal([cond for _, cond, _ in st.reasons]) if st.reasons else pl.lit(False),
        _kind=pl.when(pl.col("step_id").is_not_null()).then(pl.lit("step")).otherwise(pl.lit("job")),
        cluster=pl.coalesce(opt("cluster", pl.String), pl.lit(ctx.cluster or "default")),
        ngpus=pl.coalesce(opt("_gpus_alloc_tres", pl.Int64), opt("_gpus_req_tres", pl.Int64)),
        gpu_type=pl.coalesce(opt("_gtype_alloc_tres", pl.String), opt("_gtype_req_tres", pl.String)),
        source=pl.lit(SOURCE),
    )
    w = _derived(w, present)
    # an impossible number (analytics/ingest/limits.py): the per-line reader rejects the line and says why
    w = w.with_columns(_bad=pl.col("_bad") | limits.out_of_range({c: w.schema[c] for c in w.columns if c in limits.RECORD}))
    # null_reasons only for the rows that have one (string building is the costly part), filtering
    # only the columns it reads (lazy: projection pushdown)
    reasons = pl.repeat(None, w.height, dtype=pl.String, eager=True).alias("null_reasons")
    if st.reasons:
        text = pl.concat_str(_one_per_target(st.reasons), separator=", ", ignore_nulls=True)
        why = (w.lazy().with_row_index("__i").filter(pl.col("_why"))
               .select("__i", pl.concat_str([pl.lit("{"), text, pl.lit("}")]).alias("v")).collect())
        if why.height:
            reasons = reasons.scatter(why["__i"], why["v"])
    w = w.with_columns(reasons)
    return _conform(w, keep_bad=True)


def _one_per_target(reasons: list[tuple]) -> list[pl.Expr]:
    """One reason per target column, as the per-line reader's dict gives: placed where the target
    first appears, the text of the last of its columns that has one (Timelimit and TimelimitRaw)."""
    by: dict[str, pl.Expr] = {}
    for target, cond, text in reasons:
        by[target] = pl.when(cond).then(text).otherwise(by[target]) if target in by else pl.when(cond).then(text)
    return list(by.values())


def _conform(df: pl.DataFrame, keep_bad: bool = False) -> pl.DataFrame:
    cols = [pl.col(k).cast(t) if k in df.columns else pl.lit(None, t).alias(k) for k, t in OUT_SCHEMA.items()]
    if keep_bad:
        cols.append(pl.col("_bad"))
    return df.select(cols)


def split_fields(g: pl.DataFrame, cols: list[str], delim: str) -> tuple[pl.DataFrame, pl.DataFrame]:
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

