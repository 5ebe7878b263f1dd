"""The sidecar's command line:

    jobsight sidecar [OPTIONS]                    background mode, until SIGTERM
    jobsight sidecar run [OPTIONS] -- CMD ARGS    wrapper mode
    jobsight sidecar prolog [OPTIONS]             site mode: start a root sidecar for a job (scheduler prolog)
    jobsight sidecar epilog [OPTIONS]             site mode: stop it (scheduler epilog)
"""
from __future__ import annotations

import argparse
import shlex

from .cgroup import DEFAULT_ROOT

SIDECAR_VERSION = "0.1.0"
# Where site mode writes; a job's own sidecar looks here (or in $JOBSIGHT_SPOOL) for a site sidecar.
DEFAULT_SPOOL = "/var/spool/jobsight"
MODES = ("run", "prolog", "epilog")


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from None
    if not (0 <= value < 1e6):
        raise argparse.ArgumentTypeError(f"minutes must be between 0 and 1e6, got {text!r}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=float, default=10.0, metavar="SECONDS", help="seconds between samples (default 10)")
    p.add_argument("--job-id", default=None, help="job id to record (default: SLURM_JOB_ID / PBS_JOBID / LSB_JOBID, else local-<pid>)")
    p.add_argument("--cluster", default=None, help="cluster name (default: SLURM_CLUSTER_NAME, else JOBSIGHT_CLUSTER)")
    p.add_argument("--gpus", choices=("auto", "none", "nvml", "nvidia-smi"), default="auto",
                   help="sample the job's GPUs: auto (NVML, else nvidia-smi), none, or force nvml / nvidia-smi")
    # For tests and unusual nodes: where cgroups are mounted.
    p.add_argument("--cgroup-root", default=DEFAULT_ROOT, help=argparse.SUPPRESS)


def build_parser(wrapper: bool = False, mode: str | None = None) -> argparse.ArgumentParser:
    """The parser of one mode: None (background), "run" (or wrapper=True), "prolog", "epilog"."""
    mode = mode or ("run" if wrapper else None)
    prog = "jobsight sidecar" + (f" {mode}" if mode else "")
    descriptions = {
        None: "Sample this job's CPU, memory and GPUs to CSV until SIGTERM/SIGINT. "
              "Use `jobsight sidecar run [OPTIONS] -- CMD ...` to wrap a command instead.",
        "run": "Run CMD, sample this job's CPU, memory and GPUs while it runs, forward SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 "
               "to it and exit with its exit code.",
        "prolog": "Site mode, from the scheduler's prolog (as root): start a detached sidecar that samples this job "
                  "into the site spool, and return at once. Always exits 0.",
        "epilog": "Site mode, from the scheduler's epilog: stop this job's site sidecar (a last sample, fsync) within "
                  "about a second, leaving no process behind. Always exits 0.",
    }
    p = argparse.ArgumentParser(prog=prog, description=descriptions[mode])
    if mode == "epilog":
        p.add_argument("--spool", default=DEFAULT_SPOOL, metavar="DIR", help=f"the site spool (default {DEFAULT_SPOOL})")
        p.add_argument("--job-id", default=None, help="the job (default: the scheduler's LSB_JOBID / PBS_JOBID / SLURM_JOB_ID)")
        p.add_argument("--scheduler", choices=("slurm", "pbs", "lsf"), default=None,
                       help="whose epilog this is (default: LSF with LSB_JOBID, else PBS with PBS_JOBID, else Slurm)")
        return p
    _common(p)
    if mode == "prolog":
        p.add_argument("--spool", default=DEFAULT_SPOOL, metavar="DIR",
                       help=f"the site spool, created root-only (0711) if missing (default {DEFAULT_SPOOL})")
        p.add_argument("--user", default=None, metavar="USER",
                       help="the job's user, name or uid (default: SLURM_JOB_UID under Slurm, LSFUSER under LSF; "
                            "under PBS the prologue's $2 or qstat's Job_Owner)")
        p.add_argument("--scheduler", choices=("slurm", "pbs", "lsf"), default=None,
                       help="whose prolog this is (default: LSF with LSB_JOBID, else PBS with PBS_JOBID, else Slurm); "
                            "the job and its user are read from its variables only")
        p.add_argument("--scheduler-bin", default=None, metavar="DIR",
                       help="where the scheduler's scontrol / qstat / bjobs are, when not in /usr/sbin:/usr/bin:/sbin:/bin "
                            "(they check the job's user)")
        return p
    p.add_argument("--out", default=".", metavar="DIR", help="output directory, created 0750 if missing (default: current directory)")
    p.add_argument("--idle-alert", type=_minutes, default=30.0, metavar="MINUTES",
                   help="one stderr line when a GPU has been idle this long, at most hourly, and a summary at the end "
                        "(default 30; 0 = off)")
    p.add_argument("--on-idle", default=None, metavar="CMD",
                   help="run CMD once when the idle alert first fires (split like a shell command, not run by a shell; "
                        "JOBSIGHT_JOB_ID, JOBSIGHT_GPU_INDEX, JOBSIGHT_GPU_UUID, JOBSIGHT_IDLE_MINUTES in its environment)")
    p.add_argument("--idle-cancel", type=_minutes, default=0.0, metavar="MINUTES",
                   help="cancel this job (scancel / qdel / bkill) when every GPU stays idle this much longer after the alert "
                        "(default 0 = never)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="jobsight.toml for the idle threshold and the price of a GPU-hour (default: $JOBSIGHT_CONFIG)")
    # For tests and unusual nodes: a file to read instead of /proc/self/cgroup.
    p.add_argument("--proc-cgroup", default=None, help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"jobsight sidecar {SIDECAR_VERSION}")
    if mode == "run":
        p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")
    return p


def parse_args(argv: list[str]):
    """argparse's Namespace plus `mode` (None, run, prolog, epilog), `wrapper` (run mode) and `cmd`
    (the command, [] otherwise); `on_idle_argv` for --on-idle. Usage errors exit through argparse
    (SystemExit 2)."""
    mode = argv[0] if argv and argv[0] in MODES else None
    rest = argv[1:] if mode else list(argv)
    parser = build_parser(mode=mode)
    command: list[str] = []
    if mode == "run" and "--" in rest:
        i = rest.index("--")
        rest, command = rest[:i], rest[i + 1:]
    args = parser.parse_args(rest)
    args.mode = mode
    args.wrapper = mode == "run"
    if mode == "run":
        command = command or [c for c in args.command if c != "--"]
        if not command:
            parser.error("no command given: use `jobsight sidecar run [OPTIONS] -- CMD ARGS...`")
    args.cmd = command
    if mode == "epilog":
        return args
    if not (args.interval > 0):
        parser.error("--interval must be a positive number of seconds")
    if mode == "prolog":
        return args
    args.on_idle_argv = None
    if args.on_idle is not None:
        try:
            args.on_idle_argv = shlex.split(args.on_idle)
        except ValueError as exc:
            parser.error(f"--on-idle: {exc}")
        if not args.on_idle_argv:
            parser.error("--on-idle: empty command")
    if (args.on_idle_argv or args.idle_cancel) and not args.idle_alert:
        parser.error("--on-idle and --idle-cancel count from the idle alert: give --idle-alert MINUTES above 0")
    return args
