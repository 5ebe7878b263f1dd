"""`jobsight watch --once` on the real Slurm harness (scripts/slurm-harness.sh): a job whose GPU (the
fake nvidia-smi) stays idle under its own sidecar is ingested from the real sacct while it runs,
stored RUNNING, and its owner gets exactly one notice; a second cycle sends nothing more.

About 20 s. Locally without root or the harness the test skips with the reason; under CI
(JOBSIGHT_REQUIRE_SERVICES=1) it fails.
"""
from __future__ import annotations

import email
import email.policy
import json
import shutil
import time
from pathlib import Path

import pytest
import slurm_batch
from conftest import ROOT, require_service
from slurm_harness import CLUSTER, as_user, queue_state, slurm_status, submit, wait_finished, wait_running
from slurm_harness import workdir as harness_workdir
from test_slurm_integration import query, sidecar_command

from jobsight.analytics.cli import main

pytestmark = pytest.mark.slurm

FAKE_SMI = ROOT / "tests" / "fake_nvml"
IDLE_GPU = "GPU-5a5a0000-1111-4000-8000-0000000000bb"
# An idle GPU sampled every half second, until the test scancels the job (at most 2 minutes).
JOB = """#!/bin/bash
export PATH=@FAKE@:$PATH FAKE_NVIDIA_SMI_CONFIG=@CFG@
@SIDECAR@ run --gpus nvidia-smi --interval 0.5 --idle-alert 0 --out @OUT@ -- sleep 120
"""
CONFIG = """
[email]
from = "jobsight@example.org"
user_address = "{user}@example.org"

[watch]
idle_hours = 0.001     # 3.6 s
"""


def test_watch_once_notifies_the_owner_of_a_running_idle_job(tmp_path, capsys):
    up, reason = slurm_status()
    require_service(up, reason)
    slurm_batch.wait_all()     # the session's batch of jobs (tests/slurm_batch.py) has left the node
    user = "alice"
    cmd = sidecar_command(user)
    assert cmd, f"{user} cannot run the sidecar"
    work = harness_workdir("jobsight-slurm-watch-")
    try:
        smi = work / "smi.json"
        smi.write_text(json.dumps({"driver": "550.54.15", "gpus": [
            {"uuid": IDLE_GPU, "name": "NVIDIA A100-SXM4-80GB", "util": "0", "mem_used": "0", "mem_total": "81920",
             "power": "60", "temp": "30", "clock": "210"}]}))
        smi.chmod(0o644)
        out = work / "out"
        out.mkdir()
        shutil.chown(out, user=user)
        script = JOB.replace("@SIDECAR@", cmd).replace("@OUT@", str(out)).replace("@FAKE@", str(FAKE_SMI))
        job = submit(user, script.replace("@CFG@", str(smi)), "-J", "watch-idle", "-o", f"{work}/%j.out",
                     "-e", f"{work}/%j.err", workdir=work)
        try:
            wait_running(job, timeout=120)
            deadline = time.monotonic() + 30
            while not _sampled_for(out, 5.0):      # past idle_hours in the samples
                assert time.monotonic() < deadline, f"no idle samples of job {job} in {out}"
                time.sleep(0.5)
            assert queue_state(job) == "RUNNING"
            db, eml, cfg = tmp_path / "jobs.duckdb", tmp_path / "eml", tmp_path / "jobsight.toml"
            cfg.write_text(CONFIG)
            argv = ["watch", "--db", str(db), "--config", str(cfg), "--spool", str(out), "--eml-dir", str(eml), "--once"]
            assert main(argv) == 0, capsys.readouterr().err
            (row,) = query(db, "SELECT state, \"user\", elapsed_s FROM jobs WHERE job_id_raw = ?", job)
            assert row["state"] == "RUNNING" and row["user"] == user and row["elapsed_s"] > 0
            mails = [email.message_from_bytes(p.read_bytes(), policy=email.policy.default) for p in eml.glob("*.eml")]
            assert len(mails) == 1
            (msg,) = mails
            assert msg["To"] == f"{user}@example.org" and msg["X-Jobsight-Watch"] == f"{CLUSTER}/{job}"
            body = msg.get_content()
            assert f"Your job {job} has had 1 of its" in body and f"scancel {job}" in body and "watch-idle" in body
            assert main(argv) == 0
            assert len(list(eml.glob("*.eml"))) == 1
        finally:
            as_user(user, "scancel", job)
            wait_finished([job], timeout=120)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _sampled_for(folder: Path, seconds: float) -> bool:
    """The sidecar CSV in folder spans at least `seconds` of samples."""
    files = list(folder.glob("*.csv"))
    if not files:
        return False
    lines = files[0].read_text().splitlines()[1:]
    times = sorted(line.split(",", 1)[0] for line in lines if line.count(",") > 5)
    if len(times) < 2:
        return False
    from datetime import datetime
    first, last = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (times[0], times[-1]))
    return (last - first).total_seconds() >= seconds
