"""The job's GPUs, sampled through NVML (nvidia-ml-py's `pynvml`), else through nvidia-smi.

    src = open_gpus(os.environ, mode="auto", interval=10.0)   # None: no GPUs / no NVML
    rows = src.sample()      # one dict per device, keys = CSV column names, None = blank
    src.meta(); src.close()

NVML is initialised once and device handles are cached; devices are keyed by UUID, never by index.
Per field and device: NotSupported / FunctionNotFound / NoPermission -> blank and never asked again
(memory info v2 falls back to v1 first). A lost GPU (GpuIsLost, GpuNotFound, ResetRequired, or
Unknown/NotFound from a field that worked before) is reported once on stderr; its row is still
emitted every sample, with every measurement blank, and the other GPUs keep being sampled.

MIG: a GPU in MIG mode yields one row for the physical GPU (power, energy, clocks, temperature, total
memory; utilisation is not available in MIG mode) plus one row per MIG instance: its own memory (memory
info on the MIG handle) and, as its utilisation, its GPM SM activity (NVML answers NotSupported for
utilisation on a MIG handle, asked once at open). Power, energy, temperature and clocks belong to the
shared parent and cannot be split: they are never read for an instance, so its row leaves them blank
and a job holding an instance is never given the parent's. A job given only a MIG instance
(CUDA_VISIBLE_DEVICES=MIG-...) gets just that instance's row. sm_active_pct comes from GPM (Hopper+;
for a MIG instance through its parent and GPU instance id); it is blank on the first sample (GPM needs
two samples) and where GPM is unsupported. meta()'s `util_source` per device says where util_pct
comes from: `nvml` (utilisation), `gpm` (SM activity), or None (never available).

Never raises out of sample(); imports pynvml lazily so the sidecar runs where it is absent.
"""
from __future__ import annotations

import shutil
from typing import Any, Callable

from .gpu_rows import blank_row, warn
from .gpu_select import Inventory, job_gpu_uuids


class _Device:
    """One sampled device (a whole GPU or a MIG instance) with its cached handle and field state."""

    def __init__(self, handle: Any, uuid: str, index: int, name: str, mig: bool, parent_uuid: str | None):
        self.handle = handle
        self.uuid = uuid
        self.index = index            # NVML index of the GPU (the parent's for a MIG instance)
        self.name = name
        self.mig = mig
        self.parent_uuid = parent_uuid
        self.readers: dict[str, Callable[["_Device", dict], None]] = {}  # field group -> reader
        self.worked: set[str] = set()  # field groups that returned a value at least once
        self.lost = False
        self.gpm: Any = None          # (sample_a, sample_b, metrics struct, have_previous) when supported
        self.gpm_instance: Any = None  # MIG only: (parent handle, GPU instance id) for nvmlGpmMigSampleGet
        self.util_source: str | None = None  # what util_pct holds: "nvml" utilisation, "gpm" SM activity

    def info(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "index": self.index, "name": self.name, "mig": self.mig,
                "parent_uuid": self.parent_uuid, "util_source": self.util_source}


class NvmlGpuSource:
    """GpuSource over NVML. Construct through open_gpus()."""

    method = "nvml"

    def __init__(self, nvml: Any, devices: list[_Device]):
        self._nvml = nvml
        self._devs = devices
        self.devices = [d.info() for d in devices]
        self._closed = False
        n = nvml
        # error codes grouped by what they mean for a field
        self._skip_field = {n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND,
                            n.NVML_ERROR_NO_PERMISSION, n.NVML_ERROR_INVALID_ARGUMENT}
        self._lost = {n.NVML_ERROR_GPU_IS_LOST, getattr(n, "NVML_ERROR_GPU_NOT_FOUND", 28),
                      n.NVML_ERROR_RESET_REQUIRED}
        self._lost_if_worked = {n.NVML_ERROR_UNKNOWN, n.NVML_ERROR_NOT_FOUND}
        self._driver = self._nvml_str(n.nvmlSystemGetDriverVersion)
        self._nvml_version = self._nvml_str(n.nvmlSystemGetNVMLVersion)

    def _nvml_str(self, fn: Callable[[], Any]) -> str | None:
        try:
            v = fn()
            return v.decode() if isinstance(v, bytes) else str(v)
        except Exception:
            return None

    def meta(self) -> dict[str, Any]:
        return {"gpu_method": self.method, "driver_version": self._driver,
                "nvml_version": self._nvml_version, "gpus": list(self.devices)}

    def sample(self) -> list[dict[str, Any]]:
        rows = []
        for d in self._devs:
            row = blank_row(d.uuid, d.index)
            if not d.lost and not self._closed:
                try:
                    self._sample_device(d, row)
                except Exception:  # belt and braces: sample() must never raise
                    row = blank_row(d.uuid, d.index)
            rows.append(row)
        return rows

    def _sample_device(self, d: _Device, row: dict[str, Any]) -> None:
        NVMLError = self._nvml.NVMLError
        for group, reader in list(d.readers.items()):
            try:
                reader(d, row)
                d.worked.add(group)
            except NVMLError as exc:
                code = exc.value
                if group == "mem" and code in (self._nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                               self._nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH) \
                        and reader is _read_mem_v2:
                    d.readers["mem"] = _read_mem_v1  # driver older than R510: no v2 struct
                    try:
                        _read_mem_v1(d, row)
                        d.worked.add(group)
                        continue
                    except NVMLError as exc2:
                        code = exc2.value
                if code in self._lost or (code in self._lost_if_worked and group in d.worked):
                    d.lost = True
                    row.update(blank_row(d.uuid, d.index))
                    warn(f"GPU {d.uuid} (index {d.index}) lost ({exc}); its rows stay blank, other GPUs are still sampled")
                    return
                if code in self._skip_field and not (group == "gpm" and code == self._nvml.NVML_ERROR_INVALID_ARGUMENT):
                    self._drop(d, group)  # blank from now on, never asked again
                # any other error (and a GPM sample pair NVML rejects): blank this time, ask again next sample
            except Exception as exc:  # not an NVML error (a binding problem): drop the field, say so once
                self._drop(d, group)
                warn(f"GPU {d.uuid}: reading {group} failed ({exc!r}); left blank from now on")

    def _drop(self, d: _Device, group: str) -> None:
        d.readers.pop(group, None)
        if group == "gpm":
            self._free_gpm(d)

    def _free_gpm(self, d: _Device) -> None:
        if d.gpm is not None:
            for s in d.gpm[:2]:
                try:
                    self._nvml.nvmlGpmSampleFree(s)
                except Exception:
                    pass
            d.gpm = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for d in self._devs:
            self._free_gpm(d)
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


# ---- field readers: (device, row) -> None, raising pynvml.NVMLError ----
# They reach pynvml through the module object bound at open time (see _bind).
_n: Any = None


def _read_util(d: _Device, row: dict) -> None:
    row["util_pct"] = _n.nvmlDeviceGetUtilizationRates(d.handle).gpu


def _read_mem_v2(d: _Device, row: dict) -> None:
    m = _n.nvmlDeviceGetMemoryInfo(d.handle, version=_n.nvmlMemory_v2)
    row["mem_used_bytes"] = m.used
    row["mem_total_bytes"] = m.total


def _read_mem_v1(d: _Device, row: dict) -> None:
    m = _n.nvmlDeviceGetMemoryInfo(d.handle)
    row["mem_used_bytes"] = m.used
    row["mem_total_bytes"] = m.total


def _read_power(d: _Device, row: dict) -> None:
    row["power_w"] = _n.nvmlDeviceGetPowerUsage(d.handle) / 1000.0


def _read_energy(d: _Device, row: dict) -> None:
    row["energy_j"] = _n.nvmlDeviceGetTotalEnergyConsumption(d.handle) / 1000.0


def _read_clock(d: _Device, row: dict) -> None:
    row["sm_clock_mhz"] = _n.nvmlDeviceGetClockInfo(d.handle, _n.NVML_CLOCK_SM)


def _read_temp(d: _Device, row: dict) -> None:
    row["temperature_c"] = _n.nvmlDeviceGetTemperature(d.handle, _n.NVML_TEMPERATURE_GPU)


def _read_gpm(d: _Device, row: dict) -> None:
    """SM activity from two GPM samples: the previous call's and this one's (alternating buffers)."""
    a, b, mg, have_prev = d.gpm
    if d.gpm_instance is None:
        _n.nvmlGpmSampleGet(d.handle, b)
    else:  # MIG: sampled through the parent GPU, per GPU instance
        _n.nvmlGpmMigSampleGet(d.gpm_instance[0], d.gpm_instance[1], b)
    if have_prev:
        mg.sample1, mg.sample2 = a, b
        mg.numMetrics = 1
        mg.metrics[0].metricId = _n.NVML_GPM_METRIC_SM_UTIL
        _n.nvmlGpmMetricsGet(mg)
        if mg.metrics[0].nvmlReturn == _n.NVML_SUCCESS:
            row["sm_active_pct"] = round(mg.metrics[0].value, 2)
            if d.util_source == "gpm":  # a MIG instance: NVML has no utilisation for it
                row["util_pct"] = row["sm_active_pct"]
    d.gpm = (b, a, mg, True)


def _setup_gpm(d: _Device, parent_handle: Any) -> bool:
    """Allocate GPM buffers when the device supports GPM (Hopper+); False otherwise.

    A MIG instance is sampled through its parent GPU and its GPU instance id (nvmlGpmMigSampleGet)."""
    n = _n
    if not hasattr(n, "nvmlGpmQueryDeviceSupport"):
        return False
    try:
        if d.mig:
            if not hasattr(n, "nvmlGpmMigSampleGet"):
                return False
            d.gpm_instance = (parent_handle, n.nvmlDeviceGetGpuInstanceId(d.handle))
        if not n.nvmlGpmQueryDeviceSupport(parent_handle if d.mig else d.handle).isSupportedDevice:
            return False
        a, b = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    except n.NVMLError:
        return False
    mg = n.c_nvmlGpmMetricsGet_t()  # ~19 kB: allocated once, reused every sample
    mg.version = n.NVML_GPM_METRICS_GET_VERSION
    d.gpm = (a, b, mg, False)
    return True


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _enumerate(n: Any) -> tuple[list[Inventory], dict[str, tuple]]:
    """Every GPU and MIG instance NVML shows: inventory for selection + uuid -> (handle, index, name, parent)."""
    inventory: list[Inventory] = []
    found: dict[str, tuple] = {}
    for i in range(n.nvmlDeviceGetCount()):
        try:
            h = n.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(n.nvmlDeviceGetUUID(h))
        except n.NVMLError as exc:
            warn(f"GPU index {i}: cannot open it through NVML ({exc}); skipped")
            continue
        try:
            name = _text(n.nvmlDeviceGetName(h))
        except n.NVMLError:
            name = ""
        inv = Inventory(index=i, uuid=uuid)
        found[uuid] = (h, i, name, None)
        try:
            mig_on = n.nvmlDeviceGetMigMode(h)[0] == n.NVML_DEVICE_MIG_ENABLE
        except (n.NVMLError, AttributeError):
            mig_on = False  # not MIG capable (NotSupported) or binding/driver too old
        inv.mig_mode = mig_on
        if mig_on:
            for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                    muuid = _text(n.nvmlDeviceGetUUID(mh))
                except n.NVMLError:
                    continue  # NotFound: no instance in this slot
                try:
                    mname = _text(n.nvmlDeviceGetName(mh))
                except n.NVMLError:
                    mname = name
                inv.migs.append(muuid)
                found[muuid] = (mh, i, mname, uuid)
        inventory.append(inv)
    return inventory, found


def _open_nvml(env: dict[str, str]) -> NvmlGpuSource | None | str:
    """NvmlGpuSource, None (no GPUs for this job), or the reason NVML is unusable (a str)."""
    global _n
    try:
        import pynvml
    except ImportError:
        return "the nvidia-ml-py package (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver on this node?)"
    except pynvml.NVMLError as exc:
        return f"NVML initialisation failed ({exc})"
    _n = pynvml
    try:
        inventory, found = _enumerate(pynvml)
        uuids, problems = job_gpu_uuids(inventory, env)
        for p in problems:
            warn(p)
        devices: list[_Device] = []
        for uuid in uuids:
            # a whole GPU in MIG mode brings its instances along; a MIG uuid comes alone
            members = [uuid] + next((g.migs for g in inventory if g.uuid == uuid), [])
            for u in members:
                if any(d.uuid == u for d in devices):
                    continue
                h, idx, name, parent = found[u]
                mig_mode = any(g.uuid == u and g.mig_mode for g in inventory)
                devices.append(_new_device(h, u, idx, name, parent, found[parent][0] if parent else None, mig_mode))
        if not devices:
            pynvml.nvmlShutdown()
            if inventory and not problems and (env.get("CUDA_VISIBLE_DEVICES") or env.get("SLURM_JOB_GPUS")):
                warn("none of this job's GPUs is visible through NVML; recording CPU only")
            return None
        return NvmlGpuSource(pynvml, devices)
    except Exception:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
        raise


def _new_device(handle: Any, uuid: str, index: int, name: str, parent: str | None, parent_handle: Any,
                mig_mode: bool) -> _Device:
    d = _Device(handle, uuid, index, name, mig=parent is not None, parent_uuid=parent)
    mem = _read_mem_v2 if hasattr(_n, "nvmlMemory_v2") else _read_mem_v1
    if d.mig:
        # Only the instance's own readings: power, energy, clocks and temperature are the parent's.
        d.readers = {"mem": mem}
        if _answers(_n.nvmlDeviceGetUtilizationRates, d.handle):  # NotSupported on every driver so far
            d.readers["util"] = _read_util
    else:
        d.readers = {"util": _read_util, "mem": mem, "power": _read_power, "energy": _read_energy,
                     "clock": _read_clock, "temp": _read_temp}
        if mig_mode:
            del d.readers["util"]  # NVML has no whole-GPU utilisation in MIG mode
    if "util" in d.readers:
        d.util_source = "nvml"
    if _setup_gpm(d, parent_handle):
        d.readers["gpm"] = _read_gpm
        if d.mig and d.util_source is None:
            d.util_source = "gpm"
    return d


def _answers(fn: Callable[[Any], Any], handle: Any) -> bool:
    """Whether one NVML query succeeds on this handle (any error: no)."""
    try:
        fn(handle)
        return True
    except Exception:
        return False


def open_gpus(env: dict[str, str], mode: str = "auto", interval: float = 10.0):
    """The job's GPUs as a GpuSource (NVML, else nvidia-smi), or None: no GPUs, mode 'none', or no way to read them.

    mode: 'auto' (NVML, falling back to nvidia-smi), 'none', 'nvml' or 'nvidia-smi' (force one method).
    Prints at most one line to stderr when GPU monitoring was possible in principle but failed.
    """
    if mode == "none":
        return None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "NoDevFiles"):
        return None  # the job was given no GPUs
    try:
        reason = None
        if mode in ("auto", "nvml"):
            res = _open_nvml(env)
            if not isinstance(res, str):
                return res
            reason = res
        smi = shutil.which("nvidia-smi", path=env.get("PATH"))
        if mode in ("auto", "nvidia-smi") and smi:
            from .smi_fallback import open_smi
            src = open_smi(smi, env, interval)
            if not isinstance(src, str):
                if src is not None and reason:
                    warn(f"{reason}; sampling GPUs through nvidia-smi instead")
                return src
            reason = f"{reason}; {src}" if reason else src
        if reason is None:
            reason = "nvidia-smi not found on PATH"
        warn(f"no GPU monitoring: {reason}; recording CPU only")
        return None
    except Exception as exc:  # whatever happens, the sidecar goes on CPU-only
        warn(f"no GPU monitoring: unexpected error {exc!r}; recording CPU only")
        return None
