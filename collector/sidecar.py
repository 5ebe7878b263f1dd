"""The in-job sidecar: samples the job's CPU, memory and GPUs to a CSV (schema v1) beside a metadata JSON.

    jobsight sidecar [--interval 10] [--out DIR] [--job-id ID] [--cluster NAME] [--gpus auto|none] &
    jobsight sidecar run [OPTIONS] -- CMD ARGS...
    jobsight sidecar prolog|epilog [--spool DIR]     (site mode, site_mode.py)
    python3 collector/sidecar.py ...            (where jobsight is not installed)

With GPUs, an idle alert watches them (idle.py): one stderr line per idle GPU at most hourly, a
summary at the end, and the user's opt-in actions. When the site's sidecar already records the job
on this node, a job's own sidecar writes no files and keeps only its idle alert.

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

if __name__ == "__main__":
    # prolog / epilog run as root: an isolated interpreter and a clean environment before anything
    # else is imported (isolate.py)
    from .isolate import restart_isolated
    restart_isolated(sys.argv[1:], ["-m", __package__] if __package__ == "jobsight.collector" else [os.path.abspath(__file__)])

import time  # noqa: E402

from . import csv_schema, jobenv, site_mode, writer  # noqa: E402
from .loop import (  # noqa: E402
    DEFAULT_MIN_UTIL_WINDOW_S,
    MIN_UTIL_WINDOW_S,
    Sampler,
    Signals,
    cpu_util_pct,
    iso_utc,
    next_deadline,
    sample_until,
)
from .options import SIDECAR_VERSION, build_parser, parse_args  # noqa: E402
from .problems import Problems, guard_std_fds  # noqa: E402
from .sources import CgroupCpu, CpuReading, PsutilCpu, make_cpu_source, open_gpu_source  # noqa: E402
from .wrapper import Command  # noqa: E402

# Reached through this module by tests, benchmarks and `jobsight sidecar` (analytics/cli.py).
__all__ = ["SIDECAR_VERSION", "CgroupCpu", "CpuReading", "Problems", "PsutilCpu", "Sampler", "Sidecar",
           "build_parser", "cpu_util_pct", "iso_utc", "main", "next_deadline", "output_stem", "parse_args"]


def output_stem(job: jobenv.JobInfo, started: float, pid: int) -> str:
    """The files' name: each of cluster, job id and host as a safe name of at most 64 characters,
    so the name stays well under the 255 bytes a file name may have."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    cluster, job_id, host = (jobenv.safe_name(v)[:64] for v in (job.cluster or "nocluster", job.job_id, job.host))
    return f"jobsight-{cluster}-{job_id}-{host}-{stamp}-{pid}"


def main(argv: list[str] | None = None) -> int:
    guard_std_fds()   # before anything is opened: stderr closed (2>&-) must not become a file of ours
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    if args.mode == "prolog":
        return site_mode.prolog(args)
    if args.mode == "epilog":
        return site_mode.epilog(args)
    return Sidecar(args).run()


class Sidecar:
    """One run: the wrapped command first (wrapper mode), then output and sources, the sampling
    loop, and the metadata JSON completed at the end."""

    def __init__(self, args) -> None:
        self.args = args
        self.problems = Problems()
        self.env = dict(os.environ)
        self.pid = os.getpid()
        self.command: Command | None = None  # wrapper mode
        self.out: writer.CsvWriter | None = None
        self.meta: dict = {}
        self.meta_path: str | None = None
        self.site_mode = getattr(args, "mode", None) == "site"   # started by `jobsight sidecar prolog`
        self.watch = None
        self.cpu = None
        self.cores_source = None

    def _open_output(self, started: float) -> str | None:
        """The CSV (returns the files' stem), or a NullWriter when the site's sidecar records this job."""
        args, job = self.args, self.job
        marker = None if self.site_mode or job.scheduler == "none" else site_mode.site_sidecar_running(self.env, job.host)
        if marker is not None:
            self.out = writer.NullWriter()
            self.problems.warn("site", f"jobsight sidecar: the site's sidecar records job {job.job_id} on this node "
                                       f"({marker}); this one writes no files")
            return None
        writer.ensure_dir(args.out)
        stem = os.path.join(args.out, output_stem(job, started, self.pid))
        self.out = writer.CsvWriter(stem + ".csv", csv_schema.COLUMNS, warn=self.problems.warn)
        return stem

    def _cpu_source(self):
        args, job = self.args, self.job
        if self.site_mode:
            cpu = site_mode.make_site_cpu(self.env, args.site_uid, args.cgroup_root)
            return (cpu, *site_mode.site_cores(self.env))
        proc_text = None
        if args.proc_cgroup:
            try:
                with open(args.proc_cgroup) as f:
                    proc_text = f.read()
            except OSError as exc:
                self.problems.warn("proc-cgroup", f"jobsight sidecar: cannot read {args.proc_cgroup}: {exc.strerror}")
                proc_text = ""
        return make_cpu_source(job, self.env, self.command.pid if self.command else None,
                               args.cgroup_root, proc_text, self.problems)

    def _idle_watch(self, gpus, gpu_meta: dict):
        """The idle alert for a job with GPUs (not in site mode: its stderr reaches no one)."""
        args = self.args
        if self.site_mode or gpus is None or not args.idle_alert:
            return None
        from .idle import IdleWatch
        from .idle_settings import idle_settings
        names = [g.get("name") or "" for g in gpu_meta["gpus"] if isinstance(g, dict)]
        settings = idle_settings(args.config, self.env, self.job.scheduler, names,
                                 warn=lambda line: self.problems.warn("config", line))
        return IdleWatch(self.job.job_id, args.idle_alert * 60, settings, self.problems, self.env,
                         on_idle=args.on_idle_argv, cancel_s=args.idle_cancel * 60)

    def _who(self) -> dict:
        """The job's user: the site sidecar's from the scheduler, a job's own sidecar's is its own."""
        if self.site_mode:
            return {"mode": "site", "uid": self.args.site_uid, "user": self.args.site_user}
        import pwd
        uid = os.getuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = None
        return {"mode": "job", "uid": uid, "user": user}

    def _setup(self, started: float):
        """Open output, CPU and GPU sources. Returns a Sampler, or None (after one stderr line)."""
        args, job = self.args, self.job
        try:
            stem = self._open_output(started)
        except writer.OutputError as exc:
            self.problems.warn("output", f"jobsight sidecar: {exc}; not sampling (the job is not affected)")
            return None
        cpu, cores, self.cores_source = self._cpu_source()
        self.cpu = cpu
        gpus = open_gpu_source(self.env, args.gpus, args.interval, self.problems)
        gpu_meta = {"gpu_method": "none", "driver_version": None, "nvml_version": None, "gpus": []}
        if gpus is not None:
            try:
                gpu_meta.update(gpus.meta())
            except Exception as exc:
                self.problems.warn("gpu-meta", f"jobsight sidecar: GPU metadata unavailable ({exc!r})")
        try:
            self.watch = self._idle_watch(gpus, gpu_meta)
        except Exception as exc:   # a courtesy: never a reason not to sample
            self.problems.warn("idle", f"jobsight sidecar: idle alert disabled ({exc!r})")
        if stem is None and self.watch is None:   # the site records the job and there is nothing to watch
            if gpus is not None:
                gpus.close()
            return None
        # A short --interval lowers the minimum window, so jitter alone never blanks regular rows.
        min_window = min(MIN_UTIL_WINDOW_S.get(cpu.method, DEFAULT_MIN_UTIL_WINDOW_S), args.interval / 2)
        sampler = Sampler(job, cpu, cores, gpus, self.out, self.problems, min_window=min_window)
        sampler.watch = self.watch
        if self.site_mode:
            def found(cg, sampler=sampler) -> None:   # the job's cgroup: its cpuset gives the cores
                sampler.cores, self.cores_source = jobenv.allocated_cores(self.env, cg.cpuset())
            cpu.on_cgroup = found
        sampler.baseline()
        if stem is None:
            return sampler
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
            "alloc_cores_source": self.cores_source,
            "mem_limit_bytes": mem_limit,
            **gpu_meta,
            **self._who(),
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
        if self.watch is not None and sampler is not None:
            try:
                self.watch.finish(time.monotonic())
            except Exception as exc:
                self.problems.warn("idle", f"jobsight sidecar: idle summary failed ({exc!r})")
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
                              "exit_code": exit_code, "write_failed": self.out.failed,
                              # site mode may have found the job's cgroup after the start
                              "cpu_method": sampler.cpu.method, "cgroup_path": sampler.cpu.cgroup_path,
                              "alloc_cores": sampler.cores, "alloc_cores_source": self.cores_source})
            if self.watch is not None:
                self.meta.update(self.watch.meta())
            if self.problems.lines:
                self.meta["problems"] = list(self.problems.lines)
            try:
                writer.replace_json(self.meta_path, self.meta)
            except writer.OutputError as exc:
                self.problems.warn("meta", f"jobsight sidecar: {exc}")

    def run(self) -> int:
        args = self.args
        signals = Signals()
        started_mono, started = time.monotonic(), time.time()
        if args.wrapper:
            self.command = Command(args.cmd)
            failed = self.command.start(signals)
            if failed is not None:
                return failed
        try:
            self.job = jobenv.detect_job(self.env, args.job_id, args.cluster, self.pid,
                                         warn=lambda line: self.problems.warn("identity", line))
            sampler = self._setup(started)
        except Exception as exc:  # never let a sidecar bug take the wrapped command down
            self.problems.warn("setup", f"jobsight sidecar: sampling disabled ({exc!r})")
            sampler = None
        if sampler is None and not args.wrapper:
            return 0
        job_over = (lambda: self.cpu.gone) if self.site_mode and sampler is not None else None
        sample_until(sampler, signals, args.interval, started_mono,
                     self.command.exited if args.wrapper else None, self.problems, job_over, quick_start=self.site_mode)
        exit_code = self.command.exit_code() if args.wrapper else 0
        try:
            self._finish(sampler, exit_code if args.wrapper else None)
        except Exception as exc:
            self.problems.warn("finish", f"jobsight sidecar: {exc!r}")
        return exit_code


if __name__ == "__main__":
    sys.exit(main())
