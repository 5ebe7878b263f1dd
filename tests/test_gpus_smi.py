"""nvidia-smi fallback: one long-running `nvidia-smi --query-gpu=... -l N` child, here a fake script."""
from __future__ import annotations

import ctypes.util
import json
import os
import sys
from pathlib import Path

import fake_nvml
import pytest

from jobsight.collector.smi_fallback import parse_line

HERE = Path(__file__).parent
FAKE_SMI_DIR = HERE / "fake_nvml"
MIB = 2**20
G0 = "GPU-0000cccc-0000-4000-8000-000000000000"
G1 = "GPU-1111cccc-0000-4000-8000-000000000001"
SMI_CFG = {"driver": "550.54.15", "gpus": [
    {"uuid": G0, "name": "NVIDIA A100-SXM4-40GB", "util": "37", "mem_used": "1024", "mem_total": "40960",
     "power": "250.12", "temp": "45", "clock": "1410"},
    {"uuid": G1, "name": "NVIDIA A100-SXM4-40GB", "util": "[N/A]", "mem_used": "3", "mem_total": "40960",
     "power": "[Not Supported]", "temp": "39", "clock": "210"}]}


def test_parse_line_values_and_units():
    uuid, row = parse_line(f"{G0}, 0, 37, 1024, 40960, 250.12, 45, 1410\n")
    assert uuid == G0
    assert row == {"util_pct": 37, "mem_used_bytes": 1024 * MIB, "mem_total_bytes": 40960 * MIB,
                   "power_w": 250.12, "temperature_c": 45, "sm_clock_mhz": 1410}


def test_parse_line_absent_values_are_blank():
    _, row = parse_line(f"{G1}, 1, [N/A], 3, 40960, [Not Supported], N/A, [Unknown Error]")
    assert row["util_pct"] is None and row["power_w"] is None
    assert row["temperature_c"] is None and row["sm_clock_mhz"] is None
    assert row["mem_used_bytes"] == 3 * MIB


def test_parse_line_rejects_other_shapes():
    assert parse_line("index, uuid") is None
    assert parse_line("0, GPU-x, 1, 2, 3, 4, 5, 6") is None  # uuid must come first


def run_probe(tmp_path: Path, job_env: dict, ld_library_path: str, smi_cfg: dict = SMI_CFG, **req) -> dict:
    (tmp_path / "smi.json").write_text(json.dumps(smi_cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}
    env.update(LD_LIBRARY_PATH=ld_library_path, FAKE_NVIDIA_SMI_CONFIG=str(tmp_path / "smi.json"))
    path = f"{FAKE_SMI_DIR}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    req["env"] = {"PATH": path, **job_env}
    return fake_nvml.run_probe(req, env)


def test_fallback_when_pynvml_is_absent(tmp_path):
    # -l 30: without close() terminating it, the child would still be sleeping when the probe checks
    out = run_probe(tmp_path, {}, str(tmp_path), block_pynvml=True, wait_values=True, samples=1, interval=30)
    assert out["meta"] == {"gpu_method": "nvidia-smi", "driver_version": "550.54.15", "nvml_version": None, "gpus": [
        {"uuid": G0, "index": 0, "name": "NVIDIA A100-SXM4-40GB", "mig": False, "parent_uuid": None,
         "util_source": "nvidia-smi"},
        {"uuid": G1, "index": 1, "name": "NVIDIA A100-SXM4-40GB", "mig": False, "parent_uuid": None,
         "util_source": "nvidia-smi"}]}
    r0, r1 = out["samples"][0]
    assert r0 == {"device": G0, "gpu_index": 0, "util_pct": 37, "mem_used_bytes": 1024 * MIB,
                  "mem_total_bytes": 40960 * MIB, "power_w": 250.12, "energy_j": None, "sm_clock_mhz": 1410,
                  "temperature_c": 45, "sm_active_pct": None}
    assert (r1["util_pct"], r1["power_w"], r1["temperature_c"]) == (None, None, 39)
    assert out["stderr"] == ["jobsight sidecar: the nvidia-ml-py package (pynvml) is not installed; "
                             "sampling GPUs through nvidia-smi instead"]
    assert out["smi_returncode"] == -15  # close() terminated the looping child (SIGTERM)


def test_fallback_when_nvml_library_missing_respects_cuda_visible_devices(tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed on this machine: 'no library' cannot be arranged")
    out = run_probe(tmp_path, {"CUDA_VISIBLE_DEVICES": "1"}, str(tmp_path), wait_values=True, samples=1, interval=0.2)
    assert [r["device"] for r in out["samples"][0]] == [G1]
    assert out["samples"][0][0]["mem_used_bytes"] == 3 * MIB
    assert len(out["stderr"]) == 1 and "sampling GPUs through nvidia-smi instead" in out["stderr"][0]


def test_malformed_smi_line_reported_once(tmp_path):
    cfg = dict(SMI_CFG, garbage_line=True)
    out = run_probe(tmp_path, {}, str(tmp_path), cfg, block_pynvml=True, wait_values=True, samples=1, interval=0.2)
    assert out["samples"][0][0]["util_pct"] == 37
    assert sum("not uuid,index" in line for line in out["stderr"]) == 1
