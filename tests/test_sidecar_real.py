"""The issue's real check: one allocated core (taskset), a busy command reads busy, a sleeping one idle.

About 9 s in total: the durations are the issue's. Outside a job this exercises the psutil path with
allocated cores = CPU affinity = 1.
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

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 4: pass"


def jobsight() -> list[str]:
    exe = Path(sys.executable).parent / "jobsight"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "analytics.cli"]


def cpu_utils(out: Path) -> list[float]:
    (path,) = out.glob("jobsight-*.csv")
    with path.open() as f:
        return [float(r["util_pct"]) for r in csv.DictReader(f) if r["device"] == "cpu" and r["util_pct"] != ""]


@pytest.mark.parametrize("command,check", [
    (["python3", "-c", BUSY], lambda mean: mean >= 80),
    (["sleep", "4"], lambda mean: mean <= 10),
])
def test_one_core_busy_and_idle(tmp_path, command, check):
    require_service(shutil.which("taskset") is not None, "taskset (util-linux) is needed")
    out = tmp_path / "out"
    res = subprocess.run(["taskset", "-c", "0", *jobsight(), "sidecar", "run", "--interval", "0.5",
                          "--out", str(out), "--", *command], cwd=ROOT, env=clean_env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    utils = cpu_utils(out)
    assert len(utils) >= 6
    mean = sum(utils) / len(utils)
    assert check(mean), (mean, utils)
