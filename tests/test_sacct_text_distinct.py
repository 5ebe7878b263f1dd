"""sacct text: fields converted once per distinct value (_convert_distinct, for big blocks) give the
same rows, rejects and reasons as the column-wise conversion of every value and as the per-line path."""
import json
import random
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from jobsight.analytics.ingest.parsers import sacct_columns, sacct_text
from jobsight.analytics.ingest.records import ParseOptions

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
GiB, MiB = 1024 ** 3, 1024 ** 2
HDR = "JobID|JobIDRaw|State|Elapsed|Timelimit|ReqMem|NCPUS|AllocTRES|ReqTRES|MaxRSS|NodeList|TRESUsageInTot\n"
# field values that repeat, odd ones included: null words, bad units, several typed GPUs, 'by' states
STATES = ["COMPLETED", "CANCELLED by 1500", "FAILED", "RUNNING", "CANCELLED+", "cancelled", "BOGUS STATE!", ""]
DURS = ["01:00:00", "1-00:00:00", "UNLIMITED", "Partition_Limit", "05:12.345", "", "12:99:00", "xx"]
TRES = ["billing=4,cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=16G,node=1", "cpu=1,mem=4000M", "",
        "billing=4,cpu=4,gres/gpu:a100=1,gres/gpu:v100=2,mem=1G", "cpu=2,mem=12Q", "garbage", "gres/gpu=x"]
MEMS = ["", "1024K", "2G", "1.5M", "12Q", "Unknown", "0"]
REQMEM = ["4G", "4000Mc", "16Gn", "0n", "", "bad", "18446744073709551616.00M", "2000000000000000T", "2000000000000M"]
NODES = ["node01", "None assigned", "", "node[01-04]", "Unknown"]
USAGE = ["cpu=00:00:31,mem=1024K", "mem=2G,gres/gpuutil=50,gres/gpumem=1G", "", "mem=bad"]


def _dump(path: Path, n: int, seed: int) -> None:
    rnd = random.Random(seed)
    def pick(values):   # the first two are good
        return rnd.choice(values[:2] if rnd.random() < 0.9 else values)
    lines = [HDR]
    for i in range(n):
        jid = str(1000 + i) + ("" if i % 3 == 0 else ".batch" if i % 3 == 1 else ".0")
        lines.append("|".join([jid, jid, pick(STATES), pick(DURS), pick(DURS),
                               pick(REQMEM), pick(["4", "2", "", "x"]),
                               pick(TRES), pick(TRES), pick(MEMS), pick(NODES), pick(USAGE)]) + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def _parse(path, monkeypatch, mode):
    if mode == "distinct":          # every field of those kinds converted once per distinct value
        monkeypatch.setattr(sacct_columns, "DEDUP_MIN_ROWS", 0)
        monkeypatch.setattr(sacct_columns, "DEDUP_MAX_SHARE", 1.0)
    elif mode == "columnwise":
        monkeypatch.setattr(sacct_columns, "DEDUP_MIN_ROWS", 1 << 60)
    try:
        return sacct_text.parse(path, ParseOptions(timezone="Europe/Amsterdam"), fast_path=mode != "per-line")
    finally:
        monkeypatch.undo()


def _same(a, b):
    assert_frame_equal(a.jobs, b.jobs)
    assert_frame_equal(a.steps, b.steps)
    assert [(r.line_no, r.reason) for r in a.rejects] == [(r.line_no, r.reason) for r in b.rejects]
    assert (a.rows_in, a.dropped) == (b.rows_in, b.dropped)


@pytest.mark.parametrize("seed", [1, 2])
def test_distinct_conversion_matches_both_other_paths(tmp_path, monkeypatch, seed):
    src = tmp_path / "dump.txt"
    _dump(src, 600, seed)
    distinct = _parse(src, monkeypatch, "distinct")
    _same(distinct, _parse(src, monkeypatch, "columnwise"))
    _same(distinct, _parse(src, monkeypatch, "per-line"))
    # the mix really has rows of each sort, rejected and kept, with reasons
    assert len(distinct.rejects) > 100 and len(distinct.jobs) > 50 and len(distinct.steps) > 100
    assert distinct.jobs["null_reasons"].drop_nulls().len() > 0


def test_distinct_conversion_values_by_hand(tmp_path, monkeypatch):
    src = tmp_path / "few.txt"
    src.write_text(HDR + "".join(
        f"{i}|{i}|CANCELLED by 1500|1-00:00:00|UNLIMITED|4000Mc|4|billing=4,cpu=4,gres/gpu:a100=2,mem=16G|||None assigned|\n"
        for i in range(1, 6)), encoding="utf-8")
    res = _parse(src, monkeypatch, "distinct")
    assert not res.rejects and len(res.jobs) == 5
    j = res.jobs.row(4, named=True)
    assert (j["state"], j["cancelled_by_uid"], j["elapsed_s"], j["timelimit_s"]) == ("CANCELLED", 1500, 86400, None)
    assert (j["ngpus"], j["gpu_type"], j["billing"], j["mem_alloc_bytes"]) == (2, "a100", 4.0, 16 * GiB)
    assert j["mem_req_bytes"] == 4000 * MiB * 4 and j["node_list"] is None
    assert json.loads(j["null_reasons"]) == {"timelimit_s": "UNLIMITED", "node_list": "None assigned"}


def test_mixed_fixture_through_distinct_path(monkeypatch):
    a = _parse(FIX / "mixed-jobs.txt", monkeypatch, "distinct")
    _same(a, _parse(FIX / "mixed-jobs.txt", monkeypatch, "columnwise"))
