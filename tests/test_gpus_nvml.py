"""collector.gpus over the fake libnvidia-ml.so.1 (tests/fake_nvml/fake_nvml.c), loaded by the real pynvml.

Each case runs tests/fake_nvml/probe.py in a fresh process: pynvml dlopens "libnvidia-ml.so.1" by
name, and LD_LIBRARY_PATH only reaches the dynamic loader at process start.
"""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_service
from fake_nvml import build_fake_nvml, fake_nvml_env, gcc_available, run_probe

G = [f"GPU-{i}{i}{i}{i}bbbb-0000-4000-8000-0000000000{i:02d}" for i in range(8)]
GIB = 2**30


@pytest.fixture(autouse=True)
def _needs_gcc():
    require_service(gcc_available(), "gcc is needed to build the fake libnvidia-ml.so.1")


def conf(n: int, **per_gpu: dict[int, str]) -> str:
    """gpus=n with the G uuids, plus per-GPU lines: conf(2, power_mw={0: '250000'})."""
    lines = [f"gpus={n}"] + [f"gpu.{i}.uuid={G[i]}" for i in range(n)]
    for key, values in per_gpu.items():
        lines += [f"gpu.{i}.{key}={v}" for i, v in values.items()]
    return "\n".join(lines) + "\n"


def probe(tmp_path: Path, config: str | None, *, variant: str = "default", lib: bool = True,
          job_env: dict | None = None, **req) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    if config is not None:
        env.update(fake_nvml_env(tmp_path, config, variant))
    elif lib:  # library present, no config: the fake behaves like a node whose driver is not loaded
        env["LD_LIBRARY_PATH"] = str(build_fake_nvml(variant))
    else:
        env["LD_LIBRARY_PATH"] = str(tmp_path)  # no libnvidia-ml.so.1 anywhere
    req["env"] = {"PATH": "/nonexistent", **(job_env or {})}  # no nvidia-smi unless a test adds it
    return run_probe(req, env)


def test_zero_gpus_gives_none_quietly(tmp_path):
    out = probe(tmp_path, "gpus=0\n")
    assert out["none"] is True
    assert out["stderr"] == []


def test_one_gpu_every_field(tmp_path):
    cfg = conf(1, util={0: "10,20"}, mem_total={0: str(80 * GIB)}, mem_used={0: str(3 * GIB)},
               mem_reserved={0: str(GIB // 2)}, power_mw={0: "250500"}, energy_mj={0: "5000000"},
               energy_step_mj={0: "1500"}, sm_clock={0: "1755"}, temp={0: "61"}, name={0: "NVIDIA H100 80GB HBM3"})
    cfg += "driver_version=535.104.05\nnvml_version=12.535.104.05\n"
    out = probe(tmp_path, cfg, samples=3)
    assert out["meta"] == {
        "gpu_method": "nvml", "driver_version": "535.104.05", "nvml_version": "12.535.104.05",
        "gpus": [{"uuid": G[0], "index": 0, "name": "NVIDIA H100 80GB HBM3", "mig": False, "parent_uuid": None,
                  "util_source": "nvml"}]}
    s1, s2, s3 = (s[0] for s in out["samples"])
    assert s1 == {"device": G[0], "gpu_index": 0, "util_pct": 10, "mem_used_bytes": 3 * GIB,
                  "mem_total_bytes": 80 * GIB, "power_w": 250.5, "energy_j": 5000.0, "sm_clock_mhz": 1755,
                  "temperature_c": 61, "sm_active_pct": None}
    # utilisation cycles through the configured values; the energy counter grows 1500 mJ per read
    assert [s["util_pct"] for s in (s2, s3)] == [20, 10]
    assert [s["energy_j"] for s in (s2, s3)] == [5001.5, 5003.0]
    assert out["stderr"] == []


def test_eight_gpus_in_nvml_order(tmp_path):
    out = probe(tmp_path, conf(8, util={i: str(10 * i) for i in range(8)}), samples=2)
    for rows in out["samples"]:
        assert [r["device"] for r in rows] == G
        assert [r["gpu_index"] for r in rows] == list(range(8))
        assert [r["util_pct"] for r in rows] == [0, 10, 20, 30, 40, 50, 60, 70]
    assert [d["index"] for d in out["devices"]] == list(range(8))


def test_cuda_visible_devices_indices(tmp_path):
    out = probe(tmp_path, conf(8), job_env={"CUDA_VISIBLE_DEVICES": "5,2"}, samples=1)
    assert [(d["uuid"], d["index"]) for d in out["devices"]] == [(G[5], 5), (G[2], 2)]
    assert [r["device"] for r in out["samples"][0]] == [G[5], G[2]]


def test_cuda_visible_devices_uuid_list_with_prefix(tmp_path):
    out = probe(tmp_path, conf(8), job_env={"CUDA_VISIBLE_DEVICES": f"{G[7]},GPU-3333"}, samples=1)
    assert [r["device"] for r in out["samples"][0]] == [G[7], G[3]]
    assert [r["gpu_index"] for r in out["samples"][0]] == [7, 3]


def test_slurm_job_gpus_global_ids(tmp_path):
    out = probe(tmp_path, conf(8), job_env={"SLURM_JOB_GPUS": "1,6"}, samples=1)
    assert [r["device"] for r in out["samples"][0]] == [G[1], G[6]]


def test_slurm_job_gpus_constrained_node(tmp_path):
    # ConstrainDevices: NVML shows only the job's two GPUs, renumbered 0,1; SLURM_JOB_GPUS stays global
    out = probe(tmp_path, conf(2), job_env={"SLURM_JOB_GPUS": "4,6"}, samples=1)
    assert [(r["device"], r["gpu_index"]) for r in out["samples"][0]] == [(G[0], 0), (G[1], 1)]


MIG_CFG = (conf(2, mig={1: "1"}, power_mw={1: "300000"}, mem_total={1: str(80 * GIB)}, mem_used={1: str(GIB)})
           + "gpu.1.mig.0.uuid=MIG-aaaa0000-0000-4000-8000-000000000000\n"
           + f"gpu.1.mig.0.mem_total={20 * GIB}\ngpu.1.mig.0.mem_used={5 * GIB}\n"
           + "gpu.1.mig.2.uuid=MIG-aaaa0002-0000-4000-8000-000000000000\n"
           + f"gpu.1.mig.2.mem_total={10 * GIB}\ngpu.1.mig.2.mem_used={7 * GIB}\n")
MIG_A = "MIG-aaaa0000-0000-4000-8000-000000000000"
MIG_B = "MIG-aaaa0002-0000-4000-8000-000000000000"


def test_mig_instances_memory_only(tmp_path):
    out = probe(tmp_path, MIG_CFG, samples=1)
    assert [(d["uuid"], d["index"], d["mig"], d["parent_uuid"]) for d in out["devices"]] == [
        (G[0], 0, False, None), (G[1], 1, False, None), (MIG_A, 1, True, G[1]), (MIG_B, 1, True, G[1])]
    rows = {r["device"]: r for r in out["samples"][0]}
    # the MIG-mode parent: no utilisation, but power and whole-GPU memory
    assert rows[G[1]]["util_pct"] is None
    assert rows[G[1]]["power_w"] == 300.0
    assert (rows[G[1]]["mem_used_bytes"], rows[G[1]]["mem_total_bytes"]) == (GIB, 80 * GIB)
    blank = dict(util_pct=None, power_w=None, energy_j=None, sm_clock_mhz=None, temperature_c=None, sm_active_pct=None)
    assert rows[MIG_A] == {"device": MIG_A, "gpu_index": 1, "mem_used_bytes": 5 * GIB, "mem_total_bytes": 20 * GIB, **blank}
    assert rows[MIG_B] == {"device": MIG_B, "gpu_index": 1, "mem_used_bytes": 7 * GIB, "mem_total_bytes": 10 * GIB, **blank}


def test_job_given_one_mig_instance(tmp_path):
    out = probe(tmp_path, MIG_CFG, job_env={"CUDA_VISIBLE_DEVICES": MIG_B}, samples=1)
    assert [(r["device"], r["mem_used_bytes"]) for r in out["samples"][0]] == [(MIG_B, 7 * GIB)]


def test_not_supported_fields_blank_and_asked_once(tmp_path):
    out = probe(tmp_path, conf(2, not_supported={0: "power,temp"}, util={0: "55", 1: "66"}), samples=3,
                counts=[[G[0], "nvmlDeviceGetPowerUsage"], [G[0], "nvmlDeviceGetTemperature"],
                        [G[0], "nvmlDeviceGetUtilizationRates"], [G[1], "nvmlDeviceGetPowerUsage"]])
    for rows in out["samples"]:
        assert rows[0]["power_w"] is None and rows[0]["temperature_c"] is None
        assert rows[0]["util_pct"] == 55
        assert rows[1]["power_w"] == 60.0 and rows[1]["util_pct"] == 66
    assert out["counts"] == [1, 1, 3, 3]
    assert out["stderr"] == []


def test_old_driver_without_memory_info_v2_uses_v1(tmp_path):
    # v1 counts reserved memory as used: 2 GiB used + 0.5 GiB reserved
    cfg = conf(1, mem_used={0: str(2 * GIB)}, mem_reserved={0: str(GIB // 2)})
    out = probe(tmp_path, cfg, variant="old-driver", samples=2,
                counts=[[G[0], "nvmlDeviceGetMemoryInfo"]])
    assert [s[0]["mem_used_bytes"] for s in out["samples"]] == [2 * GIB + GIB // 2] * 2
    assert out["counts"] == [2]


def test_gpu_lost_mid_run_others_keep_sampling(tmp_path):
    flag = tmp_path / "gpu1-fell-off-the-bus"
    out = probe(tmp_path, conf(3, util={0: "11", 1: "22", 2: "33"}, lost_when_exists={1: str(flag)}),
                samples=3, touch_before={"2": str(flag)}, counts=[[G[1], "nvmlDeviceGetUtilizationRates"]])
    s1, s2, s3 = out["samples"]
    assert [r["util_pct"] for r in s1] == [11, 22, 33]
    for rows in (s2, s3):
        assert [r["device"] for r in rows] == G[:3]   # the lost GPU keeps its (blank) row
        assert [r["util_pct"] for r in rows] == [11, None, 33]
        assert rows[1] == {"device": G[1], "gpu_index": 1, "util_pct": None, "mem_used_bytes": None,
                           "mem_total_bytes": None, "power_w": None, "energy_j": None, "sm_clock_mhz": None,
                           "temperature_c": None, "sm_active_pct": None}
    assert len(out["stderr"]) == 1 and G[1] in out["stderr"][0] and "lost" in out["stderr"][0]
    assert out["counts"] == [2]  # asked in sample 1 (ok) and 2 (lost), never again


def test_unknown_error_after_working_means_lost(tmp_path):
    flag = tmp_path / "flag"
    out = probe(tmp_path, conf(2, lost_when_exists={0: str(flag)}, lost_code={0: "999"}),
                samples=3, touch_before={"2": str(flag)})
    assert out["samples"][0][0]["mem_total_bytes"] == 85899345920
    for later in out["samples"][1:]:
        assert later[0]["mem_total_bytes"] is None
        assert later[1]["mem_total_bytes"] == 85899345920
    assert len(out["stderr"]) == 1 and "Unknown Error" in out["stderr"][0]


def test_gpm_sm_activity_from_second_sample(tmp_path):
    out = probe(tmp_path, conf(2, gpm={0: "1"}, sm_active={0: "63.25"}), samples=3)
    assert [s[0]["sm_active_pct"] for s in out["samples"]] == [None, 63.25, 63.25]
    assert [s[1]["sm_active_pct"] for s in out["samples"]] == [None, None, None]  # no GPM on that one


def test_no_library_at_all(tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed on this machine: 'no library' cannot be arranged")
    out = probe(tmp_path, None, lib=False)
    assert out["none"] is True
    assert len(out["stderr"]) == 1
    assert out["stderr"][0].startswith("jobsight sidecar: no GPU monitoring: NVML library libnvidia-ml.so.1 not found")


def test_driver_not_loaded(tmp_path):
    out = probe(tmp_path, None, lib=True)
    assert out["none"] is True
    assert out["stderr"] == ["jobsight sidecar: no GPU monitoring: NVML initialisation failed (Driver Not Loaded); "
                             "recording CPU only"]


def test_mode_none_and_no_gpus_for_the_job(tmp_path):
    assert probe(tmp_path, conf(2), mode="none")["none"] is True
    out = probe(tmp_path, conf(2), job_env={"CUDA_VISIBLE_DEVICES": ""})
    assert out["none"] is True and out["stderr"] == []


def test_in_process_loader_for_the_benchmark(tmp_path):
    # what bench scripts use: no LD_LIBRARY_PATH, the fake preloaded under its soname
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from fake_nvml import load_in_process, eight_gpu_config\n"
            "load_in_process(sys.argv[3], eight_gpu_config())\n"
            "from jobsight.collector.gpus import open_gpus\n"
            "src = open_gpus({}, 'auto', 10.0); rows = src.sample(); src.close()\n"
            "print(src.meta()['gpu_method'], len(rows), rows[7]['power_w'], rows[7]['mem_used_bytes'])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    res = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(Path(__file__).parents[1]),
                          str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["nvml", "8", "350.0", str(47 * GIB)]  # eight_gpu_config: (40 + i) GiB used


def test_gpu_already_lost_at_start_is_skipped(tmp_path):
    # lost_after=0: the GPU fails from its first query on (the handle itself is still handed out)
    out = probe(tmp_path, conf(3, lost_after={1: "0"}, util={0: "5", 2: "7"}), samples=1)
    assert [(r["device"], r["util_pct"]) for r in out["samples"][0]] == [(G[0], 5), (G[2], 7)]
    assert out["stderr"] == ["jobsight sidecar: GPU index 1: cannot open it through NVML (GPU is lost); skipped"]


def test_gpm_on_mig_instances_through_the_parent(tmp_path):
    cfg = MIG_CFG + "gpu.1.gpm=1\ngpu.1.sm_active=30\ngpu.1.mig.0.sm_active=40\ngpu.1.mig.2.sm_active=12.5\n"
    out = probe(tmp_path, cfg, samples=2)
    second = {r["device"]: r["sm_active_pct"] for r in out["samples"][1]}
    assert second == {G[0]: None, G[1]: 30.0, MIG_A: 40.0, MIG_B: 12.5}
    assert all(r["sm_active_pct"] is None for r in out["samples"][0])
