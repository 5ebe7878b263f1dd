"""psutil fallback on real processes: CPU time and RSS of a process tree, and of a job's processes."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobsight.collector import procs

# Burns a fixed amount of CPU time (not wall time, so a loaded machine only makes it slower),
# optionally holds memory, reports "ready", then waits for stdin to close.
BURNER = r"""
import sys, time, subprocess
cpu = float(sys.argv[1]); mb = int(sys.argv[2]); child = sys.argv[3] == "1"
kid = None
if child:
    kid = subprocess.Popen([sys.executable, "-c", sys.argv[4], str(cpu), "0", "0", ""],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    kid.stdout.readline()
hold = bytearray(mb * 1024 * 1024)
for i in range(0, len(hold), 4096):
    hold[i] = 1
while time.process_time() < cpu:
    pass
print("ready", flush=True)
sys.stdin.read()
if kid:
    kid.stdin.close(); kid.wait()
"""


def start(cpu: float, mb: int, child: bool, env=None) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", BURNER, str(cpu), str(mb), "1" if child else "0", BURNER],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    return p


def stop(p: subprocess.Popen) -> None:
    p.stdin.close()
    p.wait(timeout=30)


TREES = [procs.ProcessTree, procs.ProcfsTree]
JOBS = [procs.JobProcesses, procs.ProcfsJobProcesses]


@pytest.mark.parametrize("tree_cls", TREES)
def test_tree_sums_cpu_and_rss_of_child_and_grandchild(tree_cls):
    p = start(0.3, 40, child=True)
    try:
        tree = tree_cls(p.pid)
        cpu, rss, n = tree.read()
        assert n == 2
        # 0.3 s of CPU in each of two processes; /proc counts in 10 ms ticks.
        assert 0.58 <= cpu <= 0.8
        assert rss >= 40 * 1024 * 1024
    finally:
        stop(p)


@pytest.mark.parametrize("tree_cls", TREES)
def test_cpu_counter_never_goes_down_when_a_process_exits(tree_cls):
    p = start(0.2, 0, child=False)
    tree = tree_cls(p.pid)
    before, _, n_before = tree.read()
    stop(p)
    after, rss, n_after = tree.read()
    assert (n_before, n_after) == (1, 0)
    assert after == before and rss == 0


@pytest.mark.parametrize("job_cls", JOBS)
def test_job_processes_selected_by_environment(job_cls):
    env = dict(os.environ, SLURM_JOB_ID="jobsight-test-424242")
    p = start(0.2, 0, child=False, env=env)
    other = start(0.1, 0, child=False)
    try:
        cpu, _, n = job_cls("SLURM_JOB_ID", "jobsight-test-424242").read()
        assert n == 1
        assert 0.19 <= cpu <= 0.3
    finally:
        stop(p)
        stop(other)


def test_procfs_stat_parsing_survives_odd_command_names(tmp_path):
    # /proc/<pid>/stat of a process named "a) b": the name is split off at the LAST ')'.
    fields = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", "250", "50", "0", "0", "20", "0", "1", "0",
              "777", "100000", "3"]
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (a) b) " + " ".join(fields) + "\n")
    ppid, cpu, rss, start = procs._proc_stat(42, str(tmp_path))
    assert (ppid, start) == (1, 777)
    assert cpu == (250 + 50) / os.sysconf("SC_CLK_TCK")
    assert rss == 3 * os.sysconf("SC_PAGE_SIZE")
