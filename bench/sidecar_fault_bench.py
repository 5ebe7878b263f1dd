"""Sidecar under fault: figures for docs/reliability.md (prints figures; not a test).

    .venv/bin/python bench/sidecar_fault_bench.py [--trials 20] [--procs 2000 10000]

1. The wrapped job, bare vs under `jobsight sidecar run --interval 0.2`, alternating, seeded:
   exit codes equal?, the wall time seen by the caller, the job's own runtime (it times a fixed
   piece of CPU work itself, so a sidecar stealing CPU would show there), and the sidecar's own CPU
   time (children's rusage of the wrapped run minus the bare run's: not disturbed by machine load).
2. A job tree of N processes (tests/reliability/test_rel_sidecar.py TREE_JOB: N sleeps under N/100
   shells): one read of the tree by each process-tree reader in this process (psutil, the default
   where psutil is installed, vs the standard-library /proc reader), wall and CPU; then the real
   sidecar wrapping that job (run_tree from the same test): its CPU per sample and row spacing.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tests", ROOT / "tests" / "reliability"):
    sys.path.insert(0, str(p))

from test_rel_sidecar import SIDECAR, TREE_JOB, kill_group, run_tree  # noqa: E402
from test_sidecar_run import clean_env  # noqa: E402

# Fixed CPU work, timed by the job itself; then a sleep; exit with the code given.
JOB = ("import sys, time\nt = time.perf_counter()\nx = 0\nfor i in range(3_000_000): x += i\n"
       "print(f'{time.perf_counter() - t:.4f}')\ntime.sleep(float(sys.argv[1]))\nsys.exit(int(sys.argv[2]))\n")


def overhead(trials: int, tmp: Path) -> None:
    rng = random.Random(8101)
    walls, own, codes_equal = {"bare": [], "sidecar": []}, {"bare": [], "sidecar": []}, 0
    cpu = {"bare": [], "sidecar": []}  # CPU of the whole run (job + sidecar), from the children's rusage
    for trial in range(trials):
        code, secs = rng.choice((0, 1, 7, 42)), rng.uniform(0.2, 0.8)
        job = [sys.executable, "-c", JOB, f"{secs:.3f}", str(code)]
        got = {}
        for kind in (("bare", "sidecar") if trial % 2 == 0 else ("sidecar", "bare")):
            cmd = job if kind == "bare" else [*SIDECAR, "run", "--interval", "0.2", "--gpus", "none", "--out",
                                              str(tmp / f"o{trial}"), "--", *job]
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            res = subprocess.run(cmd, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120)
            walls[kind].append(time.perf_counter() - t)
            ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[kind].append(ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime)
            own[kind].append(float(res.stdout.split()[0]))
            got[kind] = res.returncode
        codes_equal += got["bare"] == got["sidecar"] == code
    extra = [s - b for s, b in zip(walls["sidecar"], walls["bare"])]
    slow = [s - b for s, b in zip(own["sidecar"], own["bare"])]
    side_cpu = [s - b for s, b in zip(cpu["sidecar"], cpu["bare"])]

    def ms(v):
        return f"{statistics.median(v) * 1000:+.0f} ms median, {max(v) * 1000:+.0f} ms max"
    print(f"wrapped job: {trials} trials, exit code equal to bare in {codes_equal}/{trials}")
    print(f"  caller's wall time, sidecar minus bare: {ms(extra)} "
          f"(bare median {statistics.median(walls['bare']):.2f} s)")
    print(f"  job's own runtime of its CPU work, sidecar minus bare: {ms(slow)} "
          f"(bare median {statistics.median(own['bare']) * 1000:.0f} ms)")
    print(f"  the sidecar's own CPU per run (start-up, samples every 0.2 s, exit), sidecar minus bare: {ms(side_cpu)}")


def reader_costs(groups: int, per: int, tmp: Path) -> None:
    from jobsight.collector import procs
    ready, go = tmp / f"ready{groups}", tmp / f"go{groups}"
    job = subprocess.Popen([sys.executable, "-c", TREE_JOB, str(groups), str(per), str(ready), str(go)],
                           start_new_session=True)
    try:
        t = time.perf_counter()
        while not ready.exists():
            if job.poll() is not None or time.perf_counter() - t > 900:
                raise SystemExit("tree job failed")
            time.sleep(0.1)
        print(f"{1 + groups + groups * per} processes spawned in {time.perf_counter() - t:.1f} s")
        for name, cls in (("psutil", procs.ProcessTree), ("/proc", procs.ProcfsTree)):
            reader = cls(job.pid)
            walls, cpus = [], []
            for _ in range(4):
                w, c = time.perf_counter(), time.process_time()
                _cpu, rss, n = reader.read()
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
            print(f"  {name:6} reader: {n} processes, RSS sum {rss / 2**30:.2f} GiB, per read "
                  f"{statistics.median(cpus) * 1000:.0f} ms CPU, {statistics.median(walls) * 1000:.0f} ms wall (median of 4)")
        go.touch()
        job.wait(timeout=300)
    finally:
        kill_group(job.pid)
        job.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--procs", type=int, nargs="*", default=[2000, 10000], help="sleeps in the tree (multiples of 100)")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.trials:
            overhead(args.trials, tmp)
        for n in args.procs:
            groups = n // 100
            sub = tmp / f"tree{n}"
            sub.mkdir()
            reader_costs(groups, 100, sub)
            interval = 1.0 if n <= 2000 else 2.0
            fig = run_tree(sub, groups, 100, interval)
            print(f"  sidecar run --interval {interval}: exit code {fig['returncode']} (job's: 7), "
                  f"{fig['cpu_ms_per_sample']:.0f} ms CPU per sample, one row per {fig['s_per_row']:.2f} s, "
                  f"RSS column {statistics.median(fig['hold_rss']) / 2**30:.2f} GiB vs "
                  f"{fig['rss_now'] / 2**30:.2f} GiB summed from /proc/*/status")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
