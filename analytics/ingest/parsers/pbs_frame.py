"""The column-wise PBS reader: a block's lines -> one row of key columns per record (the record's
key=value words split with polars; lines with quotes, option flags or other odd words through
pbs.split_pairs, the one rule for them), then every record converted with polars expressions.
Where a value needs a scalar rule (a duration, exec_host, nodes=, a size), the rule in pbs.py or
units.py is applied once per distinct value (line_blocks.map_distinct). A record that fails a check
gets the number of the first check it fails (in the order the rules read the record); its reason is
worded in Python for those few rows only."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Optional

import numpy as np
import polars as pl

from jobsight.analytics.ingest import limits
from jobsight.analytics.ingest.parsers.line_blocks import lines_frame, map_distinct
from jobsight.analytics.ingest.records import Reject

HEAD_OK = r"^(?:[0-9]{8}:)?[0-9]{2}/[0-9]{2}/[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}$"
JOBID = r"^([0-9]+)(?:\[([0-9]*)\])?(?:-([0-9]+))?(?:\.(.+))?$"
KEY_OK = r"^[A-Za-z_][\w.\-]*$"
# rest of a line that split_pairs must read: other whitespace than ' ', quotes, a '-X' option flag value
ODD_REST = r'[^\S ]|"|=-[A-Za-z](?: |$)'
# what ODD_REST holds, in ASCII: a blank other than ' ' (\s: \t..\r), a quote, '=-'
ODD_BYTES = r'[\t\n\x0b\x0c\r"]|=-'
NOT_A_RECORD = "not a PBS accounting record (MM/DD/YYYY HH:MM:SS;type;jobid;...)"
EPOCHS = ("ctime", "qtime", "etime", "start", "end")
DURATIONS = ("Resource_List.walltime", "resources_used.walltime", "resources_used.cput")
INTS = ("Resource_List.ncpus", "resources_used.ncpus", "total_execution_slots", "unique_node_count",
        "Resource_List.ngpus", "run_count", "start_count")
KEYS = ("user", "group", "account", "project", "jobname", "queue", *EPOCHS, *DURATIONS, "exec_host",
        "Resource_List.nodes", "Resource_List.nodect", "exec_vnode", "resources_used.mem", "Resource_List.mem",
        "Resource_List.pmem", "Exit_status", "exit_status", *INTS)
MAX_DATETIME_S = 253402300799
_KEY_ENUM = pl.Enum(KEYS)   # 9999-12-31 23:59:59, the last second a datetime holds


def read_block(first: int, text: str, split_pairs: Callable[[str], dict]) -> tuple:
    """A block -> (records: _line, rtype, jobid, head, text + KEYS columns as text; rejects; comments;
    Counter of skipped record types; rows_in)."""
    lines = lines_frame(first, text)
    lines = lines.filter(pl.col("text").str.contains(r"\S"))   # not blank (no stripped copy of every line)
    rows_in = lines.height
    comments = 0
    if "#" in text:
        is_comment = pl.col("text").str.starts_with("#")
        comments = int(lines.select(is_comment.sum()).item())
        lines = lines.filter(~is_comment)
    parts = lines.with_columns(pl.col("text").str.splitn(";", 4).alias("_p")).unnest("_p")
    parts = parts.rename({"field_0": "head", "field_1": "rtype", "field_2": "jobid", "field_3": "rest"})
    ok = (pl.col("head").str.contains(HEAD_OK) & pl.col("rtype").str.contains(r"^[A-Za-z]$").fill_null(False)
          & pl.col("jobid").is_not_null())
    parts = parts.with_columns(_ok=ok.fill_null(False))
    rejects = [Reject(n, NOT_A_RECORD, t[:1000]) for n, t in parts.filter(~pl.col("_ok")).select("_line", "text").iter_rows()]
    parts = parts.filter(pl.col("_ok")).drop("_ok")
    kept = pl.col("rtype").is_in(["E", "S", "Q", "D"])
    skipped = Counter(dict(parts.filter(~kept)["rtype"].value_counts().iter_rows()))
    recs = parts.filter(kept).with_columns(pl.col("rest").fill_null(""))
    return _fields(recs, split_pairs, rejects), rejects, comments, skipped, rows_in


def _fields(recs: pl.DataFrame, split_pairs: Callable[[str], dict], rejects: list) -> pl.DataFrame:
    """The records' KEYS as text columns: plain 'k=v k=v' rests split column-wise, the rest by split_pairs."""
    w, key = pl.col("w"), pl.col("_key")
    k = w.str.slice(0, pl.col("_eq").fill_null(0))   # the text before '=', "" for a word without one
    words = (recs.lazy().with_row_index("_r").select("_r", "_line", w=pl.col("rest").str.split(" ")).explode("w").filter(w != "")
             .with_columns(_eq=w.str.find("=", literal=True))
             # the known keys as an Enum (null for the others): pivoted on, it groups by a small integer
             .with_columns(_key=k.cast(_KEY_ENUM, strict=False)).collect())
    # a word is bad (the record goes to split_pairs) without '=' or with a key of another form; a known key has the form
    # (a log's unknown keys are few: each form tested once)
    unknown = words.lazy().filter(key.is_null()).select("_line", k=k).collect()
    forms = unknown["k"].unique()
    bad_forms = forms.filter(~forms.str.contains(KEY_OK))
    bad = (unknown.filter(pl.col("k").is_in(bad_forms.implode()))["_line"] if bad_forms.len()
           else pl.Series("_line", [], dtype=unknown.schema["_line"]))
    plain = words.filter(key.is_not_null()).select("_r", "_key", v=w.str.slice(pl.col("_eq") + 1))
    rest = pl.col("rest")
    # ODD_REST looked for only where a cheap look finds one of its bytes (a non-ASCII one: a Unicode blank)
    maybe = rest.str.contains(ODD_BYTES) | (rest.str.len_bytes() != rest.str.len_chars())
    odd_rest = recs.select("_line", "rest").filter(maybe).filter(rest.str.contains(ODD_REST))["_line"]   # in turn
    odd = pl.concat([odd_rest, bad]).unique()
    wide = _wide(recs["_line"], plain).filter(~pl.col("_line").is_in(odd.implode()))
    extra, refused = [], []
    for line, rtype, jobid, text, rest in (recs.filter(pl.col("_line").is_in(odd.implode()))
                                           .select("_line", "rtype", "jobid", "text", "rest").iter_rows()):
        try:
            fields = split_pairs(rest)
        except ValueError as exc:
            rejects.append(Reject(line, f"PBS {rtype} record {jobid}: {exc}", text[:1000]))
            refused.append(line)
            continue
        extra.append({"_line": line, **{k: fields[k] for k in KEYS if k in fields}})
    if extra:
        wide = pl.concat([wide, pl.DataFrame(extra, schema={"_line": pl.Int64, **{k: pl.String for k in KEYS}})],
                         how="diagonal_relaxed")
    if refused:
        recs = recs.filter(~pl.col("_line").is_in(refused))
    recs = recs.drop("rest").join(wide, on="_line", how="left", maintain_order="left")
    missing = [k for k in KEYS if k not in recs.columns]
    return recs.with_columns([pl.lit(None, dtype=pl.String).alias(k) for k in missing])


def _wide(lines: pl.Series, plain: pl.DataFrame) -> pl.DataFrame:
    """_line (the records') and a column per KEYS entry: the value of each record's word of that key,
    the last one where a key repeats. plain: the words of known keys (_r, the record's row in lines;
    _key; v), in file order. A pivot without its grouping: one gather of plain's values."""
    n = lines.len()
    codes = plain["_key"].to_physical().to_numpy()
    order = np.argsort(codes, kind="stable")   # by key, each key's words in file order
    bounds = np.searchsorted(codes[order], np.arange(len(KEYS) + 1))
    rows = plain["_r"].to_numpy()[order]
    none = plain.height   # no word of the key: a null
    at = np.full((len(KEYS), n), none, dtype=np.uint32)
    for i in range(len(KEYS)):
        r, pos = rows[bounds[i]:bounds[i + 1]], order[bounds[i]:bounds[i + 1]]
        if r.size > 1 and (r[1:] == r[:-1]).any():   # a key repeated in a record: its last word
            last = np.append(r[1:] != r[:-1], True)
            r, pos = r[last], pos[last]
        at[i, r] = pos
    at = pl.Series(at.ravel())
    values = plain["v"].rechunk().gather(at.to_frame("i").select(pl.when(pl.col("i") != none).then(pl.col("i"))).to_series())
    return pl.DataFrame({"_line": lines, **{k: values.slice(i * n, n) for i, k in enumerate(KEYS)}})


def _int(k: str) -> pl.Expr:
    return pl.col(k).str.strip_chars().cast(pl.Int64, strict=False)


def _given(k: str) -> pl.Expr:
    return pl.col(k).is_not_null() & (pl.col(k) != "")


def _truthy(e: pl.Expr) -> pl.Expr:
    return e.is_not_null() & (e != 0)


def exit_state(status: pl.Expr, elapsed: pl.Expr, limit: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Exit_status -> (state, 'code:signal'). 256+N / 10000+N: killed by signal N; a negative
    JOB_EXEC_* code: the job did not run to an exit (e.g. -11 = rerun)."""
    sig = pl.when(status > 10000).then(status - 10000).when(status > 256).then(status - 256)
    timed_out = (elapsed.is_not_null() & _truthy(limit) & (elapsed >= limit)).fill_null(False)
    state = (pl.when(sig.is_not_null()).then(pl.when(timed_out).then(pl.lit("TIMEOUT")).otherwise(pl.lit("CANCELLED")))
             .when(status == 0).then(pl.lit("COMPLETED")).otherwise(pl.lit("FAILED")))
    code = (pl.when(sig.is_not_null()).then(pl.format("0:{}", sig)).when(status == 0).then(pl.lit("0:0"))
            .when(status < 0).then(pl.format("{}:0", status)).otherwise(pl.format("{}:0", status % 256)))
    return state, code


def _mapped(df: pl.DataFrame, key: str, rule: Callable, dtypes: dict, prefix: str,
            form: Optional[Callable[[pl.Expr], tuple[pl.Expr, dict, dict]]] = None) -> pl.DataFrame:
    """df with rule's columns for the non-empty values of column key, named prefix + name. ``form``:
    (value -> (in a regular form, {name: the rule's result as an expression}, {part: expression}
    the others read, computed first)), for the values the
    rule reads alike in a few column operations; the rule reads the others. Either reads each
    distinct value once (a job's S and E records repeat most values), joined back to the rows."""
    given = pl.when(_given(key)).then(pl.col(key))
    if form is None:
        out = map_distinct(df.select(given).to_series(), rule, dtypes)
        return pl.concat([df, out.rename({c: prefix + c for c in out.columns})], how="horizontal")
    values = df.select(given.alias("_v"))
    regular, exprs, parts = form(pl.col("_v"))
    # parts (a regex's groups, say) computed once, before the expressions that take them apart
    fast = values.unique().drop_nulls().with_columns(**parts).with_columns(
        _fast=regular.fill_null(False), **{c: exprs[c] for c in dtypes})
    if fast.select(pl.col("_fast").all()).item():   # the rule has nothing to read
        table = fast.select("_v", **{prefix + c: pl.col(c).cast(t) for c, t in dtypes.items()},
                            **{prefix + "_error": pl.lit(None, dtype=pl.String)})
    else:
        out = map_distinct(fast.select(pl.when(~pl.col("_fast")).then(pl.col("_v"))).to_series(), rule, dtypes)
        table = fast.select("_v", **{prefix + c: pl.when(pl.col("_fast")).then(pl.col(c)).otherwise(out[c]) for c in dtypes},
                            **{prefix + "_error": pl.when(pl.col("_fast")).then(None).otherwise(out["_error"])})
    found = values.join(table, on="_v", how="left", maintain_order="left").drop("_v")
    return pl.concat([df, found], how="horizontal")


def duration_form(v: pl.Expr) -> tuple[pl.Expr, dict, dict]:
    """HH:MM:SS: parse_duration's seconds (a float)."""
    g = pl.col("_g")
    h, m, s = (g.struct.field(str(i)).cast(pl.Float64) for i in (1, 2, 3))
    # group 1 is there exactly when the value matches
    return g.struct.field("1").is_not_null(), {"v": h * 3600 + m * 60 + s}, {
        "_g": v.str.extract_groups(r"^([0-9]{1,9}):([0-5][0-9]):([0-5][0-9])$")}


_SIZE_POW = {"": 1.0, "b": 1 / 1024, "w": 8 / 1024, "kb": 1.0, "mb": 2.0 ** 10, "gb": 2.0 ** 20, "tb": 2.0 ** 30, "pb": 2.0 ** 40}


def size_form(v: pl.Expr) -> tuple[pl.Expr, dict, dict]:
    """An integer of kB (no unit) or of b/w/kb/mb/gb/tb/pb: _mem_rule(pbs_mem)'s (bytes within
    MAX_BYTES, bytes as a float, no limit text). A number times a power of two is exact in a float."""
    g = pl.col("_g")
    kib = g.struct.field("2").fill_null("").replace_strict(_SIZE_POW, return_dtype=pl.Float64, default=None)
    f = g.struct.field("1").cast(pl.Float64) * kib * 1024
    return g.struct.field("1").is_not_null(), {
        "_b": pl.when(f <= limits.MAX_BYTES).then(f.cast(pl.Int64, strict=False)), "_f": f, "_lim": pl.lit(None, dtype=pl.String)}, {
        "_g": v.str.extract_groups(r"^([0-9]{1,15})(b|w|kb|mb|gb|tb|pb)?$")}


_EXEC_PART = r"[A-Za-z0-9_.\-]+/[0-9]{1,6}(?:-[0-9]{1,6}|\*[0-9]{1,6})?"


def exec_host_form(v: pl.Expr) -> tuple[pl.Expr, dict, dict]:
    """host/0+host/1, host/0-3, host/0*13 (plain host names): exec_host_slots_text's (slots, hosts, 'h1,h2')."""
    el, stars, names = pl.element(), pl.col("_stars"), pl.col("_names")
    # slots: one a part, a 'first-last' range adds last - first, a '*N' adds N - 1
    ranges = v.str.extract_all(r"/[0-9]+-[0-9]+").list.eval(
        el.str.extract(r"-([0-9]+)", 1).cast(pl.Int64, strict=False) - el.str.extract(r"^/([0-9]+)", 1).cast(pl.Int64, strict=False))
    slots = (v.str.count_matches("+", literal=True) + 1 + stars.list.eval(el.str.slice(1).cast(pl.Int64, strict=False)).list.sum()
             - stars.list.len() + ranges.list.sum())
    return v.str.contains(f"^{_EXEC_PART}(?:\\+{_EXEC_PART})*$"), {
        "slots": slots.cast(pl.Int64), "n": names.list.len().cast(pl.Int64), "hosts": names.list.join(",")}, {
        "_stars": v.str.extract_all(r"\*[0-9]+"),
        "_names": v.str.replace_all(r"/[^+]*", "").str.split("+").list.unique(maintain_order=True)}


def vnode_form(v: pl.Expr) -> tuple[pl.Expr, dict, dict]:
    """ASCII text (where \\d is [0-9]) with ngpus counts of under 10 digits: vnode_gpus's sum of them."""
    counts = v.str.extract_all(r"ngpus=[0-9]+").list.eval(pl.element().str.slice(6).cast(pl.Int64, strict=False)).list.sum()
    return ~v.str.contains(r"[^\x00-\x7f]|ngpus=[0-9]{10}"), {"gpus": counts.cast(pl.Int64)}, {}


def _mem_rule(pbs_mem: Callable) -> Callable:
    """A size -> (bytes if at most MAX_BYTES, its float, the OutOfLimits text); another form raises."""
    def rule(v: str):
        try:
            b = pbs_mem(v)
        except limits.OutOfLimits as exc:
            return None, None, str(exc)
        return (b if b <= limits.MAX_BYTES else None), float(b), None
    return rule


_MEM_T = {"_b": pl.Int64, "_f": pl.Float64, "_lim": pl.String}
def _says(key: str, what: str) -> Callable[[dict], str]:
    return lambda r: f"{key}={r[key]!r} is not {what}"


# the checks of a record, in the order the rules read it: (name, message(raw fields, row) -> reason)
CHECKS: list[tuple[str, Callable[[dict], str]]] = [
    ("jobid", lambda r: f"not a PBS job id: {r['jobid']!r}"),
    *((f"epoch_{k}", _says(k, "an epoch time")) for k in EPOCHS),
    ("dur_Resource_List.walltime", lambda r: f"Resource_List.walltime={r['Resource_List.walltime']!r} is not a duration"),
    ("dur_resources_used.walltime", lambda r: f"resources_used.walltime={r['resources_used.walltime']!r} is not a duration"),
    ("end_before_start", lambda r: f"end ({r['end']}) before start ({r['start']})"),
    ("dur_resources_used.cput", lambda r: f"resources_used.cput={r['resources_used.cput']!r} is not a duration"),
    ("exec_host", lambda r: r["_x_error"]),
    ("nodes", lambda r: r["_n_error"]),
    *((f"int_{k}", _says(k, "an integer"))
      for k in ("Resource_List.ncpus", "resources_used.ncpus", "total_execution_slots", "unique_node_count",
                "Resource_List.ngpus")),
    ("nodect", lambda r: r["_c_error"]),
    ("mem_resources_used.mem", lambda r: f"resources_used.mem: {r['_mp_lim']}"),
    ("mem_Resource_List.mem", lambda r: f"Resource_List.mem: {r['_mr_lim']}"),
    ("mem_Resource_List.pmem", lambda r: f"Resource_List.pmem: {r['_mm_lim']}"),
    ("int_run_count", lambda r: f"run_count={r['run_count']!r} is not an integer"),
    ("int_start_count", lambda r: f"start_count={r['start_count']!r} is not an integer"),
    ("exit_status", lambda r: f"Exit_status={r['_status']!r} is not an integer"),
]
_CHECK_NO = {name: i for i, (name, _) in enumerate(CHECKS)}


def convert(recs: pl.DataFrame, cluster: Optional[str], rules) -> pl.DataFrame:
    """Records (read_block's, rtime set) -> rows of pbs.SCHEMA + _line, rtype, _check (the first
    failed check's number, else null), _mem_req_f / _mem_peak_f (sizes as floats, for the limits)."""
    c = pl.col
    df = recs
    for k in DURATIONS:
        df = _mapped(df, k, rules.parse_duration, {"v": pl.Float64}, f"_d_{k}", duration_form)
    df = _mapped(df, "exec_host", rules.exec_host_slots_text, {"slots": pl.Int64, "n": pl.Int64, "hosts": pl.String}, "_x",
                 exec_host_form)
    df = _mapped(df, "Resource_List.nodes", rules.nodes_spec, {"n": pl.Int64, "cores": pl.Int64, "gpus": pl.Int64}, "_n")
    df = _mapped(df, "Resource_List.nodect", rules.nodes_spec, {"n": pl.Int64, "cores": pl.Int64, "gpus": pl.Int64}, "_c")
    df = _mapped(df, "exec_vnode", rules.vnode_gpus, {"gpus": pl.Int64}, "_v", vnode_form)
    mem = _mem_rule(rules.pbs_mem)
    for k, p in (("resources_used.mem", "_mp"), ("Resource_List.mem", "_mr"), ("Resource_List.pmem", "_mm")):
        df = _mapped(df, k, mem, _MEM_T, p, size_form)
    # the job id's groups once (each field taken from an expression would run the regex again)
    df = df.with_columns(_g=c("jobid").str.strip_chars().str.extract_groups(JOBID))
    g = c("_g")
    idx = pl.when(g.struct.field("2").is_not_null() & (g.struct.field("2") != "")).then(g.struct.field("2")) \
        .otherwise(g.struct.field("3"))
    server_label = g.struct.field("4").str.splitn(".", 2).struct.field("field_0")
    ep = {}
    for k in EPOCHS:
        secs = c(k).cast(pl.Int64, strict=False)
        ok = c(k).str.contains(r"^[0-9]+$") & secs.is_not_null() & (secs <= MAX_DATETIME_S)
        wanted = _given(k) & (c(k) != "0")
        ep[k] = (pl.when(wanted & ok).then(pl.from_epoch(secs, time_unit="s").cast(pl.Datetime("us"))),
                 (wanted & ~ok).fill_null(False))
    df = df.with_columns(
        _seq=g.struct.field("1"), _idx=idx, _jid_ok=g.struct.field("1").is_not_null(),
        _server=pl.when(server_label != "").then(server_label),
        **{f"_e_{k}": ep[k][0] for k in EPOCHS}, **{f"_ex_{k}": ep[k][1] for k in EPOCHS},
        **{f"_i_{k}": _int(k) for k in INTS},
        _status=pl.when(c("Exit_status").is_not_null()).then(c("Exit_status")).otherwise(c("exit_status")))
    limit, elapsed_used = c("_d_Resource_List.walltimev"), c("_d_resources_used.walltimev")
    start, end = c("_e_start"), c("_e_end")
    elapsed = pl.when(elapsed_used.is_not_null()).then(elapsed_used).when(start.is_not_null() & end.is_not_null()) \
        .then((end - start).dt.total_microseconds() / 1e6)
    slots, nhosts = c("_xslots").fill_null(0), c("_xn").fill_null(0)
    ru, rl, tes = c("_i_resources_used.ncpus"), c("_i_Resource_List.ncpus"), c("_i_total_execution_slots")
    cands = pl.max_horizontal(pl.when(_truthy(rl)).then(rl), pl.when(_truthy(c("_ncores"))).then(c("_ncores")))
    ncpus = pl.when(_truthy(ru)).then(ru).when(slots != 0).then(slots).when(_truthy(tes)).then(tes).otherwise(cands)
    unc = c("_i_unique_node_count")
    nodect_n = pl.when(c("Resource_List.nodect").str.contains(r"^[0-9]+$")).then(c("Resource_List.nodect").cast(pl.Int64, strict=False))
    nnodes = (pl.when(nhosts != 0).then(nhosts).when(_truthy(unc)).then(unc).when(_truthy(nodect_n)).then(nodect_n)
              .otherwise(c("_nn")))
    nodect_spec = _given("Resource_List.nodect") & ~c("Resource_List.nodect").str.contains(r"^[0-9]+$")
    gpus = pl.coalesce(c("_i_Resource_List.ngpus"), pl.when(_given("Resource_List.nodes")).then(c("_ngpus")),
                       pl.when(nodect_spec).then(c("_cgpus")), pl.when(_given("exec_vnode")).then(c("_vgpus")))
    df = df.with_columns(_elapsed=elapsed, ncpus=ncpus, nnodes=nnodes, ngpus=gpus)
    # requested memory: Resource_List.mem, else pmem x cores
    use_pmem = c("_mr_b").is_null() & c("_mr_lim").is_null() & _given("Resource_List.pmem") & _truthy(c("ncpus"))
    mem_req_f = pl.when(c("_mr_f").is_not_null()).then(c("_mr_f")).when(use_pmem).then(c("_mm_f") * c("ncpus"))
    mem_req = pl.when(c("_mr_b").is_not_null()).then(c("_mr_b")).when(use_pmem & (c("_mm_f") * c("ncpus") <= limits.MAX_BYTES)) \
        .then(c("_mm_b") * c("ncpus"))
    nr_req = pl.when(use_pmem & c("_mm_error").is_not_null()).then(c("Resource_List.pmem")) \
        .when(c("_mr_error").is_not_null()).then(c("Resource_List.mem"))
    rc, sc = c("_i_run_count"), c("_i_start_count")
    runs = pl.when(_truthy(rc)).then(rc).otherwise(sc)
    status_given = c("_status").is_not_null() & (c("_status") != "")
    status = c("_status").str.strip_chars().cast(pl.Int64, strict=False)
    state, code = exit_state(status, c("_elapsed"), limit)
    is_e, rtype, rtime = c("rtype") == "E", c("rtype"), c("rtime")
    fail = {
        "jobid": ~c("_jid_ok"), **{f"epoch_{k}": c(f"_ex_{k}") for k in EPOCHS},
        "epoch_qtime": c("_ex_qtime") & c("_e_ctime").is_null(),
        **{f"dur_{k}": c(f"_d_{k}_error").is_not_null() for k in DURATIONS},
        "end_before_start": start.is_not_null() & end.is_not_null() & (end < start),
        "exec_host": c("_x_error").is_not_null(), "nodes": c("_n_error").is_not_null(),
        **{f"int_{k}": _given(k) & c(f"_i_{k}").is_null() for k in ("Resource_List.ncpus", "resources_used.ncpus",
                                                                    "Resource_List.ngpus", "run_count")},
        "int_total_execution_slots": _given("total_execution_slots") & tes.is_null() & ~_truthy(ru) & (slots == 0),
        "int_unique_node_count": _given("unique_node_count") & unc.is_null() & (nhosts == 0),
        "nodect": nodect_spec & c("_c_error").is_not_null() & c("_i_Resource_List.ngpus").is_null()
        & ~_given("Resource_List.nodes"),
        "mem_resources_used.mem": c("_mp_lim").is_not_null(), "mem_Resource_List.mem": c("_mr_lim").is_not_null(),
        "mem_Resource_List.pmem": use_pmem & c("_mm_lim").is_not_null(),
        "int_start_count": _given("start_count") & sc.is_null() & ~_truthy(rc),
        "exit_status": is_e & status_given & status.is_null(),
    }
    check = pl.coalesce([pl.when(fail[name].fill_null(False)).then(pl.lit(i, dtype=pl.Int32)) for name, i in _CHECK_NO.items()])
    submit = pl.coalesce(c("_e_ctime"), c("_e_qtime"))
    return df.select(
        "_line", "rtype", "jobid", "text",
        cluster=pl.lit(cluster) if cluster else pl.coalesce(c("_server"), pl.lit("default")),
        job_id=pl.when(c("_idx").is_not_null()).then(pl.format("{}[{}]", c("_seq"), c("_idx"))).otherwise(c("_seq")),
        job_id_raw=pl.when(c("_idx").is_not_null()).then(pl.format("{}[{}]", c("_seq"), c("_idx"))).otherwise(c("_seq")),
        source=pl.lit("pbs"),
        array_job_id=pl.when(c("_idx").is_not_null()).then(c("_seq")), array_task_id=c("_idx"),
        job_name=pl.when(_given("jobname")).then(c("jobname")), user=pl.when(_given("user")).then(c("user")),
        group=pl.when(_given("group")).then(c("group")),
        account=pl.when(_given("account")).then(c("account"))
        .when(_given("project") & (c("project") != "_pbs_project_default")).then(c("project")),
        partition=pl.when(_given("queue")).then(c("queue")),
        state=pl.when(is_e & status_given).then(state).when(rtype == "S").then(pl.lit("RUNNING"))
        .when(rtype == "Q").then(pl.lit("PENDING")).when(rtype == "D").then(pl.lit("CANCELLED")),
        exit_code=pl.when(is_e & status_given).then(code),
        submit_time=pl.when(rtype == "Q").then(pl.coalesce(submit, rtime)).otherwise(submit),
        eligible_time=c("_e_etime"), start_time=start,
        end_time=pl.when(rtype == "S").then(None).when(rtype == "D").then(rtime).when(is_e).then(pl.coalesce(end, rtime))
        .otherwise(end),
        elapsed_s=c("_elapsed").cast(pl.Int64, strict=False), timelimit_s=limit.cast(pl.Int64, strict=False),
        ncpus="ncpus", nnodes="nnodes", ngpus="ngpus", mem_req_bytes=mem_req,
        mem_peak_bytes=c("_mp_b"), cpu_time_s=c("_d_resources_used.cputv"),
        node_list=pl.when(c("_xhosts") != "").then(c("_xhosts")),
        restarts=pl.when(_truthy(runs)).then(runs - 1).cast(pl.Int32, strict=False),
        _nr_peak=pl.when(c("_mp_error").is_not_null()).then(c("resources_used.mem")), _nr_req=nr_req,
        _nr_exit=pl.when(is_e & ~status_given).then(pl.lit("no Exit_status")),
        _mem_req_f=mem_req_f, _mem_peak_f=c("_mp_f"), _check=check,
        _raw=pl.struct("jobid", *KEYS, "_x_error", "_n_error", "_c_error", "_mp_lim", "_mr_lim", "_mm_lim", "_status"),
    )
