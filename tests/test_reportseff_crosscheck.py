"""Cross-check with reportseff (PyPI): the same sacct data through reportseff and through jobsight.

reportseff runs against a `sacct` shim on PATH (fixtures/crosscheck/bin/sacct) that prints the
fixture in the form reportseff asks for (`--parsable -n --delimiter=^|^ --format=... --jobs=...`,
and `--helpformat`), plus a `scontrol show partition` shim. jobsight ingests the same file with
`jobsight ingest`. Per job, CPU, memory and time efficiency are compared:

- where both define a metric the same, they must be equal to reportseff's rounding (0.1 %);
- where they differ, a test names the difference and asserts both values, computed by hand.

reportseff's formulas (reportseff/job.py, 2.10):
  CPUEff  = round(int(TotalCPU) / AllocCPUS / Elapsed x 100, 1)    TotalCPU truncated to whole seconds
  MemEff  = round(max over steps(MaxRSS x NTasks) / ReqMem x 100, 1) ReqMem 'c'/'n' scaled by CPUs/nodes
  TimeEff = round(Elapsed / Timelimit x 100, 1); '---' for UNLIMITED and Partition_Limit (resolved
            from scontrol's MaxTime only when Partition is among the requested columns, which the
            default format does not request)
jobsight's (sql/views/20_job_metrics.sql): cpu_time_s / (elapsed_s x ncpus); peak memory = the largest
step's TRESUsageInTot mem (the sum of that step's task peaks), else MaxRSS x NTasks, over AllocTRES mem
(else ReqMem); elapsed_s / timelimit_s, NULL when unlimited.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, jobsight_cmd, require_service

CROSS = FIXTURES / "crosscheck"
FIXTURE = CROSS / "sacct-crosscheck.txt"
HARNESS = FIXTURES / "slurm" / "harness-sacct.txt"


@pytest.fixture(scope="module")
def reportseff_exe() -> str:
    """reportseff from PyPI, installed into this interpreter's environment when missing."""
    exe = Path(sys.executable).parent / "reportseff"
    if not exe.exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "reportseff"],
                              capture_output=True, text=True, timeout=300)
        require_service(proc.returncode == 0 and exe.exists(),
                        f"reportseff could not be installed from PyPI: {proc.stderr.strip()[-300:]}")
    return str(exe)


def run_reportseff(exe: str, fixture: Path, jobs: list[str]) -> dict[str, dict[str, str]]:
    env = dict(os.environ, PATH=f"{CROSS / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               SACCT_SHIM_FIXTURE=str(fixture))
    proc = subprocess.run([exe, "--parsable", "--format", "JobID,State,CPUEff,MemEff,TimeEff", *jobs],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[0].split("|")
    return {row["JobID"]: row for row in (dict(zip(header, ln.split("|"))) for ln in lines[1:] if ln)}


def ingest(tmp: Path, fixture: Path) -> dict[str, dict]:
    db = tmp / "x.duckdb"
    cmd = jobsight_cmd()
    proc = subprocess.run([*cmd, "ingest", "--db", str(db), "--timezone", "UTC", "--format", "sacct", str(fixture)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and " 0 rejected" in proc.stdout, proc.stdout + proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT * FROM job_metrics")
        names = [d[0] for d in cur.description]
        return {r[names.index("job_id")]: dict(zip(names, r)) for r in cur.fetchall()}
    finally:
        con.close()


def num(text: str) -> float | None:
    return None if text == "---" else float(text)


@pytest.fixture(scope="module")
def both(reportseff_exe, tmp_path_factory):
    jobs = ["101", "102", "103", "104", "105", "106_3", "107"]
    return run_reportseff(reportseff_exe, FIXTURE, jobs), ingest(tmp_path_factory.mktemp("xc"), FIXTURE)


# ------------------------------------------------------------------------------- same definition

# job: (cpu %, mem %, time %) worked out from the fixture's lines; the same in both tools.
SAME = {
    # 7200 s / (4 x 3600); time 3600 / 14400
    "101": (50.0, None, 25.0),
    # 540 / 600; one task: MaxRSS 1 GiB x 1 of 2 GiB (no TRESUsageInTot: jobsight falls back to MaxRSS x NTasks); 600 / 1200
    "102": (90.0, 50.0, 50.0),
    # 120 / 600 (CPU differs: see test_cpu_time_milliseconds); 512000 KiB of 1 GiB = 48.83
    "103": (None, 48.828125, 20.0),
    # 2700 / (2 x 1800); 3 GiB of 4 GiB; no limit -> undefined in both
    "104": (75.0, 75.0, None),
    # 19440 / 21600; 256 MiB of 1 GiB; Partition_Limit -> undefined in both
    "105": (90.0, 25.0, None),
    # array task 106_3 (raw 109): 1200 / (2 x 2400); 2 GiB of 8 GiB (the extern step's 1 MiB is not the max); 2400 / 3600
    "106_3": (25.0, 25.0, 100 * 2400 / 3600),
    # 8 cores on 2 nodes: 3600 / (8 x 900); ReqMem 2000Mc x 8 CPUs = 16000 MiB = AllocTRES mem;
    # step .0: 8 tasks x 1000 MiB MaxRSS = its TRESUsageInTot 8000 MiB (all tasks peaked alike) -> 50 %; 900 / 1800
    "107": (50.0, 50.0, 50.0),
}


@pytest.mark.parametrize("job", list(SAME))
def test_same_definition_same_numbers(both, job):
    rs, js = both
    cpu, mem, time_ = SAME[job]
    r, m = rs[job], js[job]
    if cpu is not None:
        assert m["cpu_eff_pct"] == pytest.approx(cpu) and num(r["CPUEff"]) == round(cpu, 1)
    if mem is not None:
        assert m["mem_eff_pct"] == pytest.approx(mem) and num(r["MemEff"]) == round(mem, 1)
    if time_ is None:
        assert m["time_eff_pct"] is None and r["TimeEff"] == "---"
    else:
        assert m["time_eff_pct"] == pytest.approx(time_) and num(r["TimeEff"]) == round(time_, 1)


# --------------------------------------------------------------------------------- named differences

def test_memory_multi_task_step_maxrss_times_ntasks_vs_tresusageintot(both):
    """Job 101, step .0: 4 tasks, the largest peaked at 2 GiB (MaxRSS), the four peaks sum to 6 GiB
    (TRESUsageInTot mem). reportseff assumes every task peaked like the largest: 2 GiB x 4 = 8 GiB
    of 16 GiB = 50.0 %. jobsight takes the measured sum: 6 GiB of 16 GiB = 37.5 %."""
    rs, js = both
    assert num(rs["101"]["MemEff"]) == 50.0
    assert js["101"]["mem_eff_pct"] == pytest.approx(37.5)
    assert js["101"]["mem_peak_bytes"] == 6 * 2**30


def test_cpu_time_milliseconds(both):
    """Job 103: TotalCPU 01:05.500 on 1 core for 120 s. reportseff truncates TotalCPU to whole seconds:
    65 / 120 = 54.2 %; jobsight keeps the milliseconds: 65.5 / 120 = 54.583 % (54.6 rounded)."""
    rs, js = both
    assert num(rs["103"]["CPUEff"]) == 54.2
    assert js["103"]["cpu_eff_pct"] == pytest.approx(100 * 65.5 / 120)


# --------------------------------------------------------------- real harness output (fixtures/slurm)

def test_real_harness_time_and_memory_agree(reportseff_exe, tmp_path):
    """The real Slurm 22.05 dump: every job both tools give a time efficiency for agrees; memory agrees
    for every job whose steps all ran one task (MaxRSS x 1 = TRESUsageInTot mem there)."""
    lines = HARNESS.read_text().splitlines()
    header = lines[0].split("|")
    rows = [dict(zip(header, ln.split("|"))) for ln in lines[1:] if ln]
    jobs = sorted({r["JobID"].split(".")[0] for r in rows if "." not in r["JobID"] and "|" not in r["JobName"]})
    rs = run_reportseff(reportseff_exe, HARNESS, jobs)
    js = ingest(tmp_path, HARNESS)
    compared_time = compared_mem = 0
    for job in jobs:
        if job not in rs or job not in js or rs[job]["State"] == "PENDING":
            continue
        r, m = rs[job], js[job]
        if num(r["TimeEff"]) is not None:
            assert round(m["time_eff_pct"], 1) == num(r["TimeEff"]), job
            compared_time += 1
        steps = [s for s in rows if s["JobID"].startswith(job + ".")]
        if num(r["MemEff"]) is not None and steps and all(s["NTasks"] in ("", "1") for s in steps):
            assert round(m["mem_eff_pct"], 1) == num(r["MemEff"]), job
            compared_mem += 1
    # most harness jobs run without a time limit (UNLIMITED / Partition_Limit): only the timeout job has one
    assert compared_time >= 1 and compared_mem >= 3, (compared_time, compared_mem)
