"""The clean start of the site prolog and epilog.

They run as root, and with an environment a job may have written: LSF's pre-exec gets the job's own.
So before anything else is imported they re-exec themselves as `python -I` (no PYTHON* variables,
no user site, neither the script's folder nor the current directory on sys.path) with a clean
environment: a fixed PATH and the running scheduler's own variables that site mode reads. Another
scheduler's names are dropped with everything else: under LSF a job's SLURM_JOB_ID is not kept.

Only os and sys (both loaded by every interpreter before any of our code): this module is what
runs before the rest of the sidecar is imported, and it runs as part of a plain file too.
"""
from __future__ import annotations

import os
import sys

SITE_MODES = ("prolog", "epilog")
SCHEDULERS = ("slurm", "pbs", "lsf")
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# LC_ALL set: Python then adds no LC_CTYPE of its own at start-up (PEP 538), so a clean environment
# stays exactly as given; scheduler commands and nvidia-smi print in the C locale
FIXED = {"PATH": SAFE_PATH, "LC_ALL": "C"}
JOB_ID_VARS = {"slurm": "SLURM_JOB_ID", "pbs": "PBS_JOBID", "lsf": "LSB_JOBID"}
# Each scheduler's own variables that site mode reads: the job, its array index, its user, cores,
# memory and GPUs (and Slurm's SLURM_CONF for scontrol). Nothing else of the caller's is kept.
KEEP = {
    "slurm": ("SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_JOB_USER", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
              "SLURM_CLUSTER_NAME", "SLURMD_NODENAME", "SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE",
              "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
              "SLURM_SCRIPT_CONTEXT", "SLURM_CONF"),
    "pbs": ("PBS_JOBID", "PBS_ARRAY_ID", "PBS_ARRAY_INDEX", "PBS_ARRAYID", "NCPUS", "CUDA_VISIBLE_DEVICES"),
    "lsf": ("LSB_JOBID", "LSB_JOBINDEX", "LSFUSER", "LSB_MCPU_HOSTS", "LSB_MAX_NUM_PROCESSORS", "CUDA_VISIBLE_DEVICES"),
    "none": (),
}


def decide_scheduler(env, given: str | None = None) -> str:
    """Whose prolog this is: --scheduler, else the variable only that scheduler sets. LSF and PBS
    first: their prologs see the job's own environment, where a SLURM_* name may be the user's;
    Slurm's prolog environment is slurmd's."""
    if given in SCHEDULERS:
        return given
    if env.get("LSB_JOBID", "").strip():
        return "lsf"
    if env.get("PBS_JOBID", "").strip():
        return "pbs"
    if env.get("SLURM_JOB_ID", "").strip() or env.get("SLURM_SCRIPT_CONTEXT", "").strip():
        return "slurm"
    return "none"


def clean_environ(env, scheduler: str) -> dict[str, str]:
    keep = {name: env[name] for name in KEEP[scheduler] if name in env}
    return {**keep, **FIXED}


def scheduler_option(args: list[str]) -> str | None:
    """--scheduler's value in the arguments (argparse reads them again after the restart)."""
    for i, arg in enumerate(args):
        if arg == "--scheduler" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--scheduler="):
            return arg.split("=", 1)[1]
    return None


def is_clean(args: list[str]) -> bool:
    """This interpreter is isolated and its environment is the clean one."""
    want = clean_environ(os.environ, decide_scheduler(os.environ, scheduler_option(args)))
    return bool(sys.flags.isolated) and dict(os.environ) == want


def restart_isolated(args: list[str], entry: list[str]) -> None:
    """For `prolog` / `epilog`: unless already isolated and clean, exec `python -I ENTRY ARGS` with
    the clean environment (ENTRY: ["-m", "jobsight.collector"] or the path of sidecar.py).
    Returns only when there is nothing to do; a failed exec ends the process with exit 0 (a failing
    prolog drains the node) without running anything as the caller asked."""
    if not args or args[0] not in SITE_MODES or is_clean(args):
        return
    clean = clean_environ(os.environ, decide_scheduler(os.environ, scheduler_option(args)))
    try:
        os.execve(sys.executable, [sys.executable, "-I", *entry, *args], clean)
    except (OSError, ValueError) as exc:
        try:
            os.write(2, f"jobsight sidecar {args[0]}: cannot restart as {sys.executable!r} -I: "
                        f"{getattr(exc, 'strerror', None) or exc}; nothing done\n".encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(0)
