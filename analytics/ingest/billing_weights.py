"""Slurm's TRESBillingWeights per partition: what prices an advised request under `slurm-billing`.

A job's own billing is in its AllocTRES; the request its flags advise was never submitted, so its
billing is computed from the weights of the partition it would run in (sql/metrics/45_job_advice.sql).
The weights come from, in this order of precedence per partition:

- `[advice.billing_weights]` of jobsight.toml (source `config`);
- a saved `scontrol show partition -o` named by `[advice] partitions_file` (source `file`);
- `scontrol show partition -o` run by `jobsight ingest --from-sacct` (source `scontrol`, per cluster).

They are kept in the table billing_weight, one row per partition and TRES: `cpu`, `mem` (per GiB),
`node`, `gres/gpu`, `gres/gpu:<type>` and any other TRES as Slurm names it, lowercased. A partition
without TRESBillingWeights is billed its CPUs (Slurm's default), so it gets `cpu` = 1.
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from jobsight.analytics.errors import shown
from jobsight.analytics.store import db as dbmod

# A weight's unit suffix (memory and other sizes): the weight is per this many MiB.
_UNIT_MIB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2, "P": 1024.0 ** 3}
_WEIGHT = re.compile(r"^([A-Za-z][A-Za-z0-9_/:.\-]*)=([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([KMGTP]?)$")
_FIELD = re.compile(r"(?:^|\s)(PartitionName|TRESBillingWeights)=(\S*)")
SOURCES = ("config", "file", "scontrol")     # precedence, first wins


class WeightsError(ValueError):
    pass


def parse_weights(text: str) -> dict[str, float]:
    """'CPU=1.0,Mem=0.25G,GRES/gpu=32' -> {'cpu': 1.0, 'mem': 0.25, 'gres/gpu': 32.0}; memory per
    GiB (Slurm reads a memory weight without a unit as per MiB)."""
    out: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",")):
        m = _WEIGHT.match(item)
        if not m:
            raise WeightsError(f"not a TRES weight: {shown(item)} (expected e.g. CPU=1.0, Mem=0.25G, GRES/gpu=32)")
        tres, value, unit = m.group(1).lower(), float(m.group(2)), m.group(3)
        if tres == "mem":
            value *= 1024.0 / _UNIT_MIB[unit or "M"]     # per MiB (or per unit) -> per GiB
        elif unit:
            raise WeightsError(f"{shown(item)}: a unit only applies to memory")
        out[tres] = out.get(tres, 0.0) + value
        if not math.isfinite(out[tres]):    # 400 digits read as a float are inf
            raise WeightsError(f"{shown(item)}: the weight is too large")
    if not out:
        raise WeightsError("no TRES weights given")
    return out


def parse_scontrol_partitions(text: str) -> dict[str, dict[str, float]]:
    """`scontrol show partition -o` (one partition per line) -> {partition: weights}."""
    out: dict[str, dict[str, float]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = dict(_FIELD.findall(line))
        name = fields.get("PartitionName")
        if not name:
            raise WeightsError(f"line {no}: no PartitionName= (is this `scontrol show partition -o` output?)")
        weights = fields.get("TRESBillingWeights", "")
        try:
            out[name] = parse_weights(weights) if weights and weights != "(null)" else {"cpu": 1.0}
        except WeightsError as exc:
            raise WeightsError(f"line {no}, partition {name}: {exc}") from None
    return out


def rows(weights: dict[str, dict[str, float]], source: str,
         cluster: Optional[str] = None) -> list[tuple[Optional[str], str, str, float, str]]:
    """billing_weight rows (cluster, partition, tres, weight, source); cluster None: every cluster."""
    return [(cluster, part, tres, w, source) for part, ws in sorted(weights.items()) for tres, w in sorted(ws.items())]


def replace(con, new_rows: list[tuple], source: str, cluster: Optional[str] = None) -> None:
    """Replace the rows of one source (and, for `scontrol`, of one cluster) by ``new_rows``."""
    dbmod.replace_source(con, "billing_weight", ("cluster", "partition", "tres", "weight", "source"),
                         new_rows, source, cluster, per_cluster=source == "scontrol")


def read_file(path: Path) -> dict[str, dict[str, float]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WeightsError(f"{path}: cannot read: {exc}") from None
    try:
        return parse_scontrol_partitions(text)
    except WeightsError as exc:
        raise WeightsError(f"{path}: {exc}") from None


def _scontrol(*args: str) -> str:
    scontrol = shutil.which("scontrol")
    if not scontrol:
        raise WeightsError("the `scontrol` command was not found on PATH")
    try:
        proc = subprocess.run([scontrol, *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WeightsError(f"scontrol failed: {exc}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip()
        raise WeightsError(f"scontrol {' '.join(args)} exited with {proc.returncode}: {err or '(no message)'}")
    return proc.stdout.decode("utf-8", errors="replace")


def from_scontrol(cluster: Optional[str] = None) -> tuple[str, dict[str, dict[str, float]]]:
    """(cluster name, weights) of the cluster scontrol talks to (``cluster``: `scontrol -M NAME`)."""
    where = ("-M", cluster) if cluster else ()
    weights = parse_scontrol_partitions(_scontrol(*where, "show", "partition", "-o"))
    if cluster is None:
        m = re.search(r"^ClusterName\s*=\s*(\S+)", _scontrol("show", "config"), re.MULTILINE)
        if not m:
            raise WeightsError("scontrol show config names no ClusterName")
        cluster = m.group(1)
    return cluster, weights
