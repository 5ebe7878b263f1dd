"""jobsight.toml: charging policy, flag thresholds, advice, budgets and roles.

Found at --config, else $JOBSIGHT_CONFIG, else ./jobsight.toml, else built-in defaults. Every
threshold the SQL views use is a `setting` row written from here (see sql/schema/0002_config.sql),
so the defaults live in exactly one place: DEFAULT_FLAGS, DEFAULT_SAMPLES, DEFAULT_ADVICE and
DEFAULT_BUDGET below.
"""
from __future__ import annotations

import datetime as dt
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobsight.analytics.errors import shown as _show
from jobsight.analytics.ingest import billing_weights, budgets

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
    # the dashboard's Running now: a running job's GPU under gpu_idle_pct for this many minutes of
    # its latest samples is wasting now (the sidecar's --idle-alert default)
    "running_gpu_idle_min": 30,
}
DEFAULT_SAMPLES: dict[str, float] = {"max_gap_s": 600}
# [watch]: `jobsight watch` notifies the owner of a running job whose GPUs have been idle (under
# flags.gpu_idle_pct) for idle_hours, at most max_per_user_per_day notices per user in 24 hours
# (sql/views/80_watch.sql reads both); opt_out (users never notified) and every (the time between
# cycles, when --every is not given) are [watch] keys too, not numbers: WATCH_KEYS.
DEFAULT_WATCH: dict[str, float] = {"idle_hours": 2, "max_per_user_per_day": 3}
WATCH_KEYS = tuple(DEFAULT_WATCH) + ("opt_out", "every")
DEFAULT_WATCH_EVERY = "15m"
# [advice]: the site's cheaper places for the advised request. "", 0 and [] mean "none": the request
# stays in the job's partition.
DEFAULT_ADVICE: dict[str, Any] = {
    "cpu_partition": "",
    "mem_partition": "",
    "mem_partition_node_gib": 0,
    "fat_partitions": [],
    "small_gpu_partition": "",
}
# The allocation period and alert levels of budgets (sql/views/55_budget.sql): `period` and
# `start` are [report] budget_period and budget_start (periods are start + k x period; 2001-01-01
# is a Monday, so the default gives calendar weeks, months, quarters and years), the levels are
# [budget_options] warn_pct and over_pct (percent of the allocation used).
DEFAULT_BUDGET: dict[str, Any] = {"period": "month", "start": "2001-01-01", "warn_pct": 80, "over_pct": 100}
BUDGET_PERIODS = ("week", "month", "quarter", "year")
BUDGET_OPTION_KEYS = ("warn_pct", "over_pct", "assoc_file")
# [advice] keys that are not settings: the billing weights they give go to the billing_weight table
ADVICE_WEIGHT_KEYS = ("partitions_file", "billing_weights")
POLICIES = ("slurm-billing", "table")
RATE_KEYS = ("per_core_h", "per_gpu_h", "per_gb_h", "min_cores", "min_gpus",
             "mem_per_core_gb", "cores_per_gpu", "mem_per_gpu_gb")
RATE_DIVISORS = ("mem_per_core_gb", "cores_per_gpu", "mem_per_gpu_gb")

# The range of every number in jobsight.toml that must be more than "not negative" (the rule of all
# the others: rates, sizes, counts, times, SBU and budgets), checked by _Checker.number. A
# threshold outside its range would flag every job or none; a factor of -1 would make every SBU
# negative; a headroom under 1 would advise requests the job already outgrew.
PCT, POSITIVE, NOT_NEGATIVE, AT_LEAST_1 = "pct", ">0", ">=0", ">=1"
RANGES: dict[str, str] = {
    "charging.factor": POSITIVE,
    **{f"flags.{k}": PCT for k in DEFAULT_FLAGS if k.endswith("_pct")},
    "flags.mem_headroom": AT_LEAST_1,
    "flags.time_headroom": AT_LEAST_1,
    "flags.running_gpu_idle_min": POSITIVE,     # 0 would call every running GPU idle now
    "samples.max_gap_s": POSITIVE,              # 0 would weigh every sample 0
    "watch.idle_hours": POSITIVE,
    "budget_options.warn_pct": POSITIVE,
    "budget_options.over_pct": POSITIVE,
    **{f"charging.rates.{k}": POSITIVE for k in RATE_DIVISORS},   # they divide requests
}
_RANGE_TEXT = {PCT: "must be from 0 to 100", POSITIVE: "must be greater than 0", NOT_NEGATIVE: "must not be negative",
               AT_LEAST_1: "must be at least 1"}
_IN_RANGE = {PCT: lambda x: 0 <= x <= 100, POSITIVE: lambda x: x > 0, NOT_NEGATIVE: lambda x: x >= 0,
             AT_LEAST_1: lambda x: x >= 1}


def range_of(key: str) -> str:
    """The range rule of a dotted key ("flags.gpu_idle_pct"; a rate by "charging.rates.per_gpu_h")."""
    return RANGES.get(key, NOT_NEGATIVE)

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
    budgets: dict[str, float] = field(default_factory=dict)   # "account" or "account/user" -> SBU per period
    budget: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_BUDGET))
    # (cluster, account, user) -> billing-minutes, from a saved `sacctmgr show assoc` ([budget_options] assoc_file)
    file_budgets: dict[tuple, float] = field(default_factory=dict)
    roles: dict[str, Any] = field(default_factory=dict)       # [roles] admins = [...], leads = {account = [users]}
    report: dict[str, Any] = field(default_factory=dict)      # [report], checked by analytics/reports/settings.py
    email: dict[str, Any] = field(default_factory=dict)       # [email], checked by analytics/reports/settings.py
    cluster: str | None = None
    metrics_token_file: Path | None = None   # [dashboard]: the file holding /metrics' bearer token
    dashboard_munge: bool = False            # [dashboard] munge: accept MUNGE credentials (dashboard/munge_auth.py)
    client_server: str | None = None         # [client] server: the dashboard the read commands ask (analytics/client.py)
    advice: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ADVICE))
    # partition -> TRESBillingWeights, from [advice.billing_weights] and from [advice] partitions_file
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    file_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    watch: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WATCH))
    watch_opt_out: list[str] = field(default_factory=list)
    watch_every: str = DEFAULT_WATCH_EVERY
    read_scope: str = "all"       # [database] read_scope: what the read commands show whoever runs them
    db_group: str | None = None   # [database] group: may read the database files (0640); None: the owner only (0600)
    lake_path: str | None = None  # [lake] path: the Parquet lake (`jobsight prune`, a pruned job's samples)
    samples_days: int | None = None   # [retention] samples_days: samples older than this move to the lake

    def settings(self) -> list[tuple[str, float | None, str | None]]:
        rows: list[tuple[str, float | None, str | None]] = [
            ("charging.policy", None, self.policy), ("charging.factor", float(self.factor), None)]
        rows += [(f"flags.{k}", float(v), None) for k, v in self.flags.items()]
        rows += [(f"samples.{k}", float(v), None) for k, v in self.samples.items()]
        for k, v in self.advice.items():
            # a list is one text (partition names hold no comma); numbers are values
            text = ",".join(v) if isinstance(v, list) else v
            rows.append((f"advice.{k}", None, text) if isinstance(text, str) else (f"advice.{k}", float(v), None))
        rows += [(f"budget.{k}", None, v) if isinstance(v, str) else (f"budget.{k}", float(v), None)
                 for k, v in self.budget.items()]
        rows += [(f"watch.{k}", float(v), None) for k, v in self.watch.items()]
        rows.append(("watch.opt_out", None, ",".join(self.watch_opt_out)))   # a user name holds no comma
        return rows

    def budget_rows(self) -> list[tuple]:
        """[budgets] as budget-table rows (cluster, account, user, amount, unit, source), in SBU."""
        out = []
        for key, amount in sorted(self.budgets.items()):
            account, _, user = key.partition("/")
            out.append((None, account, user or None, amount, "sbu", "config"))
        return out


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
    try:
        return local if local.is_file() else None
    except PermissionError:     # a working directory this user may not search holds no config of theirs
        return None


def load_config(explicit: str | os.PathLike | None = None) -> Config:
    path = find_config(explicit)
    if path is None:
        return Config()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: not valid TOML: not UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (ValueError, RecursionError) as exc:   # an integer over 4300 digits; arrays nested too deep
        raise ConfigError(f"{path}: not usable TOML: {str(exc)[:120]}") from None
    return parse_config(data, path, text)


_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*([^\]]*?)\s*\]")
_KEY_RE = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def _unquote(dotted: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in dotted.split("."))


def key_line(text: str | None, key: str) -> int | None:
    """Best-effort 1-based line of a dotted key ("flags.min_runtime_s", "charging.rates[1].per_gpu_h",
    "flags" for a section) in the TOML text, for error messages; None when not found (inline tables)."""
    if not text:
        return None
    counts: dict[str, int] = {}
    table = ""
    for no, line in enumerate(text.splitlines(), 1):
        m = _HEADER_RE.match(line)
        if m:
            name = _unquote(m.group(2))
            if m.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                name = f"{name}[{counts[name]}]"
            table = name
            if key == table or key == table.split("[")[0]:
                return no
            continue
        m = _KEY_RE.match(line)
        if m:
            full = _unquote(m.group(1))
            if (f"{table}.{full}" if table else full) == key:
                return no
    return None


def _name(key: str) -> str:
    """A key in an error message: as written when it is a plain name, else quoted and cut short."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]{1,60}", key) else _show(key)


class _Checker:
    """Raises ConfigError naming the file, the key's line when it can be found, and the key."""

    def __init__(self, path: Path | None, text: str | None):
        self.path, self.text = path, text

    def fail(self, key: str, message: str) -> None:
        line = key_line(self.text, key)
        where = f"{self.path}, line {line}" if line else f"{self.path}"
        raise ConfigError(f"{where}: {message}")

    def table(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, f"{key} must be a table ([{key}] with key = value lines), got {_show(value)}")
        return value

    def string(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            self.fail(key, f"{key} must be a string, got {_show(value)}")
        return value

    def number(self, key: str, value: Any, within: str = NOT_NEGATIVE) -> float:
        """A finite number in the range ``within`` (RANGES)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"{key} must be a number, got {_show(value)}")
        try:
            out = float(value)
        except OverflowError:
            out = math.inf
        if not math.isfinite(out):
            self.fail(key, f"{key} must be a finite number, got {_show(value)}")
        if not _IN_RANGE[within](out):
            self.fail(key, f"{key} {_RANGE_TEXT[within]}, got {_show(value)}")
        return out


def parse_config(data: dict[str, Any], path: Path | None = None, text: str | None = None) -> Config:
    """Check and apply a parsed jobsight.toml; `text` (the file's text) only helps name lines."""
    cfg = Config(path=path)
    check = _Checker(path, text)
    known = {"charging", "flags", "samples", "budgets", "budget_options", "roles", "cluster", "dashboard", "report", "email", "advice",
             "watch", "database", "client", "lake", "retention"}
    for key in data:
        if key not in known:
            check.fail(key, f"unknown section or key [{_name(key)}] (known: {', '.join(sorted(known))})")
    for key in known - {"cluster"}:
        if key in data:
            check.table(key, data[key])
    if "cluster" in data:
        cfg.cluster = check.string("cluster", data["cluster"])
    charging = data.get("charging", {})
    for key in charging:
        if key not in ("policy", "factor", "preset", "rates"):
            check.fail(f"charging.{key}", f"unknown key charging.{_name(key)}")
    cfg.policy = charging.get("policy", cfg.policy)
    if not isinstance(cfg.policy, str) or cfg.policy not in POLICIES:
        check.fail("charging.policy", f"charging.policy must be one of {', '.join(POLICIES)}, got {_show(cfg.policy)}")
    if "factor" in charging:
        cfg.factor = check.number("charging.factor", charging["factor"], range_of("charging.factor"))
    if "preset" in charging:
        preset = charging["preset"]
        if not isinstance(preset, str) or preset not in PRESETS:
            check.fail("charging.preset", f"unknown charging.preset {_show(preset)} (known: {', '.join(PRESETS)})")
        cfg.rates = [dict(r) for r in PRESETS[preset]]
    rates = charging.get("rates", [])
    if not isinstance(rates, list):
        check.fail("charging.rates", f"charging.rates must be a list of tables ([[charging.rates]]), got {_show(rates)}")
    for i, rate in enumerate(rates):
        where = f"charging.rates[{i}]"
        check.table(where, rate)
        if "partition" not in rate:
            check.fail(where, f"{where} needs a partition ('*' for any)")
        for key, value in rate.items():
            if key not in RATE_KEYS + ("partition", "gpu_type"):
                check.fail(f"{where}.{key}", f"unknown key {where}.{_name(key)}")
            if key in RATE_KEYS:
                check.number(f"{where}.{key}", value, range_of(f"charging.rates.{key}"))
            else:
                check.string(f"{where}.{key}", value)
        # a rate given for a partition replaces the preset's for that partition and GPU type
        cfg.rates = [r for r in cfg.rates
                     if (r["partition"], r.get("gpu_type")) != (rate["partition"], rate.get("gpu_type"))]
        cfg.rates.append(dict(rate))
    for section, target in (("flags", cfg.flags), ("samples", cfg.samples)):
        for key, value in data.get(section, {}).items():
            if key not in target:
                check.fail(f"{section}.{key}", f"unknown key {section}.{_name(key)} (known: {', '.join(sorted(target))})")
            target[key] = check.number(f"{section}.{key}", value, range_of(f"{section}.{key}"))
    _parse_advice(cfg, check, data.get("advice", {}))
    _parse_watch(cfg, check, data.get("watch", {}))
    for account, value in data.get("budgets", {}).items():
        cfg.budgets[account] = check.number(f"budgets.{_name(account)}", value)   # not negative
        parts = account.split("/")
        if len(parts) > 2 or not all(parts):
            check.fail(f"budgets.{account}", f"budgets.{_name(account)}: a budget key is an account or "
                                             "\"account/user\"")
    _parse_budget(cfg, check, data.get("budget_options", {}), data.get("report", {}))
    cfg.roles = dict(data.get("roles", {}))
    cfg.report = dict(data.get("report", {}))
    cfg.email = dict(data.get("email", {}))
    _parse_dashboard(cfg, check, data.get("dashboard", {}))
    _parse_database(cfg, check, data.get("database", {}))
    _parse_client(cfg, check, data.get("client", {}))
    _parse_retention(cfg, check, data.get("lake", {}), data.get("retention", {}))
    return cfg


def _parse_retention(cfg: Config, check: _Checker, lake: dict[str, Any], retention: dict[str, Any]) -> None:
    """[lake] path and [retention] samples_days (analytics/store/prune.py): both or neither."""
    for section, table, known in (("lake", lake, "path"), ("retention", retention, "samples_days")):
        for key in table:
            if key != known:
                check.fail(f"{section}.{key}", f"unknown key {section}.{_name(key)} (known: {known})")
    if "path" in lake:
        path = check.string("lake.path", lake["path"])
        cfg.lake_path = path if "://" in path or cfg.path is None else str(cfg.path.parent / path)
    if "samples_days" in retention:
        days = check.number("retention.samples_days", retention["samples_days"], AT_LEAST_1)
        if days != int(days):
            check.fail("retention.samples_days", f"retention.samples_days must be a whole number of days, got {_show(days)}")
        if cfg.lake_path is None:
            check.fail("retention.samples_days", "retention.samples_days needs [lake] path: samples leave the "
                                                 "database only once the lake holds them")
        cfg.samples_days = int(days)


def _parse_client(cfg: Config, check: _Checker, client: dict[str, Any]) -> None:
    """[client] server: the URL of the jobsight dashboard `job`, `flags`, `usage` and `report` ask (analytics/client.py)."""
    for key, value in client.items():
        if key != "server":
            check.fail(f"client.{key}", f"unknown key client.{_name(key)} (known: server)")
        url = check.string("client.server", value)
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", url):
            check.fail("client.server", f"client.server must be an http:// or https:// URL, got {_show(url)}")
        cfg.client_server = url


READ_SCOPES = ("all", "own")


def _parse_database(cfg: Config, check: _Checker, database: dict[str, Any]) -> None:
    """[database] group: the Unix group that may read the database and its snapshot (0640)."""
    import grp
    for key, value in database.items():
        if key == "read_scope":
            scope = check.string("database.read_scope", value)
            if scope not in READ_SCOPES:
                check.fail("database.read_scope", f"database.read_scope must be one of {', '.join(READ_SCOPES)}, "
                                                  f"got {_show(scope)}")
            cfg.read_scope = scope
            continue
        if key != "group":
            check.fail(f"database.{key}", f"unknown key database.{_name(key)} (known: group, read_scope)")
        name = check.string("database.group", value)
        try:
            grp.getgrnam(name)
        except KeyError:
            check.fail("database.group", f"database.group: no such group {_show(name)}")
        cfg.db_group = name


def _parse_advice(cfg: Config, check: _Checker, advice: dict[str, Any]) -> None:
    known = sorted(list(DEFAULT_ADVICE) + list(ADVICE_WEIGHT_KEYS))
    for key, value in advice.items():
        where = f"advice.{key}"
        if key not in known:
            check.fail(where, f"unknown key advice.{_name(key)} (known: {', '.join(known)})")
        if key == "mem_partition_node_gib":
            cfg.advice[key] = check.number(where, value, range_of(where))
        elif key == "fat_partitions":
            if not isinstance(value, list):
                check.fail(where, f"{where} must be a list of partition names, got {_show(value)}")
            cfg.advice[key] = [_partition(check, where, v) for v in value]
        elif key == "billing_weights":
            for part, text in check.table(where, value).items():
                try:
                    cfg.weights[part] = billing_weights.parse_weights(check.string(f"{where}.{_name(part)}", text))
                except billing_weights.WeightsError as exc:
                    check.fail(f"{where}.{part}", f"{where}.{_name(part)}: {exc}")
        elif key == "partitions_file":
            path = Path(check.string(where, value))
            if not path.is_absolute() and cfg.path is not None:
                path = cfg.path.parent / path       # beside the config file, whatever the working directory
            try:
                cfg.file_weights = billing_weights.read_file(path)
            except billing_weights.WeightsError as exc:
                check.fail(where, f"{where}: {exc}")
        else:
            cfg.advice[key] = _partition(check, where, value)


def _parse_watch(cfg: Config, check: _Checker, watch: dict[str, Any]) -> None:
    for key, value in watch.items():
        where = f"watch.{key}"
        if key not in WATCH_KEYS:
            check.fail(where, f"unknown key watch.{_name(key)} (known: {', '.join(sorted(WATCH_KEYS))})")
        if key == "idle_hours":
            cfg.watch[key] = check.number(where, value, range_of(where))
        elif key == "max_per_user_per_day":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                check.fail(where, f"{where} must be a whole number >= 1, got {_show(value)}")
            cfg.watch[key] = value
        elif key == "opt_out":
            if not isinstance(value, list):
                check.fail(where, f"{where} must be a list of user names, got {_show(value)}")
            names = [check.string(f"{where}[]", v) for v in value]
            if any(not n or "," in n or not n.isprintable() for n in names):
                check.fail(where, f"{where}: a user name is printable and holds no comma, got {_show(value)}")
            cfg.watch_opt_out = names
        else:
            try:
                parse_every(check.string(where, value))
            except ValueError as exc:
                check.fail(where, f"{where}: {exc}")
            cfg.watch_every = value


_EVERY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_EVERY_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_every(text: str) -> float:
    """A time between cycles: "15m", "1h", "90s", "1.5h", or plain seconds -> seconds (at least 1)."""
    m = _EVERY_RE.match(text)
    if not m:
        raise ValueError(f"not a time between cycles: {_show(text)} (use e.g. 15m, 1h, 90s)")
    seconds = float(m.group(1)) * _EVERY_UNIT[m.group(2)]
    if not 1 <= seconds <= 7 * 86400:
        raise ValueError(f"{_show(text)}: the time between cycles must be from 1 s to 7 days")
    return seconds


def _parse_budget(cfg: Config, check: _Checker, options: dict[str, Any], report: dict[str, Any]) -> None:
    """[budget_options] and the budget keys of [report] (its other keys: analytics/reports/settings.py)."""
    for key, value in options.items():
        where = f"budget_options.{key}"
        if key not in BUDGET_OPTION_KEYS:
            check.fail(where, f"unknown key {where} (known: {', '.join(BUDGET_OPTION_KEYS)})")
        if key == "assoc_file":
            path = Path(check.string(where, value))
            if not path.is_absolute() and cfg.path is not None:
                path = cfg.path.parent / path       # beside the config file, whatever the working directory
            try:
                cfg.file_budgets = budgets.read_file(path)
            except budgets.AssocError as exc:
                check.fail(where, f"{where}: {exc}")
        else:
            cfg.budget[key] = check.number(where, value, range_of(where))
    if cfg.budget["warn_pct"] > cfg.budget["over_pct"]:
        check.fail("budget_options", "budget_options.warn_pct must not be above over_pct, got "
                   f"{_show(cfg.budget['warn_pct'])} > {_show(cfg.budget['over_pct'])}")
    if "budget_period" in report:
        period = report["budget_period"]
        if not isinstance(period, str) or period not in BUDGET_PERIODS:
            check.fail("report.budget_period",
                       f"report.budget_period must be one of {', '.join(BUDGET_PERIODS)}, got {_show(period)}")
        cfg.budget["period"] = period
    if "budget_start" in report:
        start = report["budget_start"]
        if isinstance(start, str):
            try:
                start = dt.date.fromisoformat(start)
            except ValueError:
                pass
        if not isinstance(start, dt.date) or isinstance(start, dt.datetime):
            check.fail("report.budget_start",
                       f"report.budget_start must be a date (budget_start = 2026-01-01), got {_show(start)}")
        cfg.budget["start"] = start.isoformat()


def _partition(check: _Checker, where: str, value: Any) -> str:
    name = check.string(where, value)
    if "," in name:
        check.fail(where, f"{where}: a partition name holds no comma, got {_show(value)}")
    return name


def _parse_dashboard(cfg: Config, check: _Checker, dashboard: dict[str, Any]) -> None:
    for key, value in dashboard.items():
        if key == "munge":
            if not isinstance(value, bool):
                check.fail("dashboard.munge", f"dashboard.munge must be true or false, got {_show(value)}")
            cfg.dashboard_munge = value
            continue
        if key != "metrics_token_file":
            check.fail(f"dashboard.{key}", f"unknown key dashboard.{_name(key)} (known: metrics_token_file, munge)")
        path = Path(check.string("dashboard.metrics_token_file", value))
        if not path.is_absolute() and cfg.path is not None:
            path = cfg.path.parent / path       # beside the config file, whatever the working directory
        cfg.metrics_token_file = path
