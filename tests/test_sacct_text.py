"""sacct text parser: values checked by hand against fixtures/sacct/mixed-jobs.txt, layouts, odd lines."""
import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
GiB = 1024 ** 3
MiB = 1024 ** 2


def parse_text(tmp_path, text, **opts):
    p = tmp_path / "in.txt"
    p.write_text(text, encoding="utf-8")
    return sacct_text.parse(p, ParseOptions(**opts))


def job(res, job_id_raw):
    rows = res.jobs.filter(pl.col("job_id_raw") == job_id_raw).to_dicts()
    assert len(rows) >= 1, job_id_raw
    return rows[-1]


def step(res, job_id_raw, step_id):
    rows = res.steps.filter((pl.col("job_id_raw") == job_id_raw) & (pl.col("step_id") == step_id)).to_dicts()
    assert len(rows) == 1
    return rows[0]


@pytest.fixture(scope="module")
def mixed():
    return sacct_text.parse(FIX / "mixed-jobs.txt", ParseOptions(timezone="Europe/Amsterdam"))


def test_mixed_accounting(mixed):
    # 15 data lines: 9 job lines (3000 twice), 6 steps, nothing rejected
    assert mixed.rows_in == 15
    assert (len(mixed.jobs), len(mixed.steps), len(mixed.rejects), mixed.dropped) == (9, 6, 0, 0)


def test_byte_order_mark_is_not_part_of_the_header(tmp_path, mixed):
    # a dump saved by a Windows editor starts with EF BB BF; the header line must still be one
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbf" + (FIX / "mixed-jobs.txt").read_bytes())
    res = sacct_text.parse(p, ParseOptions(timezone="Europe/Amsterdam"))
    assert (res.rows_in, len(res.jobs), len(res.steps), res.rejects) == (15, 9, 6, [])
    assert_frame_equal(res.jobs, mixed.jobs)
    assert_frame_equal(res.steps, mixed.steps)


def test_gpu_job_values(mixed):
    j = job(mixed, "1001")
    # Amsterdam is UTC+1 on 2026-11-01 (summer time ended 2026-10-25)
    assert j["submit_time"] == datetime(2026, 11, 1, 9, 0, 0)
    assert j["start_time"] == datetime(2026, 11, 1, 9, 5, 0)
    assert j["end_time"] == datetime(2026, 11, 1, 10, 5, 30)
    assert j["elapsed_s"] == 3600 + 30
    assert j["timelimit_s"] == 7200
    assert (j["ncpus"], j["nnodes"], j["ngpus"], j["gpu_type"]) == (8, 1, 2, "a100")
    assert j["billing"] == 24.0
    assert j["mem_req_bytes"] == 16 * GiB and j["mem_alloc_bytes"] == 16 * GiB
    assert j["cpu_time_s"] == 6 * 3600 + 60
    assert j["state"] == "COMPLETED" and j["job_name"] == "train model" and j["user"] == "alice"
    s0 = step(mixed, "1001", "0")
    assert s0["mem_usage_tot_bytes"] == 10 * GiB
    assert s0["gpu_util_tres"] == 150.0 and s0["gpu_mem_tres_bytes"] == 30 * GiB
    assert s0["max_rss_bytes"] == 3 * GiB and s0["ntasks"] == 4
    assert s0["ave_rss_bytes"] == 2 * GiB
    sb = step(mixed, "1001", "batch")
    assert sb["user_cpu_s"] == 40.0 and sb["system_cpu_s"] == 20.0 and sb["max_rss_bytes"] == 2048 * 1024


def test_cancelled_pending_with_pipe_in_name(mixed):
    j = job(mixed, "1002")
    assert j["job_name"] == "a|b name"          # surplus field joined back into JobName
    assert (j["state"], j["cancelled_by_uid"]) == ("CANCELLED", 1500)
    assert j["start_time"] is None and j["timelimit_s"] is None and j["node_list"] is None
    assert j["mem_req_bytes"] == 4000 * MiB * 4  # 4000Mc x 4 CPUs
    import json
    assert json.loads(j["null_reasons"]) == {"start_time": "Unknown", "timelimit_s": "UNLIMITED",
                                             "node_list": "None assigned"}


def test_arrays_and_het(mixed):
    t = job(mixed, "1010")
    assert (t["job_id"], t["array_job_id"], t["array_task_id"]) == ("1003_7", "1003", "7")
    assert t["mem_req_bytes"] == 16 * GiB * 2    # 16Gn x 2 nodes
    assert step(mixed, "1010", "batch")["cpu_time_s"] == pytest.approx(65.5)  # MM:SS.mmm
    p = job(mixed, "1003")
    assert (p["job_id"], p["array_task_id"], p["state"]) == ("1003_[8-10%2]", "[8-10%2]", "PENDING")
    h1 = job(mixed, "2001")
    assert (h1["job_id"], h1["het_job_id"], h1["het_offset"]) == ("2000+1", "2000", 1)
    assert step(mixed, "2000", "0")["job_id"] == "2000+0"
    assert step(mixed, "4000", "interactive")["elapsed_s"] == 2 * 86400 + 3 * 3600 + 4 * 60 + 5


def test_fast_and_per_line_paths_agree(mixed):
    slow = sacct_text.parse(FIX / "mixed-jobs.txt", ParseOptions(timezone="Europe/Amsterdam"), fast_path=False)
    assert_frame_equal(mixed.jobs, slow.jobs)
    assert_frame_equal(mixed.steps, slow.steps)


HDR = "JobID|JobName|State|Start|End|ReqMem|NCPUS\n"


def test_pipe_in_name_unrecoverable_with_two_free_text_columns(tmp_path):
    res = parse_text(tmp_path, "JobID|JobName|Comment|State\n7|a|b|c|COMPLETED\n", timezone="UTC")
    assert len(res.rejects) == 1 and res.rejects[0].line_no == 2
    assert "more than one placement parses: JobName +1; Comment +1" in res.rejects[0].reason


def test_bad_values_rejected_with_reasons(tmp_path):
    text = HDR + ("1|ok|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|1G|2\n"
                  "2|x|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|12Q|2\n"
                  "3|x|COMPLETED|2026-01-01T02:00:00|2026-01-01T01:00:00|1G|2\n"
                  "4|x|COMPLETED|yesterday|2026-01-01T01:00:00|1G|2\n"
                  "5|x|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|1G\n"
                  "# a comment\n\n")
    res = parse_text(tmp_path, text, timezone="UTC")
    reasons = {r.line_no: r.reason for r in res.rejects}
    assert set(reasons) == {3, 4, 5, 6}
    assert "reqmem" in reasons[3] and "12Q" in reasons[3]
    assert "before Start" in reasons[4]
    assert "timestamp" in reasons[5]
    assert "6 fields where the columns are 7" in reasons[6]
    assert res.rows_in == 6 and res.dropped == 1 and len(res.jobs) == 1


def test_columns_option_and_trailing_delimiter(tmp_path):
    res = parse_text(tmp_path, "11|COMPLETED|00:01:00|\n12|FAILED|1-00:00:00|\n",
                     columns=["JobID", "State", "Elapsed"], timezone="UTC")
    assert res.jobs["elapsed_s"].to_list() == [60, 86400] and not res.rejects


def test_headerless_unknown_layout_says_pass_columns(tmp_path):
    res = parse_text(tmp_path, "11|COMPLETED|00:01:00\n", timezone="UTC")
    assert len(res.rejects) == 1 and "--columns" in res.rejects[0].reason


def test_epoch_and_dst_gap(tmp_path):
    text = "JobIDRaw|Start|End|State\n5|1730212549|Unknown|RUNNING\n6|2026-03-29T02:30:00|Unknown|RUNNING\n"
    res = parse_text(tmp_path, text, timezone="Europe/Amsterdam")
    assert job(res, "5")["start_time"] == datetime(2024, 10, 29, 14, 35, 49)  # epoch is UTC already
    assert len(res.rejects) == 1 and res.rejects[0].line_no == 3 and "does not exist" in res.rejects[0].reason


def test_sniff():
    assert sacct_text.sniff(HDR, Path("x"))
    assert sacct_text.sniff("4103947|4103947|ub-hpc|general", Path("x"))
    assert not sacct_text.sniff("timestamp, name, utilization.gpu [%]\n2024/01/01 00:00:00.000, A100, 5 %\n", Path("x"))
    assert not sacct_text.sniff("Job ID: 123\nCluster: x\nState: COMPLETED\n", Path("x"))


# -- property: whatever the line, parse never raises and every reject has a line number and a reason
_field = st.one_of(st.sampled_from(["", "Unknown", "None", "UNLIMITED", "1G", "4000Mc", "0n", "05:12.345",
                                    "1-02:03:04", "2026-01-01T00:00:00", "1730212549", "CANCELLED by 1",
                                    "123_[1-3%2]", "17+0.batch", "billing=3,gres/gpu:a100=1", "-5", "|"]),
                   st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                           max_size=12))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.lists(_field, min_size=1, max_size=9).map("|".join), max_size=8),
       header=st.booleans())
def test_random_lines_never_raise(tmp_path, lines, header):
    text = (HDR if header else "") + "\n".join(lines) + "\n"
    p = tmp_path / "fuzz.txt"
    p.write_text(text, encoding="utf-8")
    res = sacct_text.parse(p, ParseOptions(timezone="Europe/Amsterdam"))
    assert res.rows_in == res.frame_rows() + len(res.rejects) + res.dropped
    for r in res.rejects:
        assert isinstance(r.line_no, int) and r.line_no >= 1 and r.reason


def test_pipe_in_name_with_parsable_trailing_delimiter(tmp_path):
    res = parse_text(tmp_path, "JobID|JobName|State|\n5|a|b|COMPLETED|\n6|plain|FAILED|\n", timezone="UTC")
    assert not res.rejects
    assert res.jobs.select("job_id", "job_name", "state").rows() == [("5", "a|b", "COMPLETED"), ("6", "plain", "FAILED")]


def test_pipe_in_name_not_last_column(tmp_path):
    res = parse_text(tmp_path, "JobID|JobName|State|Elapsed\n5|x|y|z|TIMEOUT|01:00:00\n", timezone="UTC")
    assert res.jobs.select("job_name", "state", "elapsed_s").rows() == [("x|y|z", "TIMEOUT", 3600)]


_FIXTURE_LINES = (FIX / "mixed-jobs.txt").read_text(encoding="utf-8").splitlines()


@st.composite
def _mutated_file(draw):
    lines = list(_FIXTURE_LINES)
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(1, len(lines) - 1))
        line = lines[i]
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "duplicate"]))
        pos = draw(st.integers(0, max(0, len(line) - 1)))
        ch = draw(st.sampled_from(list("|:-.#0 9xK\u00e9\u2603")))
        if op == "delete":
            line = line[:pos] + line[pos + 1:]
        elif op == "insert":
            line = line[:pos] + ch + line[pos:]
        elif op == "replace":
            line = line[:pos] + ch + line[pos + 1:]
        elif op == "truncate":
            line = line[:pos]
        else:
            lines.insert(i, line)
        lines[i] = line
    return "\n".join(lines) + "\n"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_mutated_file())
def test_mutated_lines_never_break_ingest(tmp_path, text):
    from conftest import fresh_memory_db

    from jobsight.analytics.ingest import files as ingest
    p = tmp_path / "mut.txt"
    p.write_text(text, encoding="utf-8")
    res = sacct_text.parse(p, ParseOptions(timezone="Europe/Amsterdam"))
    for r in res.rejects:
        assert isinstance(r.line_no, int) and r.line_no >= 2 and r.reason
    with fresh_memory_db() as con:
        rep = ingest.load_result(con, res, str(p), None, {})   # asserts the accounting itself
    assert rep.rows_in == rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped


def test_out_of_range_values_are_rejected_not_raised(tmp_path):
    text = ("JobID|MaxRSS|Elapsed|State|JobName\n"
            "1|99999999999999999999P|00:01:00|COMPLETED|a\n"
            "2|1K|99999999999999999999999:00:00|COMPLETED|b\n"
            "3|1K|inf|COMPLETED|c\n"
            "4+99999999999|1K|00:01:00|COMPLETED|d\n"
            "5_[1-3]|1K|00:00:01|PENDING|e\n")
    res = parse_text(tmp_path, text, timezone="UTC")
    # text that is no value of its kind rejects the line; a number beyond the limits in a field
    # that does not place the row is stored NULL with the reason
    assert [r.line_no for r in res.rejects] == [4, 5]
    assert "not a duration" in res.rejects[0].reason
    assert res.jobs["job_id"].to_list() == ["1", "2", "5_[1-3]"]
    one, two = res.jobs.row(0, named=True), res.jobs.row(1, named=True)
    assert "above the limit" in json.loads(one["null_reasons"])["max_rss_bytes"]   # a step column
    assert two["elapsed_s"] is None and "above the limit" in json.loads(two["null_reasons"])["elapsed_s"]


def test_gpu_counts_from_tres(tmp_path):
    text = ("JobID|AllocTRES|ReqTRES\n"
            "1|billing=4,cpu=4,gres/gpu:a100=1,gres/gpu:v100=2,mem=1G|\n"     # two typed entries: 3 GPUs
            "2|cpu=4,gres/gpu=2,mem=1G|\n"
            "3||cpu=1,gres/gpu:h100=4\n")                                       # pending: from ReqTRES
    res = parse_text(tmp_path, text, timezone="UTC")
    assert res.jobs.select("job_id", "ngpus", "gpu_type", "billing").rows() == [
        ("1", 3, "a100", 4.0), ("2", 2, None, None), ("3", 4, "h100", None)]


# A real line of the Slurm 22.05 harness: sacct read ~2 s after a 2-second job ended, before
# slurmdbd had its request (Partition empty, QOS and Eligible Unknown, ReqMem NO_VAL64 MiB).
NOVAL_HDR = ("JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|User|UID|Submit|Eligible|Start|End|Elapsed|"
             "ExitCode|State|NNodes|NCPUS|ReqCPUS|NTasks|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|TotalCPU|"
             "UserCPU|SystemCPU|MaxRSS|AveRSS|MaxVMSize|TRESUsageInTot|TRESUsageInMax|TRESUsageInAve|JobName\n")
NOVAL_LINE = ("804|804|jobsight||Unknown|proj-astro|root|alice|0|2026-11-27T15:13:18|Unknown|2026-11-27T15:13:18|"
              "2026-11-27T15:13:20|00:00:02|0:0|COMPLETED|1|2|0||{reqmem}||billing=2,cpu=2,mem=1024M,node=1||vm|"
              "00:00.007|00:00.007|00:00:00|||||||allocation\n")


@pytest.mark.parametrize("fast", [True, False])
def test_reqmem_no_val_is_not_recorded_not_rejected(tmp_path, fast):
    import json
    p = tmp_path / "in.txt"
    p.write_text(NOVAL_HDR + NOVAL_LINE.format(reqmem="18446744073709551616.00M")
                 + NOVAL_LINE.replace("804|804", "805|805").format(reqmem="2000000000000M"), encoding="utf-8")
    res = sacct_text.parse(p, ParseOptions(timezone="UTC"), fast_path=fast)
    j = job(res, "804")
    assert (j["user"], j["state"], j["ncpus"], j["elapsed_s"], j["mem_req_bytes"]) == ("alice", "COMPLETED", 2, 2, None)
    assert json.loads(j["null_reasons"])["mem_req_bytes"] == "18446744073709551616.00M"
    # a size above 1 EiB that is not Slurm's NO_VAL is an impossible number: NULL with the reason
    assert res.rejects == []
    other = job(res, "805")
    assert other["mem_req_bytes"] is None and "above the limit" in json.loads(other["null_reasons"])["mem_req_bytes"]
