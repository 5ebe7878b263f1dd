"""Sidecar logic in-process: CPU percentage, deadlines, rows, argument parsing."""
from __future__ import annotations

import pytest

from jobsight.collector import csv_schema, jobenv, sidecar


def test_cpu_util_pct_is_share_of_allocated_cores():
    assert sidecar.cpu_util_pct(2.0, 1.0, 4) == 50.0      # 2 of 4 cores busy
    assert sidecar.cpu_util_pct(10.0, 10.0, 1) == 100.0
    assert sidecar.cpu_util_pct(0.5, 10.0, 2) == 2.5
    assert sidecar.cpu_util_pct(-1.0, 1.0, 2) == 0.0       # a counter reset never goes negative


def test_deadlines_stay_on_the_grid_and_skip_missed_ones():
    assert sidecar.next_deadline(100.0, 10.0, 99.0) == 100.0
    assert sidecar.next_deadline(100.0, 10.0, 100.0) == 110.0
    assert sidecar.next_deadline(100.0, 10.0, 103.7) == 110.0
    assert sidecar.next_deadline(100.0, 10.0, 135.2) == 140.0  # 110, 120, 130 were missed: no burst


def test_iso_utc():
    assert sidecar.iso_utc(1763719200.1234) == "2025-11-21T10:00:00.123Z"


class FakeCpu:
    method = "cgroup-v2"
    cgroup_path = "/x/job_1"

    def __init__(self, readings):
        self.readings = list(readings)

    def read(self):
        return self.readings.pop(0)


class FakeGpus:
    devices = [{"uuid": "GPU-a", "index": 0}]

    def sample(self):
        return [{"device": "GPU-a", "util_pct": 97, "mem_used_bytes": 1000, "mem_total_bytes": 4000, "gpu_index": 0,
                 "power_w": 250.5, "energy_j": 1234.5, "sm_clock_mhz": 1410, "temperature_c": 61, "sm_active_pct": None}]


class ListOut:
    def __init__(self):
        self.rows = []

    def write_row(self, row):
        self.rows.append(row)
        return True


def test_sampler_rows_from_counter_deltas():
    clock = iter([0.0, 10.0, 20.0])
    readings = [sidecar.CpuReading(100.0, 1, 8, 1),
                sidecar.CpuReading(120.0, 3 << 30, 8 << 30, 4 << 30),   # 20 s CPU in 10 s on 4 cores
                sidecar.CpuReading(121.0, 2 << 30, 8 << 30, 5 << 30)]   # 1 s CPU in 10 s
    job = jobenv.JobInfo("123", "clu", "n1", "slurm", None, None)
    out = ListOut()
    s = sidecar.Sampler(job, FakeCpu(readings), 4, FakeGpus(), out, sidecar.Problems(),
                        clock=lambda: next(clock), wallclock=lambda: 1763719200.0)
    s.baseline()
    s.sample()
    s.sample()
    cpu_rows = [r for r in out.rows if r["device"] == "cpu"]
    assert [r["util_pct"] for r in cpu_rows] == [50.0, 2.5]
    assert (cpu_rows[0]["mem_used_bytes"], cpu_rows[0]["mem_total_bytes"]) == (3 << 30, 8 << 30)
    assert s.mem_peak == 5 << 30
    gpu_rows = [r for r in out.rows if r["device"] == "GPU-a"]
    assert len(gpu_rows) == 2
    assert gpu_rows[0]["job_id"] == "123" and gpu_rows[0]["cluster"] == "clu" and gpu_rows[0]["host"] == "n1"
    assert gpu_rows[0]["time"] == cpu_rows[0]["time"] == "2025-11-21T10:00:00.000Z"
    assert set(gpu_rows[0]) <= set(csv_schema.COLUMNS)


def test_sampler_survives_a_failing_cpu_read(capsys):
    class Broken:
        method = "psutil"

        def read(self):
            raise RuntimeError("boom")

    out = ListOut()
    s = sidecar.Sampler(jobenv.JobInfo("1", "", "h", "none", None, None), Broken(), 1, None, out, sidecar.Problems())
    s.baseline()
    s.sample()
    s.sample()
    assert [r["util_pct"] for r in out.rows] == [None, None]
    assert capsys.readouterr().err.count("boom") == 1  # one line per distinct problem


def test_parse_args_modes():
    a = sidecar.parse_args(["--interval", "2", "--out", "D"])
    assert (a.wrapper, a.interval, a.out, a.cmd, a.gpus) == (False, 2.0, "D", [], "auto")
    a = sidecar.parse_args(["run", "--interval", "0.5", "--gpus", "none", "--", "python", "-u", "x.py", "--out", "y"])
    assert (a.wrapper, a.interval, a.cmd, a.out) == (True, 0.5, ["python", "-u", "x.py", "--out", "y"], ".")


@pytest.mark.parametrize("argv", [["run"], ["run", "--"], ["--interval", "0"], ["--interval", "-1"], ["--gpus", "x"]])
def test_bad_arguments_exit_2(argv, capsys):
    assert sidecar.main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_output_stem_never_collides_across_hosts_and_restarts():
    job = jobenv.JobInfo("4243", "snellius", "gcn12", "slurm", None, None)
    assert sidecar.output_stem(job, 1763719200.0, 777) == "jobsight-snellius-4243-gcn12-20251121T100000Z-777"
    local = jobenv.JobInfo("local-5", "", "vm", "none", None, None)
    assert sidecar.output_stem(local, 1763719200.0, 5) == "jobsight-nocluster-local-5-vm-20251121T100000Z-5"
