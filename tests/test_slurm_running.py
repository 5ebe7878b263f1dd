"""Running jobs on the real Slurm harness (scripts/slurm-harness.sh): `ingest --from-sacct` while a
job runs stores it RUNNING with its elapsed time and SBU so far, and its sidecar file as far as it
is written; after the job ends the next incremental run (no --since) stores it COMPLETED with the
final elapsed time, its stored metrics follow, and the sidecar file is read on from where the
first ingest stopped, nothing counted twice.

About 30 s: the job waits under its sidecar until the test has ingested it while it runs. Locally without root or the harness the test
skips with the reason; under CI (JOBSIGHT_REQUIRE_SERVICES=1) it fails.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import slurm_batch
from conftest import require_service
from slurm_harness import queue_state, sacct_rows, slurm_status, submit, utc_now, wait_finished, wait_running
from test_slurm_integration import ingest, query, sidecar_command

pytestmark = pytest.mark.slurm

# Runs until the test creates @STOP@ (at most 5 minutes), so it is still running at the first ingest
# however busy the node is.
JOB = """#!/bin/bash
@SIDECAR@ run --interval 1 --out @OUT@ -- sh -c 'i=0; while [ ! -e @STOP@ ] && [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done'
"""


def lines_of(folder: Path) -> int:
    """The data lines (complete) of the one sidecar CSV in folder."""
    (csv,) = folder.glob("*.csv")
    return csv.read_bytes().count(b"\n") - 1


def test_running_job_then_completed(tmp_path_factory):
    up, reason = slurm_status()
    require_service(up, reason)
    slurm_batch.wait_all()     # the session's batch of jobs (tests/slurm_batch.py) has left the node
    workdir = Path(tempfile.mkdtemp(prefix="jobsight-slurm-running-", dir="/tmp"))
    workdir.chmod(0o1777)
    try:
        _run(workdir, tmp_path_factory.mktemp("running") / "jobs.duckdb")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(workdir: Path, db: Path) -> None:
    user = "alice" if sidecar_command("alice") else "root"
    cmd = sidecar_command(user)
    assert cmd, "neither alice nor root can run the sidecar"
    out = workdir / "sidecar"
    out.mkdir()
    shutil.chown(out, user=user)
    since = utc_now().strftime("%Y-%m-%dT%H:%M:%S")
    stop = workdir / "stop"
    script = JOB.replace("@SIDECAR@", cmd).replace("@OUT@", str(out)).replace("@STOP@", str(stop))
    job = submit(user, script, "-J", "running",
                 "-o", f"{workdir}/%j.out", workdir=workdir)
    wait_running(job, timeout=300)   # the node's 2 CPUs may be busy with other tests' jobs
    # a job that starts after it and ends while it runs: the latest end time stored, which the next
    # incremental run starts its window at, is after the running job's start
    short = submit("bob", "#!/bin/bash\nsleep 1\n", "-J", "short", "-o", f"{workdir}/%j.out", workdir=workdir)
    wait_finished([short], timeout=300)
    deadline = time.monotonic() + 30
    while not list(out.glob("*.csv")) or lines_of(out) < 8:
        assert time.monotonic() < deadline, f"no sidecar lines in {out}"
        time.sleep(0.5)
    assert queue_state(job) == "RUNNING"

    first = json.loads(ingest(db, "--json", "--quiet", "--from-sacct", "--since", since, str(out)).stdout)
    assert first["failed"] == 0
    (row,) = query(db, "SELECT state, end_time, elapsed_s, null_reasons FROM jobs WHERE job_id_raw = ?", job)
    assert row["state"] == "RUNNING" and row["end_time"] is None and row["elapsed_s"] > 0
    assert "end_time" in json.loads(row["null_reasons"])
    (m_running,) = query(db, "SELECT state, elapsed_s, sbu FROM job_metrics WHERE job_id_raw = ?", job)
    assert m_running["state"] == "RUNNING" and m_running["elapsed_s"] == row["elapsed_s"] and m_running["sbu"] > 0
    assert not query(db, "SELECT code FROM job_flags WHERE job_id_raw = ? AND code IN "
                         "('time_oversized', 'mem_oversized')", job)
    (run,) = query(db, "SELECT job_id_raw, cpu_util_now_pct, last_sample FROM running_jobs WHERE job_id_raw = ?", job)
    assert run["last_sample"] is not None
    (off,) = query(db, 'SELECT "offset", lines FROM file_offset')
    held = query(db, "SELECT count(*) AS n FROM samples WHERE job_id_raw = ?", job)[0]["n"]
    assert held == off["lines"] - 1 > 0

    stop.touch()
    wait_finished([job], timeout=120)
    (truth,) = [t for t in sacct_rows([job]) if t["JobIDRaw"] == job]
    second = json.loads(ingest(db, "--json", "--quiet", "--from-sacct", str(out)).stdout)
    sacct_run = next(f for f in second["files"] if f["path"].startswith("sacct:"))
    assert sacct_run["updated"] >= 1
    window = query(db, "SELECT options FROM ingests WHERE file LIKE 'sacct:%' ORDER BY ingest_id DESC LIMIT 1")
    assert json.loads(window[0]["options"])["since"] > since        # incremental, past the job's start
    (row,) = query(db, "SELECT state, end_time, elapsed_s FROM jobs WHERE job_id_raw = ?", job)
    assert row["state"] == "COMPLETED" and row["end_time"] is not None
    assert row["elapsed_s"] == int(truth["ElapsedRaw"]) >= m_running["elapsed_s"]
    (m,) = query(db, "SELECT state, elapsed_s, end_time, sbu FROM job_metrics WHERE job_id_raw = ?", job)
    assert (m["state"], m["elapsed_s"], m["end_time"]) == ("COMPLETED", row["elapsed_s"], row["end_time"])
    assert m["sbu"] >= m_running["sbu"]
    assert not query(db, "SELECT 1 FROM running_jobs WHERE job_id_raw = ?", job)

    side = next(f for f in second["files"] if f["path"].endswith(".csv"))
    total = lines_of(out)
    assert side["rows_in"] == total - (off["lines"] - 1) and side["unchanged"] == 0
    assert any(n.startswith(f"read from line {off['lines'] + 1} ") for n in side["notes"])
    assert query(db, "SELECT count(*) AS n FROM samples WHERE job_id_raw = ?", job)[0]["n"] == total
    assert query(db, "SELECT count(*) AS n FROM (SELECT DISTINCT host, device, time FROM samples "
                     "WHERE job_id_raw = ?)", job)[0]["n"] == total
