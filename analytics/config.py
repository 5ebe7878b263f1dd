"""jobsight.toml: charging policy, flag thresholds, budgets and roles.

Found at --config, else $JOBSIGHT_CONFIG, else ./jobsight.toml, else built-in defaults. Every
threshold the SQL views use is a `setting` row written from here (see sql/schema/0002_config.sql),
so the defaults live in exactly one place: DEFAULT_FLAGS and DEFAULT_CHARGING below.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analytics.render import select_list

# Defaults follow the anchors (../shared/docs/metrics-anchors.md): jobstats' GPU 25/15 %,
# CPU 65 %, its 300 s minimum runtime; Job Defense Shield's time-limit ratio 0.2.
DEFAULT_FLAGS: dict[str, float] = {
    "min_runtime_s": 300,
    "gpu_idle_pct": 1,
    "gpu_low_util_pct": 25,
    "gpu_low_util_alarm_pct": 15,
    "gpu_fits_smaller_mem_pct": 20,
    "gpu_fits_smaller_util_pct": 50,
    "cpu_low_eff_pct": 65,
    "cpu_low_eff_alarm_pct": 50,
    "cpu_serial_min_cores": 4,
    "cpu_serial_used_min": 0.85,
    "cpu_serial_used_max": 1.1,
    "mem_oversized_pct": 35,
    "mem_oversized_min_unused_gib": 4,
    "mem_headroom": 1.2,
    "time_oversized_pct": 20,
    "time_headroom": 1.5,
    "failed_burn_alarm_sbu": 100,
}
DEFAULT_SAMPLES: dict[str, float] = {"max_gap_s": 600}
POLICIES = ("slurm-billing", "table")
RATE_KEYS = ("per_core_h", "per_gpu_h", "per_gb_h", "min_cores", "min_gpus",
             "mem_per_core_gb", "cores_per_gpu", "mem_per_gpu_gb")

# SURF Snellius, from SURF's published partition weights (../shared/docs/charging.md).
SNELLIUS_RATES: list[dict[str, Any]] = [
    {"partition": "rome", "per_core_h": 1.0, "min_cores": 16, "mem_per_core_gb": 1.75},
    {"partition": "genoa", "per_core_h": 1.0, "min_cores": 24, "mem_per_core_gb": 1.75},
    {"partition": "fat_rome", "per_core_h": 1.5, "min_cores": 16},
    {"partition": "fat_genoa", "per_core_h": 1.5, "min_cores": 24},
    {"partition": "himem_4tb", "per_core_h": 2.0},
    {"partition": "himem_8tb", "per_core_h": 3.0},
    {"partition": "gpu_a100", "per_gpu_h": 128, "min_gpus": 1, "cores_per_gpu": 18, "mem_per_gpu_gb": 120},
    {"partition": "gpu_h100", "per_gpu_h": 192, "min_gpus": 1, "cores_per_gpu": 16, "mem_per_gpu_gb": 180},
]
PRESETS = {"snellius": SNELLIUS_RATES}


class ConfigError(ValueError):
    pass


@dataclass
class Config:
    path: Path | None = None
    policy: str = "slurm-billing"
    factor: float = 1.0
    rates: list[dict[str, Any]] = field(default_factory=list)
    flags: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FLAGS))
    samples: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SAMPLES))
    budgets: dict[str, float] = field(default_factory=dict)   # account -> SBU per period
    roles: dict[str, Any] = field(default_factory=dict)       # [roles] admins = [...], leads = {account = [users]}
    report: dict[str, Any] = field(default_factory=dict)      # [report], checked by analytics/reports/settings.py
    email: dict[str, Any] = field(default_factory=dict)       # [email], checked by analytics/reports/settings.py
    cluster: str | None = None

    def settings(self) -> list[tuple[str, float | None, str | None]]:
        rows: list[tuple[str, float | None, str | None]] = [
            ("charging.policy", None, self.policy), ("charging.factor", float(self.factor), None)]
        rows += [(f"flags.{k}", float(v), None) for k, v in self.flags.items()]
        rows += [(f"samples.{k}", float(v), None) for k, v in self.samples.items()]
        return rows


def find_config(explicit: str | os.PathLike | None = None) -> Path | None:
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        return p
    env = os.environ.get("JOBSIGHT_CONFIG")
    if env:
        p = Path(env)
        if not p.is_file():
            raise ConfigError(f"{p}: config file named by $JOBSIGHT_CONFIG not found")
        return p
    local = Path("jobsight.toml")
    return local if local.is_file() else None


def load_config(explicit: str | os.PathLike | None = None) -> Config:
    path = find_config(explicit)
    if path is None:
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, path)


def _number(path: Path | None, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: {key} must be a number, got {value!r}")
    return float(value)


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    cfg = Config(path=path)
    known = {"charging", "flags", "samples", "budgets", "roles", "cluster", "dashboard", "report", "email"}
    for key in data:
        if key not in known:
            raise ConfigError(f"{path}: unknown section or key [{key}] (known: {', '.join(sorted(known))})")
    if "cluster" in data:
        cfg.cluster = str(data["cluster"])
    charging = data.get("charging", {})
    for key in charging:
        if key not in ("policy", "factor", "preset", "rates"):
            raise ConfigError(f"{path}: unknown key charging.{key}")
    cfg.policy = charging.get("policy", cfg.policy)
    if cfg.policy not in POLICIES:
        raise ConfigError(f"{path}: charging.policy must be one of {', '.join(POLICIES)}, got {cfg.policy!r}")
    if "factor" in charging:
        cfg.factor = _number(path, "charging.factor", charging["factor"])
    if "preset" in charging:
        preset = charging["preset"]
        if preset not in PRESETS:
            raise ConfigError(f"{path}: unknown charging.preset {preset!r} (known: {', '.join(PRESETS)})")
        cfg.rates = [dict(r) for r in PRESETS[preset]]
    for i, rate in enumerate(charging.get("rates", [])):
        if "partition" not in rate:
            raise ConfigError(f"{path}: charging.rates[{i}] needs a partition ('*' for any)")
        for key, value in rate.items():
            if key not in RATE_KEYS + ("partition", "gpu_type"):
                raise ConfigError(f"{path}: unknown key charging.rates[{i}].{key}")
            if key in RATE_KEYS:
                _number(path, f"charging.rates[{i}].{key}", value)
        # a rate given for a partition replaces the preset's for that partition and GPU type
        cfg.rates = [r for r in cfg.rates
                     if (r["partition"], r.get("gpu_type")) != (rate["partition"], rate.get("gpu_type"))]
        cfg.rates.append(dict(rate))
    for section, target in (("flags", cfg.flags), ("samples", cfg.samples)):
        for key, value in data.get(section, {}).items():
            if key not in target:
                raise ConfigError(f"{path}: unknown key {section}.{key} (known: {', '.join(sorted(target))})")
            target[key] = _number(path, f"{section}.{key}", value)
    for account, value in data.get("budgets", {}).items():
        cfg.budgets[account] = _number(path, f"budgets.{account}", value)
    cfg.roles = dict(data.get("roles", {}))
    cfg.report = dict(data.get("report", {}))
    cfg.email = dict(data.get("email", {}))
    return cfg


def apply_to_db(con, cfg: Config) -> None:
    """Write settings and charge rates into the database the SQL views read (one transaction)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM setting")
        con.executemany("INSERT INTO setting (name, value, text) VALUES (?, ?, ?)", cfg.settings())
        con.execute("DELETE FROM charge_rate")
        cols = ("partition", "gpu_type") + RATE_KEYS
        for rate in cfg.rates:
            values = [rate.get("partition"), rate.get("gpu_type")]
            values += [rate.get(k, 0 if k in ("per_core_h", "per_gpu_h", "per_gb_h", "min_cores", "min_gpus") else None)
                       for k in RATE_KEYS]
            placeholders = ", ".join("?" for _ in cols)
            con.execute(f"INSERT INTO charge_rate ({select_list(cols)}) VALUES ({placeholders})", values)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
