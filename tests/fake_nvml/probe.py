"""Run collector.gpus in a fresh process (so LD_LIBRARY_PATH reaches the loader) and print JSON.

argv[1] = JSON: {"env": {...job env passed to open_gpus...}, "mode": "auto", "interval": 1.0,
  "samples": 3, "touch_before": {"2": "/path"} (create a file before sample #2, 1-based),
  "counts": [[uuid, nvml function name], ...], "block_pynvml": false, "wait_values": false}
stdout = JSON: {"none": bool, "meta": ..., "devices": ..., "samples": [[row, ...], ...], "counts": [...],
  "smi_returncode": int|null}
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, as in the real sidecar

req = json.loads(sys.argv[1])
if req.get("block_pynvml"):
    sys.modules["pynvml"] = None  # `import pynvml` now raises ImportError, as where it is not installed

from jobsight.collector.gpus import open_gpus  # noqa: E402

src = open_gpus(req.get("env", {}), req.get("mode", "auto"), req.get("interval", 1.0))
out = {"none": src is None, "meta": None, "devices": None, "samples": [], "counts": [], "smi_returncode": None}
if src is not None:
    out["meta"] = src.meta()
    out["devices"] = src.devices
    if req.get("wait_values"):  # the nvidia-smi reader thread fills values asynchronously
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and all(r["mem_total_bytes"] is None for r in src.sample()):
            time.sleep(0.05)
    for k in range(1, req.get("samples", 3) + 1):
        path = req.get("touch_before", {}).get(str(k))
        if path:
            Path(path).touch()
        out["samples"].append(src.sample())
    proc = getattr(src, "_proc", None)
    src.close()
    # the nvidia-smi child's exit status right after close() (None = still running)
    out["smi_returncode"] = proc.poll() if proc is not None else None
if req.get("counts"):
    import ctypes

    import pynvml
    fn = pynvml.nvmlLib.fakenvml_call_count
    fn.restype = ctypes.c_ulonglong
    out["counts"] = [fn(u.encode(), f.encode()) for u, f in req["counts"]]
print(json.dumps(out))
