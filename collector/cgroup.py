"""The job's own cgroup: found from /proc/self/cgroup by walking up to the job level, then read.

Only a scheduler job's cgroup counts. Outside a job the sidecar sits in a login session or
service cgroup that holds other processes, so `find_job_cgroup` returns None there and the
caller falls back to psutil. Standard library only.

Layouts recognised (the component that marks the job level):
  Slurm v2  /system.slice/slurmstepd.scope/job_<id>/step_batch/user/task_0
  Slurm v1  /slurm/uid_<uid>/job_<id>/step_0/task_0       (per controller hierarchy)
  PBS       .../pbs_jobs.service/jobid/<PBS_JOBID>, /pbspro/<PBS_JOBID>, /torque/<PBS_JOBID>
  LSF       /lsf/<cluster>/job.<LSB_JOBID>.<index>.<submit time>
"""
from __future__ import annotations

import os
import re

DEFAULT_ROOT = "/sys/fs/cgroup"
# cgroup v1 reports "no limit" as a huge page-aligned number (LONG_MAX rounded down).
_V1_UNLIMITED = 1 << 60


def parse_proc_cgroup(text: str) -> tuple[str | None, dict[str, tuple[str, str]]]:
    """/proc/<pid>/cgroup -> (v2 path or None, {v1 controller: (hierarchy's controller list, path)})."""
    v2: str | None = None
    v1: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hier, controllers, path = parts
        if controllers == "":
            v2 = path
        else:
            for c in controllers.split(","):
                v1[c] = (controllers, path)
    return v2, v1


def job_level(path: str, scheduler: str, job_id: str | None) -> str | None:
    """Cut a cgroup path just below the job level; None when the path is not inside a job."""
    if scheduler == "none" or not job_id:
        return None
    parts = [p for p in path.split("/") if p]
    cut = None
    if scheduler == "slurm":
        exact = f"job_{job_id}"
        for i, p in enumerate(parts):
            if p == exact:
                cut = i
                break
        if cut is None:
            # Slurm 26.05 names the directory by SLUID unless CgroupJobIdPaths=yes.
            for i, p in enumerate(parts):
                if re.fullmatch(r"job_[A-Za-z0-9]+", p):
                    cut = i
                    break
    elif scheduler == "pbs":
        for i, p in enumerate(parts):
            if p == job_id:
                cut = i
                break
    elif scheduler == "lsf":
        for i, p in enumerate(parts):
            if p.startswith(f"job.{job_id}.") or p == f"job.{job_id}":
                cut = i
                break
    if cut is None:
        return None
    return "/" + "/".join(parts[: cut + 1])


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return None


class CgroupSample:
    """cpu_usec: cumulative CPU time of everything in the job cgroup; mem_max None = unlimited/unknown."""
    __slots__ = ("cpu_usec", "mem_current", "mem_peak", "mem_max")

    def __init__(self, cpu_usec: int | None, mem_current: int | None, mem_peak: int | None,
                 mem_max: int | None) -> None:
        self.cpu_usec = cpu_usec
        self.mem_current = mem_current
        self.mem_peak = mem_peak
        self.mem_max = mem_max


class JobCgroup:
    """Reads one job's cgroup files. `method` is cgroup-v2 or cgroup-v1; `path` the job-level path."""

    def __init__(self, method: str, path: str, cpu_dir: str | None, mem_dir: str | None,
                 cpuset_dir: str | None) -> None:
        self.method = method
        self.path = path
        self.cpu_dir = cpu_dir
        self.mem_dir = mem_dir
        self.cpuset_dir = cpuset_dir

    def __repr__(self) -> str:
        return f"JobCgroup({self.method}, {self.path!r}, cpu={self.cpu_dir!r}, mem={self.mem_dir!r})"

    def cpu_usec(self) -> int | None:
        if self.cpu_dir is None:
            return None
        if self.method == "cgroup-v2":
            text = _read(os.path.join(self.cpu_dir, "cpu.stat"))
            if text is None:
                return None
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    try:
                        return int(value)
                    except ValueError:
                        return None
            return None
        ns = _read_int(os.path.join(self.cpu_dir, "cpuacct.usage"))
        return None if ns is None else ns // 1000

    def read(self) -> CgroupSample:
        cpu = self.cpu_usec()
        if self.mem_dir is None:
            return CgroupSample(cpu, None, None, None)
        if self.method == "cgroup-v2":
            current = _read_int(os.path.join(self.mem_dir, "memory.current"))
            peak = _read_int(os.path.join(self.mem_dir, "memory.peak"))
            raw_max = _read(os.path.join(self.mem_dir, "memory.max"))
            mem_max = None
            if raw_max is not None and raw_max.strip() != "max":
                try:
                    mem_max = int(raw_max.strip())
                except ValueError:
                    mem_max = None
            return CgroupSample(cpu, current, peak, mem_max)
        current = _read_int(os.path.join(self.mem_dir, "memory.usage_in_bytes"))
        peak = _read_int(os.path.join(self.mem_dir, "memory.max_usage_in_bytes"))
        limit = _read_int(os.path.join(self.mem_dir, "memory.limit_in_bytes"))
        if limit is not None and limit >= _V1_UNLIMITED:
            limit = None
        return CgroupSample(cpu, current, peak, limit)

    def cpuset(self) -> str | None:
        if self.cpuset_dir is None:
            return None
        names = ("cpuset.cpus.effective", "cpuset.cpus") if self.method == "cgroup-v2" \
            else ("cpuset.effective_cpus", "cpuset.cpus")
        for name in names:
            text = _read(os.path.join(self.cpuset_dir, name))
            if text and text.strip():
                return text.strip()
        return None


def _v1_mount(root: str, controller: str, field: str) -> str | None:
    """Directory where a v1 hierarchy is mounted: <root>/cpu,cpuacct (its controller list) or <root>/cpuacct."""
    for name in (field, controller):
        d = os.path.join(root, name)
        if os.path.isdir(d):
            return d
    return None


def _join(root: str, cg_path: str) -> str:
    return os.path.join(root, cg_path.lstrip("/"))


def find_job_cgroup(scheduler: str, job_id: str | None, cgroup_root: str = DEFAULT_ROOT,
                    proc_cgroup_text: str | None = None) -> JobCgroup | None:
    """The job's cgroup, or None outside a job / when no job-level directory can be read."""
    if scheduler == "none" or not job_id:
        return None
    if proc_cgroup_text is None:
        proc_cgroup_text = _read("/proc/self/cgroup") or ""
    v2_path, v1 = parse_proc_cgroup(proc_cgroup_text)

    # Pure cgroup v2: the root carries cgroup.controllers. (Hybrid hosts mount v2 at
    # <root>/unified without controllers; their CPU and memory live in v1.)
    if v2_path is not None and os.path.exists(os.path.join(cgroup_root, "cgroup.controllers")):
        job = job_level(v2_path, scheduler, job_id)
        if job is None:
            return None
        d = _join(cgroup_root, job)
        if not os.path.isfile(os.path.join(d, "cpu.stat")):
            return None
        mem_dir = d if os.path.isfile(os.path.join(d, "memory.current")) else None
        cpuset_dir = d if os.path.isfile(os.path.join(d, "cpuset.cpus.effective")) else None
        return JobCgroup("cgroup-v2", job, d, mem_dir, cpuset_dir)

    def v1_dir(controller: str, probe: str) -> tuple[str | None, str | None]:
        if controller not in v1:
            return None, None
        field, path = v1[controller]
        job = job_level(path, scheduler, job_id)
        mount = _v1_mount(cgroup_root, controller, field)
        if job is None or mount is None:
            return None, None
        d = _join(mount, job)
        return (d, job) if os.path.isfile(os.path.join(d, probe)) else (None, None)

    cpu_dir, cpu_job = v1_dir("cpuacct", "cpuacct.usage")
    if cpu_dir is None:
        return None
    mem_dir, _ = v1_dir("memory", "memory.usage_in_bytes")
    cpuset_dir, _ = v1_dir("cpuset", "cpuset.cpus")
    return JobCgroup("cgroup-v1", cpu_job or "", cpu_dir, mem_dir, cpuset_dir)
