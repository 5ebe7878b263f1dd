"""Which GPUs belong to this job: CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS -> UUIDs.

Pure functions (no NVML) so the mapping rules are testable on their own. Standard library only.

Rules (see /docs: with Slurm's ConstrainDevices the job sees only its GPUs, renumbered from 0):
- CUDA_VISIBLE_DEVICES set: parsed like CUDA does: comma list of indices into what this process
  sees (= NVML order, which CUDA follows with CUDA_DEVICE_ORDER=PCI_BUS_ID) or UUIDs / unique UUID
  prefixes (`GPU-...`, `MIG-...`); parsing stops at the first entry that matches nothing, as in CUDA.
  Empty or `NoDevFiles` = no GPUs.
- else SLURM_JOB_GPUS: global GPU ids. When NVML shows no more GPUs than the job has (ConstrainDevices,
  or the job owns the node) every visible GPU is the job's; otherwise the ids are NVML indices.
  Slurm counts each MIG instance as a GPU, so on a node with MIG instances the ids are not NVML
  indices: a job holding as many GPUs as the node has devices gets them all (the instances, never a
  MIG-mode parent, whose power and energy other jobs share), any other job none, with a problem line.
- else every GPU NVML shows.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Inventory:
    """One physical GPU as NVML enumerates it; `migs` holds its MIG instance UUIDs (MIG mode on)."""
    index: int
    uuid: str
    migs: list[str] = field(default_factory=list)
    mig_mode: bool = False


def _int_list(value: str) -> list[int] | None:
    """'0,2-3' -> [0, 2, 3]; None if any part is not an id (e.g. a gres type such as 'gpu:a100:0')."""
    out: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            return None
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return out


def _match_uuid(token: str, inventory: list[Inventory]) -> str | None:
    """Full UUID or unique prefix of a GPU or MIG UUID (CUDA accepts prefixes)."""
    candidates = [g.uuid for g in inventory] + [m for g in inventory for m in g.migs]
    if token in candidates:
        return token
    hits = [c for c in candidates if c.startswith(token)]
    return hits[0] if len(hits) == 1 else None


def job_gpu_uuids(inventory: list[Inventory], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The job's GPU/MIG UUIDs in order, and human-readable problems (entries that matched nothing)."""
    problems: list[str] = []
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        chosen: list[str] = []
        for token in (t.strip() for t in cvd.split(",")):
            if token == "" or token == "NoDevFiles":
                break
            if token.startswith(("GPU-", "MIG-")):
                uuid = _match_uuid(token, inventory)
            elif token.isdigit() and int(token) < len(inventory):
                uuid = inventory[int(token)].uuid
            else:
                uuid = None
            if uuid is None:
                # CUDA ignores this entry and everything after it; so do we, but say so
                problems.append(f"CUDA_VISIBLE_DEVICES entry {token!r} matches no GPU visible here; "
                                f"ignoring it and the entries after it, as CUDA does")
                break
            if uuid not in chosen:
                chosen.append(uuid)
        return chosen, problems

    slurm = env.get("SLURM_JOB_GPUS")
    if slurm is not None and slurm.strip():
        ids = _int_list(slurm)
        if ids is None:
            problems.append(f"SLURM_JOB_GPUS={slurm!r} is not a list of GPU ids; sampling every visible GPU")
            return [g.uuid for g in inventory], problems
        if any(g.migs for g in inventory):
            return _slurm_ids_on_mig_node(inventory, slurm, ids, problems)
        if len(inventory) <= len(set(ids)):
            # constrained to the job's GPUs (renumbered from 0), or the job holds them all
            return [g.uuid for g in inventory], problems
        chosen = [inventory[i].uuid for i in dict.fromkeys(ids) if i < len(inventory)]
        missing = [i for i in ids if i >= len(inventory)]
        if missing:
            problems.append(f"SLURM_JOB_GPUS ids {missing} are beyond the {len(inventory)} GPUs NVML shows; skipped")
        return chosen, problems

    return [g.uuid for g in inventory], problems


def _slurm_ids_on_mig_node(inventory: list[Inventory], slurm: str, ids: list[int],
                           problems: list[str]) -> tuple[list[str], list[str]]:
    """SLURM_JOB_GPUS where NVML shows MIG instances: Slurm's ids count each instance as a GPU and
    cannot be told apart from NVML's; only a job holding every device is known to hold them."""
    devices = [u for g in inventory for u in (g.migs or [g.uuid])]
    if len(devices) <= len(set(ids)):
        return devices, problems
    problems.append(f"SLURM_JOB_GPUS={slurm!r} cannot be matched to NVML's GPUs on a node with MIG instances "
                    f"(Slurm counts each instance as a GPU); no GPU sampled: give the sidecar CUDA_VISIBLE_DEVICES")
    return [], problems
