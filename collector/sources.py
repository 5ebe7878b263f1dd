"""Where the sidecar's readings come from: the job's CPU time and memory (job cgroup, else psutil,
else /proc read directly) and its GPUs (NVML or nvidia-smi, see gpus.py)."""
from __future__ import annotations

import os

from . import jobenv
from .cgroup import find_job_cgroup
from .problems import Problems


class CpuReading:
    __slots__ = ("cpu_s", "mem_used", "mem_total", "mem_peak")

    def __init__(self, cpu_s, mem_used, mem_total, mem_peak) -> None:
        self.cpu_s = cpu_s
        self.mem_used = mem_used
        self.mem_total = mem_total
        self.mem_peak = mem_peak


class CgroupCpu:
    def __init__(self, cg) -> None:
        self.cg = cg
        self.method = cg.method
        self.cgroup_path = cg.path

    def read(self) -> CpuReading:
        s = self.cg.read()
        return CpuReading(None if s.cpu_usec is None else s.cpu_usec / 1e6, s.mem_current, s.mem_max, s.mem_peak)


class PsutilCpu:
    method = "psutil"
    cgroup_path = None

    def __init__(self, procs, mem_limit: int | None) -> None:
        self.procs = procs
        self.mem_limit = mem_limit
        self.peak = 0

    def read(self) -> CpuReading:
        total, rss, _n = self.procs.read()
        self.peak = max(self.peak, rss)
        return CpuReading(total, rss, self.mem_limit, self.peak)


def make_cpu_source(job: jobenv.JobInfo, env: dict[str, str], child_pid: int | None,
                    cgroup_root: str, proc_cgroup_text: str | None, problems: Problems):
    """Job cgroup first; else psutil (or /proc read directly when psutil is missing) over the wrapped
    command / the job's processes / the tree of the process that started the sidecar."""
    scheduler_id = jobenv.detect_scheduler(env)[1]
    cg = None
    try:
        cg = find_job_cgroup(job.scheduler, scheduler_id, cgroup_root, proc_cgroup_text)
    except Exception as exc:  # a strange cgroup layout must not stop the sidecar
        problems.warn("cgroup", f"jobsight sidecar: cannot read the job's cgroup ({exc}); using psutil")
    if cg is not None and cg.cpu_usec() is not None:
        cores, source = jobenv.allocated_cores(env, cg.cpuset())
        return CgroupCpu(cg), cores, source
    cores, source = jobenv.allocated_cores(env, None)
    from . import procs
    have_psutil = procs.psutil_available()
    tree, by_env = (procs.ProcessTree, procs.JobProcesses) if have_psutil else (procs.ProcfsTree, procs.ProcfsJobProcesses)
    if child_pid is not None:
        pset = tree(child_pid)
    elif job.scheduler != "none" and scheduler_id:
        var = {"slurm": "SLURM_JOB_ID", "pbs": "PBS_JOBID", "lsf": "LSB_JOBID"}[job.scheduler]
        pset = by_env(var, scheduler_id)
    else:
        # Outside a job: the shell (or whatever) that started us, and its other children.
        pset = tree(os.getppid())
    cpu = PsutilCpu(pset, jobenv.memory_limit_from_env(env, cores))
    if not have_psutil:
        cpu.method = "procfs"  # same counters as psutil, read from /proc by the standard library
    return cpu, cores, source


def open_gpu_source(env: dict[str, str], mode: str, interval: float, problems: Problems):
    if mode == "none":
        return None
    try:
        from .gpus import open_gpus
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.gpus":
            problems.warn("gpus-import", f"jobsight sidecar: GPU sampling unavailable ({exc})")
        return None
    except Exception as exc:
        problems.warn("gpus-import", f"jobsight sidecar: GPU sampling unavailable ({exc})")
        return None
    try:
        return open_gpus(env, mode=mode, interval=interval)
    except Exception as exc:
        problems.warn("gpus-open", f"jobsight sidecar: GPU sampling disabled ({exc})")
        return None
