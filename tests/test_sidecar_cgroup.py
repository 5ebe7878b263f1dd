"""Finding and reading the job's cgroup: v2 and v1 trees built in temp dirs."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobsight.collector import cgroup

SLURM_V2_TASK = "/system.slice/slurmstepd.scope/job_123/step_batch/user/task_0"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2_tree(root: Path, job_dir: str = "system.slice/slurmstepd.scope/job_123", mem_max: str = "8589934592\n") -> Path:
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    d = root / job_dir
    write(d / "cpu.stat", "usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\nnr_periods 0\n")
    write(d / "memory.current", "1073741824\n")
    write(d / "memory.peak", "2147483648\n")
    write(d / "memory.max", mem_max)
    write(d / "cpuset.cpus.effective", "0-3\n")
    (d / "step_batch" / "user" / "task_0").mkdir(parents=True)
    return d


@pytest.mark.parametrize("path,scheduler,job_id,expected", [
    (SLURM_V2_TASK, "slurm", "123", "/system.slice/slurmstepd.scope/job_123"),
    ("/slurm/uid_1000/job_77/step_0/task_0", "slurm", "77", "/slurm/uid_1000/job_77"),
    # Slurm 26.05 names the job directory by SLUID: any job_<id> directory is the job level.
    ("/system.slice/slurmstepd.scope/job_0sluidabc/step_0/user/task_0", "slurm", "88", "/system.slice/slurmstepd.scope/job_0sluidabc"),
    ("/pbs_jobs.service/jobid/1234.srv", "pbs", "1234.srv", "/pbs_jobs.service/jobid/1234.srv"),
    ("/torque/99.head/sub", "pbs", "99.head", "/torque/99.head"),
    ("/lsf/clusterA/job.555.0.1700000000/task", "lsf", "555", "/lsf/clusterA/job.555.0.1700000000"),
    # A login session holds other processes: never a job cgroup.
    ("/user.slice/user-1000.slice/session-4.scope", "none", None, None),
    ("/user.slice/user-1000.slice/session-4.scope", "slurm", "123", None),
    ("/pbs_jobs.service/jobid/1234.srv", "pbs", "9999.srv", None),
])
def test_job_level(path, scheduler, job_id, expected):
    assert cgroup.job_level(path, scheduler, job_id) == expected


def test_parse_proc_cgroup_hybrid():
    text = "9:name=systemd:/\n4:memory:/slurm/uid_1/job_5/step_0\n2:cpu,cpuacct:/slurm/uid_1/job_5/step_0\n0::/\n"
    v2, v1 = cgroup.parse_proc_cgroup(text)
    assert v2 == "/"
    assert v1["cpuacct"] == ("cpu,cpuacct", "/slurm/uid_1/job_5/step_0")
    assert v1["memory"] == ("memory", "/slurm/uid_1/job_5/step_0")


def test_v2_slurm_job_walks_up_from_task_and_reads_files(tmp_path):
    v2_tree(tmp_path)
    cg = cgroup.find_job_cgroup("slurm", "123", str(tmp_path), f"0::{SLURM_V2_TASK}\n")
    assert cg is not None
    assert (cg.method, cg.path) == ("cgroup-v2", "/system.slice/slurmstepd.scope/job_123")
    s = cg.read()
    assert (s.cpu_usec, s.mem_current, s.mem_peak, s.mem_max) == (5_000_000, 1073741824, 2147483648, 8589934592)
    assert cg.cpuset() == "0-3"


def test_v2_memory_max_literal_max_is_unlimited(tmp_path):
    v2_tree(tmp_path, mem_max="max\n")
    cg = cgroup.find_job_cgroup("slurm", "123", str(tmp_path), f"0::{SLURM_V2_TASK}\n")
    assert cg.read().mem_max is None


def test_v2_usage_counter_changes_are_seen(tmp_path):
    d = v2_tree(tmp_path)
    cg = cgroup.find_job_cgroup("slurm", "123", str(tmp_path), f"0::{SLURM_V2_TASK}\n")
    write(d / "cpu.stat", "usage_usec 7500000\nuser_usec 6000000\nsystem_usec 1500000\n")
    assert cg.cpu_usec() == 7_500_000


def test_v2_outside_a_job_uses_no_cgroup(tmp_path):
    v2_tree(tmp_path, job_dir="user.slice/user-0.slice/session-1.scope")
    assert cgroup.find_job_cgroup("none", None, str(tmp_path), "0::/user.slice/user-0.slice/session-1.scope\n") is None


def test_v2_job_directory_missing_gives_none(tmp_path):
    write(tmp_path / "cgroup.controllers", "cpu memory\n")
    assert cgroup.find_job_cgroup("slurm", "123", str(tmp_path), f"0::{SLURM_V2_TASK}\n") is None


def v1_tree(root: Path, limit: str) -> str:
    job = "slurm/uid_1000/job_77"
    write(root / "cpu,cpuacct" / job / "cpuacct.usage", "3000000000\n")  # ns
    write(root / "memory" / job / "memory.usage_in_bytes", "524288000\n")
    write(root / "memory" / job / "memory.max_usage_in_bytes", "600000000\n")
    write(root / "memory" / job / "memory.limit_in_bytes", limit)
    write(root / "cpuset" / job / "cpuset.cpus", "2,5\n")
    (root / "unified").mkdir()  # hybrid: v2 mounted without controllers
    step = "/slurm/uid_1000/job_77/step_batch/task_0"
    return f"12:cpuset:{step}\n4:memory:{step}\n2:cpu,cpuacct:{step}\n1:name=systemd:/x\n0::/x\n"


def test_v1_slurm_job(tmp_path):
    proc = v1_tree(tmp_path, "4294967296\n")
    cg = cgroup.find_job_cgroup("slurm", "77", str(tmp_path), proc)
    assert (cg.method, cg.path) == ("cgroup-v1", "/slurm/uid_1000/job_77")
    s = cg.read()
    assert (s.cpu_usec, s.mem_current, s.mem_peak, s.mem_max) == (3_000_000, 524288000, 600000000, 4294967296)
    assert cg.cpuset() == "2,5"


def test_v1_unlimited_memory_is_blank(tmp_path):
    proc = v1_tree(tmp_path, "9223372036854771712\n")
    assert cgroup.find_job_cgroup("slurm", "77", str(tmp_path), proc).read().mem_max is None


def test_v1_login_session_is_ignored(tmp_path):
    write(tmp_path / "cpu,cpuacct" / "user.slice" / "cpuacct.usage", "1\n")
    assert cgroup.find_job_cgroup("none", None, str(tmp_path), "2:cpu,cpuacct:/user.slice\n") is None


def test_this_machine_outside_a_job_finds_nothing():
    # The real /proc/self/cgroup and /sys/fs/cgroup: no scheduler job here.
    assert cgroup.find_job_cgroup("none", None) is None
