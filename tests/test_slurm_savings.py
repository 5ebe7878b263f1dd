"""What the advice would have saved, checked against the real Slurm of the harness
(scripts/slurm-harness.sh): wasteful jobs are submitted, ingested with `--from-sacct` (which also
reads the partitions' TRESBillingWeights with `scontrol show partition -o`), and each one is then
submitted again with the request its advice adds up to (job_savings.fitted_request). Slurm's own
billing of the resubmitted job, times the first job's elapsed time, is what sbu_if_fitted predicted.

Billing is a rate (per second, times the weights): the check compares rates, billing x elapsed of
the first job, never the resubmitted job's own elapsed time, which is another length. The weights
(fixtures/slurm/README.md): cpu CPU=1.0,Mem=0.25G; gpu CPU=1.0,Mem=0.25G,GRES/gpu=32; Slurm
truncates the sum to a whole number.

    job        submitted with                    flags                 -> the request that fits         billing
    cpu_idle   -p cpu -c 2 --mem=3G, sleeps      cpu_low_eff, mem_oversized -> 1 core, 1G             2 + 0.75 = 2 -> 1 + 0.25 = 1
    gpu_idle   -p gpu --gres=gpu:1 --mem=1G,     gpu_idle              -> --partition=cpu --gres=none 1 + 0.25 + 32 = 33 -> 1
               GPU at 0 %
    gpu_half   -p gpu --gres=gpu:2 --mem=1G,     gpu_unused_devices    -> --gres=gpu:1                1 + 0.25 + 64 = 65 -> 33
               GPU 0 at 90 %, GPU 1 idle

The GPUs are fake GRES (no NVML): each GPU job writes the sidecar CSV of its GPUs itself, as in
tests/test_slurm_flags.py. [flags] are lowered for 15 s jobs on a 4 GiB node, as there.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import slurm_batch
from conftest import ROOT, require_service
from slurm_harness import CLUSTER, sacct_rows, slurm_status, submit, tres, wait_finished
from slurm_harness import workdir as harness_workdir

pytestmark = pytest.mark.slurm

CONFIG = """\
[flags]
min_runtime_s = 10                 # the jobs run 15-20 s
mem_oversized_min_unused_gib = 1   # the harness node has 4 GiB in all
cpu_low_eff_pct = 30

[advice]
cpu_partition = "cpu"              # CPU-only work, and jobs whose GPUs sat idle
"""

SLEEP = "#!/bin/bash\nsleep 15\n"
# A sidecar-style CSV of the job's GPUs (util per GPU from @UTILS@), one sample a second.
GPUS = r"""#!/bin/bash
out=@OUT@/jobsight-${SLURM_CLUSTER_NAME}-${SLURM_JOB_ID}-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)-$$.csv
h=time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes
echo "$h,gpu_index,power_w,energy_j,sm_clock_mhz,temperature_c,sm_active_pct" > "$out.part"
for i in $(seq 1 15); do
  t=$(date -u +%Y-%m-%dT%H:%M:%S.000Z)
  g=0
  for u in @UTILS@; do
    echo "$t,$SLURM_JOB_ID,$SLURM_CLUSTER_NAME,$(hostname),GPU-fake-0000-$g,$u,30000000000,40000000000,$g,,,,," >> "$out.part"
    g=$((g + 1))
  done
  sleep 1
done
mv "$out.part" "$out"
"""

# name -> (user, script, sbatch options, billing charged, the request that fits, its billing)
JOBS = {
    "cpu_idle": ("alice", SLEEP, {"--partition": "cpu", "--cpus-per-task": "2", "--mem": "3G"}, 2,
                 "--ntasks=1 --cpus-per-task=1 --mem=1G", 1),
    "gpu_idle": ("alice", GPUS.replace("@UTILS@", "0"), {"--partition": "gpu", "--gres": "gpu:1", "--mem": "1G"}, 33,
                 "--partition=cpu --gres=none", 1),
    "gpu_half": ("bob", GPUS.replace("@UTILS@", "90 0"), {"--partition": "gpu", "--gres": "gpu:2", "--mem": "1G"}, 65,
                 "--gres=gpu:1", 33),
}


def jobsight(*args: str, cwd: Path) -> str:
    exe = ROOT / ".venv" / "bin" / "jobsight"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, f"jobsight {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def options(opts: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in opts.items()]


def submit_slurm_jobs(start) -> tuple[dict, list[str]]:
    """Submit the first jobs (tests/slurm_batch.py does, as the session starts); the 2-CPU job last,
    so that no 1-CPU job waits behind it."""
    work = harness_workdir("jobsight-savings-")
    out = work / "sidecar-out"
    out.mkdir()
    out.chmod(0o1777)
    (work / "jobsight.toml").write_text(CONFIG)
    ids = {name: submit(user, script.replace("@OUT@", str(out)), "-J", f"savings-{name}", "-o", f"{work}/%j.out",
                        "--time=00:01:00", *options(opts), workdir=work)
           for name, (user, script, opts, *_rest) in sorted(JOBS.items(), key=lambda kv: kv[1][2].get("--cpus-per-task", "1"))}
    return {"work": work, "out": out, "start": start, "ids": ids}, list(ids.values())


@pytest.fixture(scope="module")
def harness():
    up, reason = slurm_status()
    require_service(up, reason)
    submitted = slurm_batch.jobs_of(submit_slurm_jobs)     # every job of the batch final in accounting
    work, out, start, ids = (submitted[k] for k in ("work", "out", "start", "ids"))
    db = work / "savings.duckdb"
    csvs = sorted(str(p) for p in out.glob("*.csv"))
    assert len(csvs) == 2, f"the GPU jobs wrote {len(csvs)} sidecar CSVs (see {work}/*.out)"
    log = jobsight("ingest", "--db", str(db), "--config", str(work / "jobsight.toml"), "--from-sacct",
                   "--since", start.strftime("%Y-%m-%dT%H:%M:%S"), *csvs, cwd=work)
    saved = json.loads(jobsight("flags", "--db", str(db), "--config", str(work / "jobsight.toml"), "--format", "json",
                                "--limit", "0", cwd=work))
    con_rows = {}
    con = duckdb.connect(str(db), read_only=True)
    try:
        for row in con.execute("SELECT job_id_raw, fitted_request, fitted_billing, sbu_if_fitted, savings_sbu, "
                               "savings_note, sbu FROM job_savings").fetchall():
            con_rows[row[0]] = dict(zip(("job_id_raw", "fitted_request", "fitted_billing", "sbu_if_fitted",
                                         "savings_sbu", "savings_note", "sbu"), row))
        weights = con.execute("SELECT cluster, \"partition\", tres, weight, source FROM billing_weight "
                              "ORDER BY ALL").fetchall()
        elapsed = dict(con.execute("SELECT job_id_raw, elapsed_s FROM job_metrics").fetchall())
    finally:
        con.close()
    # the same request again, as the advice says: the job's own options, the advised ones replacing theirs
    again = {}
    for name, (user, _script, opts, *_rest) in JOBS.items():
        advised = dict(tok.split("=", 1) for tok in (con_rows[ids[name]]["fitted_request"] or "").split())
        again[name] = submit(user, "#!/bin/bash\nsleep 1\n", "-J", f"savings-again-{name}", "-o", f"{work}/%j.out",
                             "--time=00:02:00", *options({**opts, **advised}), workdir=work)
    wait_finished(list(again.values()), timeout=300)
    billed = {r["JobIDRaw"]: float(tres(r["AllocTRES"])["billing"])
              for r in sacct_rows(list(again.values()), "JobID,JobIDRaw,AllocTRES") if "." not in r["JobID"]}
    return {"work": work, "ids": ids, "again": again, "savings": con_rows, "weights": weights, "log": log,
            "elapsed": elapsed, "billed": billed, "flags": saved}


def test_from_sacct_reads_the_partitions_billing_weights(harness):
    assert "read with scontrol show partition -o" in harness["log"]
    got = {(p, t): w for c, p, t, w, s in harness["weights"] if c == CLUSTER and s == "scontrol"}
    assert got[("cpu", "cpu")] == 1.0 and got[("cpu", "mem")] == 0.25
    assert got[("gpu", "cpu")] == 1.0 and got[("gpu", "mem")] == 0.25 and got[("gpu", "gres/gpu")] == 32.0


@pytest.mark.parametrize("name", list(JOBS))
def test_the_priced_request_is_the_advice(harness, name):
    *_head, charged, request, fitted_billing = JOBS[name]
    s = harness["savings"][harness["ids"][name]]
    assert s["savings_note"] is None                 # the weights give the billing each job was charged
    assert s["fitted_request"] == request
    assert s["fitted_billing"] == fitted_billing
    hours = harness["elapsed"][harness["ids"][name]] / 3600
    assert s["sbu"] == pytest.approx(charged * hours)
    assert s["sbu_if_fitted"] == pytest.approx(fitted_billing * hours)
    assert s["savings_sbu"] == pytest.approx((charged - fitted_billing) * hours)


@pytest.mark.parametrize("name", list(JOBS))
def test_resubmitted_with_the_advice_slurm_charges_what_was_predicted(harness, name):
    s = harness["savings"][harness["ids"][name]]
    billing = harness["billed"][harness["again"][name]]
    hours = harness["elapsed"][harness["ids"][name]] / 3600       # a job of the same length
    assert billing * hours == pytest.approx(s["sbu_if_fitted"])
    assert billing == s["fitted_billing"]


def test_flags_carry_the_savings(harness):
    by_job = {r["job_id_raw"]: r["savings_sbu"] for r in harness["flags"]}
    for name in JOBS:
        job = harness["ids"][name]
        assert by_job[job] == pytest.approx(harness["savings"][job]["savings_sbu"])
