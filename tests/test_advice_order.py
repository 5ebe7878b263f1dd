"""A job's advice matches its waste: it leads with the request that drove its wasted SBU, advice
that lowers no charge says what it buys instead and comes after, contradicting advice is never
given together, memory advice is per node for a job of several nodes (never below the fullest
node's peak), and a GPU reading known only for the whole job is named so.

Cluster ao, every job 2 h (2026-11-17 10:00-12:00), default [flags], no [advice] places.
Charging table: thin 1/core-h (memory not charged); memp 1/core-h with 2 GiB per core (memory buys
cores); gpu 32/GPU-h.

    job  partition  cores mem    GPUs          busy     peak            state  -> flags, in order
    701  gpu        8     64G    1 (sidecar)   8 cores  4G, GPU 0 % 1 GB TIMEOUT   gpu_idle, failed_burn
                                                                               (not "longer --time"), mem_oversized;
                                                                               gpu_fits_smaller dropped
    702  gpu        8     64G    2 (gres/gpuutil=0)      40G            COMPLETED  gpu_idle, job-level
    703  gpu        8     64G    2 (gres/gpuutil=10)     40G            COMPLETED  gpu_low_util, job-level
    704  thin       64/2n 512G   -             64       165G, sidecar n1 120G n2 45G   mem_oversized 144G per node
    705  thin       64/2n 512G   -             64       165G (sacct)    COMPLETED  mem_oversized 99G per node
    706  thin       8     32G    -             2        4G, limit 1 day COMPLETED  cpu_low_eff, mem_oversized,
                                                                               time_oversized (no SBU saved)
    707  memp       4     64G    -             2        8G              COMPLETED  mem_oversized, cpu_low_eff
                                                                               (memory buys the cores)
    708  thin       4     32G    -             4        2G              OUT_OF_MEMORY  failed_burn only

704's --mem: the fullest node's 120 GiB x 1.2 = 144, not the job's 165 / 2 x 1.2 = 99.
Under Slurm billing with Mem weighed in thin (CPU=1.0,Mem=0.25G), 706's --mem lowers the charge: it
says no "saves no SBU" and comes before the --time advice.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_savings import HDR, T0, T1, jobsight, toml

from jobsight.analytics.config import parse_config
from jobsight.analytics.store.database import Database
from jobsight.collector.csv_schema import COLUMNS, HEADER

GiB = 1 << 30


def job(jid, part, cores, mem, cpu, peak, state="COMPLETED", limit="03:00:00", nodes=1, gpus=0, gpu_util=None,
        billing=None) -> str:
    tres = (f"billing={billing or cores},cpu={cores}" + (f",gres/gpu:a100={gpus},gres/gpu={gpus}" if gpus else "")
            + f",mem={mem},node={nodes}")
    usage = f"gres/gpuutil={gpu_util}" if gpu_util is not None else ""
    return (f"{jid}|{jid}|ao|j{jid}|ann|prj-a|{part}|{state}|0:0|{T0}|{T0}|{T1}|02:00:00|{limit}|{cores}|{nodes}||"
            f"{mem}|{tres}|{cpu}||{usage}\n"
            f"{jid}.batch|{jid}.batch|ao|batch||||{state}|0:0||{T0}|{T1}|02:00:00||{cores}|{nodes}|1|||{cpu}||"
            f"cpu={cpu},mem={peak}\n")


SACCT = HDR + "".join([
    job("701", "gpu", 8, "64G", "16:00:00", "4G", state="TIMEOUT", limit="02:00:00", gpus=1),
    job("702", "gpu", 8, "64G", "16:00:00", "40G", gpus=2, gpu_util=0),
    job("703", "gpu", 8, "64G", "16:00:00", "40G", gpus=2, gpu_util=10),
    job("704", "thin", 64, "512G", "5-08:00:00", "165G", nodes=2),
    job("705", "thin", 64, "512G", "5-08:00:00", "165G", nodes=2),
    job("706", "thin", 8, "32G", "04:00:00", "4G", limit="1-00:00:00", billing=16),
    job("707", "memp", 4, "64G", "04:00:00", "8G"),
    job("708", "thin", 4, "32G", "08:00:00", "2G", state="OUT_OF_MEMORY"),
])
TABLE = {"charging": {"policy": "table", "rates": [
    {"partition": "thin", "per_core_h": 1.0},
    {"partition": "memp", "per_core_h": 1.0, "mem_per_core_gb": 2},
    {"partition": "gpu", "per_gpu_h": 32, "min_gpus": 1}]},
    "advice": {"cpu_partition": ""}}
BILLING = {"advice": {"cpu_partition": "", "billing_weights": {"thin": "CPU=1.0,Mem=0.25G", "memp": "CPU=1.0",
                                                               "gpu": "GRES/gpu=32"}}}


def sidecar(folder: Path) -> Path:
    """701's GPU idle with 1 of 40 GB used; 704's two nodes at 120 and 45 GiB, every core busy."""
    rows_ = []
    for minute in range(0, 120, 10):
        t = f"2026-11-17T{10 + minute // 60:02d}:{minute % 60:02d}:00.000Z"
        for jid, host, dev, idx, util, used, total in (
                ("701", "g1", "GPU-aaaa", "0", "0", 1_000_000_000, 40_000_000_000),
                ("704", "n1", "cpu", "", "100", 120 * GiB, 256 * GiB),
                ("704", "n2", "cpu", "", "100", 45 * GiB, 256 * GiB)):
            cell = {c: "" for c in COLUMNS}
            cell.update(time=t, job_id=jid, cluster="ao", host=host, device=dev, util_pct=util, mem_used_bytes=str(used),
                        mem_total_bytes=str(total), gpu_index=idx)
            rows_.append(",".join(cell[c] for c in COLUMNS))
    path = folder / "jobsight-ao-7xx-n1-20261117T100000Z-1.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows_) + "\n", encoding="utf-8")
    return path


def rows(work: Path, cfg: dict, sql: str) -> list[tuple]:
    db = Database.open(work / "ao.duckdb", parse_config(cfg))
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("advice")
    (work / "sacct.txt").write_text(SACCT, encoding="utf-8")
    (work / "table.toml").write_text(toml(TABLE), encoding="utf-8")
    out = jobsight("ingest", "--db", str(work / "ao.duckdb"), "--timezone", "UTC", "--config", str(work / "table.toml"),
                   str(work / "sacct.txt"), str(sidecar(work)), cwd=work)
    assert "0 rejected" in out
    return work


@pytest.fixture(scope="module")
def flags(work) -> dict[str, list[tuple]]:
    """Each job's (code, advice, lowers_charge, message) in advice_order."""
    out: dict[str, list[tuple]] = {}
    for jid, order, code, advice, lowers, message in rows(
            work, TABLE, "SELECT job_id, advice_order, code, advice, lowers_charge, message FROM job_flags ORDER BY ALL"):
        assert order == len(out.setdefault(jid, [])) + 1, (jid, order)
        out[jid].append((code, advice, lowers, message))
    return out


def codes(flags, jid):
    return [f[0] for f in flags[jid]]


def test_an_idle_timed_out_gpu_job_is_told_to_drop_the_gpu_not_to_ask_for_more_time(flags):
    assert codes(flags, "701") == ["gpu_idle", "failed_burn", "mem_oversized"]
    advice = [f[1] for f in flags["701"]]
    assert "--gres=none" in advice[0]
    assert advice[1] == "Checkpoint and restart; it timed out mostly idle, so more time is not the fix"
    assert not any("longer --time" in a or "MIG" in a for a in advice)


def test_a_job_level_gpu_reading_is_named_so(flags):
    assert codes(flags, "702") == ["gpu_idle"]
    assert flags["702"][0][3].startswith("Job-level GPU utilisation 0.0% (Slurm's gres/gpuutil, not per GPU) on 2 GPU(s)")
    assert codes(flags, "703") == ["gpu_low_util"]
    assert flags["703"][0][3].startswith("Job-level GPU utilisation 10.0% (Slurm's gres/gpuutil for its 2 GPU(s), not per GPU)")
    # a per-GPU reading (701's sidecar) keeps the per-GPU wording
    assert flags["701"][0][3].startswith("1 GPU(s) at 0.0% mean utilisation")


def test_memory_advice_is_per_node_and_never_below_the_fullest_node(flags):
    (code, advice, lowers, message), = flags["704"]
    assert code == "mem_oversized"
    assert advice.startswith("--mem=144G per node: saves no SBU")
    assert message.endswith("on 2 nodes: 120.0 GiB on the fullest")
    # sacct alone: the job's peak shared evenly, 165 / 2 x 1.2 = 99
    assert flags["705"][0][1].startswith("--mem=99G per node: saves no SBU")


def test_advice_that_lowers_no_charge_says_what_it_buys_and_comes_last(flags):
    assert codes(flags, "706") == ["cpu_low_eff", "mem_oversized", "time_oversized"]
    assert [f[2] for f in flags["706"]] == [True, False, False]
    assert flags["706"][1][1] == ("--mem=5G: saves no SBU (memory is not charged here); it starts sooner and leaves "
                                  "memory for others")
    assert flags["706"][2][1].startswith("--time=03:00:00: saves no SBU (the time run is charged, not the limit); "
                                         "a shorter limit starts sooner")


def test_where_memory_buys_the_cores_the_memory_advice_leads(flags):
    assert codes(flags, "707") == ["mem_oversized", "cpu_low_eff"]
    assert [f[2] for f in flags["707"]] == [True, False]
    assert flags["707"][0][1] == "--mem=10G"
    assert flags["707"][1][1].endswith("; saves no SBU while the memory asked for buys the cores (see --mem)")


def test_contradicting_advice_is_dropped(flags):
    assert codes(flags, "708") == ["failed_burn"]          # out of memory: no advice to ask for less
    assert flags["708"][0][1] == "--mem=48G, or reduce the memory the code holds"


def test_memory_weighed_in_the_billing_lowers_the_charge(work):
    got = rows(work, BILLING, "SELECT code, advice, lowers_charge FROM job_flags WHERE job_id = '706' ORDER BY advice_order")
    assert [(c, lowers) for c, _, lowers in got] == [("cpu_low_eff", True), ("mem_oversized", True),
                                                     ("time_oversized", False)]
    assert got[1][1] == "--mem=5G"


def test_every_face_lists_the_leading_advice_first(work):
    cfg = ["--db", str(work / "ao.duckdb"), "--config", str(work / "table.toml")]
    listed = json.loads(jobsight("flags", *cfg, "--format", "json", cwd=work))
    assert [r["code"] for r in listed if r["job_id"] == "706"] == ["cpu_low_eff", "mem_oversized", "time_oversized"]
    one = json.loads(jobsight("job", "707", *cfg, "--format", "json", cwd=work))
    assert [f["code"] for f in one["flags"]] == ["mem_oversized", "cpu_low_eff"]
    table = jobsight("flags", *cfg, "--wide", cwd=work)
    line = next(ln for ln in table.splitlines() if ln.startswith("706"))
    assert line.index("--cpus-per-task=2") < line.index("--mem=5G") < line.index("--time=03:00:00")
