"""The issue's real check: one allocated core (taskset), a busy command reads busy, a sleeping one idle.

About 9 s in total: the durations are the issue's. Outside a job this exercises the psutil path with
allocated cores = CPU affinity = 1.

The development machine is shared, and when other work runs on core 0 the busy loop really gets
less than the whole core (nice does not help across sessions with autogroup scheduling). So the busy
command also reports the CPU share it actually got, and the test checks the sidecar against that
ground truth; the issue's absolute ">= 80" is asserted whenever the core was really available.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, require_service
from test_sidecar_run import clean_env

BUSY = ("import sys, time\nt, c = time.time(), time.process_time()\nwhile time.time() - t < 4: pass\n"
        "open(sys.argv[1], 'w').write(f'{(time.process_time() - c) / (time.time() - t) * 100}')")


def jobsight() -> list[str]:
    exe = Path(sys.executable).parent / "jobsight"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]


def run_on_core0(tmp_path: Path, command: list[str]) -> list[float]:
    require_service(shutil.which("taskset") is not None, "taskset (util-linux) is needed")
    out = tmp_path / "out"
    res = subprocess.run(["taskset", "-c", "0", *jobsight(), "sidecar", "run", "--interval", "0.5",
                          "--out", str(out), "--", *command], cwd=ROOT, env=clean_env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (path,) = out.glob("jobsight-*.csv")
    with path.open() as f:
        return [float(r["util_pct"]) for r in csv.DictReader(f) if r["device"] == "cpu" and r["util_pct"] != ""]


def test_busy_loop_on_one_core(tmp_path):
    # The sidecar must agree with the loop's own measured share of core 0 on every try. The issue's
    # absolute ">= 80" needs core 0 free for the loop: up to three tries for a quiet moment, then a
    # skip that says so (other work on a shared machine, not the sidecar, decides that share).
    for attempt in range(3):
        run_dir = tmp_path / f"try{attempt}"
        run_dir.mkdir()
        share_file = run_dir / "share"
        utils = run_on_core0(run_dir, ["python3", "-c", BUSY, str(share_file)])
        truth = float(share_file.read_text())  # % of core 0 the loop actually got
        assert len(utils) >= 6
        mean = sum(utils) / len(utils)
        assert abs(mean - truth) <= 10, (mean, truth, utils)
        if truth >= 90:
            assert mean >= 80, (mean, utils)
            return
    pytest.skip(f"sidecar agreed with the loop's real share each time (last {mean:.0f} vs {truth:.0f} %), but "
                "core 0 was busy with other work, so the issue's >= 80 % could not be checked")


def test_sleep_on_one_core(tmp_path):
    utils = run_on_core0(tmp_path, ["sleep", "4"])
    assert len(utils) >= 6
    assert sum(utils) / len(utils) <= 10, utils
