"""Who the sidecar is sampling for: the job's identity and its allocated cores, from the environment.

Standard library only (runs where jobsight is not installed). Every function takes the
environment as a dict so tests can hand in any scheduler's variables.
"""
from __future__ import annotations

import os
import re


class JobInfo:
    """job_id: raw scheduler id (SLURM_JOB_ID = sacct JobIDRaw), --job-id, or local-<pid>;
    cluster: "" when unknown; scheduler: slurm | pbs | lsf | none.
    (A plain class: dataclasses costs ~15 ms of import time, and the sidecar must start fast.)"""
    __slots__ = ("job_id", "cluster", "host", "scheduler", "array_job_id", "array_task_id")

    def __init__(self, job_id: str, cluster: str, host: str, scheduler: str,
                 array_job_id: str | None, array_task_id: str | None) -> None:
        self.job_id = job_id
        self.cluster = cluster
        self.host = host
        self.scheduler = scheduler
        self.array_job_id = array_job_id
        self.array_task_id = array_task_id

    def __repr__(self) -> str:
        return "JobInfo(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


def _get(env: dict[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def detect_scheduler(env: dict[str, str]) -> tuple[str, str | None]:
    """(scheduler, raw job id) from the variables each scheduler sets in a job."""
    for scheduler, var in (("slurm", "SLURM_JOB_ID"), ("pbs", "PBS_JOBID"), ("lsf", "LSB_JOBID")):
        job_id = _get(env, var)
        if job_id:
            return scheduler, job_id
    return "none", None


def _array_ids(env: dict[str, str], scheduler: str, job_id: str | None) -> tuple[str | None, str | None]:
    if scheduler == "slurm":
        return _get(env, "SLURM_ARRAY_JOB_ID"), _get(env, "SLURM_ARRAY_TASK_ID")
    if scheduler == "pbs":
        # PBS Pro sets PBS_ARRAY_ID/PBS_ARRAY_INDEX, Torque PBS_ARRAYID (the index).
        index = _get(env, "PBS_ARRAY_INDEX") or _get(env, "PBS_ARRAYID")
        return (_get(env, "PBS_ARRAY_ID") if index else None), index
    if scheduler == "lsf":
        index = _get(env, "LSB_JOBINDEX")
        if index and index != "0":  # LSF sets 0 for a job that is not an array element
            return job_id, index
    return None, None


def short_hostname(env: dict[str, str]) -> str:
    """The node name as the scheduler knows it (Slurm NodeList uses short names)."""
    # os.uname() is gethostname() without importing socket (start-up time).
    return _get(env, "SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


# What a CSV cell cannot carry so that `jobsight ingest` reads it back as written: the field
# separator, the quote (the reader takes quotes as text), line breaks and every other control
# character (C0, DEL, C1), and lone surrogates (bytes of an argument or variable that were not
# UTF-8, which cannot be written as UTF-8 at all).
_NOT_IN_CSV = re.compile('[,"\x00-\x1f\x7f-\x9f\ud800-\udfff]')


def csv_value(text: str) -> str:
    """`text` as the sidecar writes it in the CSV's job_id, cluster and host: leading and trailing
    whitespace removed (the ingester strips it), then each character the CSV cannot carry (see
    _NOT_IN_CSV) replaced by '_'. Whatever this returns is read back by the ingester unchanged; an
    empty result means "not known", as an empty cell does."""
    return _NOT_IN_CSV.sub("_", text.strip())


def _short(text: str) -> str:
    shown = repr(text)   # repr: the line stays one line whatever the value holds
    return shown if len(shown) <= 80 else shown[:77] + "..."


def detect_job(env: dict[str, str], job_id: str | None = None, cluster: str | None = None,
               pid: int | None = None, warn=None) -> JobInfo:
    """The job this sidecar belongs to. `job_id`/`cluster` (from --job-id/--cluster) override.
    job_id, cluster and host are made CSV-safe (csv_value); `warn(line)` is called once when that
    changed any of them (never for a value that needed no change)."""
    changed: list[str] = []

    def safe(what: str, value: str | None) -> str | None:
        if value is None:
            return None
        clean = csv_value(value)
        if clean != value:
            changed.append(f"{what} {_short(value)} as {_short(clean)}")
        return clean

    scheduler, env_job_id = detect_scheduler(env)
    array_job_id, array_task_id = _array_ids(env, scheduler, env_job_id)
    resolved_id = (safe("job id", job_id) or safe("job id", env_job_id)
                   or f"local-{pid if pid is not None else os.getpid()}")
    resolved_cluster = safe("cluster", cluster or _get(env, "SLURM_CLUSTER_NAME") or _get(env, "JOBSIGHT_CLUSTER") or "")
    host = safe("host", short_hostname(env))
    if changed and warn is not None:
        warn("jobsight sidecar: written " + "; ".join(changed)
             + " (a comma, quote, line break or control character cannot be read back from the CSV)")
    return JobInfo(resolved_id, resolved_cluster, host, scheduler, array_job_id, array_task_id)


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?(?::(\d+))?$")


def parse_cpu_list(text: str) -> set[int]:
    """Kernel cpu list ('0-3,8,10-14:2') -> set of cpu numbers. Raises ValueError on bad input."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"bad cpu list element {part!r} in {text.strip()!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise ValueError(f"bad cpu range {part!r} in {text.strip()!r}")
        cpus.update(range(lo, hi + 1, step))
    return cpus


def _slurm_cpus_on_node(env: dict[str, str]) -> int | None:
    value = _get(env, "SLURM_CPUS_ON_NODE")
    if value is None:
        return None
    # Heterogeneous jobs can report '4(x2)'-like forms; the leading number is this node's count.
    m = re.match(r"\d+", value)
    return int(m.group(0)) if m and int(m.group(0)) > 0 else None


def allocated_cores(env: dict[str, str], cpuset: str | None = None) -> tuple[int, str]:
    """(cores, source): the cgroup cpuset, else SLURM_CPUS_ON_NODE, else this process's affinity."""
    if cpuset:
        try:
            cpus = parse_cpu_list(cpuset)
        except ValueError:
            cpus = set()
        if cpus:
            return len(cpus), "cpuset"
    slurm = _slurm_cpus_on_node(env)
    if slurm:
        return slurm, "SLURM_CPUS_ON_NODE"
    try:
        return max(1, len(os.sched_getaffinity(0))), "affinity"
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1), "cpu_count"


def memory_limit_from_env(env: dict[str, str], cores: int) -> int | None:
    """The job's memory on this node from Slurm's variables (MB), used when no cgroup says it."""
    per_node = _get(env, "SLURM_MEM_PER_NODE")
    if per_node and per_node.isdigit() and int(per_node) > 0:
        return int(per_node) * 1024 * 1024
    per_cpu = _get(env, "SLURM_MEM_PER_CPU")
    if per_cpu and per_cpu.isdigit() and int(per_cpu) > 0:
        return int(per_cpu) * 1024 * 1024 * cores
    return None


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def safe_name(text: str) -> str:
    """A piece of a file name: anything but [A-Za-z0-9._+-] becomes '_' (PBS ids hold '[', ']')."""
    return _UNSAFE.sub("_", text) or "_"
