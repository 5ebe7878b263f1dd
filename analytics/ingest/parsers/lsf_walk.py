"""lsf.walk for a block of records at once, with polars: each record cut into a list column of its
field values, the positions of the variable-length parts (asked hosts, exec hosts, submitEXT,
host rusage entries) computed from their counts, the fields a job row needs taken by position.

It reads the records whose reading is plain; lsf.fields_of and lsf.walk (the rule) read the others,
one at a time: a record with a byte outside printable ASCII and newline (Python's and polars' regex
classes agree on those), a quote inside a string, an unquoted word without a letter or digit, a
count in an odd form, a record that ends early or whose host rusage entries are not found (walk
rejects it with its reason), more than MAX_RUSAGE_HOSTS rusage entries, a repeated submitEXT key,
a number too large for a column."""
from __future__ import annotations

import polars as pl

from jobsight.analytics.ingest.parsers import lsf

PLAIN = r'^"[\n\x20-\x7e]*$'
# lsf._TOKEN for a plain record (only blanks between words); a quoted field's "" written unrolled,
# which the regex engine runs faster than an alternation per character
_TOKEN = r'"[^"]*(?:""[^"]*)*"|[^ "]+'
# an unquoted word without a letter or digit (after whole quoted fields, alone or after a blank)
_STRAY = r'^(?:[^"]*"[^"]*")*(?:[^"]* )?[^ "0-9A-Za-z]+(?:[ "]|$)'
# a count, a number, an integer as written (a quoted field holds no quote when it is one)
_COUNT = r'^"?[0-9]{1,9}"?$'
_NUMBER = r'^"?-?[0-9.]+"?$'
_INT = r'^"?-?[0-9]+"?$'
_NGPUS = r"ngpus(?:_physical)?\s*=\s*([0-9]+)"
_GPUOPT = r'-gpu\s+"?[^"\n]*?\bnum=([0-9]+)'
_BSUB_GPU = r'#BSUB\s+-gpu\s+"?[^";\n]*?\bnum=([0-9]+)'
MAX_RUSAGE_HOSTS = 16
_PLAIN_BYTES = b"\n" + bytes(range(0x20, 0x7F))   # the bytes PLAIN allows after its first quote


def _value(e: pl.Expr) -> pl.Expr:
    """A field as written -> its value: a quoted one without the quotes, "" inside read as one."""
    # a bare field holds no quote; a quoted one starts and ends with one
    return e.str.strip_prefix('"').str.strip_suffix('"').str.replace_all('""', '"', literal=True)


def _count(e: pl.Expr) -> pl.Expr:
    return pl.when(e.str.contains(_COUNT)).then(e.str.strip_chars('"').cast(pl.Int64, strict=False))


def _gpu_in(e: pl.Expr) -> pl.Expr:
    """gpus_per_host's look at one text: ngpus=N, else -gpu "num=N" (digits, as text)."""
    return pl.coalesce(e.str.extract(_NGPUS, 1), e.str.extract(_GPUOPT, 1))


def printable(text: str) -> bool:
    """Whether text holds only the bytes PLAIN allows (printable ASCII and newlines)."""
    # isascii is known to CPython without a look at the text; then every byte but PLAIN's deleted
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_BYTES)


def walk_block(recs: pl.DataFrame, all_printable: bool = False) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Records (_line, text) -> (walked: _line + lsf._WALK_SCHEMA's columns, for the JOB_FINISH
    records read here; other: event, the other events read here; left: _line, text, the records
    for fields_of and walk). ``all_printable``: every record holds only printable ASCII and newlines
    (then PLAIN asks only for the first quote)."""
    c = pl.col
    # lsf's record layout (lsf imports this module: read at call time)
    head_n, after_n, opt_n = len(lsf._HEAD), len(lsf._AFTER_HOSTS), len(lsf._OPTIONAL)
    late = {k: lsf._AFTER_HOSTRUSAGE.index(k) for k in ("runLimit", "effectiveResReq", "runTime")}
    text = c("text")
    plain = (text.str.starts_with('"') if all_printable else text.str.contains(PLAIN)) & ~text.str.contains(_STRAY)
    df = recs.with_columns(_plain=plain.fill_null(False))
    left = df.filter(~c("_plain")).select("_line", "text")
    df = df.filter(c("_plain"))
    el = pl.element()
    # the fields as written (quoted or not), read as values where used
    df = df.with_columns(t=text.str.extract_all(_TOKEN))
    t, n = c("t"), c("t").list.len()

    def tok(i) -> pl.Expr:
        return t.list.get(i, null_on_oob=True)

    df = df.with_columns(event=_value(tok(0)), _packed=tok(head_n).str.contains(r"^0[0-9]+$"))
    # fields_of notes a packed count ('02' for '0 2') whatever the event: those records go to it
    odd_other = (c("event") != "JOB_FINISH") & c("_packed").fill_null(False)
    # a filter then a select, lazily: only the columns selected are filtered (not the list of fields)
    other = df.lazy().filter((c("event") != "JOB_FINISH") & ~odd_other).select("event").collect()
    left = pl.concat([left, df.lazy().filter(odd_other).select("_line", "text").collect()])
    if not df.select((c("event") == "JOB_FINISH").fill_null(False).all()).item():
        df = df.filter(c("event") == "JOB_FINISH")
    # the variable-length parts by their counts; a record the rule would refuse is left to it
    na = _count(tok(head_n))
    df = df.with_columns(_p1=head_n + 1 + na)
    df = df.with_columns(_ne=_count(tok(c("_p1"))))
    df = df.with_columns(_p2=c("_p1") + 1 + c("_ne"))
    df = df.with_columns(_p3=c("_p2") + after_n)
    rest = n - c("_p3")
    has_opt = rest > opt_n
    df = df.with_columns(_ok=~c("_packed").fill_null(True) & (c("_p3") <= n).fill_null(False),
                         _m=pl.when(has_opt).then(_count(tok(c("_p3") + opt_n))))
    df = df.with_columns(_ok=c("_ok") & (~has_opt | (c("_m").is_not_null() & (c("_p3") + opt_n + 1 + 2 * c("_m") <= n)))
                         .fill_null(False))
    df = df.with_columns(_p4=pl.when(has_opt).then(c("_p3") + opt_n + 1 + 2 * c("_m")))
    has_hr = (c("_p4") < n).fill_null(False)
    df = df.with_columns(_h=pl.when(has_hr).then(_count(tok(c("_p4")))))
    df = df.with_columns(_ok=c("_ok") & (~has_hr | (c("_h").is_not_null() & (c("_h") <= MAX_RUSAGE_HOSTS))).fill_null(False))
    most = df.select(pl.when(c("_ok") & has_hr).then(c("_h")).max()).item()
    df = df.with_columns(_rusage_width(df, int(most or 0)))
    df = df.with_columns(_ok=c("_ok") & (~has_hr | (c("_h") == 0) | c("_w").is_not_null()).fill_null(False))
    p5 = c("_p4") + 1 + c("_h") * c("_w").fill_null(0)
    fields = {**{k: tok(i) for k, i in lsf._AT_HEAD.items()},
              **{k: tok(c("_p2") + i) for k, i in lsf._AT_AFTER_HOSTS.items()},
              "exitInfo": pl.when(rest > lsf._EXIT_INFO).then(tok(c("_p3") + lsf._EXIT_INFO)),
              **{k: pl.when(has_hr & c("_ok")).then(tok(p5 + i)) for k, i in late.items()}}
    df = df.with_columns(_hosts=t.list.slice(c("_p1") + 1, c("_ne")),
                         _ext=t.list.slice(c("_p3") + opt_n + 1, 2 * c("_m").fill_null(0)), **fields)
    star = el.str.extract(r"^([0-9]+)\*", 1)
    # a field none of whose values is quoted (a number, as LSF writes them) is its value already
    quoted = df.select(**{k: c(k).str.starts_with('"').any() for k in fields}).row(0, named=True)
    df = df.with_columns(_hosts=c("_hosts").list.eval(_value(el)), _ext=c("_ext").list.eval(_value(el)),
                         **{k: _value(c(k)) for k in fields if quoted[k]})
    df = df.with_columns(
        _big=c("_hosts").list.eval(el.str.contains(r"^[0-9]{16,}\*")).list.any(),
        slots=c("_hosts").list.eval(pl.when(star.is_not_null()).then(star.cast(pl.Int64, strict=False))
                                    .otherwise(pl.lit(1, dtype=pl.Int64))).list.sum(),
        _names=c("_hosts").list.eval(pl.when(star.is_not_null()).then(el.str.replace(r"^[0-9]+\*", "")).otherwise(el))
        .list.unique(maintain_order=True))
    ext = c("_ext")
    # submitEXT's values (at odd places) read for a GPU count only in records that say 'gpu' somewhere
    # (both of _gpu_in's forms do)
    vals = (df.lazy().filter(text.str.contains("gpu", literal=True))
            .select("_line", g=ext.list.gather(pl.int_ranges(1, ext.list.len(), 2)).list.eval(_gpu_in(el))
                    .list.drop_nulls().list.first()).filter(c("g").is_not_null()).collect())
    gpu = pl.coalesce(_gpu_in(c("resReq")), _gpu_in(c("effectiveResReq")),
                      c("_line").replace_strict(vals["_line"], vals["g"], default=None, return_dtype=pl.String),
                      c("command").str.extract(_BSUB_GPU, 1))
    df = df.with_columns(_gpu=gpu)
    # a submitEXT key (at even places) twice in a record
    keys = df.select(_r=pl.int_range(pl.len()), k=ext.list.gather(pl.int_ranges(0, ext.list.len(), 2))).explode("k")
    twice = keys.filter(keys.is_duplicated())["_r"]
    df = df.with_columns(_ok=c("_ok") & ~c("_big") & (c("_gpu").str.len_bytes() <= 15).fill_null(True)
                         & ~pl.int_range(pl.len()).is_in(twice.implode()))
    left = pl.concat([left, df.lazy().filter(~c("_ok")).select("_line", "text").collect()])
    walked = df.lazy().filter(c("_ok")).select(
        "_line", *lsf.WALKED, slots="slots",
        nhosts=c("_names").list.len().cast(pl.Int64), hosts=c("_names").list.join(","),
        gpus=c("_gpu").cast(pl.Int64)).collect()
    return walked.select(list(lsf._WALK_SCHEMA)), other, left


def _rusage_width(df: pl.DataFrame, most: int) -> pl.Series:
    """_hostrusage_width for each record of df with 1..MAX_RUSAGE_HOSTS host rusage entries: the
    first width (5 to 8) that puts a host name at every entry start, a number after it and an
    integer (or the record's end) after the last entry; null where none does or there are none.
    The fields after _p4 are looked at once each (exploded), not once per width and entry."""
    c, t = pl.col, pl.col("t")
    start, h, n = c("_p4") + 1, c("_h"), t.list.len()
    if not most:
        return pl.Series("_w", [None] * df.height, dtype=pl.Int64)
    region = df.select(
        _r=pl.int_range(pl.len(), dtype=pl.Int64), _hh=h,
        _num=pl.when(h > 0).then(t.list.slice(start, h * 8)).list.eval(pl.element().str.contains(_NUMBER)),
        **{f"_end{w}": ((start + h * w == n) | t.list.get(start + h * w, null_on_oob=True).str.contains(_INT))
           & (start + h * w <= n) for w in (5, 6, 7, 8)})
    cells = (region.select("_r", "_hh", "_num", _pos=pl.int_ranges(0, c("_num").list.len(), dtype=pl.Int64))
             .explode("_num", "_pos").filter(c("_pos").is_not_null()))
    # an entry's host name (a number: wrong) or the number after it (not one: wrong), for width w
    wrong = {w: (c("_pos") < c("_hh") * w) & (((c("_pos") % w == 0) & c("_num")) | ((c("_pos") % w == 1) & ~c("_num")))
             for w in (5, 6, 7, 8)}
    bad = cells.group_by("_r").agg(**{f"_bad{w}": e.fill_null(True).any() for w, e in wrong.items()})
    region = region.join(bad, on="_r", how="left").sort("_r")
    widths = [pl.when(c(f"_end{w}").fill_null(False) & ~c(f"_bad{w}").fill_null(False)).then(pl.lit(w, dtype=pl.Int64))
              for w in (5, 6, 7, 8)]
    return region.select(_w=pl.when(c("_hh") > 0).then(pl.coalesce(widths)))["_w"]
