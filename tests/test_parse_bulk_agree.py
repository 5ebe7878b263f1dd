"""The column-wise readers of PBS and LSF logs against the scalar rules they stand for: on generated
logs with hostile values (quotes, blanks in names, markup, formulas, NaN, 1e999, empty and odd
host lists, truncated records) every row, reject, reason and note is the same either way."""
from __future__ import annotations

import json
import random
from functools import partial

import polars as pl
import pytest
from conftest import FIXTURES, accounted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import lsf, lsf_frame, lsf_walk, pbs, pbs_frame
from jobsight.analytics.ingest.records import ParseOptions

HOSTILE = ["<b>x</b>", "=1+1", "@SUM(A1)", "a b", 'say "hi"', "NaN", "1e999", "", "ø-ünï", "tab\there", "-", "a,b",
           "--", "+", "x\ny"]
NUMBERS = ["0", "-1", "12", "3.5", "nan", "NaN", "1e999", "-5", "", "inf", "007", "99999999999999999999", "1e5", "x"]


def _q(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _lsf_record(rnd: random.Random, i: int) -> str:
    pick = rnd.choice
    hostile = rnd.random() < 0.3

    def num(plain: int) -> str:
        return pick(NUMBERS) if hostile and rnd.random() < 0.1 else str(plain)

    def text(plain: str) -> str:
        return _q(pick(HOSTILE) if hostile and rnd.random() < 0.2 else plain)

    nh = pick([0, 1, 1, 2, 3])
    hosts = [pick([f"cn{rnd.randrange(9)}", f"{pick([1, 4, 16])}*cn{rnd.randrange(9)}", "*h", "16*", "cn1",
                   "4*a*b"] + ["99999999999999999999*h"] * (rnd.random() < 0.05)) for _ in range(nh)]
    asked = [_q(f"cn{k}") for k in range(pick([0, 0, 2]))]
    ext_pairs = pick([[], [("1110", "default")], [("1086", "ngpus_physical=3")], [("1", "a"), ("1", "-gpu num=2")]])
    ext = f"{len(ext_pairs)} " + " ".join(f'{k} {_q(v)}' for k, v in ext_pairs)
    width = pick([5, 6])
    nr = pick([0, 0, 1, 2, 17])
    rusage = f"{nr} " + " ".join(" ".join([_q(f"cn{k}"), "100", "0", "1.5", "0.5", "0"][:width]) for k in range(nr))
    res = pick(["select[type == any]", "rusage[ngpus_physical=2]", '-gpu "num=4"', "span[ptile=4]"])
    cmd = pick(["./a.out", '#!/bin/sh\n#BSUB -gpu "num=2"\n./x', 'run "quoted" arg', "=cmd|' /C calc'!A0"])
    status = pick([(64, 0, 0), (32, 256, 0), (32, 9, 5), (32, 15, 16), (64, 0, 0), (96, 0, 0)] + [(16, 0, 0)] * hostile)
    start = 1_700_000_000 + i * 10
    head = (f'"JOB_FINISH" "10.108" {num(start + 500)} {num(1000 + i)} 1501 33554450 {num(nh or 1)} {num(start - 60)} 0 0 '
            f'{num(start)} {text(f"u{i % 7}")} {text("normal")} {_q(res)} "" "" "login" "/home" "" "/o" "" "1.2" '
            f'{len(asked)} {" ".join(asked)} {num(len(hosts))} {" ".join(_q(h) for h in hosts)} {num(status[0])} '
            f'{pick(["100.0", "1"] + ["x", ""] * hostile)} {text(f"job {i}")} {_q(cmd)} {num(20)} {num(2)} 1 0 -1 0 0 1 4 0 9 3 '
            f'-1 0 0 0 8 4 -1 "" {text("proj")} {num(status[1])} {nh} "/bin/sh" "" {num(pick([0, 0, 3]))} {num(4096)} '
            f'0 "" "" "" "" 0 "" {num(status[2])} "" -1 "" "" "" "" -1 "" "" 6160 "" 1 "" "" {ext} {rusage} '
            f'{num(3600)} 4 5 {_q(pick([res, "rusage[ngpus_physical=5]", ""]) + " ")} "" -1 "" -1 0 "" 0 0 "" '
            f'{num(490)} "/w" 0 "" 0.0 0 0 0 0 0 -1 0 0 0 0 1')
    r = rnd.random()
    if r < 0.05:   # truncated
        words = head.split(" ")
        head = " ".join(words[:rnd.randrange(1, len(words))])
        head = head if head.count('"') % 2 == 0 else head + '"'
    elif r < 0.08:   # numAskedHosts and numExHosts packed ('02'); a stray unquoted word, alone or beside a '*'
        head = pick([head.replace('"1.2" 0  ', '"1.2" 0', 1), head.replace(" 0 ", " - ", 1),
                     head.replace(" 0 ", " - ", 1).replace(' "1.2" ', " 1*2 ", 1)])
    elif r < 0.1:
        head = head.replace('"JOB_FINISH"', pick(['"JOB_RESIZE"', "JOB_FINISH", '"EVENT_ADRSV_FINISH"']))
        head = head.replace('"1.2" 0  ', '"1.2" 0', 1) if rnd.random() < 0.5 else head
    return head


def _scalar_lsf(monkeypatch):
    monkeypatch.setattr(lsf, "_block", partial(lsf._block, bulk=False))


def _same(a, b) -> None:
    assert a.jobs.equals(b.jobs)
    assert a.rejects == b.rejects and a.notes == b.notes and (a.rows_in, a.dropped) == (b.rows_in, b.dropped)


def test_lsf_bulk_walk_equals_record_walk(tmp_path, monkeypatch):
    rnd = random.Random(7)
    path = tmp_path / "lsb.acct"
    path.write_text("# hostile\n" + "\n".join(_lsf_record(rnd, i) for i in range(1500)) + "\n\n")
    counted = {"bulk": 0}
    real = lsf_walk.walk_block

    def counting(frame, **kw):
        out = real(frame, **kw)
        counted["bulk"] += out[0].height
        return out
    monkeypatch.setattr(lsf_walk, "walk_block", counting)
    bulk = lsf.parse(path, ParseOptions())
    _scalar_lsf(monkeypatch)
    one_by_one = lsf.parse(path, ParseOptions())
    _same(bulk, one_by_one)
    assert accounted(bulk) and all(r.line_no and r.reason for r in bulk.rejects)
    # both ways in use: most records read column-wise, the hostile ones by the rule
    assert bulk.frame_rows() > 500 and 300 < counted["bulk"] < bulk.rows_in and len(bulk.rejects) > 50
    assert bulk.jobs["ngpus"].drop_nulls().len() > 50 and (bulk.jobs["nnodes"] == 3).any()


@pytest.mark.parametrize("record, why", [
    ('"JOB_FINISH" "10.108" 1 2', "record ends before"),
    ('"JOB_FINISH" "10.108"' + ' 0' * 20 + ' x', "numAskedHosts='x' is not a count"),
])
def test_lsf_bulk_refusals_keep_the_rule_reason(tmp_path, record, why):
    path = tmp_path / "a"
    path.write_text(record + "\n")
    r = lsf.parse(path, ParseOptions())
    assert [(x.line_no, why in x.reason) for x in r.rejects] == [(1, True)]


def _pbs_line(rnd: random.Random, i: int) -> str:
    pick = rnd.choice

    def v(plain: str) -> str:
        return pick(HOSTILE + NUMBERS) if rnd.random() < 0.08 else plain
    wall = pick(["01:00:00", "100:59:59", "1:2:3", "00:61:00", "3600", "1-00:00:00", "", "nan", "01:00:00.5"])
    mem = pick(["2031040kb", "4gb", "12", "12.27M", "1.5gb", "0kb", "99999999999999999999gb", "8w", "100b", "5GB",
                "1e999kb", "18014398509481984kb"])
    host = pick(["cn1/0-3+cn2/0-3", "cn1/0*13", "cn1/0+cn1/1", "h/3-1", "cn-1/0", "a+b", "x/1,2", "cn1/0*99999999999",
                 "h/", "ø/0", "cn1/0+cn1/1+cn2/5"])
    rtype = pick("QSED")
    return (f"03/01/2024 10:{i % 60:02d}:00;{rtype};{1000 + i}.srv;user={v('u1')} queue={v('batch')} "
            f"jobname={v('j')} ctime={v(str(1709280000 + i))} start={v(str(1709281000 + i))} "
            f"end={v(str(1709285000 + i))} exec_host={host} Resource_List.walltime={wall} "
            f"resources_used.walltime={pick(['00:30:00', wall])} resources_used.cput={pick(['01:00:00', wall])} "
            f"resources_used.mem={mem} Resource_List.mem={pick([mem, '4gb'])} Exit_status={v('0')}")


def test_pbs_regular_forms_equal_the_rules(tmp_path, monkeypatch):
    rnd = random.Random(3)
    path = tmp_path / "20240301"
    path.write_text("\n".join(_pbs_line(rnd, i) for i in range(1500)) + "\n")
    opts = ParseOptions(timezone="UTC")
    bulk = pbs.parse(path, opts)
    real = pbs_frame._mapped
    monkeypatch.setattr(pbs_frame, "_mapped", lambda df, key, rule, dtypes, prefix, form=None: real(df, key, rule, dtypes, prefix))
    _same(bulk, pbs.parse(path, opts))
    assert accounted(bulk) and bulk.frame_rows() > 300 and len(bulk.rejects) > 50


@pytest.mark.parametrize("form, rule, values", [
    (pbs_frame.duration_form, pbs._Rules.parse_duration, ["00:00:00", "01:00:00", "999999999:59:59", "12:60:00"]),
    (pbs_frame.size_form, pbs_frame._mem_rule(pbs.pbs_mem),
     ["0", "1", "7kb", "8w", "3b", "1pb", "999999999999999gb", "1048576tb", "1048577tb", "1.5gb", "4GB"]),
    (pbs_frame.exec_host_form, pbs.exec_host_slots_text,
     ["a/0", "a/0-3+b/0*13", "a/3-1", "n-1/0+n-1/1", "a/0*0", "a/1,2", "a+b", "x/0*999999"]),
])
def test_each_regular_form_gives_the_rule_value(form, rule, values):
    regular, exprs, parts = form(pl.col("v"))
    got = pl.DataFrame({"v": values}).with_columns(**parts).select(regular.alias("_ok"), **exprs)
    assert got["_ok"].sum() >= len(values) - 3
    for v, row in zip(values, got.iter_rows(named=True)):
        if row.pop("_ok"):
            want = rule(v)
            assert tuple(row.values()) == (want if isinstance(want, tuple) else (want,)), v


def test_lsf_records_delimited_by_their_quotes():
    lines = ['"A" 1', "", "# c", '"B" "x', 'y" 2', '#"odd', '"C" "never', '"D" 3']
    assert lsf.records(lines) == [(0, '"A" 1', None), (2, "# c", "comment"), (3, '"B" "x\ny" 2', None),
                                  (5, '#"odd', "comment"), (6, '"C" "never', "a quoted field is never closed"),
                                  (7, '"D" 3', None)]
    assert lsf.records(lines, final=False)[-1] == (6, None, "more")


def test_lsf_null_reasons_written_as_json_dumps_writes_them():
    values = [None, "-1", "0", "", 'a"b', "back\\slash", "ø", "tab\t", "<b>", "=1+1", "1e999 nan"]
    rnd = random.Random(5)
    dicts = [{k: rnd.choice(values) for k in lsf_frame._NULLABLE} for _ in range(300)]
    rows = pl.DataFrame({"_line": range(300), "_nulls": dicts})
    got = lsf_frame.null_reasons(rows)["null_reasons"].to_list()
    want = [json.dumps({k: v for k, v in d.items() if v is not None}) if any(v is not None for v in d.values()) else None
            for d in dicts]
    assert got == want and sum(g is not None and "\\" in g for g in got) > 10


_tok = st.sampled_from(['""', '"x y"', "0", "-1", "1", "2", "3", "64", "32", "16*h", '"4*h"', "1e400", "nan", "02", "¡",
                        "3.5", '"JOB_FINISH"', '"a""b"', "-", '"ngpus_physical=2"', '"-gpu num=1"', '"9"', "\t"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.integers(0, 5), cut=st.integers(20, 140), edits=st.lists(st.tuples(st.integers(0, 140), _tok), max_size=4))
def test_lsf_bulk_equals_record_walk_on_edited_records(tmp_path_factory, record, cut, edits):
    """Fixture records with fields replaced or cut off: the same rows, rejects and notes either way."""
    recs = ['"JOB_FINISH"' + r for r in (FIXTURES / "lsf" / "lsb.acct").read_text().split('\n"JOB_FINISH"')[1:]]
    words = [('"' + v.replace('"', '""') + '"') if q else v for v, q in lsf.tokenize(recs[record % len(recs)])]
    for pos, tok in edits:
        words[pos % len(words)] = tok
    path = tmp_path_factory.mktemp("lsf") / "acct"
    path.write_text(" ".join(words[:cut]) + "\n")
    bulk = lsf.parse(path, ParseOptions())
    with pytest.MonkeyPatch.context() as mp:
        _scalar_lsf(mp)
        _same_or_empty(bulk, lsf.parse(path, ParseOptions()))
    assert accounted(bulk)


def _same_or_empty(a, b) -> None:
    assert (a.jobs is None) == (b.jobs is None)
    if a.jobs is not None:
        assert a.jobs.equals(b.jobs)
    assert a.rejects == b.rejects and a.notes == b.notes and (a.rows_in, a.dropped) == (b.rows_in, b.dropped)
