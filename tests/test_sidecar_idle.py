"""The sidecar's idle alert: IdleWatch driven with an injected clock (hours of job time in
microseconds), its settings from jobsight.toml, and the whole sidecar over the fake NVML."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, require_service
from test_sidecar_run import clean_env, meta, sidecar, wait_rows

from jobsight.analytics.config import DEFAULT_FLAGS
from jobsight.collector import idle_settings
from jobsight.collector.idle import IdleWatch, cancel_argv
from jobsight.collector.idle_settings import IDLE_PCT_DEFAULT, IdleSettings
from jobsight.collector.problems import Problems

G0 = "GPU-00000000-aaaa-4000-8000-000000000000"
G1 = "GPU-11111111-bbbb-4000-8000-000000000001"
MIN = 60.0


def rows(*utils) -> list[dict]:
    return [{"device": g, "gpu_index": i, "util_pct": u} for i, (g, u) in enumerate(zip((G0, G1), utils))]


class Run:
    """An IdleWatch fed samples every `step` seconds of fake time; what it wrote, ran and cancelled."""

    def __init__(self, alert_min=30.0, step=10.0, price=None, on_idle=None, cancel_min=0.0, env=None, cancel_code=0,
                 emit_ok=True, spawn=None, job_id="4242"):
        self.lines: list[str] = []
        self.cancels: list[list[str]] = []
        self.problems = Problems(stream=io.StringIO())
        self.t, self.step = 1000.0, step

        def emit(line):
            self.lines.append(line)
            return emit_ok

        def run(argv, env):
            self.cancels.append(argv)
            return cancel_code, "" if cancel_code == 0 else "scancel: error: Kill job error on job id 4242: Access denied"
        self.watch = IdleWatch(job_id, alert_min * MIN, IdleSettings(price=price, where="partition gpu_a100"),
                               self.problems, env if env is not None else {"SLURM_JOB_ID": "4242"},
                               on_idle=on_idle, cancel_s=cancel_min * MIN, emit=emit, run=run, **({"spawn": spawn} if spawn else {}))

    def feed(self, minutes: float, *utils) -> None:
        end = self.t + minutes * MIN
        while self.t < end - 1e-9:
            self.t += self.step
            self.watch.observe(self.t, rows(*utils))

    def finish(self) -> None:
        self.watch.finish(self.t)


def test_idle_for_n_minutes_gives_exactly_one_line():
    r = Run(alert_min=30)
    r.feed(29.5, 0)
    assert r.lines == []
    r.feed(15, 0)
    assert len(r.lines) == 1
    line = r.lines[0]
    assert line.startswith("jobsight sidecar: job 4242: GPU 0 (" + G0 + ") idle for 30 min (under 1 % utilisation)")
    assert "costs" not in line      # no charging settings, no price


def test_a_busy_gpu_gets_no_line_and_no_summary():
    r = Run(alert_min=30)
    r.feed(180, 55)
    r.finish()
    assert r.lines == []


def test_under_the_threshold_only():
    r = Run(alert_min=30)
    r.watch.settings.idle_pct = 5
    r.feed(40, 5)            # 5 % is not under 5 %
    assert r.lines == []
    r.feed(40, 4.9)
    assert len(r.lines) == 1


def test_repeats_hourly_while_idle():
    r = Run(alert_min=30)
    r.feed(3 * 60, 0)
    assert len(r.lines) == 3           # at 30, 90 and 150 minutes
    assert "idle for 30 min" in r.lines[0]
    assert "still idle for 90 min" in r.lines[1] and "still idle for 150 min" in r.lines[2]


def test_at_most_hourly_across_interrupted_idle_runs():
    r = Run(alert_min=30)
    r.feed(31, 0)
    r.feed(1, 80)            # busy for a minute: a new idle run starts after it
    r.feed(45, 0)            # 45 min idle again, but only 46 min since the first line
    assert len(r.lines) == 1
    r.feed(20, 0)            # an hour after the first line, 58 min into the new run
    assert len(r.lines) == 2 and "still idle for 58 min" in r.lines[1]


def test_per_gpu_and_readings_without_utilisation_are_no_evidence():
    r = Run(alert_min=30)
    r.feed(40, 70, 0)
    assert len(r.lines) == 1 and f"GPU 1 ({G1})" in r.lines[0]
    r2 = Run(alert_min=30)
    r2.feed(120, None)     # a MIG instance or a lost GPU: no utilisation
    assert r2.lines == []


def test_price_and_summary():
    r = Run(alert_min=30, price=128)
    r.feed(60, 0, 80)
    r.feed(60, 80, 80)
    r.finish()
    assert len(r.lines) == 2
    assert r.lines[0].endswith("; an idle GPU costs 128 SBU per hour (partition gpu_a100)")
    summary = r.lines[1]
    assert summary.startswith("jobsight sidecar: job 4242: idle summary: GPU 0 (" + G0 + ") idle 60 of 120 min")
    assert G1 not in summary                        # never idle: not listed
    assert summary.endswith("1.00 idle GPU-hours, about 128 SBU")
    m = r.watch.meta()
    assert (m["idle_alerts"], m["idle_gpu_hours"], m["idle_pct"], m["idle_alert_min"]) == (1, pytest.approx(1.0, abs=0.01), 1.0, 30)


def test_on_idle_runs_once_with_the_job_and_gpu_in_its_environment(tmp_path):
    out = tmp_path / "env.txt"
    # data reaches the command only through the environment: a job id full of shell syntax stays inert
    evil = "4242$(touch " + str(tmp_path / "pwned") + ")"
    r = Run(alert_min=30, on_idle=["sh", "-c", f'env > "{out}"'], job_id=evil)
    r.feed(3 * 60, 0)
    assert len(r.lines) == 3 and r.watch.on_idle_state in ("started", "exited 0")   # once, not per line
    deadline = time.monotonic() + 10
    while not (out.exists() and "JOBSIGHT_IDLE_MINUTES" in out.read_text()):
        assert time.monotonic() < deadline, "the --on-idle command never ran"
        time.sleep(0.02)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if line.startswith("JOBSIGHT_"))
    assert env == {"JOBSIGHT_JOB_ID": evil, "JOBSIGHT_GPU_INDEX": "0", "JOBSIGHT_GPU_UUID": G0, "JOBSIGHT_IDLE_MINUTES": "30"}
    assert not (tmp_path / "pwned").exists()
    if r.watch.on_idle_proc is not None:
        r.watch.on_idle_proc.wait(10)
    r.finish()
    assert r.watch.on_idle_state == "exited 0"


def test_on_idle_command_missing_is_a_problem_not_an_error():
    r = Run(alert_min=30, on_idle=["/nonexistent/notify-me", "x"])
    r.feed(40, 0)
    assert r.watch.on_idle_state.startswith("failed: ")
    assert "--on-idle /nonexistent/notify-me could not be run" in r.problems.stream.getvalue()
    assert len(r.lines) == 1 and len(r.problems.lines) == 1


def test_stderr_that_cannot_be_written_is_recorded(monkeypatch):
    r = Run(alert_min=30, emit_ok=False)
    r.feed(40, 0)
    assert r.problems.lines == ["jobsight sidecar: the idle alert could not be written to stderr"]
    from jobsight.collector import problems
    monkeypatch.setattr(sys, "stderr", None)
    assert problems.stderr_line("x") is False


def test_idle_cancel_after_further_idleness_of_every_gpu():
    r = Run(alert_min=30, cancel_min=15, env={"SLURM_JOB_ID": "4242"}, job_id="what --job-id said")
    r.feed(40, 0, 0)
    assert r.cancels == []
    r.feed(10, 0, 0)
    assert r.cancels == [["scancel", "4242"]]       # the scheduler's id, never --job-id
    assert "every GPU idle for 45 min: cancelling the job (scancel 4242, --idle-cancel)" in r.lines[-1]
    r.feed(60, 0, 0)
    assert len(r.cancels) == 1 and r.watch.cancel_state == "requested"


def test_idle_cancel_not_while_one_gpu_works():
    r = Run(alert_min=30, cancel_min=15)
    r.feed(3 * 60, 0, 90)
    assert r.cancels == [] and len(r.lines) == 3


def test_idle_cancel_failing_leaves_the_job_alone():
    r = Run(alert_min=1, cancel_min=1, cancel_code=1)
    r.feed(5, 0)
    assert len(r.cancels) == 1 and r.watch.cancel_state.startswith("failed: scancel: error")
    assert "scancel 4242 failed" in r.problems.stream.getvalue()
    r2 = Run(alert_min=1, cancel_min=1, env={})       # not a scheduler job: nothing to cancel
    r2.feed(5, 0)
    assert r2.cancels == [] and r2.watch.cancel_state == "failed: not in a Slurm, PBS or LSF job"
    # a missing scancel: the real runner raises, the watch records it
    from jobsight.collector.idle import _run
    r3 = Run(alert_min=1, cancel_min=1, env={"SLURM_JOB_ID": "4242", "PATH": "/nonexistent"})
    r3.watch.run = _run
    r3.feed(5, 0)
    assert r3.watch.cancel_state.startswith("failed: ") and "scancel 4242 failed" in r3.problems.stream.getvalue()


def test_cancel_names_only_this_job():
    assert cancel_argv({"SLURM_JOB_ID": "77", "SLURM_ARRAY_JOB_ID": "70", "SLURM_ARRAY_TASK_ID": "7"}) == ["scancel", "77"]
    assert cancel_argv({"PBS_JOBID": "12[3].pbs01"}) == ["qdel", "12[3].pbs01"]
    assert cancel_argv({"LSB_JOBID": "55", "LSB_JOBINDEX": "4"}) == ["bkill", "55[4]"]
    assert cancel_argv({"LSB_JOBID": "55", "LSB_JOBINDEX": "0"}) == ["bkill", "55"]
    assert cancel_argv({}) is None


# ---- settings from jobsight.toml

def settings(tmp_path: Path, toml: str, env: dict, scheduler="slurm", names=("NVIDIA A100-SXM4-80GB",)):
    path = tmp_path / "jobsight.toml"
    path.write_text(toml)
    warned: list[str] = []
    s = idle_settings.idle_settings(str(path), env, scheduler, list(names), warned.append)
    return s, warned


RATES = """
[charging]
policy = "table"
[[charging.rates]]
partition = "gpu_a100"
per_gpu_h = 128
[[charging.rates]]
partition = "gpu_a100"
gpu_type = "h100"
per_gpu_h = 192
[[charging.rates]]
partition = "*"
per_core_h = 1
[[charging.rates]]
partition = "*"
gpu_type = "a100"
per_gpu_h = 100
[flags]
gpu_idle_pct = 2.5
"""


def test_the_idle_default_is_ingests():
    assert IDLE_PCT_DEFAULT == DEFAULT_FLAGS["gpu_idle_pct"]


def test_settings_pick_the_rate_ingest_would(tmp_path):
    s, warned = settings(tmp_path, RATES, {"SLURM_JOB_PARTITION": "gpu_a100"}, scheduler="pbs")
    assert (s.idle_pct, s.price, s.where, warned) == (2.5, 128, "partition gpu_a100", [])
    # the job's own partition beats '*', even a '*' row naming the GPU type
    s, _ = settings(tmp_path, RATES, {"PBS_QUEUE": "other"}, scheduler="pbs")
    assert (s.price, s.where) == (100, "any partition, GPU type a100")       # by the NVML name
    s, _ = settings(tmp_path, RATES, {"PBS_QUEUE": "gpu_a100"}, scheduler="pbs", names=("NVIDIA H100 80GB HBM3",))
    assert (s.price, s.where) == (192, "partition gpu_a100, GPU type h100")
    s, _ = settings(tmp_path, RATES, {"SLURM_JOB_PARTITION": "other", "SLURM_TRES_PER_NODE": "gres/gpu:h100:1"},
                    scheduler="lsf", names=())
    assert s.price is None                           # '*' gives only per_core_h for an h100


def test_settings_without_a_price(tmp_path):
    # slurm-billing on Slurm: TRESBillingWeights decide, which the sidecar cannot see
    s, _ = settings(tmp_path, RATES.replace('"table"', '"slurm-billing"'), {"SLURM_JOB_PARTITION": "gpu_a100"})
    assert (s.price, s.idle_pct) == (None, 2.5)
    s, _ = settings(tmp_path, '[charging]\npolicy = "table"\npreset = "snellius"\n', {"SLURM_JOB_PARTITION": "gpu_a100"})
    assert s.price is None
    assert idle_settings.idle_settings(None, {}, "slurm", [], print).idle_pct == IDLE_PCT_DEFAULT


def test_a_bad_config_costs_one_line_and_keeps_the_defaults(tmp_path, monkeypatch):
    s, warned = settings(tmp_path, "[flags\n", {})
    assert (s.idle_pct, s.price) == (IDLE_PCT_DEFAULT, None) and len(warned) == 1 and "cannot read" in warned[0]
    s, warned = settings(tmp_path, "[flags]\ngpu_idle_pct = 'lots'\n", {})
    assert s.idle_pct == IDLE_PCT_DEFAULT and "gpu_idle_pct must be a number" in warned[0]
    warned = []
    assert idle_settings.idle_settings(str(tmp_path / "missing.toml"), {}, "slurm", [], warned.append).price is None
    assert "No such file" in warned[0]
    monkeypatch.setitem(sys.modules, "tomllib", None)      # python3 older than 3.11
    s, warned = settings(tmp_path, RATES, {"PBS_QUEUE": "gpu_a100"}, scheduler="pbs")
    assert (s.idle_pct, s.price) == (IDLE_PCT_DEFAULT, None) and "has no tomllib" in warned[0]


# ---- the whole sidecar over the fake NVML (real time, fractional minutes)

@pytest.fixture
def fake_gpu(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_nvml import fake_nvml_env, gcc_available
    require_service(gcc_available(), "gcc is needed to build the fake libnvidia-ml.so.1")

    def make(util: str) -> dict:
        return fake_nvml_env(tmp_path, f"gpus=1\ngpu.0.uuid={G0}\ngpu.0.util={util}\n")
    return make


def idle_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "idle" in line]


def test_sidecar_idle_gpu_one_line_then_the_summary(tmp_path, fake_gpu):
    out = tmp_path / "out"
    p = sidecar(["--interval", "0.05", "--idle-alert", "0.005", "--out", str(out)],
                env=clean_env(SLURM_JOB_ID="88", SLURM_JOB_PARTITION="gpu", **fake_gpu("0")))
    wait_rows(out, 2 * 20, p)     # 1 s: well past the 0.3 s alert, far from the hour of a repeat
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0
    lines = idle_lines(err)
    assert len(lines) == 2 and err.count("\n") == 2, err
    assert lines[0].startswith(f"jobsight sidecar: job 88: GPU 0 ({G0}) idle for 0.") and "under 1 % utilisation" in lines[0]
    assert lines[1].startswith(f"jobsight sidecar: job 88: idle summary: GPU 0 ({G0}) idle ")
    m = meta(out)
    assert (m["idle_alerts"], m["on_idle"], m["idle_cancel"], m["mode"]) == (1, None, None, "job")


def test_sidecar_busy_gpu_says_nothing(tmp_path, fake_gpu):
    out = tmp_path / "out"
    p = sidecar(["run", "--interval", "0.05", "--idle-alert", "0.002", "--out", str(out), "--", "sleep", "1"],
                env=clean_env(**fake_gpu("90,95")))
    _, err = p.communicate(timeout=20)
    assert (p.returncode, err) == (0, "")
    assert meta(out)["idle_alerts"] == 0


def test_sidecar_on_idle_and_stderr_closed_never_change_the_exit_code(tmp_path, fake_gpu):
    marker = tmp_path / "notified"
    argv = [sys.executable, "-m", "jobsight.collector", "run", "--interval", "0.05", "--idle-alert", "0.002",
            "--on-idle", f"sh -c 'echo $JOBSIGHT_GPU_UUID > {marker}'", "--out", str(tmp_path / "out"), "--",
            "sh", "-c", "sleep 1; exit 5"]
    p = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *argv], cwd=ROOT, env=clean_env(**fake_gpu("0")),
                       capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stdout) == (5, "")
    assert marker.read_text() == G0 + "\n"
    missing = [*argv[:9], "/nonexistent/notify", *argv[10:]]
    p = subprocess.run(missing, cwd=ROOT, env=clean_env(**fake_gpu("0")), capture_output=True, text=True, timeout=30)
    assert p.returncode == 5 and "--on-idle /nonexistent/notify could not be run" in p.stderr


def test_actions_need_the_alert(tmp_path):
    p = subprocess.run([sys.executable, "-m", "jobsight.collector", "--idle-alert", "0", "--idle-cancel", "5"],
                       cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "give --idle-alert MINUTES above 0" in p.stderr
    assert not os.listdir(tmp_path)
