"""PBS records whose values run past a blank (Torque's `Resource_Request_2.0=-L tasks=1:lprocs=4 -L
tasks=1`, words without '='): read column-wise, every known key's value is what split_pairs, the one
word-by-word rule, gives, and a record it refuses is rejected with its reason."""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest.parsers import pbs, pbs_frame

HEAD = "03/01/2024 10:00:00;E;{}.s;"
_word = st.sampled_from([
    "user=u", "queue=q", "user=", "Exit_status=0", "exec_host=h/0", "Resource_List.nodes=2:ppn=4",
    "Resource_Request_2.0=-L", "Resource_List.mem=-L", "user=-x", "other=-L", "other=1", "-L", "-x", "-",
    "-LL", "tasks=1:lprocs=4", "garbage", "=", "=v", "a=b=-L", "9k=1", "user=a=b", "jobname=-L", "x.y-z=-Q"])
_rest = st.lists(_word, max_size=9).map(lambda ws: " ".join(ws))
TORQUE = ("user=u queue=q Resource_Request_2.0=-L tasks=2:lprocs=4:memory=16GB -L tasks=1:lprocs=1 "
          "Resource_List.walltime=01:00:00 jobname=-L user=v Exit_status=0 exec_host=h/0-3")


@pytest.mark.parametrize("text, fields", [
    ("a=-L b=-L c=1", {"a": "-L b=-L", "c": "1"}),     # after a flag, a key=value word continues the value
    ("a= b c", {"a": "b c"}),                           # words without '=' continue it; an empty value adds no blank
    ("x=1 -L y=2 z=3", {"x": "1 -L y=2", "z": "3"}),
    ("a=1 9k=2 -x=3", {"a": "1 9k=2 -x=3"}),            # keys of another form continue it too
    ("a=-l -Q b=1 -Z", {"a": "-l -Q b=1 -Z"}),
    ("a=1 a=2 b", {"a": "2 b"}), ("a=-L a=3 a=4", {"a": "4"}),
    ("=v a=1", "text before the first key=value: '=v'"), ("9k=1", "text before the first key=value: '9k=1'"),
])
def test_split_pairs_word_by_word(text, fields):
    if isinstance(fields, str):
        with pytest.raises(ValueError, match=re.escape(fields)):
            pbs.split_pairs(text)
    else:
        assert pbs.split_pairs(text) == fields


def _expected(rest: str):
    try:
        fields = pbs.split_pairs(rest)
    except ValueError as exc:
        return str(exc)
    return {k: fields[k] for k in pbs_frame.KEYS if k in fields}


def _read(rests: list[str]):
    text = "\n".join(HEAD.format(i) + r for i, r in enumerate(rests))
    recs, rejects, *_ = pbs_frame.read_block(1, text, pbs.split_pairs)
    got = {}
    for r in recs.iter_rows(named=True):
        got[r["_line"]] = {k: r[k] for k in pbs_frame.KEYS if r[k] is not None}
    for x in rejects:
        got[x.line_no] = x.reason.split(": ", 1)[1]
    return got


def test_torque_resource_request_reads_as_split_pairs():
    rests = [TORQUE, TORQUE.replace(" -L tasks=1:lprocs=1", ""), "user=u queue=q", "user=u -L queue=q extra"]
    got = _read(rests)
    assert got == {i + 1: _expected(r) for i, r in enumerate(rests)}
    assert got[1]["user"] == "u" and got[1]["jobname"] == "-L user=v"   # after a value "-L" a key=value word continues it
    assert got[4]["user"] == "u -L queue=q extra"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rests=st.lists(_rest, min_size=1, max_size=12))
def test_words_read_column_wise_as_split_pairs_reads_them(rests):
    assert _read(rests) == {i + 1: _expected(r) for i, r in enumerate(rests)}
