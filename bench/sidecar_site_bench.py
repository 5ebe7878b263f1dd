"""Site-mode and idle-alert benchmark (prints figures; not a test).

    .venv/bin/python bench/sidecar_site_bench.py [--samples 500] [--runs 10]

With 8 GPUs from the fake libnvidia-ml.so.1 (tests/fake_nvml, loaded by the real pynvml):
  - CPU time per sample of a job's own sidecar with the idle alert on (cgroup + 8 GPUs + IdleWatch)
  - CPU time per sample of a site sampler once it has found the job's cgroup (fake Slurm v2 tree)
  - the same before (or without) a job cgroup: the job's processes, found by uid and SLURM_JOB_ID
  - `jobsight sidecar prolog`: wall time until it returns (the job waits for it), until the first row
  - `jobsight sidecar epilog`: wall time until it returns, the sampler stopped (last sample, fsync)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from sidecar_bench import SLURM_ENV, fake_cgroup  # noqa: E402


def per_sample(tmp: Path, n: int, env: dict[str, str]) -> dict[str, float]:
    from jobsight.collector import cgroup, csv_schema, jobenv, procs, site_mode, writer
    from jobsight.collector.gpus import open_gpus
    from jobsight.collector.idle import IdleWatch
    from jobsight.collector.idle_settings import IdleSettings
    from jobsight.collector.loop import Sampler
    from jobsight.collector.problems import Problems
    from jobsight.collector.sources import CgroupCpu

    gpus = open_gpus(env, "auto", 10.0)
    assert gpus is not None and len(gpus.devices) == 8, "the fake NVML did not load"
    root, proc = fake_cgroup(tmp)
    job = jobenv.detect_job(SLURM_ENV)
    text = proc.read_text()
    site_cg = site_mode.SiteCpu(procs.ProcfsJobProcesses("SLURM_JOB_ID", "123"), "slurm", "123", str(root), None,
                                read_text=lambda p: text)
    site_cg.procs.pids = [os.getpid()]
    site_cg._locate()
    assert site_cg.cg is not None
    scan = site_mode.make_site_cpu({"SLURM_JOB_ID": "123"}, os.getuid(), "/nonexistent")
    cases = {
        "job: cgroup + 8 GPUs + idle alert": (CgroupCpu(cgroup.find_job_cgroup("slurm", "123", str(root), text)), True),
        "site: job cgroup found + 8 GPUs": (site_cg, False),
        f"site: no job cgroup, {scan.method} scan + 8 GPUs": (scan, False),
    }
    results = {}
    for name, (cpu, watch) in cases.items():
        out = writer.CsvWriter(str(tmp / f"{len(results)}.csv"), csv_schema.COLUMNS)
        s = Sampler(job, cpu, 16, gpus, out, Problems())
        if watch:
            s.watch = IdleWatch("123", 1800, IdleSettings(price=128, where="bench"), Problems(), {})
        s.baseline()
        for _ in range(20):
            s.sample()
        t0 = time.process_time()
        for _ in range(n):
            s.sample()
        results[name] = (time.process_time() - t0) / n
        out.close()
    gpus.close()
    return results


def jobsight() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "jobsight"
    return [str(exe), "sidecar"] if exe.exists() else [sys.executable, "-m", "jobsight.collector"]


def prolog_epilog(env: dict[str, str], runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"prolog": [], "first row": [], "epilog": []}
    with tempfile.TemporaryDirectory() as d:
        spool = Path(d) / "spool"
        for i in range(runs):
            job_env = {**env, "SLURM_JOB_ID": f"9{i:05d}", "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_CPUS_PER_NODE": "4"}
            t0 = time.monotonic()
            subprocess.run([*jobsight(), "prolog", "--spool", str(spool)], env=job_env, check=True)
            out["prolog"].append(time.monotonic() - t0)
            while not any(f.stat().st_size > 200 for f in spool.glob(f"*-9{i:05d}-*.csv")):
                if time.monotonic() - t0 > 10:
                    raise SystemExit("no first row within 10 s")
                time.sleep(0.001)
            out["first row"].append(time.monotonic() - t0)
            t0 = time.monotonic()
            res = subprocess.run([*jobsight(), "epilog", "--spool", str(spool)], env=job_env, capture_output=True, text=True)
            out["epilog"].append(time.monotonic() - t0)
            if res.stderr:
                print("epilog:", res.stderr.strip())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "LSB_", "CUDA_VISIBLE", "JOBSIGHT_"))}
    env.update(SLURM_ENV)
    if "FAKE_NVML_CONFIG" not in os.environ:
        from fake_nvml import eight_gpu_config, fake_nvml_env
        env.update(fake_nvml_env(Path(tempfile.mkdtemp(prefix="jobsight-bench-")), eight_gpu_config()))
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)   # LD_LIBRARY_PATH at start-up
    with tempfile.TemporaryDirectory() as d:
        cpu = per_sample(Path(d), args.samples, env)
    times = prolog_epilog(env, args.runs)
    print(f"8 fake GPUs (real pynvml); {args.samples} samples; {args.runs} prolog/epilog runs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name, value in cpu.items():
        print(f"CPU per sample, {name:<40} {value * 1e3:.3f} ms   (target <= 2 ms)")
    for name, values in times.items():
        print(f"{name:<10} median {statistics.median(values) * 1e3:.0f} ms, max {max(values) * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
