"""GPU sampling through one long-running `nvidia-smi --query-gpu=... -l N` child (no pynvml/NVML).

A background thread reads the child's CSV lines and keeps the latest values per GPU UUID; sample()
only copies them, so it costs nothing and never blocks. The child is terminated at close().
The inventory comes from one `nvidia-smi --query-gpu=index,uuid,name,driver_version` call at start.
nvidia-smi's query does not list MIG instances: this path measures whole GPUs only; energy and
SM activity are not available (blank).
"""
from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

from .gpu_rows import blank_row, warn
from .gpu_select import Inventory, job_gpu_uuids

QUERY = "uuid,index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm"
MIB = 1024 * 1024


def _num(cell: str, kind: type = float) -> Any:
    """'37' -> 37; '[N/A]', 'N/A', '[Not Supported]', '' ... -> None."""
    cell = cell.strip()
    try:
        return kind(float(cell)) if kind is int else float(cell)
    except ValueError:
        return None


def parse_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """One `--query-gpu=QUERY --format=csv,noheader,nounits` line -> (uuid, row fields); None if malformed."""
    cells = [c.strip() for c in line.rstrip("\n").split(",")]
    if len(cells) != 8 or not cells[0].startswith("GPU-"):
        return None
    uuid, _index, util, used, total, power, temp, clock = cells
    used_mib, total_mib = _num(used), _num(total)
    return uuid, {
        "util_pct": _num(util, int),
        "mem_used_bytes": int(used_mib * MIB) if used_mib is not None else None,
        "mem_total_bytes": int(total_mib * MIB) if total_mib is not None else None,
        "power_w": _num(power),
        "temperature_c": _num(temp, int),
        "sm_clock_mhz": _num(clock, int),
    }


class SmiGpuSource:
    method = "nvidia-smi"

    def __init__(self, smi: str, devices: list[dict[str, Any]], driver: str | None, interval: float):
        self.devices = devices
        self._driver = driver
        self._interval = interval
        self._latest: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._bad_lines = 0
        loop = ["-lms", str(max(100, int(interval * 1000)))] if interval < 1 else ["-l", str(int(round(interval)))]
        self._proc = subprocess.Popen([smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", *loop],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                      text=True, bufsize=1)
        self._thread = threading.Thread(target=self._read, name="jobsight-nvidia-smi", daemon=True)
        self._thread.start()
        self._exit_reported = False

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            parsed = parse_line(line)
            if parsed is None:
                if line.strip():
                    self._bad_lines += 1
                    if self._bad_lines == 1:
                        warn(f"nvidia-smi printed a line that is not {QUERY}: {line.strip()[:120]!r}; skipped")
                continue
            with self._lock:
                self._latest[parsed[0]] = (time.monotonic(), parsed[1])

    def sample(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        stale_after = 3 * self._interval + 5  # values older than this are not reported as current
        with self._lock:
            latest = dict(self._latest)
        if self._proc.poll() is not None and not self._exit_reported:
            self._exit_reported = True
            warn(f"nvidia-smi exited (code {self._proc.returncode}); GPU rows are blank from now on")
        rows = []
        for dev in self.devices:
            row = blank_row(dev["uuid"], dev["index"])
            got = latest.get(dev["uuid"])
            if got and now - got[0] <= stale_after:
                row.update(got[1])
            rows.append(row)
        return rows

    def meta(self) -> dict[str, Any]:
        return {"gpu_method": self.method, "driver_version": self._driver, "nvml_version": None,
                "gpus": list(self.devices)}

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._thread.join(timeout=1)
        if self._proc.stdout:
            self._proc.stdout.close()


def open_smi(smi: str, env: dict[str, str], interval: float) -> SmiGpuSource | None | str:
    """SmiGpuSource, None (no GPUs for this job), or why nvidia-smi cannot be used (a str)."""
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"running {smi} failed ({exc})"
    if out.returncode != 0:
        first = (out.stdout.strip() or out.stderr.strip()).splitlines()[:1]
        return f"{smi} failed with code {out.returncode}" + (f": {first[0]}" if first else "")
    inventory: list[Inventory] = []
    names: dict[str, str] = {}
    driver = None
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        inventory.append(Inventory(index=int(cells[0]), uuid=cells[1]))
        names[cells[1]] = cells[2]
        driver = driver or cells[3]
    inventory.sort(key=lambda g: g.index)
    uuids, problems = job_gpu_uuids(inventory, env)
    for p in problems:
        warn(p + (" (MIG instances are not listed by the nvidia-smi fallback)" if "MIG-" in p else ""))
    index = {g.uuid: g.index for g in inventory}
    devices = [{"uuid": u, "index": index[u], "name": names[u], "mig": False, "parent_uuid": None,
                "util_source": "nvidia-smi"} for u in uuids]
    if not devices:
        return None
    return SmiGpuSource(smi, devices, driver, interval)
