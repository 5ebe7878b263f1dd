"""Real Slurm: '|' in job names and in a WorkDir, with sacct --parsable2 dumps that carry several
free-text columns (WorkDir, SubmitLine, Comment) or none besides JobName. sacct does not escape the
delimiter; every job must come back with its own name. Skips without the harness (fails under CI,
JOBSIGHT_REQUIRE_SERVICES=1), like tests/test_slurm_integration.py."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
import slurm_batch
from conftest import require_service
from slurm_harness import SlurmError, sacct, sacct_rows, slurm_status, submit

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/bash\ntrue\n"
BASE = "JobID,JobIDRaw,JobName,User,UID,Account,Partition,State,ExitCode,Submit,Start,End,Elapsed,NCPUS,AllocTRES"
FORMATS = {
    "JobName only": BASE,
    "WorkDir": BASE + ",WorkDir,NodeList",
    "WorkDir, SubmitLine, Comment": "JobID,JobName,User,State,WorkDir,Submit,SubmitLine,Elapsed,Comment,NCPUS,Account",
    "SubmitLine early": "JobID,JobIDRaw,SubmitLine,User,UID,JobName,State,Start,End,WorkDir,ElapsedRaw",
}


def submit_slurm_jobs(start) -> tuple[tuple[dict[str, str], Path], list[str]]:
    """Submit this module's jobs (tests/slurm_batch.py does, as the session starts)."""
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
    return (ids, top), list(ids.values())


@pytest.fixture(scope="module")
def jobs():
    up, reason = slurm_status()
    require_service(up, reason)
    ids, top = slurm_batch.jobs_of(submit_slurm_jobs)     # every job of the batch final in accounting
    _wait_named(ids)
    yield ids, top
    shutil.rmtree(top, ignore_errors=True)


def _wait_named(ids: dict[str, str], timeout: float = 60) -> None:
    """A job that ends within a second can be in accounting, finished, under the name 'allocation'
    for a moment before its own name arrives: wait for the names as submitted."""
    deadline = time.monotonic() + timeout
    while True:
        names = {r["JobID"]: r["JobName"] for r in sacct_rows(list(ids.values()), "JobID,JobName") if "." not in r["JobID"]}
        if names == {job_id: name for name, job_id in ids.items()}:
            return
        if time.monotonic() > deadline:
            raise SlurmError(f"sacct names after {timeout}s: {names}")
        time.sleep(1)


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


def test_a_dump_with_workdir_and_steps_ingests_every_job(jobs, tmp_path):
    """The whole road: `jobsight ingest` of a dump with job and step rows and a WorkDir column."""
    ids, _ = jobs
    dump = tmp_path / "dump.txt"
    dump.write_text(sacct("--parsable2", "--allusers", "--duplicates", "-j", ",".join(ids.values()),
                          "--format", FORMATS["WorkDir"] + ",SubmitLine"))
    con = db.connect(tmp_path / "db.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [dump], ParseOptions(timezone="UTC"), fmt="sacct")
        got = dict(con.execute("SELECT job_id_raw, job_name FROM jobs").fetchall())
    finally:
        con.close()
    assert rep.status == "ingested" and rep.rejected == 0
    assert got == {job_id: job_name for job_name, job_id in ids.items()}
