"""sacct --parsable2 does not escape '|' in free text: a line with too many fields has the extra ones
given back to its free-text columns (JobName, WorkDir, Comment, SubmitLine, ...) in the one way
where every typed column parses; none or several ways reject the line with that reason."""
from __future__ import annotations

from datetime import datetime

from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.parsers.sacct_lines import _shares
from jobsight.analytics.ingest.records import ParseOptions

T0, T1 = "2026-01-01T00:00:00", "2026-01-01T01:00:00"


def parse(tmp_path, text: str):
    p = tmp_path / "dump.txt"
    p.write_text(text, encoding="utf-8")
    return sacct_text.parse(p, ParseOptions(timezone="UTC"))


def by_id(res) -> dict:
    return {r["job_id_raw"]: r for r in res.jobs.to_dicts()}


def test_name_and_workdir_both_hold_pipes(tmp_path):
    hdr = "JobID|JobName|User|Account|State|Start|End|NCPUS|AllocTRES|WorkDir\n"
    tres = "billing=2,cpu=2,mem=4G,node=1"
    lines = [
        f"1|weird|name <b>x</b>|alice|proj|COMPLETED|{T0}|{T1}|2|{tres}|/home/alice",
        f"2|pipe|in|name|bob|phys|FAILED|{T0}|{T1}|4|{tres}|/home/bob",
        f"3|a|b|alice|proj|COMPLETED|{T0}|{T1}|2|{tres}|/scratch/x|y/run",
        f"4|plain|alice|proj|TIMEOUT|{T0}|{T1}|8|{tres}|/x|y|z",
        f"5|x|y|z|bob|phys|CANCELLED by 1000|{T0}|{T1}|1|{tres}|/p|q/r",
        f"6|ok|alice|proj|COMPLETED|{T0}|{T1}|2|{tres}|/home/alice",
    ]
    res = parse(tmp_path, hdr + "\n".join(lines) + "\n")
    assert res.rejects == []
    jobs = by_id(res)
    got = {k: (v["job_name"], v["user"], v["account"], v["state"], v["ncpus"]) for k, v in jobs.items()}
    assert got == {
        "1": ("weird|name <b>x</b>", "alice", "proj", "COMPLETED", 2),
        "2": ("pipe|in|name", "bob", "phys", "FAILED", 4),
        "3": ("a|b", "alice", "proj", "COMPLETED", 2),
        "4": ("plain", "alice", "proj", "TIMEOUT", 8),
        "5": ("x|y|z", "bob", "phys", "CANCELLED", 1),
        "6": ("ok", "alice", "proj", "COMPLETED", 2),
    }
    assert jobs["5"]["cancelled_by_uid"] == 1000
    assert all(j["start_time"] == datetime(2026, 1, 1) and j["mem_alloc_bytes"] == 4 << 30 for j in jobs.values())


def test_comment_submitline_constraints_apart_from_the_name(tmp_path):
    # each free-text column has a typed one after it; a free-text column next to another (or next
    # to a name such as User) is ambiguous in itself: see the test below
    hdr = "JobID|JobName|State|Comment|Submit|Elapsed|Constraints|NNodes|SubmitLine|Account\n"
    lines = [
        f"7|a|b|COMPLETED|note|x|{T0}|00:10:00|gpu|a100|1|sbatch -J a|b job.sh|proj",
        f"8|plain|PENDING|c|d|{T0}|00:00:00||1|sbatch --comment=c|d x.sh|phys",
        f"9|n|COMPLETED|ok|{T0}|01:00:00|[rack1|rack2]|2|sbatch x.sh|proj",
        "10|x|y|z|FAILED|||01:00:00||1|sbatch -J x|y|z --wrap=a|b|c|proj",
    ]
    res = parse(tmp_path, hdr + "\n".join(lines) + "\n")
    assert res.rejects == []
    got = {k: (v["job_name"], v["state"], v["elapsed_s"], v["nnodes"], v["account"], v["submit_time"])
           for k, v in by_id(res).items()}
    t0 = datetime(2026, 1, 1)
    assert got == {
        "7": ("a|b", "COMPLETED", 600, 1, "proj", t0),
        "8": ("plain", "PENDING", 0, 1, "phys", t0),
        "9": ("n", "COMPLETED", 3600, 2, "proj", t0),
        "10": ("x|y|z", "FAILED", 3600, 1, "proj", None),
    }


def test_several_valid_placements_reject_with_them_named(tmp_path):
    res = parse(tmp_path, "JobID|JobName|Comment|State\n7|a|b|c|COMPLETED\n8|ok||COMPLETED\n")
    assert [r.line_no for r in res.rejects] == [2] and len(res.jobs) == 1
    assert res.rejects[0].reason == ("5 fields where the columns are 4: the extra delimiters cannot be placed "
                                     "(more than one placement parses: JobName +1; Comment +1)")


def test_no_valid_placement_rejects_with_the_first_reason(tmp_path):
    res = parse(tmp_path, "JobID|JobName|Start|WorkDir\n7|a|b|yesterday|/x\n")
    (r,) = res.rejects
    assert "no way of putting them in JobName, WorkDir lets every column parse" in r.reason
    assert "with all in JobName: column start" in r.reason


def test_a_state_must_read_as_sacct_prints_it(tmp_path):
    # name 'a' + State 'b' would parse (any word is a state): sacct prints states in capitals
    res = parse(tmp_path, "JobID|JobName|State|WorkDir\n7|a|b|RUNNING|/x|y\n")
    assert res.rejects == [] and by_id(res)["7"]["job_name"] == "a|b"


def test_no_free_text_column(tmp_path):
    res = parse(tmp_path, "JobID|User|State\n7|a|b|COMPLETED\n")
    assert "no free-text column such as JobName" in res.rejects[0].reason


def test_a_relative_workdir_is_not_a_placement(tmp_path):
    # name 'a' + WorkDir 'b|/w' parses too, but Slurm's WorkDir is absolute: JobName takes the pipe
    res = parse(tmp_path, "JobID|JobName|WorkDir|State\n7|a|b|/w|COMPLETED\n")
    assert res.rejects == [] and by_id(res)["7"]["job_name"] == "a|b"


def test_shares_cover_every_way_once():
    ways = list(_shares(3, 3))
    assert ways[0] == (3, 0, 0) and len(ways) == len(set(ways)) == 10
    assert all(sum(w) == 3 for w in ways)


def test_workdir_nodelist_submitline_as_real_slurm_prints_them(tmp_path):
    # lines from Slurm 22.05 (tests/test_slurm_pipes.py): a WorkDir under 'runs|2026/in|here', then
    # NodeList (any host name parses) and SubmitLine (free text): the node name must have no
    # spaces and SubmitLine must start with the submitting command
    hdr = ("JobID|JobIDRaw|JobName|User|UID|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|NCPUS|"
           "AllocTRES|WorkDir|NodeList|SubmitLine\n")
    t, tres = "2026-11-24T01:39:04", "billing=1,cpu=1,mem=200M,node=1"
    lines = [
        f"160|160|a|b|alice|1001|proj-astro|cpu|COMPLETED|0:0|{t}|{t}|{t}|00:00:00|1|{tres}|/tmp/p/runs|2026/in|here|vm|"
        "sbatch --parsable -J a|b -o /dev/null",
        f"160.batch|160.batch|batch|||proj-astro||COMPLETED|0:0|{t}|{t}|{t}|00:00:00|1|cpu=1,mem=200M,node=1||vm|",
        f"161|161|x|y|z|alice|1001|proj-astro|cpu|COMPLETED|0:0|{t}|{t}|{t}|00:00:00|1|{tres}|/tmp/p|vm|"
        "sbatch --parsable -J x|y|z --comment note|with|pipes -o /dev/null",
        f"162|162|plain|bob|1002|proj-bio|cpu|COMPLETED|0:0|{t}|{t}|{t}|00:00:00|1|{tres}|/tmp/p/runs|2026/in|here|vm|"
        "sbatch --parsable -J plain -o /dev/null",
    ]
    res = parse(tmp_path, hdr + "\n".join(lines) + "\n")
    assert res.rejects == []
    assert {k: (v["job_name"], v["user"], v["node_list"]) for k, v in by_id(res).items()} == {
        "160": ("a|b", "alice", "vm"), "161": ("x|y|z", "alice", "vm"), "162": ("plain", "bob", "vm")}
    assert len(res.steps) == 1
