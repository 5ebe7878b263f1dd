"""The sidecar's command line: `jobsight sidecar [OPTIONS]` and `jobsight sidecar run [OPTIONS] -- CMD ARGS...`."""
from __future__ import annotations

import argparse

from .cgroup import DEFAULT_ROOT

SIDECAR_VERSION = "0.1.0"


def build_parser(wrapper: bool) -> argparse.ArgumentParser:
    prog = "jobsight sidecar run" if wrapper else "jobsight sidecar"
    p = argparse.ArgumentParser(
        prog=prog,
        description=("Run CMD, sample this job's CPU, memory and GPUs while it runs, forward SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 "
                     "to it and exit with its exit code." if wrapper else
                     "Sample this job's CPU, memory and GPUs to CSV until SIGTERM/SIGINT. "
                     "Use `jobsight sidecar run [OPTIONS] -- CMD ...` to wrap a command instead."),
    )
    p.add_argument("--interval", type=float, default=10.0, metavar="SECONDS", help="seconds between samples (default 10)")
    p.add_argument("--out", default=".", metavar="DIR", help="output directory, created 0750 if missing (default: current directory)")
    p.add_argument("--job-id", default=None, help="job id to record (default: SLURM_JOB_ID / PBS_JOBID / LSB_JOBID, else local-<pid>)")
    p.add_argument("--cluster", default=None, help="cluster name (default: SLURM_CLUSTER_NAME, else JOBSIGHT_CLUSTER)")
    p.add_argument("--gpus", choices=("auto", "none", "nvml", "nvidia-smi"), default="auto",
                   help="sample the job's GPUs: auto (NVML, else nvidia-smi), none, or force nvml / nvidia-smi")
    # For tests and unusual nodes: where cgroups are mounted, and a file to read instead of /proc/self/cgroup.
    p.add_argument("--cgroup-root", default=DEFAULT_ROOT, help=argparse.SUPPRESS)
    p.add_argument("--proc-cgroup", default=None, help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"jobsight sidecar {SIDECAR_VERSION}")
    if wrapper:
        p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")
    return p


def parse_args(argv: list[str]):
    """argparse's Namespace plus `wrapper` (run mode) and `cmd` (the command, [] in background mode).
    Usage errors exit through argparse (SystemExit 2)."""
    wrapper = bool(argv) and argv[0] == "run"
    rest = argv[1:] if wrapper else list(argv)
    parser = build_parser(wrapper)
    command: list[str] = []
    if wrapper and "--" in rest:
        i = rest.index("--")
        rest, command = rest[:i], rest[i + 1:]
    args = parser.parse_args(rest)
    if wrapper:
        command = command or [c for c in args.command if c != "--"]
        if not command:
            parser.error("no command given: use `jobsight sidecar run [OPTIONS] -- CMD ARGS...`")
    if not (args.interval > 0):
        parser.error("--interval must be a positive number of seconds")
    args.wrapper = wrapper
    args.cmd = command
    return args
