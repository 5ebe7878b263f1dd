"""A job holding one MIG instance, end to end over the fake libnvidia-ml.so.1: its utilisation is
the instance's GPM SM activity (NVML has none for a MIG handle), its memory the instance's, and it
gets none of the parent GPU's power or energy; a whole GPU on the same host reads as before.

The collector runs in child processes (the probe, then the real sidecar), so that pynvml's
dlopen("libnvidia-ml.so.1") finds the fake through LD_LIBRARY_PATH; its files are then ingested and
the stored job metrics checked."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from conftest import ROOT, require_service
from fake_nvml import fake_nvml_env, gcc_available, run_probe

from jobsight.analytics.config import parse_config
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store.database import Database
from jobsight.collector.csv_schema import COLUMNS, HEADER

GIB = 2**30
PARENT = "GPU-0a0a0000-0000-4000-8000-000000000000"
FULL = "GPU-1b1b0000-0000-4000-8000-000000000001"
MIG = "MIG-0a0a0000-0001-4000-8000-000000000000"     # the job's instance
OTHER = "MIG-0a0a0000-0002-4000-8000-000000000000"   # another job's instance on the same GPU
CLUSTER = "migclu"
# GPU 0 in MIG mode (Hopper: GPM) with two 1g.10gb-sized instances; GPU 1 whole.
CONFIG = f"""gpus=2
gpu.0.uuid={PARENT}
gpu.0.name=NVIDIA H100 80GB HBM3
gpu.0.mig=1
gpu.0.gpm=1
gpu.0.sm_active=70
gpu.0.mem_total={80 * GIB}
gpu.0.mem_used={12 * GIB}
gpu.0.power_mw=400000
gpu.0.energy_step_mj=4000000
gpu.0.mig.1.uuid={MIG}
gpu.0.mig.1.mem_total={10 * GIB}
gpu.0.mig.1.mem_used={3 * GIB}
gpu.0.mig.1.sm_active=40
gpu.0.mig.2.uuid={OTHER}
gpu.0.mig.2.mem_total={10 * GIB}
gpu.0.mig.2.mem_used={9 * GIB}
gpu.0.mig.2.sm_active=95
gpu.1.uuid={FULL}
gpu.1.gpm=1
gpu.1.sm_active=55
gpu.1.util=70
gpu.1.mem_total={80 * GIB}
gpu.1.mem_used={20 * GIB}
gpu.1.power_mw=250000
gpu.1.energy_step_mj=500000
"""
PARENT_ONLY = ("power_w", "energy_j", "sm_clock_mhz", "temperature_c")


@pytest.fixture(autouse=True)
def _needs_gcc():
    require_service(gcc_available(), "gcc is needed to build the fake libnvidia-ml.so.1")


def _child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "PBS_", "LSB_", "CUDA_VISIBLE_DEVICES", "JOBSIGHT_", "LD_LIBRARY_PATH", "FAKE_NVML"))}
    env.update(fake_nvml_env(tmp_path, CONFIG), **extra)
    return env


def test_mig_instance_utilisation_is_its_gpm_sm_activity(tmp_path):
    calls = [[MIG, f] for f in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage",
                                "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetMemoryInfo_v2")]
    calls += [[PARENT, f] for f in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
                                    "nvmlDeviceGetMemoryInfo_v2")]
    out = run_probe({"env": {"PATH": "/nonexistent", "CUDA_VISIBLE_DEVICES": f"{MIG},{FULL}"}, "samples": 3,
                     "counts": calls}, _child_env(tmp_path))
    assert [(d["uuid"], d["mig"], d["parent_uuid"], d["util_source"]) for d in out["meta"]["gpus"]] == [
        (MIG, True, PARENT, "gpm"), (FULL, False, None, "nvml")]
    per_sample = [{r["device"]: r for r in rows} for rows in out["samples"]]
    assert [list(s) for s in per_sample] == [[MIG, FULL]] * 3      # neither the parent nor the other instance
    # GPM needs two samples: the first has no SM activity, so no utilisation for the instance
    assert [(s[MIG]["util_pct"], s[MIG]["sm_active_pct"]) for s in per_sample] == [(None, None), (40.0, 40.0), (40.0, 40.0)]
    for s in per_sample:
        mig = s[MIG]
        assert (mig["mem_used_bytes"], mig["mem_total_bytes"], mig["gpu_index"]) == (3 * GIB, 10 * GIB, 0)
        assert [mig[f] for f in PARENT_ONLY] == [None] * 4
    # the whole GPU beside it: NVML utilisation, power, energy as ever
    assert [s[FULL]["util_pct"] for s in per_sample] == [70, 70, 70]
    assert [s[FULL]["power_w"] for s in per_sample] == [250.0] * 3
    assert [s[FULL]["energy_j"] for s in per_sample] == [1000.0, 1500.0, 2000.0]
    assert [s[FULL]["sm_active_pct"] for s in per_sample] == [None, 55.0, 55.0]
    assert (per_sample[0][FULL]["mem_used_bytes"], per_sample[0][FULL]["mem_total_bytes"]) == (20 * GIB, 80 * GIB)
    # utilisation asked once on the MIG handle (NotSupported); nothing of the parent's ever read
    assert out["counts"] == [1, 0, 0, 3, 0, 0, 0]
    assert out["stderr"] == []


def _sidecar(tmp_path: Path, job: str, devices: str) -> subprocess.Popen:
    env = _child_env(tmp_path, CUDA_VISIBLE_DEVICES=devices, SLURMD_NODENAME="gn1")
    return subprocess.Popen([sys.executable, "-m", "jobsight.collector", "--interval", "0.05", "--job-id", job,
                             "--cluster", CLUSTER, "--out", str(tmp_path / "out" / job)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop_after(proc: subprocess.Popen, folder: Path, rows: int) -> None:
    """SIGTERM once the CSV has `rows` data rows (a hang guard, not a speed check); the sidecar then
    takes a last sample and exits 0."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        files = list(folder.glob("*.csv"))
        if files and files[0].read_text().count("\n") >= rows + 1:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    assert (proc.returncode, err) == (0, "")


def _old_sidecar_file(folder: Path, job: str, sm_active: float) -> Path:
    """A MIG job's file whose rows carry the SM activity in sm_active_pct only (utilisation blank)."""
    rows = []
    for minute in range(6):
        cell = dict.fromkeys(COLUMNS, "")
        cell.update(time=f"2026-11-17T10:{minute:02d}:00.000Z", job_id=job, cluster=CLUSTER, host="gn2", device=MIG,
                    mem_used_bytes=str(GIB), mem_total_bytes=str(10 * GIB), gpu_index="0",
                    sm_active_pct=str(sm_active) if minute else "")
        rows.append(",".join(cell[c] for c in COLUMNS))
    path = folder / f"jobsight-{CLUSTER}-{job}-gn2-20261117T100000Z-1.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _sacct(folder: Path) -> Path:
    start = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None) - timedelta(hours=1)
    end = start + timedelta(hours=2)
    line = "{j}|{j}|{user}|proj|gpu|COMPLETED|{s}|{e}|02:00:00|04:00:00|8|01:00:00|32G|billing=40,cpu=8,mem=32G,node=1,gres/gpu=1\n"
    user = os.environ.get("USER") or "root"
    path = folder / "sacct.txt"
    path.write_text("JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|Timelimit|NCPUS|TotalCPU|ReqMem|AllocTRES\n"
                    + "".join(line.format(j=j, user=user, s=start.isoformat(), e=end.isoformat())
                              for j in ("9301", "9302", "9303")), encoding="utf-8")
    return path


def test_mig_job_metrics_from_the_instance_alone(tmp_path):
    procs = {job: _sidecar(tmp_path, job, dev) for job, dev in (("9301", MIG), ("9302", FULL))}
    out = tmp_path / "out"
    for job, proc in procs.items():
        _stop_after(proc, out / job, 2 * 4)      # a cpu and a GPU row per sample: 4 samples at least
    metas = {m.parent.name: json.loads(m.read_text()) for m in out.glob("*/*.meta.json")}
    assert [(g["uuid"], g["util_source"]) for g in metas["9301"]["gpus"]] == [(MIG, "gpm")]
    files = sorted(out.glob("*/*.csv"))
    written = {p.parent.name: list(csv.DictReader(p.open())) for p in files}
    mig_rows = [r for r in written["9301"] if r["device"] == MIG]
    assert len(mig_rows) >= 4 and mig_rows[0]["util_pct"] == "" and {r["util_pct"] for r in mig_rows[1:]} == {"40"}
    assert {(r["power_w"], r["energy_j"]) for r in mig_rows} == {("", "")}
    full_rows = [r for r in written["9302"] if r["device"] == FULL]

    db = tmp_path / "jobs.duckdb"
    con = Database.open(db, parse_config({}))
    try:
        reports = ingest.ingest_paths(con.con, [_sacct(tmp_path), *files, _old_sidecar_file(tmp_path, "9303", 0.5)],
                                      ParseOptions(timezone="UTC", cluster=CLUSTER))
        assert [r.status for r in reports] == ["ingested"] * 4
        con.refresh()
        cols = ("gpu_util_pct", "gpu_util_source", "gpu_mem_peak_pct", "gpu_energy_kwh", "gpus_sampled", "gpus_idle",
                "charge_driver", "wasted_sbu", "sbu")
        m = {r[0]: dict(zip(cols, r[1:])) for r in con.execute(
            f"SELECT job_id_raw, {', '.join(cols)} FROM job_metrics WHERE cluster = ?", [CLUSTER]).fetchall()}
        devices = {r[0]: r[1:] for r in con.execute(
            "SELECT job_id_raw, device, util_mean_pct, mem_peak_bytes, mem_total_bytes, energy_j, power_mean_w "
            "FROM job_gpu_devices WHERE cluster = ?", [CLUSTER]).fetchall()}
        flags = {(r[0], r[1]) for r in con.execute("SELECT job_id_raw, code FROM job_flags WHERE cluster = ?",
                                                   [CLUSTER]).fetchall()}
    finally:
        con.close()

    # the MIG job: utilisation 40 % from GPM, memory 3 of the instance's 10 GiB, no energy at all
    assert devices["9301"] == (MIG, pytest.approx(40.0), 3 * GIB, 10 * GIB, None, None)
    mig = m["9301"]
    assert (mig["gpu_util_pct"], mig["gpu_mem_peak_pct"], mig["gpu_energy_kwh"]) == (pytest.approx(40.0), pytest.approx(30.0), None)
    assert (mig["gpu_util_source"], mig["gpus_sampled"], mig["gpus_idle"], mig["charge_driver"]) == ("sidecar", 1, 0, "gpu")
    assert mig["sbu"] == pytest.approx(80.0) and mig["wasted_sbu"] == pytest.approx(80.0 * 0.6)
    # the whole GPU on the same host: NVML utilisation, its power, its energy counter's increase
    n_full = len(full_rows)
    energy = 500.0 * (n_full - 1)
    assert devices["9302"] == (FULL, pytest.approx(70.0), 20 * GIB, 80 * GIB, pytest.approx(energy), pytest.approx(250.0))
    full = m["9302"]
    assert (full["gpu_util_pct"], full["gpu_mem_peak_pct"], full["gpu_energy_kwh"]) == (
        pytest.approx(70.0), pytest.approx(25.0), pytest.approx(energy / 3.6e6))
    assert full["wasted_sbu"] == pytest.approx(80.0 * 0.3)
    # a MIG file with the SM activity only in sm_active_pct: the same rule, so an idle instance is idle
    assert devices["9303"][:2] == (MIG, pytest.approx(0.5))
    assert (m["9303"]["gpu_util_pct"], m["9303"]["gpus_idle"]) == (pytest.approx(0.5), 1)
    assert ("9303", "gpu_idle") in flags and ("9301", "gpu_idle") not in flags


def test_slurm_job_gpus_on_a_mig_node_never_give_the_parent(tmp_path):
    """A prolog knows only SLURM_JOB_GPUS, whose ids count each MIG instance as a GPU: they cannot
    name NVML's GPUs here, so a job holding some devices gets none (rather than the parent GPU and
    every instance on it), and a job holding all of them gets the instances and the whole GPU."""
    env = _child_env(tmp_path)
    some = run_probe({"env": {"PATH": "/nonexistent", "SLURM_JOB_GPUS": "1"}, "samples": 1}, env)
    assert some["none"] is True
    assert some["stderr"] == ["jobsight sidecar: SLURM_JOB_GPUS='1' cannot be matched to NVML's GPUs on a node with "
                              "MIG instances (Slurm counts each instance as a GPU); no GPU sampled: give the sidecar "
                              "CUDA_VISIBLE_DEVICES"]
    every = run_probe({"env": {"PATH": "/nonexistent", "SLURM_JOB_GPUS": "0-2"}, "samples": 1,
                       "counts": [[PARENT, "nvmlDeviceGetPowerUsage"], [PARENT, "nvmlDeviceGetTotalEnergyConsumption"]]},
                      env)
    assert [r["device"] for r in every["samples"][0]] == [MIG, OTHER, FULL]
    assert every["counts"] == [0, 0] and every["stderr"] == []


def test_every_reader_takes_a_mig_rows_sm_activity_as_its_utilisation(tmp_path):
    """A MIG file with the SM activity only in sm_active_pct reads alike everywhere: the stored
    metrics, Running now (so an idle instance raises the idle alert), the job page's and `jobsight
    job`'s series, and held samples (sample_pending) through the same rule."""
    from jobsight.analytics.queries import samples as job_samples
    from jobsight.analytics.queries.scope import Scope
    from jobsight.analytics.queries.summaries import job_samples as page_samples

    start = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None) - timedelta(hours=1)
    user = os.environ.get("USER") or "root"
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|Timelimit|NCPUS|TotalCPU|ReqMem|AllocTRES\n"
                     f"9304|9304|{user}|proj|gpu|RUNNING|{start.isoformat()}|Unknown|01:00:00|04:00:00|8|00:10:00|32G|"
                     "billing=40,cpu=8,mem=32G,node=1,gres/gpu=1\n", encoding="utf-8")
    db = tmp_path / "jobs.duckdb"
    con = Database.open(db, parse_config({"flags": {"running_gpu_idle_min": 1}}))
    try:
        reports = ingest.ingest_paths(con.con, [sacct, _old_sidecar_file(tmp_path, "9304", 0.5)],
                                      ParseOptions(timezone="UTC", cluster=CLUSTER))
        assert [r.status for r in reports] == ["ingested"] * 2
        con.refresh()
        # the raw rows keep what the file said; every reader goes through the rule
        assert con.value("SELECT count(*) FROM sample WHERE device = ? AND util_pct IS NOT NULL", [MIG]) == 0
        assert con.value("SELECT gpu_util_pct FROM job_metrics WHERE job_id_raw = '9304'") == pytest.approx(0.5)
        running = con.rows("SELECT device, util_pct, idle_min, idle_now FROM running_gpus WHERE job_id_raw = '9304'")
        assert running == [{"device": MIG, "util_pct": pytest.approx(0.5), "idle_min": pytest.approx(5.0), "idle_now": True}]
        assert job_samples.series(con, CLUSTER, "9304") == {MIG: [None, 0.5, 0.5, 0.5, 0.5, 0.5]}
        page = page_samples(con, Scope("admin", "root"), CLUSTER, "9304")
        assert page[page["device"] == MIG]["util_pct"].tolist()[1:] == [0.5] * 5
        # held samples: the same file's rows as if waiting for their job's accounting
        con.execute("INSERT INTO sample_pending BY NAME SELECT * EXCLUDE (job_id_raw), 'held' AS job_id_raw, "
                    "1000 AS owner_uid FROM samples WHERE job_id_raw = '9304' AND device <> 'cpu'")
        con.execute("UPDATE sample_pending SET util_pct = NULL")       # as the file said
        assert job_samples.series(con, CLUSTER, "held", "sample_pending") == {MIG: [None, 0.5, 0.5, 0.5, 0.5, 0.5]}
        held = job_samples.summary(con, CLUSTER, "held", "pending")
        assert [(g["device"], g["util_mean_pct"]) for g in held["gpus"]] == [(MIG, pytest.approx(0.5))]
    finally:
        con.close()
