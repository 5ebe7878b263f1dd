"""The sidecar on the real Slurm harness (scripts/slurm-harness.sh): site mode, whose Prolog and
Epilog run `jobsight sidecar prolog|epilog` for partition `site` (spool /var/spool/jobsight), and
--idle-cancel ending a job whose GPU (the fake nvidia-smi) stays idle.

The jobs are submitted with the other Slurm modules' jobs as the session starts
(tests/slurm_batch.py) and run in parallel on the node's 2 CPUs.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import slurm_batch
from conftest import ROOT, require_service
from slurm_harness import CLUSTER, SACCT_FORMAT, as_user, sacct, sacct_rows, slurm_status, submit
from test_slurm_integration import ingest, query, sidecar_command

from jobsight.collector import procs

pytestmark = pytest.mark.slurm

SPOOL = Path("/var/spool/jobsight")
FAKE_SMI = ROOT / "tests" / "fake_nvml"
IDLE_GPU = "GPU-5a5a0000-1111-4000-8000-0000000000aa"

# No sidecar line: the site records it. About 2 s of one busy core between sleeps.
PLAIN = """#!/bin/bash
sleep 2
timeout 2 sh -c 'while :; do :; done'
sleep 2
"""
# The job's own sidecar too: it must write nothing, the site's files count once.
OWN = """#!/bin/bash
@SIDECAR@ run --interval 1 --out @OUT@ -- sleep 4
"""
# A GPU that stays at 0 %: alert after 3 s, cancel 3 s later.
IDLE = """#!/bin/bash
export PATH=@FAKE@:$PATH FAKE_NVIDIA_SMI_CONFIG=@CFG@
@SIDECAR@ run --gpus nvidia-smi --interval 0.5 --idle-alert 0.05 --idle-cancel 0.05 --out @OUT@ -- sleep 120
"""


@dataclass
class Site:
    workdir: Path
    ids: dict[str, str] = field(default_factory=dict)
    own_out: Path | None = None
    idle_out: Path | None = None
    dump: Path | None = None


def user_dir(workdir: Path, name: str, user: str) -> Path:
    d = workdir / name
    d.mkdir()
    shutil.chown(d, user=user)
    return d


def epilog_done(job_id: str, timeout: float = 30) -> None:
    """The Epilog runs as the job ends, around when accounting shows it final: wait for its marker to go."""
    deadline = time.monotonic() + timeout
    while any(SPOOL.glob(f".site-{job_id}@*")):
        assert time.monotonic() < deadline, f"the Epilog of job {job_id} never removed the site sidecar's marker"
        time.sleep(0.2)


def site_mode_missing() -> str | None:
    if "Prolog=/etc/slurm/jobsight-prolog.sh" not in Path("/etc/slurm/slurm.conf").read_text():
        return "the harness has no site-mode Prolog: run scripts/slurm-harness.sh start"
    return None


def submit_slurm_jobs(start) -> tuple[Site | None, list[str]]:
    """Submit this module's jobs (tests/slurm_batch.py does, as the session starts)."""
    if site_mode_missing():
        return None, []          # the fixture reports it
    workdir = Path(tempfile.mkdtemp(prefix="jobsight-slurm-site-", dir="/tmp"))
    workdir.chmod(0o1777)
    s = Site(workdir)
    out = ["-o", f"{workdir}/%j.out", "-e", f"{workdir}/%j.err"]
    s.ids["plain"] = submit("alice", PLAIN, "-J", "site-plain", "-p", "site", *out, workdir=workdir)
    bob_cmd = sidecar_command("bob")
    alice_cmd = sidecar_command("alice")
    assert bob_cmd and alice_cmd, "alice and bob cannot run the sidecar (.venv/bin/jobsight or collector/sidecar.py)"
    s.own_out = user_dir(workdir, "own-out", "bob")
    s.ids["own"] = submit("bob", OWN.replace("@SIDECAR@", bob_cmd).replace("@OUT@", str(s.own_out)),
                          "-J", "site-own", "-p", "site", *out, workdir=workdir)
    cfg = workdir / "smi.json"
    cfg.write_text(json.dumps({"driver": "550.54.15", "gpus": [{"uuid": IDLE_GPU, "name": "NVIDIA A100-SXM4-80GB", "util": "0",
                                                                 "mem_used": "0", "mem_total": "81920", "power": "60",
                                                                 "temp": "30", "clock": "210"}]}))
    cfg.chmod(0o644)
    s.idle_out = user_dir(workdir, "idle-out", "alice")
    text = IDLE.replace("@SIDECAR@", alice_cmd).replace("@OUT@", str(s.idle_out)).replace("@FAKE@", str(FAKE_SMI))
    s.ids["idle"] = submit("alice", text.replace("@CFG@", str(cfg)), "-J", "idle-cancel", *out, workdir=workdir)
    return s, list(s.ids.values())


@pytest.fixture(scope="module")
def site() -> Site:
    up, reason = slurm_status()
    require_service(up, reason)
    missing = site_mode_missing()
    require_service(missing is None, missing or "")
    s = slurm_batch.jobs_of(submit_slurm_jobs)     # every job of the batch final in accounting
    for key in ("plain", "own"):
        epilog_done(s.ids[key])
    s.dump = s.workdir / "sacct.txt"
    s.dump.write_text(sacct("--allusers", "--duplicates", "--parsable2", "--format", SACCT_FORMAT,
                            "-j", ",".join(s.ids.values())))
    return s


def spool_files(job_id: str, suffix: str) -> list[Path]:
    return sorted(SPOOL.glob(f"jobsight-{CLUSTER}-{job_id}-*{suffix}"))


def test_a_job_without_a_sidecar_line_is_recorded_by_the_site(site: Site, tmp_path: Path):
    job = site.ids["plain"]
    (csv_path,) = spool_files(job, ".csv")
    (meta_path,) = spool_files(job, ".meta.json")
    for f in (SPOOL, csv_path, meta_path):
        assert f.stat().st_uid == 0
    meta = json.loads(meta_path.read_text())
    assert (meta["mode"], meta["uid"], meta["user"], meta["job_id"], meta["cluster"]) == ("site", 1001, "alice", job, CLUSTER)
    assert meta["ended_at"] and meta["samples"] >= 4
    # the Epilog left no process behind
    assert procs.start_ticks(meta["pid"]) is None
    # ingested as root: a trusted file, its samples count for alice's job
    db = tmp_path / "site.duckdb"
    ingest(db, "--format", "sacct", "--timezone", "UTC", str(site.dump))
    ingest(db, str(csv_path))
    (row,) = query(db, """SELECT j."user", j.state, count(*) AS n, max(s.util_pct) AS busy
                          FROM jobs j JOIN samples s USING (cluster, job_id_raw)
                          WHERE j.job_id_raw = ? AND s.device = 'cpu' GROUP BY ALL""", job)
    assert (row["user"], row["state"], row["n"]) == ("alice", "COMPLETED", meta["samples"])
    # ~100 % on a quiet node, a share of it on a loaded one; the sampler itself stays under 1 %
    assert row["busy"] > 10, "the busy seconds of the job's one core were not measured"
    (run,) = query(db, "SELECT * FROM sidecar_run WHERE job_id_raw = ?", job)
    assert json.loads(run["metadata"])["user"] == "alice"


def test_a_job_with_its_own_sidecar_is_recorded_once(site: Site):
    job = site.ids["own"]
    assert sacct_rows([job], "JobID,State")[0]["State"] == "COMPLETED"
    assert list(site.own_out.iterdir()) == []          # bob's sidecar wrote nothing
    err = (site.workdir / f"{job}.err").read_text()
    assert f"the site's sidecar records job {job} on this node" in err
    assert len(spool_files(job, ".csv")) == 1
    meta = json.loads(spool_files(job, ".meta.json")[0].read_text())
    assert (meta["user"], meta["uid"]) == ("bob", int(as_user("bob", "id", "-u")))


def test_idle_cancel_ends_the_job_cancelled(site: Site):
    job = site.ids["idle"]
    (row,) = [r for r in sacct_rows([job], "JobID,State,Elapsed") if r["JobID"] == job]
    assert row["State"].split()[0] == "CANCELLED", row
    err = (site.workdir / f"{job}.err").read_text()
    alert = f"jobsight sidecar: job {job}: GPU 0 ({IDLE_GPU}) idle for "
    assert err.count(alert) == 1, err
    assert f"cancelling the job (scancel {job}, --idle-cancel)" in err
    h, m, sec = (int(x) for x in row["Elapsed"].split(":"))
    assert h * 3600 + m * 60 + sec < 60, row       # not the command's 120 s
    assert len(list(site.idle_out.glob("*.csv"))) == 1
    assert not any(SPOOL.glob(f"jobsight-{CLUSTER}-{job}-*"))      # partition cpu: no site sidecar


def test_the_site_partition_leaves_other_jobs_alone(site: Site):
    assert os.stat(SPOOL).st_mode & 0o777 == 0o711
    assert not any(SPOOL.glob(".site-*@*.tmp-*"))
