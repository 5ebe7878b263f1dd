"""The settings a database holds: what jobsight.toml puts in it (the setting table, the charging
table, configured billing weights and budgets), and how a config differs from them.

Settings belong to the database: only a writer (`jobsight ingest` and `watch` given a config,
`jobsight settings`) writes them; a read command given a config that differs says so and reads
with the stored ones. One function, ``rows_of``, says which rows a config stands for, for both
the writer and the comparison.
"""
from __future__ import annotations

from typing import Any

from jobsight.analytics.config import RATE_KEYS, Config
from jobsight.analytics.ingest import billing_weights, budgets
from jobsight.analytics.store import db

# the groups of the setting table that come from jobsight.toml (others are the database's own state)
SETTING_GROUPS = ("charging.", "flags.", "samples.", "advice.", "budget.", "watch.")
_ZERO_DEFAULT = ("per_core_h", "per_gpu_h", "per_gb_h", "min_cores", "min_gpus")
CHARGE_COLUMNS = ("partition", "gpu_type") + RATE_KEYS
CONFIG_SOURCES = ("config", "file")   # billing weights and budgets written from jobsight.toml and its files


def charge_rows(cfg: Config) -> list[tuple]:
    return [tuple([rate.get("partition"), rate.get("gpu_type")]
                  + [rate.get(k, 0 if k in _ZERO_DEFAULT else None) for k in RATE_KEYS]) for rate in cfg.rates]


def rows_of(cfg: Config) -> dict[str, list[tuple]]:
    """Table -> the rows the config stands for, as apply_to_db writes them."""
    return {
        "setting": list(cfg.settings()),
        "charge_rate": charge_rows(cfg),
        "billing_weight": billing_weights.rows(cfg.weights, "config") + billing_weights.rows(cfg.file_weights, "file"),
        "budget": cfg.budget_rows() + budgets.rows(cfg.file_budgets, "file"),
    }


def stored_rows(con) -> dict[str, list[tuple]]:
    """Table -> the rows of the settings the database holds, in rows_of's shape."""
    groups = " OR ".join(f"starts_with(name, '{g}')" for g in SETTING_GROUPS)
    sources = ", ".join(f"'{s}'" for s in CONFIG_SOURCES)
    cols = ", ".join(f'"{c}"' for c in CHARGE_COLUMNS)
    return {
        "setting": con.execute(f"SELECT name, value, text FROM setting WHERE {groups} ORDER BY name").fetchall(),
        "charge_rate": con.execute(f"SELECT {cols} FROM charge_rate").fetchall(),
        "billing_weight": con.execute("SELECT cluster, \"partition\", tres, weight, source FROM billing_weight "
                                      f"WHERE source IN ({sources})").fetchall(),
        "budget": con.execute("SELECT cluster, account, \"user\", amount, unit, source FROM budget "
                              f"WHERE source IN ({sources})").fetchall(),
    }


def has_settings(con) -> bool:
    """Whether the database holds settings at all (a new one holds none until the first writer)."""
    return con.execute("SELECT EXISTS (SELECT 1 FROM setting WHERE starts_with(name, 'charging.'))").fetchone()[0]


def _norm(value: Any) -> Any:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _canon(rows: list[tuple]) -> set[tuple]:
    return {tuple(_norm(v) for v in r) for r in rows}


def _shown(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "(none)" if value is None or value == "" else str(value)


def setting_lines(rows: list[tuple]) -> list[str]:
    """`name = value` for setting rows (name, value, text)."""
    return [f"{name} = {_shown(text if value is None else value)}" for name, value, text in sorted(rows)]


def differences(stored: dict[str, list[tuple]], wanted: dict[str, list[tuple]]) -> list[str]:
    """What changes from the stored settings to the wanted ones, one line each (none: the same)."""
    out: list[str] = []
    old = {n: (v, t) for n, v, t in stored["setting"]}
    new = {n: (v, t) for n, v, t in wanted["setting"]}
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None or b is None or (_norm(a[0]), a[1] or None) != (_norm(b[0]), b[1] or None):
            was = "(unset)" if a is None else _shown(a[1] if a[0] is None else a[0])
            now = "(unset)" if b is None else _shown(b[1] if b[0] is None else b[0])
            out.append(f"{name}: {was} -> {now}")
    for table in ("charge_rate", "billing_weight", "budget"):
        a, b = _canon(stored[table]), _canon(wanted[table])
        out += [f"{table}: - {', '.join(map(_shown, r))}" for r in sorted(a - b, key=repr)]
        out += [f"{table}: + {', '.join(map(_shown, r))}" for r in sorted(b - a, key=repr)]
    return out


def config_differences(con, cfg: Config) -> list[str]:
    """How the config differs from the settings the database on ``con`` holds."""
    return differences(stored_rows(con), rows_of(cfg))


def apply_to_db(con, cfg: Config, transaction: bool = True) -> None:
    """Write the settings, charge rates and configured billing weights and budgets of ``cfg`` into
    the database the SQL reads them from (one transaction, or the caller's with transaction=False):
    the writer's part, never a reader's."""
    rows = rows_of(cfg)
    if transaction:
        con.execute("BEGIN TRANSACTION")
    try:
        groups = " OR ".join(f"starts_with(name, '{g}')" for g in SETTING_GROUPS)
        con.execute(f"DELETE FROM setting WHERE {groups}")
        con.executemany("INSERT INTO setting (name, value, text) VALUES (?, ?, ?)", rows["setting"])
        con.execute("DELETE FROM charge_rate")
        if rows["charge_rate"]:
            cols = ", ".join(f'"{c}"' for c in CHARGE_COLUMNS)
            con.executemany(f"INSERT INTO charge_rate ({cols}) VALUES ({', '.join('?' for _ in CHARGE_COLUMNS)})",
                            rows["charge_rate"])
        weights, budget_rows = rows["billing_weight"], rows["budget"]
        for source in CONFIG_SOURCES:
            billing_weights.replace(con, [r for r in weights if r[-1] == source], source)
            budgets.replace(con, [r for r in budget_rows if r[-1] == source], source)
        if transaction:
            con.execute("COMMIT")
    except Exception:
        if transaction:
            db.rollback(con)
        raise
