"""Real Slurm: '|' in job names and in a WorkDir, with sacct --parsable2 dumps that carry several
free-text columns (WorkDir, SubmitLine, Comment) or none besides JobName. sacct does not escape the
delimiter; every job must come back with its own name. Skips without the harness (fails under CI,
JOBSIGHT_REQUIRE_SERVICES=1), like tests/test_slurm_integration.py."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import require_service
from slurm_harness import sacct, slurm_status, submit, wait_finished

from jobsight.analytics.parsers import sacct_text
from jobsight.analytics.records import ParseOptions

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/bash\ntrue\n"
BASE = "JobID,JobIDRaw,JobName,User,UID,Account,Partition,State,ExitCode,Submit,Start,End,Elapsed,NCPUS,AllocTRES"
FORMATS = {
    "JobName only": BASE,
    "WorkDir": BASE + ",WorkDir,NodeList",
    "WorkDir, SubmitLine, Comment": "JobID,JobName,User,State,WorkDir,Submit,SubmitLine,Elapsed,Comment,NCPUS,Account",
    "SubmitLine early": "JobID,JobIDRaw,SubmitLine,User,UID,JobName,State,Start,End,WorkDir,ElapsedRaw",
}


@pytest.fixture(scope="module")
def jobs():
    up, reason = slurm_status()
    require_service(up, reason)
    top = Path(tempfile.mkdtemp(prefix="jobsight-slurm-pipes-", dir="/tmp"))
    piped = top / "runs|2026" / "in|here"
    piped.mkdir(parents=True)
    for d in (top, piped.parent, piped):
        d.chmod(0o1777)
    out = ["-o", "/dev/null"]
    ids = {
        "a|b": submit("alice", SCRIPT, "-J", "a|b", *out, workdir=piped),
        "x|y|z": submit("alice", SCRIPT, "-J", "x|y|z", "--comment", "note|with|pipes", *out, workdir=top),
        "plain": submit("bob", SCRIPT, "-J", "plain", *out, workdir=piped),
        "weird|name <b>x</b>": submit("bob", SCRIPT, "-J", "weird|name <b>x</b>", *out, workdir=top),
    }
    wait_finished(list(ids.values()))
    yield ids, top
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_job_keeps_its_name(jobs, tmp_path, name):
    ids, _ = jobs
    dump = tmp_path / "dump.txt"
    dump.write_text(sacct("--parsable2", "--allusers", "--duplicates", "-X", "-j", ",".join(ids.values()),
                          "--format", FORMATS[name]))
    res = sacct_text.parse(dump, ParseOptions(timezone="UTC"))
    assert res.rejects == []
    got = {r["job_id_raw"]: r["job_name"] for r in res.jobs.to_dicts()}
    assert got == {job_id: job_name for job_name, job_id in ids.items()}
    states = {r["job_id_raw"]: r["state"] for r in res.jobs.to_dicts()}
    assert set(states.values()) == {"COMPLETED"}
