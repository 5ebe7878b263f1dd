"""The in-job sidecar: samples the job's CPU, memory and GPUs to a CSV (schema v1) beside a metadata JSON.

    jobsight sidecar [--interval 10] [--out DIR] [--job-id ID] [--cluster NAME] [--gpus auto|none] &
    jobsight sidecar run [OPTIONS] -- CMD ARGS...
    python3 collector/sidecar.py ...            (where jobsight is not installed)

Never harms the job: output or sampling problems print one stderr line each and the sidecar
degrades (background mode: exits 0; wrapper mode: keeps waiting for the command and returns
its exit code). SIGTERM/SIGINT/SIGHUP in background mode: a last sample, fsync, exit 0.
Wrapper mode forwards SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 to the command's process group.
"""
from __future__ import annotations

import os
import sys

if not __package__:
    # Run as a plain file: make this folder importable as the package `collector` from the
    # directory above it, so the relative imports below work without jobsight installed, and
    # drop collector/ itself from the path so its module names cannot shadow anything.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    sys.path.insert(0, os.path.dirname(_HERE))
    __package__ = "collector"

import argparse  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

from . import csv_schema, jobenv, writer  # noqa: E402
from .cgroup import DEFAULT_ROOT, find_job_cgroup  # noqa: E402

SIDECAR_VERSION = "0.1.0"
# The first row covers one short window after start, so it comes almost at once. Below the
# minimum window a CPU percentage is noise and the cell stays blank: cgroup counters are in
# microseconds, psutil's (/proc/<pid>/stat) in 10 ms clock ticks, so psutil needs longer windows.
FIRST_WINDOW_S = {"psutil": 0.25, "procfs": 0.25}
MIN_UTIL_WINDOW_S = {"psutil": 0.2, "procfs": 0.2}
DEFAULT_FIRST_WINDOW_S = 0.05
DEFAULT_MIN_UTIL_WINDOW_S = 0.02
# Wrapper mode forwards these to the command's process group; background mode stops on STOPPING.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Problems:
    """At most one stderr line per distinct problem."""

    def __init__(self, stream=None) -> None:
        self.stream = stream
        self.seen: set[str] = set()

    def warn(self, key: str, message: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        try:
            print(message, file=self.stream or sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def iso_utc(t: float) -> str:
    """Epoch seconds -> 2026-11-21T10:00:00.123Z"""
    ms_total = int(t * 1000)
    s, ms = divmod(ms_total, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{ms:03d}Z"


def cpu_util_pct(cpu_delta_s: float, wall_delta_s: float, cores: int) -> float:
    """Percent of the allocated cores busy over a window: 2 of 4 cores busy = 50.
    Not capped at 100: more than 100 means the job used more cores than it was given."""
    return round(max(0.0, cpu_delta_s) / (wall_delta_s * max(1, cores)) * 100.0, 1)


# ---------------------------------------------------------------- CPU / memory sources

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


# ---------------------------------------------------------------- sampler

class Sampler:
    """Turns readings into CSV rows: one `cpu` row plus one row per GPU per sample."""

    def __init__(self, job: jobenv.JobInfo, cpu, cores: int, gpus, out, problems: Problems,
                 clock=time.monotonic, wallclock=time.time, min_window: float | None = None) -> None:
        self.clock = clock
        self.min_window = min_window if min_window is not None else \
            MIN_UTIL_WINDOW_S.get(cpu.method, DEFAULT_MIN_UTIL_WINDOW_S)
        self.wallclock = wallclock
        self.job = job
        self.cpu = cpu
        self.cores = cores
        self.gpus = gpus
        self.out = out
        self.problems = problems
        self.last_cpu_s: float | None = None
        self.last_mono: float | None = None
        self.mem_peak: int | None = None
        self.samples = 0

    def _read_cpu(self) -> CpuReading:
        try:
            return self.cpu.read()
        except Exception as exc:
            self.problems.warn(f"cpu:{type(exc).__name__}", f"jobsight sidecar: CPU/memory read failed ({exc!r}); cells left blank")
            return CpuReading(None, None, None, None)

    def baseline(self) -> None:
        reading = self._read_cpu()
        self.last_cpu_s, self.last_mono = reading.cpu_s, self.clock()

    def sample(self) -> bool:
        """Take one sample and write its rows; False when the output can no longer be written."""
        mono = self.clock()
        reading = self._read_cpu()
        wall = self.wallclock()
        util = None
        if reading.cpu_s is not None and self.last_cpu_s is not None and self.last_mono is not None:
            dt = mono - self.last_mono
            if dt >= self.min_window:
                util = cpu_util_pct(reading.cpu_s - self.last_cpu_s, dt, self.cores)
        if reading.cpu_s is not None:
            self.last_cpu_s, self.last_mono = reading.cpu_s, mono
        if reading.mem_peak is not None:
            self.mem_peak = max(self.mem_peak or 0, reading.mem_peak)
        stamp = iso_utc(wall)
        base = {"time": stamp, "job_id": self.job.job_id, "cluster": self.job.cluster, "host": self.job.host}
        ok = self.out.write_row({**base, "device": "cpu", "util_pct": util,
                                 "mem_used_bytes": reading.mem_used, "mem_total_bytes": reading.mem_total})
        if ok and self.gpus is not None:
            try:
                gpu_rows = self.gpus.sample()
            except Exception as exc:  # sample() should never raise; if it does, keep the CPU rows going
                self.problems.warn(f"gpu:{type(exc).__name__}", f"jobsight sidecar: GPU sample failed ({exc!r})")
                gpu_rows = []
            for g in gpu_rows:
                ok = self.out.write_row({**g, **base}) and ok
        self.samples += 1
        return ok


# ---------------------------------------------------------------- signals and the loop

class Signals:
    """Python handlers that only record the signal (and forward it in wrapper mode); a wakeup
    pipe makes the sleeping loop return at once."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child_pgid: int | None = None
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        signal.set_wakeup_fd(self.wfd, warn_on_full_buffer=False)
        for sig in FORWARDED:
            signal.signal(sig, self._handle)
        signal.signal(signal.SIGCHLD, self._wake)

    def _handle(self, signum, _frame) -> None:
        self.received.append(signum)
        if self.child_pgid is not None:
            try:
                os.killpg(self.child_pgid, signum)
            except OSError:
                pass

    def _wake(self, _signum, _frame) -> None:
        pass

    def stop_requested(self) -> bool:
        return any(s in STOPPING for s in self.received)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            try:
                select.select([self.rfd], [], [], seconds)
            except InterruptedError:
                pass
        try:
            while os.read(self.rfd, 512):
                pass
        except (BlockingIOError, OSError):
            pass


def next_deadline(first: float, interval: float, now: float) -> float:
    """Smallest first + k*interval strictly after now: deadlines never drift, missed ones are skipped."""
    if now < first:
        return first
    k = int((now - first) // interval) + 1
    return first + k * interval


# ---------------------------------------------------------------- CLI

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


def output_stem(job: jobenv.JobInfo, started: float, pid: int) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    cluster = jobenv.safe_name(job.cluster or "nocluster")
    return f"jobsight-{cluster}-{jobenv.safe_name(job.job_id)}-{jobenv.safe_name(job.host)}-{stamp}-{pid}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    return Sidecar(args).run()


class Sidecar:
    def __init__(self, args) -> None:
        self.args = args
        self.problems = Problems()
        self.env = dict(os.environ)
        self.pid = os.getpid()
        self.child = None  # subprocess.Popen of the wrapped command
        self.out: writer.CsvWriter | None = None
        self.meta: dict = {}
        self.meta_path: str | None = None

    # The wrapped command comes first: nothing the sidecar does may delay or prevent it.
    def _start_child(self, signals: Signals) -> int | None:
        import subprocess  # only wrapper mode needs it (start-up time)
        try:
            if sys.version_info >= (3, 11):
                self.child = subprocess.Popen(self.args.cmd, process_group=0)
            else:  # older python3 on a node, running this file directly
                self.child = subprocess.Popen(self.args.cmd, preexec_fn=os.setpgrp)
        except OSError as exc:
            print(f"jobsight sidecar: cannot run {self.args.cmd[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            return 126 if isinstance(exc, PermissionError) else 127
        signals.child_pgid = self.child.pid
        for sig in list(signals.received):  # arrived while the command was being started
            try:
                os.killpg(self.child.pid, sig)
            except OSError:
                pass
        return None

    def _child_exited(self) -> bool:
        """True once the command has exited, WITHOUT reaping it: the last sample can still read
        the zombie's CPU time (psutil path), then _child_code() reaps it."""
        try:
            return os.waitid(os.P_PID, self.child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # already reaped
            return True

    def _child_code(self) -> int:
        code = self.child.wait()
        return 128 - code if code < 0 else code

    def _setup(self, started: float):
        """Open output, CPU and GPU sources. Returns a Sampler, or None (after one stderr line)."""
        args, job = self.args, self.job
        try:
            writer.ensure_dir(args.out)
            stem = os.path.join(args.out, output_stem(job, started, self.pid))
            self.out = writer.CsvWriter(stem + ".csv", csv_schema.COLUMNS, warn=self.problems.warn)
        except writer.OutputError as exc:
            self.problems.warn("output", f"jobsight sidecar: {exc}; not sampling (the job is not affected)")
            return None
        proc_text = None
        if args.proc_cgroup:
            try:
                with open(args.proc_cgroup) as f:
                    proc_text = f.read()
            except OSError as exc:
                self.problems.warn("proc-cgroup", f"jobsight sidecar: cannot read {args.proc_cgroup}: {exc.strerror}")
                proc_text = ""
        cpu, cores, cores_source = make_cpu_source(job, self.env, self.child.pid if self.child else None,
                                                   args.cgroup_root, proc_text, self.problems)
        gpus = open_gpu_source(self.env, args.gpus, args.interval, self.problems)
        gpu_meta = {"gpu_method": "none", "driver_version": None, "nvml_version": None, "gpus": []}
        if gpus is not None:
            try:
                gpu_meta.update(gpus.meta())
            except Exception as exc:
                self.problems.warn("gpu-meta", f"jobsight sidecar: GPU metadata unavailable ({exc!r})")
        # A short --interval lowers the minimum window, so jitter alone never blanks regular rows.
        min_window = min(MIN_UTIL_WINDOW_S.get(cpu.method, DEFAULT_MIN_UTIL_WINDOW_S), args.interval / 2)
        sampler = Sampler(job, cpu, cores, gpus, self.out, self.problems, min_window=min_window)
        sampler.baseline()
        mem_limit = None
        try:
            mem_limit = cpu.read().mem_total
        except Exception:
            pass
        self.meta = {
            "schema_version": csv_schema.SCHEMA_VERSION,
            "job_id": job.job_id,
            "cluster": job.cluster or None,
            "host": job.host,
            "scheduler": job.scheduler,
            "array_job_id": job.array_job_id,
            "array_task_id": job.array_task_id,
            "started_at": iso_utc(started),
            "interval_s": args.interval,
            "cpu_method": cpu.method,
            "cgroup_path": cpu.cgroup_path,
            "alloc_cores": cores,
            "alloc_cores_source": cores_source,
            "mem_limit_bytes": mem_limit,
            **gpu_meta,
            "pid": self.pid,
            "command": self.args.cmd or None,
            "sidecar_version": SIDECAR_VERSION,
            "csv": os.path.basename(self.out.path),
        }
        self.meta_path = stem + csv_schema.META_SUFFIX
        try:
            writer.write_json_new(self.meta_path, self.meta)
        except writer.OutputError as exc:
            self.problems.warn("meta", f"jobsight sidecar: {exc}")
            self.meta_path = None
        return sampler

    def _finish(self, sampler, exit_code: int | None) -> None:
        if sampler is not None and sampler.gpus is not None:
            try:
                sampler.gpus.close()
            except Exception:
                pass
        if self.out is not None:
            self.out.close()
        if self.meta_path and sampler is not None and not self.out.failed:  # disk full: one line is enough
            self.meta.update({"ended_at": iso_utc(time.time()), "samples": sampler.samples,
                              "rows": self.out.rows_written, "mem_peak_bytes": sampler.mem_peak,
                              "exit_code": exit_code, "write_failed": self.out.failed})
            try:
                writer.replace_json(self.meta_path, self.meta)
            except writer.OutputError as exc:
                self.problems.warn("meta", f"jobsight sidecar: {exc}")

    def run(self) -> int:
        args = self.args
        signals = Signals()
        started_mono, started = time.monotonic(), time.time()
        if args.wrapper:
            failed = self._start_child(signals)
            if failed is not None:
                return failed
        try:
            self.job = jobenv.detect_job(self.env, args.job_id, args.cluster, self.pid)
            sampler = self._setup(started)
        except Exception as exc:  # never let a sidecar bug take the wrapped command down
            self.problems.warn("setup", f"jobsight sidecar: sampling disabled ({exc!r})")
            sampler = None
        if sampler is None and not args.wrapper:
            return 0
        sampling = sampler is not None
        # First row one short window after the baseline (GPU init may have taken a while).
        window = FIRST_WINDOW_S.get(sampler.cpu.method, DEFAULT_FIRST_WINDOW_S) if sampling else 0.0
        first = (sampler.last_mono if sampling else started_mono) + min(window, args.interval)
        due = first
        while True:
            if args.wrapper:
                if self._child_exited():
                    break
            elif signals.stop_requested():
                break
            now = time.monotonic()
            if not sampling:
                signals.sleep(3600.0)  # woken by SIGCHLD or a signal
                continue
            if now < due:
                signals.sleep(due - now)
                continue
            try:
                sampling = sampler.sample()
            except Exception as exc:
                self.problems.warn(f"sample:{type(exc).__name__}", f"jobsight sidecar: sample failed ({exc!r})")
            if not sampling and not args.wrapper:
                break
            due = next_deadline(first, args.interval, time.monotonic())
        if sampling:
            try:
                sampler.sample()  # the last sample: covers the tail up to the stop / the command's exit
            except Exception as exc:
                self.problems.warn(f"sample:{type(exc).__name__}", f"jobsight sidecar: sample failed ({exc!r})")
        exit_code = self._child_code() if args.wrapper else 0
        try:
            self._finish(sampler, exit_code if args.wrapper else None)
        except Exception as exc:
            self.problems.warn("finish", f"jobsight sidecar: {exc!r}")
        return exit_code


if __name__ == "__main__":
    sys.exit(main())
