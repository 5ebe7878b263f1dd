"""Allocations (budgets) per account, or per user within an account, from Slurm's associations.

Slurm keeps a billing budget as an association limit, `GrpTRESMins=billing=N`: N billing-minutes
for an account (the association without a user), or for one user within it. jobsight reads them
with ``sacctmgr -nP show assoc format=Cluster,Account,User,GrpTRESMins`` (run by `jobsight ingest
--from-sacct`, source `sacctmgr`, per cluster) or from a saved copy of that output named by
[budget_options] assoc_file (source `file`; three columns Account|User|GrpTRESMins work too).
jobsight.toml's [budgets] (source `config`, already in SBU) comes first, then the file, then
sacctmgr (sql/views/55_budget.sql, which also converts billing-minutes to the charged unit).

They are kept in the table budget, one row per source, cluster, account and user; associations
without a billing limit are not budgets and are left out.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from jobsight.analytics.store import db as dbmod

COLUMNS = ("Cluster", "Account", "User", "GrpTRESMins")
SOURCES = ("config", "file", "sacctmgr")     # precedence, first wins

Key = tuple[Optional[str], str, Optional[str]]   # (cluster, account, user)


class AssocError(ValueError):
    pass


def billing_minutes(tres: str) -> Optional[float]:
    """The billing part of a GrpTRESMins value ('cpu=100,billing=600000' -> 600000.0), or None."""
    for item in tres.split(","):
        name, sep, value = item.strip().partition("=")
        if sep and name.lower() == "billing":
            try:
                minutes = float(value)
            except ValueError:
                raise AssocError(f"billing={value!r} is not a number of billing-minutes") from None
            if not minutes >= 0 or minutes == float("inf"):
                raise AssocError(f"billing={value!r} is not a number of billing-minutes")
            return minutes
    return None


def parse_assoc(text: str) -> dict[Key, float]:
    """`sacctmgr -nP show assoc format=Cluster,Account,User,GrpTRESMins` (or Account,User,
    GrpTRESMins; a header line is skipped) -> {(cluster, account, user): billing-minutes}."""
    out: dict[Key, float] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("|")
        if len(fields) not in (3, 4):
            raise AssocError(f"line {no}: {len(fields)} fields; expected Cluster|Account|User|GrpTRESMins "
                             "(sacctmgr -nP show assoc format=Cluster,Account,User,GrpTRESMins)")
        if [f.strip().lower() for f in fields] == [c.lower() for c in COLUMNS[-len(fields):]]:
            continue        # a header (sacctmgr without -n)
        cluster, account, user, tres = ([None] + fields if len(fields) == 3 else fields)
        if not account.strip():
            raise AssocError(f"line {no}: no account")
        try:
            minutes = billing_minutes(tres)
        except AssocError as exc:
            raise AssocError(f"line {no}: {exc}") from None
        if minutes is not None:
            out[(cluster.strip() or None if cluster else None, account.strip(), user.strip() or None)] = minutes
    return out


def rows(limits: dict[Key, float], source: str) -> list[tuple]:
    """budget rows (cluster, account, user, amount, unit, source) of billing-minute limits."""
    return [(c, a, u, m, "billing_minutes", source)
            for (c, a, u), m in sorted(limits.items(), key=lambda kv: tuple(str(x) for x in kv[0]))]


def replace(con, new_rows: list[tuple], source: str, cluster: Optional[str] = None) -> None:
    """Replace the rows of one source (and, for `sacctmgr`, of one cluster) by ``new_rows``."""
    dbmod.replace_source(con, "budget", ("cluster", "account", "user", "amount", "unit", "source"),
                         new_rows, source, cluster, per_cluster=source == "sacctmgr")


def read_file(path: Path) -> dict[Key, float]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AssocError(f"{path}: cannot read: {exc}") from None
    try:
        return parse_assoc(text)
    except AssocError as exc:
        raise AssocError(f"{path}: {exc}") from None


def _run(tool: str, *args: str) -> str:
    exe = shutil.which(tool)
    if not exe:
        raise AssocError(f"the `{tool}` command was not found on PATH")
    try:
        proc = subprocess.run([exe, *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AssocError(f"{tool} failed: {exc}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip()
        raise AssocError(f"{tool} {' '.join(args[:2])} exited with {proc.returncode}: {err or '(no message)'}")
    return proc.stdout.decode("utf-8", errors="replace")


def local_cluster() -> str:
    """The ClusterName of the cluster this machine's Slurm talks to (what sacct reads by default)."""
    m = re.search(r"^ClusterName\s*=\s*(\S+)", _run("scontrol", "show", "config"), re.MULTILINE)
    if not m:
        raise AssocError("scontrol show config names no ClusterName")
    return m.group(1)


def from_sacctmgr(cluster: str) -> dict[Key, float]:
    """The billing limits of ``cluster``'s associations, as sacctmgr reports them."""
    text = _run("sacctmgr", "-nP", "show", "assoc", f"cluster={cluster}", "format=" + ",".join(COLUMNS))
    return {(cluster, a, u): m for (_c, a, u), m in parse_assoc(text).items()}


def source_rows(con, source: str, cluster: Optional[str] = None) -> list[tuple]:
    """The budget rows of one source (and cluster), in a fixed order: to tell whether a replace changed them."""
    return con.execute('SELECT cluster, account, "user", amount, unit, source FROM budget WHERE source = ? '
                       'AND (CAST(? AS VARCHAR) IS NULL OR cluster = ?) ORDER BY ALL', [source, cluster, cluster]).fetchall()
