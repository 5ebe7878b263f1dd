"""Budgets from Slurm itself, on the real Slurm of the harness (scripts/slurm-harness.sh): a billing
budget is set on account proj-astro and on alice within it with `sacctmgr modify ...
GrpTRESMins=billing=N`, alice runs a job, and `jobsight ingest --from-sacct` reads the limits with
`sacctmgr show assoc`. What jobsight says remains must be the limit minus what sacct says was
burned (billing x elapsed of every ingested job of the account, or of alice's), in the charged unit
(charging.factor 2: a billing-hour is 2 SBU, a limit of N billing-minutes N / 60 x 2 SBU). alice's
own limit is 0 billing-minutes: `jobsight usage --budget` lists her OVER.

The limits are not enforced by the harness (no AccountingStorageEnforce), so other tests' jobs run
as before; they are removed again (billing=-1) at the end.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
import slurm_batch
from conftest import ROOT, require_service
from slurm_harness import CLUSTER, run, sacct_rows, slurm_status, submit, tres, utc_now, wait_finished
from slurm_harness import workdir as harness_workdir

pytestmark = pytest.mark.slurm

ACCOUNT_MINUTES = 600000
FACTOR = 2.0


def jobsight(*args: str, cwd: Path) -> str:
    exe = ROOT / ".venv" / "bin" / "jobsight"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, f"jobsight {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def set_limit(minutes: int, user: str | None = None) -> None:
    where = ["user", "where", "name=" + user, "account=proj-astro"] if user else ["account", "where", "name=proj-astro"]
    run(["sacctmgr", "-i", "modify", *where, f"cluster={CLUSTER}", "set", f"GrpTRESMins=billing={minutes}"])


def account_idle(timeout: float = 90) -> None:
    """No job of proj-astro pending or running: what sacct says later is what the ingest read."""
    deadline = time.monotonic() + timeout
    while run(["squeue", "-h", "-A", "proj-astro", "-o", "%i"]).strip():
        assert time.monotonic() < deadline, "proj-astro still has jobs in the queue"
        time.sleep(1)


@pytest.fixture(scope="module")
def harness():
    up, reason = slurm_status()
    require_service(up, reason)
    slurm_batch.wait_all()     # the session's batch of jobs (tests/slurm_batch.py) has left the node
    work = harness_workdir("jobsight-budget-")
    (work / "jobsight.toml").write_text(f"[charging]\nfactor = {FACTOR}\n")
    set_limit(ACCOUNT_MINUTES)
    set_limit(0, "alice")
    try:
        start = utc_now() - timedelta(seconds=5)
        job = submit("alice", "#!/bin/bash\nsleep 2\n", "-J", "budget-burn", "-o", f"{work}/%j.out", "--partition=cpu",
                     "--cpus-per-task=2", "--mem=1G", "--time=00:01:00", workdir=work)
        wait_finished([job], timeout=120)
        account_idle()
        db = work / "budget.duckdb"
        log = jobsight("ingest", "--db", str(db), "--config", str(work / "jobsight.toml"), "--from-sacct",
                       "--since", start.strftime("%Y-%m-%dT%H:%M:%S"), cwd=work)
        con = duckdb.connect(str(db), read_only=True)
        try:
            jobs = con.execute("SELECT job_id_raw, \"user\" FROM job WHERE account = 'proj-astro'").fetchall()
            stored = con.execute("SELECT cluster, account, \"user\", amount, unit FROM budget WHERE source = 'sacctmgr' "
                                 "AND account = 'proj-astro' ORDER BY \"user\" NULLS FIRST").fetchall()
        finally:
            con.close()
        # sacct's own burn of those jobs: billing x elapsed, in billing-minutes
        burn: dict[str | None, float] = {None: 0.0, "alice": 0.0}
        users = dict(jobs)
        for r in sacct_rows(list(users), "JobID,JobIDRaw,AllocTRES,ElapsedRaw"):
            if "." in r["JobID"] or not r["AllocTRES"]:
                continue
            minutes = float(tres(r["AllocTRES"]).get("billing", 0)) * int(r["ElapsedRaw"]) / 60
            burn[None] += minutes
            if users.get(r["JobIDRaw"]) == "alice":
                burn["alice"] += minutes
        today = utc_now().strftime("%Y-%m-%d")
        budget = json.loads(jobsight("usage", "--db", str(db), "--config", str(work / "jobsight.toml"), "--budget",
                                     "--until", today, "--account", "proj-astro", "--format", "json", cwd=work))
        table = jobsight("usage", "--db", str(db), "--config", str(work / "jobsight.toml"), "--budget",
                         "--until", today, "--account", "proj-astro", cwd=work)
        # a changed limit alone is published to the dashboard's snapshot, with no new job
        set_limit(120, "alice")
        again = json.loads(jobsight("ingest", "--db", str(db), "--config", str(work / "jobsight.toml"), "--from-sacct",
                                    "--json", "--quiet", cwd=work))
        con = duckdb.connect(again["snapshot"]["published"] or str(work / "missing"), read_only=True)
        try:
            republished = con.execute("SELECT amount FROM budget WHERE \"user\" = 'alice'").fetchall()
        finally:
            con.close()
    finally:
        set_limit(-1, "alice")
        set_limit(-1)
    return {"job": job, "log": log, "stored": stored, "burn": burn, "budget": budget, "table": table,
            "again": again, "republished": republished}


def test_ingest_reads_the_limits_with_sacctmgr(harness):
    assert f"budget(s) of cluster {CLUSTER} read with sacctmgr show assoc" in harness["log"]
    assert harness["stored"] == [(CLUSTER, "proj-astro", None, ACCOUNT_MINUTES, "billing_minutes"),
                                 (CLUSTER, "proj-astro", "alice", 0.0, "billing_minutes")]


def test_remaining_is_the_limit_minus_sacct_burn(harness):
    rows = {r["user"]: r for r in harness["budget"]}
    assert set(rows) == {None, "alice"}
    burn = harness["burn"]
    assert burn["alice"] > 0                     # her job was billed: 2 CPUs + 1 GiB x 0.25 -> 2, for a few seconds
    for user, limit in ((None, ACCOUNT_MINUTES), ("alice", 0)):
        r = rows[user]
        assert (r["source"], r["cluster"]) == ("sacctmgr", CLUSTER)
        assert r["allocation_sbu"] == pytest.approx(limit / 60 * FACTOR)
        assert r["burned_sbu"] == pytest.approx(burn[user] / 60 * FACTOR, rel=1e-9)
        assert r["remaining_sbu"] == pytest.approx((limit - burn[user]) / 60 * FACTOR, rel=1e-9)
    assert (rows[None]["alert"], rows["alice"]["alert"]) == ("ok", "over")


def test_usage_budget_lists_the_overrun(harness):
    lines = [line.split() for line in harness["table"].splitlines()]
    alice = [cells for cells in lines if cells[:2] == ["proj-astro", "alice"]]
    assert len(alice) == 1 and alice[0][-1] == "OVER"
    account = [cells for cells in lines if cells[:2] == ["proj-astro", "-"]]
    assert account[0][3] == f"{ACCOUNT_MINUTES / 60 * FACTOR:,.1f}" and account[0][-1] == "OK"


def test_a_changed_limit_is_published(harness):
    assert harness["again"]["totals"]["stored"] == 0 and harness["republished"] == [(120.0,)]
