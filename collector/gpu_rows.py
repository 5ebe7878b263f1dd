"""What both GPU sources (gpus.py over NVML, smi_fallback.py over nvidia-smi) share: the GPU row
fields, a row with every measurement blank, and their stderr line."""
from __future__ import annotations

from typing import Any

from .problems import stderr_line

FIELDS = ("util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "energy_j",
          "sm_clock_mhz", "temperature_c", "sm_active_pct")


def warn(msg: str) -> None:
    stderr_line(f"jobsight sidecar: {msg}")


def blank_row(uuid: str, index: int | None) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(FIELDS)
    row["device"] = uuid
    row["gpu_index"] = index
    return row
