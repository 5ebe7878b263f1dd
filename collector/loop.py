"""The sampling loop: readings -> CSV rows on a fixed time grid, woken early by signals."""
from __future__ import annotations

import os
import select
import signal
import time

from . import jobenv
from .problems import Problems
from .sources import CpuReading

# The first row covers one short window after start, so it comes almost at once. Below the
# minimum window a CPU percentage is noise and the cell stays blank: cgroup counters are in
# microseconds, psutil's (/proc/<pid>/stat) in 10 ms clock ticks, so psutil needs longer windows.
# The first row follows the baseline after one short window: long enough for a CPU reading of the
# job's processes (psutil, procfs), short for a cgroup's counter. A site sampler, started by the
# prolog before the job has a process, takes DEFAULT_FIRST_WINDOW_S (its first CPU cell is blank).
FIRST_WINDOW_S = {"psutil": 0.25, "procfs": 0.25}
MIN_UTIL_WINDOW_S = {"psutil": 0.2, "procfs": 0.2}
DEFAULT_FIRST_WINDOW_S = 0.05
DEFAULT_MIN_UTIL_WINDOW_S = 0.02
# Wrapper mode forwards these to the command's process group; background mode stops on STOPPING.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def iso_utc(t: float) -> str:
    """Epoch seconds -> 2026-11-21T10:00:00.123Z"""
    ms_total = int(t * 1000)
    s, ms = divmod(ms_total, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{ms:03d}Z"


def cpu_util_pct(cpu_delta_s: float, wall_delta_s: float, cores: int) -> float:
    """Percent of the allocated cores busy over a window: 2 of 4 cores busy = 50.
    Not capped at 100: more than 100 means the job used more cores than it was given."""
    return round(max(0.0, cpu_delta_s) / (wall_delta_s * max(1, cores)) * 100.0, 1)


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
        self.watch = None   # idle.IdleWatch: fed each sample's GPU rows

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
            if self.watch is not None:
                try:
                    self.watch.observe(mono, gpu_rows)
                except Exception as exc:   # the alert is a courtesy: it never stops the samples
                    self.problems.warn("idle", f"jobsight sidecar: idle alert disabled ({exc!r})")
                    self.watch = None
        self.samples += 1
        return ok


class Signals:
    """Python handlers that only record the signal (and forward it in wrapper mode); a wakeup
    pipe makes the sleeping loop return at once."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child_pgid: int | None = None  # set by wrapper.Command once the command runs
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


def sample_until(sampler: Sampler | None, signals: Signals, interval: float, started_mono: float,
                 command_exited, problems: Problems, job_over=None, quick_start: bool = False) -> None:
    """Sample every `interval` seconds until the wrapped command has exited (wrapper mode:
    `command_exited` is a callable) or a stop signal arrives or `job_over()` says so (background
    mode: command_exited None), then take the last sample. Without a sampler (sampling disabled), wrapper mode only waits for the command;
    when the output can no longer be written, background mode stops and wrapper mode keeps waiting."""
    wrapper = command_exited is not None
    sampling = sampler is not None
    # First row one short window after the baseline (GPU init may have taken a while).
    window = 0.0 if not sampling else DEFAULT_FIRST_WINDOW_S if quick_start else \
        FIRST_WINDOW_S.get(sampler.cpu.method, DEFAULT_FIRST_WINDOW_S)
    first = (sampler.last_mono if sampling else started_mono) + min(window, interval)
    due = first
    while True:
        if wrapper:
            if command_exited():
                break
        elif signals.stop_requested() or (job_over is not None and job_over()):
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
            problems.warn(f"sample:{type(exc).__name__}", f"jobsight sidecar: sample failed ({exc!r})")
        if not sampling and not wrapper:
            break
        due = next_deadline(first, interval, time.monotonic())
    if sampling:
        try:
            sampler.sample()  # the last sample: covers the tail up to the stop / the command's exit
        except Exception as exc:
            problems.warn(f"sample:{type(exc).__name__}", f"jobsight sidecar: sample failed ({exc!r})")
