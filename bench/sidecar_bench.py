"""Sidecar benchmark (prints figures; not a test).

    .venv/bin/python bench/sidecar_bench.py [--samples 500]

Measures, with 8 GPUs from the fake libnvidia-ml.so.1 (tests/fake_nvml, loaded by the real pynvml;
an in-process fake GpuSource if gcc is missing) and a fake Slurm cgroup v2 tree:
  - CPU time per sample (cpu row from cgroup files + 8 GPU rows + one CSV write each)
  - the same on the psutil fallback path (this process tree), for comparison
  - startup to first row of a real `python -m jobsight.collector` process
  - RSS of that process while sampling
  - SIGTERM to exit
  - overhead at --interval 10 over 10 minutes as a fraction of one core
The fake NVML answers in microseconds; a real driver adds ~10-20 us per call (docs/sidecar.md),
about 1 ms per sample for 8 GPUs, so the GPU share here is a lower bound.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SLURM_ENV = {"SLURM_JOB_ID": "123", "SLURM_CLUSTER_NAME": "bench", "SLURMD_NODENAME": "node1"}


def fake_cgroup(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "cgroup"
    job = root / "system.slice" / "slurmstepd.scope" / "job_123"
    (job / "step_batch" / "user" / "task_0").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (job / "cpu.stat").write_text("usage_usec 90000000\nuser_usec 80000000\nsystem_usec 10000000\n"
                                  "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
    (job / "memory.current").write_text("1073741824\n")
    (job / "memory.peak").write_text("3221225472\n")
    (job / "memory.max").write_text("8589934592\n")
    (job / "cpuset.cpus.effective").write_text("0-15\n")
    proc = tmp / "proc_self_cgroup"
    proc.write_text("0::/system.slice/slurmstepd.scope/job_123/step_batch/user/task_0\n")
    return root, proc


class FakeGpus:
    """Stand-in with 8 devices when the fake NVML cannot be built."""
    devices = [{"uuid": f"GPU-{i:08d}", "index": i, "name": "Fake", "mig": False, "parent_uuid": None} for i in range(8)]

    def sample(self):
        return [{"device": d["uuid"], "util_pct": 93, "mem_used_bytes": 40 << 30, "mem_total_bytes": 80 << 30,
                 "gpu_index": d["index"], "power_w": 350.0, "energy_j": 123456.789, "sm_clock_mhz": 1410,
                 "temperature_c": 65, "sm_active_pct": 71.5} for d in self.devices]

    def meta(self):
        return {"gpu_method": "fake", "driver_version": None, "nvml_version": None, "gpus": self.devices}

    def close(self):
        pass


def per_sample_cpu(tmp: Path, n: int, env: dict[str, str]) -> dict[str, float]:
    """In this process: CPU seconds per sample, cgroup + 8 GPUs, and psutil + 8 GPUs."""
    from jobsight.collector import cgroup, csv_schema, jobenv, sidecar, writer
    from jobsight.collector.gpus import open_gpus

    gpus = open_gpus(env, "auto", 10.0) if os.environ.get("FAKE_NVML_CONFIG") else None
    method = "fake NVML (real pynvml)" if gpus is not None else "in-process fake GpuSource"
    gpus = gpus or FakeGpus()
    root, proc = fake_cgroup(tmp)
    job = jobenv.detect_job(SLURM_ENV)
    results = {}
    for name, cpu in (("cgroup", sidecar.CgroupCpu(cgroup.find_job_cgroup("slurm", "123", str(root), proc.read_text()))),
                      ("psutil", None)):
        if cpu is None:
            from jobsight.collector import procs
            cpu = sidecar.PsutilCpu(procs.ProcessTree(os.getppid()), None)
        out = writer.CsvWriter(str(tmp / f"bench-{name}.csv"), csv_schema.COLUMNS)
        s = sidecar.Sampler(job, cpu, 16, gpus, out, sidecar.Problems())
        s.baseline()
        for _ in range(20):  # warm up
            s.sample()
        t0 = time.process_time()
        for _ in range(n):
            s.sample()
        results[name] = (time.process_time() - t0) / n
        out.close()
    gpus.close()
    results["gpu_method"] = method
    return results


def run_sidecar_process(tmp: Path, env: dict[str, str], interval: float) -> tuple[subprocess.Popen, Path]:
    root, proc = fake_cgroup(tmp)
    out = tmp / "out"
    cmd = [sys.executable, "-m", "jobsight.collector", "--interval", str(interval), "--out", str(out),
           "--cgroup-root", str(root), "--proc-cgroup", str(proc)]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    return p, out


def first_row_latency(env: dict[str, str], runs: int = 5) -> tuple[list[float], list[float]]:
    """Wall time from spawn to the first data row, and the CPU time the process had used by then
    (the wall figure depends on how busy the machine is; the CPU figure hardly does)."""
    import psutil
    lat, cpu = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            p, out = run_sidecar_process(Path(d), env, 10.0)
            ps = psutil.Process(p.pid)
            while True:
                files = list(out.glob("*.csv")) if out.exists() else []
                if files and files[0].read_bytes().count(b"\n") >= 2:
                    lat.append(time.monotonic() - t0)
                    t = ps.cpu_times()
                    cpu.append(t.user + t.system)
                    break
                if time.monotonic() - t0 > 10:
                    raise SystemExit("no first row within 10 s")
                time.sleep(0.001)
            p.terminate()
            p.wait()
    return lat, cpu


def process_figures(env: dict[str, str]) -> dict[str, float]:
    """A real sidecar process at --interval 0.02 for ~4 s: RSS, CPU per sample incl. loop, SIGTERM to exit.
    (/proc counts CPU in 10 ms ticks, so the per-sample figure needs a few hundred samples.)"""
    import psutil
    with tempfile.TemporaryDirectory() as d:
        p, out = run_sidecar_process(Path(d), env, 0.02)
        ps = psutil.Process(p.pid)
        time.sleep(1.0)
        c0 = ps.cpu_times()
        n0 = sum(1 for _ in (next(out.glob("*.csv"))).open())
        time.sleep(3.0)
        c1 = ps.cpu_times()
        n1 = sum(1 for _ in (next(out.glob("*.csv"))).open())
        rss = ps.memory_info().rss
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait()
        stop = time.monotonic() - t0
        startup_cpu = c0.user + c0.system  # includes ~1 s of sampling; an upper bound for start-up
        samples = (n1 - n0) / 9  # 9 rows per sample (cpu + 8 GPUs)
        per_sample = ((c1.user + c1.system) - (c0.user + c0.system)) / samples if samples else float("nan")
        err = p.stderr.read()
        return {"rss": rss, "per_sample_loop": per_sample, "stop": stop, "startup_cpu": startup_cpu, "stderr": err}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=500)
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "LSB_", "CUDA_VISIBLE"))}
    env.update(SLURM_ENV)
    if "FAKE_NVML_CONFIG" not in os.environ:
        try:
            from fake_nvml import eight_gpu_config, fake_nvml_env
            tmpconf = Path(tempfile.mkdtemp(prefix="jobsight-bench-"))
            env.update(fake_nvml_env(tmpconf, eight_gpu_config()))
            # LD_LIBRARY_PATH only reaches the loader at start-up: re-run this script with it.
            os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
        except Exception as exc:  # no gcc: in-process fake
            print(f"(fake NVML unavailable: {exc}; using an in-process fake GpuSource)")

    with tempfile.TemporaryDirectory() as d:
        inproc = per_sample_cpu(Path(d), args.samples, env)
    lat, start_cpu = first_row_latency(env)
    proc = process_figures(env)
    per10 = proc["per_sample_loop"]
    overhead_10min = (proc["startup_cpu"] + 60 * per10) / 600.0

    load = os.getloadavg()[0]
    print(f"GPUs: 8 via {inproc['gpu_method']}; cgroup: fake Slurm v2 tree; {args.samples} samples; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs (wall-clock figures grow with load)")
    rows = [
        ("CPU time per sample, cgroup + 8 GPUs (in-process)", "<= 2 ms", f"{inproc['cgroup'] * 1e3:.3f} ms"),
        ("CPU time per sample, psutil + 8 GPUs (in-process)", "(info)", f"{inproc['psutil'] * 1e3:.3f} ms"),
        ("CPU time per sample incl. loop (real process)", "<= 2 ms", f"{per10 * 1e3:.3f} ms"),
        ("startup to first row (median of 5)", "<= 300 ms",
         f"{statistics.median(lat) * 1e3:.0f} ms (min {min(lat) * 1e3:.0f}, max {max(lat) * 1e3:.0f})"),
        ("CPU time used by the first row (median of 5)", "(info)", f"{statistics.median(start_cpu) * 1e3:.0f} ms"),
        ("RSS while sampling", "<= 40 MB", f"{proc['rss'] / 2**20:.1f} MB"),
        ("SIGTERM to exit", "<= 1 s", f"{proc['stop'] * 1e3:.0f} ms"),
        ("overhead at --interval 10, steady state", "< 0.1 % core", f"{per10 / 10 * 100:.4f} %"),
        ("overhead at --interval 10 over 10 min incl. start-up", "< 0.1 % core", f"{overhead_10min * 100:.4f} %"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'target':<13}  measured")
    for name, target, value in rows:
        print(f"{name:<{w}}  {target:<13}  {value}")
    if proc["stderr"]:
        print("sidecar stderr:", proc["stderr"].strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
