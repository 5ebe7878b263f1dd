"""Site mode without a scheduler: `jobsight sidecar prolog` / `epilog` as real processes over a temporary
spool, a job's own sidecar meeting the site's, and SiteCpu finding a job's cgroup from outside the job.
(On the real Slurm harness: tests/test_slurm_site.py.)"""
from __future__ import annotations

import json
import os
import pwd
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_sidecar_run import clean_env, csv_files

from jobsight.collector import loop, procs, site_mode
from jobsight.collector.problems import Problems

PROLOG_LIMIT_S = 2.0     # a hang guard on a loaded 2-core machine (two interpreter starts); typical figures are printed
EPILOG_LIMIT_S = 1.0 + 0.6


def jobsight_sidecar(*args: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobsight.collector", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30, **kw)


def fake_scheduler(folder: Path, name: str, body: str) -> str:
    """A stand-in for scontrol / qstat / bjobs in `folder`, for the prolog's --scheduler-bin: it
    writes its arguments (one a line) to NAME.args and its environment to NAME.env, then runs `body`."""
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {shlex.quote(str(folder / name))}.args\n"
                      f"env > {shlex.quote(str(folder / name))}.env\n{body}\n")
    script.chmod(0o755)
    return str(folder)


def scontrol_owner(tmp_path: Path, uid: int | None = None) -> str:
    """--scheduler-bin with an scontrol that says the job is this user's (or uid's)."""
    uid = os.getuid() if uid is None else uid
    return fake_scheduler(tmp_path / "sched-bin", "scontrol",
                          f'echo "JobId=$4 JobName=job UserId={pwd.getpwuid(uid).pw_name}({uid}) GroupId=x(1) JobState=RUNNING"')


def site_env(job_id: str, **extra) -> dict:
    return clean_env(SLURM_JOB_ID=job_id, SLURM_JOB_UID=str(os.getuid()), SLURM_CLUSTER_NAME="siteclu",
                     SLURMD_NODENAME="node9", SLURM_JOB_CPUS_PER_NODE="1", **extra)


def alive(pid: int) -> bool:
    return procs.start_ticks(pid) is not None


@pytest.fixture
def job(tmp_path):
    """A running 'job': a process of this user with the job id in its environment, burning CPU."""
    job_id = f"7{os.getpid() % 100000:05d}"
    p = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"],
                         env=site_env(job_id))
    yield job_id
    p.kill()
    p.wait()


def test_prolog_samples_the_job_and_the_epilog_stops_it(tmp_path, job):
    spool = tmp_path / "spool"
    env = site_env(job)
    t0 = time.monotonic()
    res = jobsight_sidecar("prolog", "--spool", str(spool), "--interval", "0.1", "--gpus", "none",
                           "--scheduler-bin", scontrol_owner(tmp_path), env=env)
    prolog_s = time.monotonic() - t0
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert (tmp_path / "sched-bin" / "scontrol.args").read_text() == f"show\njob\n-o\n{job}\n"
    assert prolog_s < PROLOG_LIMIT_S, prolog_s
    marker = spool / f".site-{job}@node9"
    info = json.loads(marker.read_text())
    assert oct(spool.stat().st_mode & 0o777) == "0o711" and oct(marker.stat().st_mode & 0o777) == "0o644"
    assert (info["job_id"], info["uid"]) == (job, os.getuid()) and alive(info["pid"])
    assert os.getsid(info["pid"]) != os.getsid(0) and os.getpgid(info["pid"]) == info["pid"]   # detached
    deadline = time.monotonic() + 20
    while not (csv_files(spool) and csv_files(spool)[0].read_text().count("\n") >= 6):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    res = jobsight_sidecar("epilog", "--spool", str(spool), env=env)
    epilog_s = time.monotonic() - t0
    assert (res.returncode, res.stderr) == (0, "")          # stopped by SIGTERM, not killed
    assert epilog_s < EPILOG_LIMIT_S, epilog_s
    assert not alive(info["pid"]) and not marker.exists()
    print(f"prolog {prolog_s * 1000:.0f} ms, epilog {epilog_s * 1000:.0f} ms")
    (meta_path,) = spool.glob("*.meta.json")
    m = json.loads(meta_path.read_text())
    assert (m["mode"], m["uid"], m["user"], m["job_id"], m["cluster"], m["host"]) == \
        ("site", os.getuid(), pwd.getpwuid(os.getuid()).pw_name, job, "siteclu", "node9")
    assert m["ended_at"] and m["samples"] >= 6 and m["pid"] == info["pid"]
    assert (m["alloc_cores"], m["alloc_cores_source"]) == (1, "SLURM_JOB_CPUS_PER_NODE")
    assert "idle_alerts" not in m         # no alert: a site sidecar's stderr reaches no one
    for f in (*csv_files(spool), meta_path):
        assert oct(f.stat().st_mode & 0o777) == "0o640"
    # it measured the job's process (not itself, not this test): one busy core of the one allocated
    from jobsight.analytics.ingest.parsers import sidecar_csv
    from jobsight.analytics.ingest.records import ParseOptions
    res = sidecar_csv.parse(csv_files(spool)[0], ParseOptions())
    assert (res.rejects, res.dropped) == ([], 0)
    utils = [u for u in res.samples["util_pct"] if u is not None]
    # a busy core reads ~100 % on a quiet machine; on a loaded one it gets a share, but the sampler
    # itself (under 1 % of a core) and this test (asleep) never come near 10 %
    assert max(utils) > 10, utils


def test_the_jobs_own_sidecar_writes_nothing_while_the_site_records_the_job(tmp_path, job):
    spool = tmp_path / "spool"
    env = site_env(job)
    jobsight_sidecar("prolog", "--spool", str(spool), "--interval", "0.2", "--gpus", "none",
                     "--scheduler-bin", scontrol_owner(tmp_path), env=env)
    own = tmp_path / "own"
    try:
        res = jobsight_sidecar("run", "--gpus", "none", "--out", str(own), "--", "sh", "-c", "echo job-out; exit 4",
                               env={**env, "JOBSIGHT_SPOOL": str(spool)})
        assert (res.returncode, res.stdout) == (4, "job-out\n")
        assert res.stderr == (f"jobsight sidecar: the site's sidecar records job {job} on this node "
                              f"({spool}/.site-{job}@node9); this one writes no files\n")
        assert not own.exists()
        res = jobsight_sidecar("--gpus", "none", "--out", str(own), env={**env, "JOBSIGHT_SPOOL": str(spool)})
        assert res.returncode == 0 and not own.exists()      # background mode: nothing to do, exits at once
    finally:
        jobsight_sidecar("epilog", "--spool", str(spool), env=env)
    assert len(csv_files(spool)) == 1
    # the site's sampler is gone: its stale marker (were it left) would not silence the job's own sidecar
    marker = spool / f".site-{job}@node9"
    marker.write_text(json.dumps({"pid": os.getpid() + 10**6, "start": 1, "job_id": job, "uid": 0}))
    res = jobsight_sidecar("run", "--gpus", "none", "--interval", "0.1", "--out", str(own), "--", "true",
                           env={**env, "JOBSIGHT_SPOOL": str(spool)})
    assert (res.returncode, res.stderr) == (0, "") and len(csv_files(own)) == 1


def test_a_marker_of_another_user_is_not_believed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o711)
    marker = site_mode.marker_path(str(spool), "55", "node9")
    Path(marker).write_text(json.dumps({"pid": os.getpid(), "start": procs.start_ticks(os.getpid()), "job_id": "55", "uid": 0}))
    assert site_mode.read_marker(marker) is not None
    os.chown(marker, pwd.getpwnam("nobody").pw_uid, -1)
    assert site_mode.read_marker(marker) is None


def test_prolog_and_epilog_never_fail(tmp_path):
    env = clean_env()
    res = jobsight_sidecar("prolog", "--spool", str(tmp_path / "s"), env=env)
    assert res.returncode == 0 and "no job id" in res.stderr and not (tmp_path / "s").exists()
    no_answer = fake_scheduler(tmp_path / "no-answer", "scontrol", "echo 'slurm_load_jobs error: Invalid job id' >&2; exit 1")
    res = jobsight_sidecar("prolog", "--spool", str(tmp_path / "s"), "--scheduler-bin", no_answer, env=clean_env(SLURM_JOB_ID="5"))
    assert res.returncode == 0 and "its user is not known" in res.stderr and res.stderr.count("\n") == 1
    open_spool = tmp_path / "open"
    open_spool.mkdir()
    open_spool.chmod(0o777)
    res = jobsight_sidecar("prolog", "--spool", str(open_spool), "--scheduler-bin", scontrol_owner(tmp_path), env=site_env("5"))
    assert res.returncode == 0 and "not be writable by group or others" in res.stderr and not os.listdir(open_spool)
    res = jobsight_sidecar("epilog", "--spool", str(tmp_path / "none"), env=site_env("5"))
    assert (res.returncode, res.stderr) == (0, "")
    res = jobsight_sidecar("epilog", "--spool", str(tmp_path / "none"), env=clean_env())
    assert res.returncode == 0 and "no job id" in res.stderr


def test_epilog_kills_a_sampler_that_does_not_stop(tmp_path):
    """A sampler stuck past the 1 s grace is killed with its process group: nothing is left behind."""
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o711)
    stuck = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"], start_new_session=True)
    time.sleep(0.2)
    child = [int(p) for p in Path(f"/proc/{stuck.pid}/task/{stuck.pid}/children").read_text().split()]
    Path(site_mode.marker_path(str(spool), "66", "node9")).write_text(
        json.dumps({"pid": stuck.pid, "start": procs.start_ticks(stuck.pid), "job_id": "66", "uid": 0}))
    t0 = time.monotonic()
    res = jobsight_sidecar("epilog", "--spool", str(spool), env=site_env("66"))
    assert res.returncode == 0 and "still running after 1 s; killed" in res.stderr
    assert time.monotonic() - t0 < 3
    assert stuck.wait(5) == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while any(alive(c) for c in child):
        assert time.monotonic() < deadline, "the sampler's child survived"
        time.sleep(0.02)
    assert os.listdir(spool) == []


# ---- SiteCpu: the job's cgroup, found from outside the job

class FakeProcs:
    def __init__(self) -> None:
        self.pids: list[int] = []
        self.cpu = 0.0

    def read(self):
        return self.cpu, 1000 if self.pids else 0, len(self.pids)


def test_site_cpu_switches_to_the_jobs_cgroup_without_a_jump(tmp_path):
    root = tmp_path / "cgroup"
    job = root / "system.slice" / "slurmstepd.scope" / "job_321"
    job.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (job / "cpu.stat").write_text("usage_usec 500000000\n")
    (job / "memory.current").write_text("2048\n")
    (job / "cpuset.cpus.effective").write_text("0-7\n")
    fake, clock, found = FakeProcs(), [0.0], []
    cpu = site_mode.SiteCpu(fake, "slurm", "321", str(root), None, clock=lambda: clock[0],
                            read_text=lambda path: "0::/system.slice/slurmstepd.scope/job_321/step_batch/user/task_0\n")
    cpu.on_cgroup = found.append
    assert (cpu.read().cpu_s, cpu.method) == (0.0, "procfs")        # no job process yet
    fake.pids, fake.cpu = [4242], 2.0
    first = cpu.read()
    assert (cpu.method, cpu.cgroup_path) == ("cgroup-v2", "/system.slice/slurmstepd.scope/job_321")
    assert found and found[0].cpuset() == "0-7"
    assert first.cpu_s == pytest.approx(2.0) and first.mem_used == 2048     # continues the process sum
    (job / "cpu.stat").write_text("usage_usec 503000000\n")
    assert cpu.read().cpu_s == pytest.approx(5.0)
    assert not cpu.gone
    for f in job.iterdir():
        f.unlink()
    job.rmdir()
    gone = cpu.read()
    assert (gone.cpu_s, gone.mem_used, cpu.gone) == (None, None, True)    # the job's cgroup was removed: over


def test_site_cpu_without_cgroups_stops_when_the_jobs_processes_are_long_gone():
    fake, clock = FakeProcs(), [0.0]
    cpu = site_mode.SiteCpu(fake, "slurm", "321", "/nonexistent", None, clock=lambda: clock[0], read_text=lambda p: None)
    cpu.read()
    clock[0] = 10 * site_mode.ORPHAN_S
    cpu.read()
    assert not cpu.gone                    # never saw the job: still waiting for it
    fake.pids = [99]
    cpu.read()
    fake.pids = []
    clock[0] += site_mode.ORPHAN_S - 1
    cpu.read()
    assert not cpu.gone
    clock[0] += 1
    cpu.read()
    assert cpu.gone


def test_site_cores_from_the_prologs_variables():
    assert site_mode.site_cores({"SLURM_JOB_CPUS_PER_NODE": "4(x2)"}) == (4, "SLURM_JOB_CPUS_PER_NODE")
    assert site_mode.site_cores({"SLURM_CPUS_ON_NODE": "3", "SLURM_JOB_CPUS_PER_NODE": "4"}) == (3, "SLURM_CPUS_ON_NODE")
    assert site_mode.site_cores({}) == (1, "unknown")


class _ClockedSampler:
    """Records when sample_until takes each sample, on a clock that only its sleeps advance."""

    def __init__(self, method: str, clock: list[float], stop_after: int = 2):
        self.cpu = type("Cpu", (), {"method": method})()
        self.clock, self.last_mono, self.at, self.stop_after = clock, clock[0], [], stop_after

    def sample(self) -> bool:
        self.at.append(self.clock[0])
        return len(self.at) < self.stop_after    # False: the output is gone, and background mode stops


@pytest.mark.parametrize("quick_start, first_after", [(True, loop.DEFAULT_FIRST_WINDOW_S),
                                                      (False, loop.FIRST_WINDOW_S["procfs"])])
def test_a_site_sampler_writes_its_first_row_one_short_window_after_the_baseline(monkeypatch, quick_start,
                                                                                  first_after):
    """The prolog starts the site sampler before the job has a process: its first row comes after
    the short window (its CPU cell blank), not the process scan's CPU window, so sampling shows
    within the start-up target; then every --interval as usual."""
    clock = [1000.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: clock[0])

    class Sleeper:
        def stop_requested(self) -> bool:
            return False

        def sleep(self, seconds: float) -> None:
            clock[0] += seconds

    sampler = _ClockedSampler("procfs", clock, stop_after=3)
    loop.sample_until(sampler, Sleeper(), 10.0, clock[0], None, Problems(), quick_start=quick_start)
    first = 1000.0 + first_after
    assert sampler.at == pytest.approx([first, first + 10.0, first + 20.0])
