"""What the idle alert reads from jobsight.toml (--config, else $JOBSIGHT_CONFIG): the idle threshold
and what an idle GPU costs per hour. Standard library only: the sidecar never imports
jobsight.analytics, so this reads the same keys with the meaning docs/charging.md gives them.

- `[flags] gpu_idle_pct`: a GPU under this utilisation is idle (the key ingest's gpu_idle flag uses).
  Without it, IDLE_PCT_DEFAULT below, the same value as ingest's default.
- The price: under `policy = "table"` (or `slurm-billing` outside Slurm, where jobs carry no billing)
  the `per_gpu_h` of the `[[charging.rates]]` row that applies to the job, picked as ingest picks it:
  the job's partition before '*', a row naming the job's GPU type before one naming none. Under
  `slurm-billing` on Slurm a GPU-hour costs what Slurm's TRESBillingWeights say, which the sidecar
  cannot see, so no price is given; nor for rates that come only from a `preset`.
A config the sidecar cannot read costs one stderr line and leaves the defaults: the job is not affected.
"""
from __future__ import annotations

import math
import re

# Utilisation % under which a GPU counts as idle, when jobsight.toml sets no [flags] gpu_idle_pct.
# Ingest's default for the same key is 1 too (tests/test_sidecar_idle.py keeps them equal).
IDLE_PCT_DEFAULT = 1.0
UNIT = "SBU"            # the CLI's name for the site's charging unit (docs/charging.md)
MAX_CONFIG_BYTES = 1 << 20


class IdleSettings:
    __slots__ = ("idle_pct", "price", "where")

    def __init__(self, idle_pct: float = IDLE_PCT_DEFAULT, price: float | None = None, where: str = "") -> None:
        self.idle_pct = idle_pct    # utilisation % under which a GPU is idle
        self.price = price          # what an idle GPU costs per hour, in UNIT; None = not known here
        self.where = where          # which rate gave the price ("partition gpu_a100")


def config_path(explicit: str | None, env: dict[str, str]) -> str | None:
    return explicit or env.get("JOBSIGHT_CONFIG") or None


def _load(path: str, warn) -> dict | None:
    try:
        import tomllib
    except ImportError:   # python3 older than 3.11 running collector/sidecar.py: no price, default threshold
        warn(f"jobsight sidecar: {path} not read (this Python has no tomllib); idle threshold {IDLE_PCT_DEFAULT:g} %, no price")
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError("larger than 1 MiB")
        return tomllib.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:   # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:120]
        warn(f"jobsight sidecar: cannot read {path} ({reason}); idle threshold {IDLE_PCT_DEFAULT:g} %, no price")
        return None


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _table(data: dict, key: str) -> dict:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def job_partition(env: dict[str, str]) -> str | None:
    for var in ("SLURM_JOB_PARTITION", "PBS_QUEUE", "LSB_QUEUE"):
        if env.get(var, "").strip():
            return env[var].strip()
    return None


# `--gres=gpu:a100:2` shows up as gres/gpu:a100:2 or gpu:a100:2 in Slurm's TRES variables, `--gpus=a100:2` as a100:2.
_TYPED = re.compile(r"gpu:([A-Za-z][\w.-]*):\d")


def job_gpu_types(env: dict[str, str], gpu_names: list[str]) -> tuple[set[str], list[str]]:
    """The GPU types the job asked for (from Slurm's variables), and its GPUs' NVML names (lower case)."""
    types = set()
    for var in ("SLURM_TRES_PER_NODE", "SLURM_TRES_PER_JOB", "SLURM_TRES_PER_TASK", "SLURM_JOB_GRES"):
        types.update(m.lower() for m in _TYPED.findall(env.get(var, "")))
    gpus = env.get("SLURM_GPUS", "")
    if ":" in gpus:
        types.add(gpus.split(":")[0].strip().lower())
    return types, [n.lower() for n in gpu_names]


def _type_matches(gpu_type: str, types: set[str], names: list[str]) -> bool:
    t = gpu_type.lower()
    # the NVML name as a last resort: gpu_type "a100" is a word of "nvidia a100-sxm4-80gb"
    return t in types or any(re.search(rf"(?<![a-z0-9]){re.escape(t)}(?![a-z0-9])", n) for n in names)


def pick_rate(rates: list, partition: str | None, types: set[str], names: list[str]) -> dict | None:
    """The [[charging.rates]] row ingest would apply: own partition before '*', typed before untyped."""
    best, best_key = None, None
    for rate in rates:
        if not isinstance(rate, dict) or not isinstance(rate.get("partition"), str):
            continue
        part, gtype = rate["partition"], rate.get("gpu_type")
        if part != "*" and part != partition:
            continue
        if gtype is not None and not (isinstance(gtype, str) and _type_matches(gtype, types, names)):
            continue
        key = (part == partition and partition is not None, gtype is not None)
        if best_key is None or key > best_key:   # the first row wins a tie, as rows are read in order
            best, best_key = rate, key
    return best


def idle_settings(explicit: str | None, env: dict[str, str], scheduler: str, gpu_names: list[str], warn) -> IdleSettings:
    """The idle threshold and price for this job; `warn(line)` for a config that cannot be used."""
    path = config_path(explicit, env)
    if path is None:
        return IdleSettings()
    data = _load(path, warn)
    if data is None:
        return IdleSettings()
    out = IdleSettings()
    pct = _table(data, "flags").get("gpu_idle_pct")
    if pct is not None:
        value = _number(pct)
        if value is None or value > 100:
            warn(f"jobsight sidecar: {path}: flags.gpu_idle_pct must be a number from 0 to 100, got {pct!r}; "
                 f"using {IDLE_PCT_DEFAULT:g}")
        else:
            out.idle_pct = value
    charging = _table(data, "charging")
    policy = charging.get("policy", "slurm-billing")
    if policy == "slurm-billing" and scheduler == "slurm":
        return out
    rates = charging.get("rates")
    if policy not in ("slurm-billing", "table") or not isinstance(rates, list):
        return out
    partition = job_partition(env)
    types, names = job_gpu_types(env, gpu_names)
    rate = pick_rate(rates, partition, types, names)
    price = _number(rate.get("per_gpu_h")) if rate else None
    if price:
        out.price = price
        where = "any partition" if rate["partition"] == "*" else f"partition {rate['partition']}"
        out.where = where + (f", GPU type {rate['gpu_type']}" if rate.get("gpu_type") else "")
    return out
