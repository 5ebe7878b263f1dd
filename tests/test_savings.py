"""What following the advice would have saved: the request that would have fit (job_advice), priced
by the charging SQL that priced the job (job_savings), and its roll-ups in `jobsight usage`, the
reports and the dashboard's summaries. Every expected number is worked out below, by hand, from the
charging rules of docs/charging.md and the headroom rules of docs/metrics.md.

Cluster sv, every job 2 h (2026-11-17 10:00-12:00, ISO week 47), default [flags]. [advice]: CPU work
goes to `thin`, fat-memory jobs to `thin` when they fit its 64 GiB nodes, small GPU jobs to `mig`.

    job  user partition  cores mem  GPUs  CPU busy  peak  limit  flags -> the request that fits
    901   ann  thin       8     32G  -     1 core    4G    1 day  cpu_low_eff, cpu_serial_on_many,
                                                                 mem_oversized, time_oversized
                                                                 -> 1 core, ceil(4 x 1.2) = 5G, 3 h
    902   ann  gpu        8     64G  2     4 cores   40G   3 h    gpu_idle (TRES util 0.5 %)
                                                                 -> no GPU, partition thin
    903   bob  gpu        4     8G   -     4 cores   6G    3 h    cpu_job_on_gpu_partition -> thin
    904   bob  fat        4     128G -     4 cores   20G   3 h    mem_oversized, mem_fits_thin -> 24G
    905   ann  fat        16    64G  -     16 cores  10G   3 h    mem_oversized, mem_fits_thin -> 12G
    906   bob  gpu        4     32G  2     4 cores   16G   3 h    gpu_low_util, gpu_unused_devices,
                                                                 gpu_fits_smaller -> 1 GPU in mig
    907   ann  thin       4     8G   -     4 cores   6G    3 h    none
    908   ann  other      4     4G   -     1 core    1G    3 h    cpu_low_eff, cpu_serial_on_many -> 1 core
    909   bob  thin       as 901, but Slurm billed it 99, which thin's weights do not give

Table policy (TABLE below): thin 1/core-h, at least 4 cores, 2 GiB per core; fat 1.5/core-h; gpu
2/core-h + 32/GPU-h, at least 1 GPU, 8 cores and 64 GiB per GPU; mig 8/GPU-h; `other` has no rate
(core-hours).

    901  thin max(8, 4, 32/2) = 16 cores x 2 h = 32      -> max(1, 4, ceil(5/2)) = 4 x 2 = 8      saves 24
    902  gpu  2 h x (8 x 2 + 2 GPUs x 32) = 160           -> thin max(8, 4, 64/2) = 32 x 2 = 64     saves 96
    903  gpu  2 h x 4 x 2 = 16                            -> thin max(4, 4, 8/2) = 4 x 2 = 8        saves 8
    904  fat  4 x 1.5 x 2 = 12; 24G in fat: 12            -> thin max(4, 4, 12) x 2 = 24: dearer    saves 0
    905  fat  16 x 1.5 x 2 = 48                           -> thin max(16, 4, 6) x 2 = 32            saves 16
    906  gpu  max(2, 1, 4/8, 32/64) = 2 GPUs: 2 x (8 + 64) = 144 -> mig 1 GPU x 8 x 2 = 16         saves 128
    907  thin 4 x 2 = 8                                   (no advice)                               saves 0
    908  core-hours 4 x 2 = 8                             -> 1 x 2 = 2                              saves 6
    909  as 901                                                                                      saves 24
    total 460 SBU, 302 saved (65.65 %); ann 256 / 142, bob 204 / 160

Slurm billing (BILLING below), weights thin CPU=1,Mem=0.25G; gpu CPU=1,Mem=0.25G,GRES/gpu=32;
fat CPU=1.5; mig CPU=1,GRES/gpu=8; none for `other`. SBU = billing x 2 h; Slurm truncates billing.

    901  8 + 32/4 = 16: 32       -> 1 + 5/4 = 2.25 -> 2: 4                            saves 28
    902  8 + 16 + 64 = 88: 176   -> thin 8 + 16 = 24: 48                              saves 128
    903  4 + 2 = 6: 12           -> thin 4 + 2 = 6: 12                                saves 0
    904  4 x 1.5 = 6: 12         -> fat 6: 12 (thin 4 + 6 = 10: 20, dearer)           saves 0
    905  16 x 1.5 = 24: 48       -> thin 16 + 3 = 19: 38                              saves 10
    906  4 + 8 + 64 = 76: 152    -> mig 4 + 8 = 12: 24                                saves 128
    907  4 + 2 = 6: 12           (no advice)                                          saves 0
    908  billed 4: 8             no weights for `other`                               unknown
    909  billed 99: 198          thin's weights give 16, not 99                       unknown
    total 650 SBU, 294 saved of the 444 whose savings are known (66.2 %)
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, jobsight_cmd

from jobsight.analytics.config import ConfigError, parse_config
from jobsight.analytics.ingest import billing_weights
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.period import iso_week
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.collector.csv_schema import COLUMNS, HEADER

HDR = ("JobID|JobIDRaw|Cluster|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|"
       "Timelimit|NCPUS|NNodes|NTasks|ReqMem|AllocTRES|TotalCPU|MaxRSS|TRESUsageInTot\n")
T0, T1 = "2026-11-17T10:00:00", "2026-11-17T12:00:00"


def job(jid, user, part, cores, mem, billing, cpu, peak, limit="03:00:00", gpus=0, gpu_util=None) -> str:
    tres = f"billing={billing},cpu={cores}" + (f",gres/gpu:a100={gpus},gres/gpu={gpus}" if gpus else "") + f",mem={mem},node=1"
    usage = f"gres/gpuutil={gpu_util}" if gpu_util is not None else ""
    acct = "prj-a" if user == "ann" else "prj-b"
    return (f"{jid}|{jid}|sv|{jid.lower()}|{user}|{acct}|{part}|COMPLETED|0:0|{T0}|{T0}|{T1}|02:00:00|{limit}|{cores}|1||"
            f"{mem}|{tres}|{cpu}||{usage}\n"
            f"{jid}.batch|{jid}.batch|sv|batch||||COMPLETED|0:0||{T0}|{T1}|02:00:00||{cores}|1|1|||{cpu}||"
            f"cpu={cpu},mem={peak}\n")


SACCT = HDR + "".join([
    job("901", "ann", "thin", 8, "32G", 16, "02:00:00", "4G", limit="1-00:00:00"),
    job("902", "ann", "gpu", 8, "64G", 88, "08:00:00", "40G", gpus=2, gpu_util=0.5),
    job("903", "bob", "gpu", 4, "8G", 6, "08:00:00", "6G"),
    job("904", "bob", "fat", 4, "128G", 6, "08:00:00", "20G"),
    job("905", "ann", "fat", 16, "64G", 24, "1-08:00:00", "10G"),
    job("906", "bob", "gpu", 4, "32G", 76, "08:00:00", "16G", gpus=2),
    job("907", "ann", "thin", 4, "8G", 6, "08:00:00", "6G"),
    job("908", "ann", "other", 4, "4G", 4, "02:00:00", "1G"),
    job("909", "bob", "thin", 8, "32G", 99, "02:00:00", "4G", limit="1-00:00:00"),
])

ADVICE = {"cpu_partition": "thin", "mem_partition": "thin", "mem_partition_node_gib": 64,
          "fat_partitions": ["fat"], "small_gpu_partition": "mig"}
TABLE = {"charging": {"policy": "table", "rates": [
    {"partition": "thin", "per_core_h": 1.0, "min_cores": 4, "mem_per_core_gb": 2},
    {"partition": "fat", "per_core_h": 1.5},
    {"partition": "gpu", "per_core_h": 2, "per_gpu_h": 32, "min_gpus": 1, "cores_per_gpu": 8, "mem_per_gpu_gb": 64},
    {"partition": "mig", "per_gpu_h": 8, "min_gpus": 1}]},
    "advice": ADVICE}
BILLING = {"advice": {**ADVICE, "billing_weights": {
    "thin": "CPU=1.0,Mem=0.25G", "gpu": "CPU=1.0,Mem=0.25G,GRES/gpu=32", "fat": "CPU=1.5", "mig": "CPU=1.0,GRES/gpu=8"}}}

TABLE_SAVED = {"901": (32, 8), "902": (160, 64), "903": (16, 8), "904": (12, 12), "905": (48, 32), "906": (144, 16),
               "908": (8, 2), "909": (32, 8)}
BILLING_SAVED = {"901": (32, 4), "902": (176, 48), "903": (12, 12), "904": (12, 12), "905": (48, 38), "906": (152, 24),
                 "908": (8, None), "909": (198, None)}
REQUESTS = {"901": "--ntasks=1 --cpus-per-task=1 --mem=5G --time=03:00:00", "902": "--partition=thin --gres=none",
            "903": "--partition=thin", "904": "--mem=24G", "905": "--partition=thin --mem=12G",
            "906": "--partition=mig --gres=gpu:1", "908": "--ntasks=1 --cpus-per-task=1",
            "909": "--ntasks=1 --cpus-per-task=1 --mem=5G --time=03:00:00"}


def sidecar(folder: Path) -> Path:
    """906's two GPUs, one sample a minute: GPU 0 at 30 % with 4 of 40 GB, GPU 1 idle and empty."""
    rows = []
    for minute in range(0, 120, 10):
        for dev, idx, util, used in (("GPU-aaaa", 0, 30, 4_000_000_000), ("GPU-bbbb", 1, 0, 0)):
            cell = {c: "" for c in COLUMNS}
            cell.update(time=f"2026-11-17T{10 + minute // 60:02d}:{minute % 60:02d}:00.000Z", job_id="906", cluster="sv",
                        host="n1", device=dev, util_pct=str(util), mem_used_bytes=str(used),
                        mem_total_bytes="40000000000", gpu_index=str(idx))
            rows.append(",".join(cell[c] for c in COLUMNS))
    path = folder / "jobsight-sv-906-n1-20261117T100000Z-1.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def jobsight(*args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "JOBSIGHT_CONFIG"}
    proc = subprocess.run([*jobsight_cmd(), *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert proc.returncode == 0, f"jobsight {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def toml(cfg: dict) -> str:
    """The test's settings as jobsight.toml text (the commands read a file)."""
    def value(v):
        return json.dumps(v) if not isinstance(v, list) else "[" + ", ".join(json.dumps(x) for x in v) + "]"
    out = []
    charging = cfg.get("charging")
    if charging:
        out += ["[charging]", f'policy = "{charging["policy"]}"']
        for rate in charging["rates"]:
            out += ["[[charging.rates]]"] + [f"{k} = {value(v)}" for k, v in rate.items()]
    advice = cfg["advice"]
    out += ["[advice]"] + [f"{k} = {value(v)}" for k, v in advice.items() if k != "billing_weights"]
    if "billing_weights" in advice:
        out += ["[advice.billing_weights]"] + [f"{k} = {value(v)}" for k, v in advice["billing_weights"].items()]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("savings")
    (work / "sacct.txt").write_text(SACCT, encoding="utf-8")
    (work / "table.toml").write_text(toml(TABLE), encoding="utf-8")
    (work / "billing.toml").write_text(toml(BILLING), encoding="utf-8")
    out = jobsight("ingest", "--db", str(work / "sv.duckdb"), "--timezone", "UTC", "--config", str(work / "table.toml"),
                   str(work / "sacct.txt"), str(sidecar(work)), cwd=work)
    assert "0 rejected" in out
    return work


def rows(work: Path, cfg: dict, sql: str) -> list[tuple]:
    db = Database.open(work / "sv.duckdb", parse_config(cfg))
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def saved(work: Path, cfg: dict) -> dict[str, tuple]:
    return {j: (sbu, fit) for j, sbu, fit in rows(work, cfg, "SELECT job_id, sbu, sbu_if_fitted FROM job_savings")}


@pytest.mark.parametrize("cfg, expected", [(TABLE, TABLE_SAVED), (BILLING, BILLING_SAVED)], ids=["table", "billing"])
def test_each_job_priced_as_it_was_charged(work, cfg, expected):
    got = saved(work, cfg)
    assert got.keys() == expected.keys()        # 907 has no flag, no advice
    for j, (sbu, fit) in expected.items():
        assert got[j][0] == pytest.approx(sbu), j
        assert (got[j][1] is None) if fit is None else got[j][1] == pytest.approx(fit), j
    savings = dict(rows(work, cfg, "SELECT job_id, savings_sbu FROM job_savings"))
    assert all(savings[j] == (None if fit is None else pytest.approx(sbu - fit)) for j, (sbu, fit) in expected.items())


@pytest.mark.parametrize("cfg", [TABLE, BILLING], ids=["table", "billing"])
def test_the_request_that_would_have_fit(work, cfg):
    assert dict(rows(work, cfg, "SELECT job_id, fitted_request FROM job_savings")) == REQUESTS


def test_unknown_savings_say_why(work):
    notes = dict(rows(work, BILLING, "SELECT job_id, savings_note FROM job_savings WHERE savings_note IS NOT NULL"))
    assert notes == {"908": "no TRESBillingWeights known for partition other",
                     "909": "the TRESBillingWeights known for partition thin give billing=16, not the 99 the job was charged"}
    # the fitted billing of a request that changes the charge comes from the weights, truncated
    billing = dict(rows(work, BILLING, "SELECT job_id, fitted_billing FROM job_savings"))
    assert billing == {"901": 2, "902": 24, "903": 6, "904": 6, "905": 19, "906": 12, "908": None, "909": None}


@pytest.mark.parametrize("cfg", [TABLE, BILLING], ids=["table", "billing"])
def test_without_a_cpu_partition_dropping_the_gpus_is_priced_in_its_own_partition(work, cfg):
    """902 without GPUs, priced where it ran, gpu, with the GPU term left out; the note names that
    route. Table: 2 h x 8 cores x 2 = 32 of 160, saves 128. Billing: CPU=1,Mem=0.25G of 8 cores and
    64 GiB = 24 (the GRES/gpu=32 term gone): 48 of 176, saves 128. 903, CPU work already there,
    stays (the same request: 0)."""
    cfg = {**cfg, "advice": {k: v for k, v in cfg["advice"].items() if k != "cpu_partition"}}
    got = {j: r for j, *r in rows(work, cfg, "SELECT job_id, fitted_request, sbu_if_fitted, savings_sbu, savings_note "
                                            "FROM job_savings WHERE job_id IN ('902', '903')")}
    route = "priced as partition gpu without its GPUs: no [advice] cpu_partition is set"
    assert got["902"] == ["--gres=none", pytest.approx(got["902"][1]), pytest.approx(128), route]
    assert got["902"][1] == pytest.approx(32 if cfg["advice"].get("billing_weights") is None else 48)
    assert got["903"][0] == "" and got["903"][2] == 0.0 and got["903"][3] is None


def test_a_fat_job_is_priced_in_both_places_and_the_cheaper_counts(work):
    advice = rows(work, TABLE, "SELECT job_id_raw, \"partition\", mem_charged_bytes / 2^30, thin FROM job_advice "
                               "WHERE job_id_raw IN ('904', '905') ORDER BY ALL")
    assert advice == [("904", "fat", 24, False), ("904", "thin", 24, True), ("905", "fat", 12, False), ("905", "thin", 12, True)]
    assert dict(rows(work, TABLE, "SELECT job_id, fitted_partition FROM job_savings WHERE job_id IN ('904', '905')")) == {
        "904": "fat", "905": "thin"}


def test_advice_names_the_cheaper_place(work):
    advice = {(j, c): a for j, c, a in rows(work, TABLE, "SELECT job_id, code, advice FROM job_flags")}
    assert advice["902", "gpu_idle"].endswith("drop it (--gres=none --partition=thin)")
    assert advice["903", "cpu_job_on_gpu_partition"] == "--partition=thin: submit CPU-only work to a CPU partition"
    assert advice["906", "gpu_fits_smaller"] == "--partition=mig: a MIG slice or a smaller GPU would do"
    assert advice["905", "mem_fits_thin"] == "--partition=thin --mem=12G, where that costs less"
    assert {c for j, c in advice if j == "906"} == {"gpu_low_util", "gpu_unused_devices", "gpu_fits_smaller"}


def test_usage_rolls_savings_up(work):
    cfg = ["--config", str(work / "table.toml"), "--format", "json"]
    by_user = {r["user"]: r for r in json.loads(jobsight("usage", "--db", str(work / "sv.duckdb"), "--by", "user", *cfg, cwd=work))}
    assert by_user["ann"]["sbu"] == pytest.approx(256) and by_user["ann"]["savings_sbu"] == pytest.approx(142)
    assert by_user["bob"]["sbu"] == pytest.approx(204) and by_user["bob"]["savings_sbu"] == pytest.approx(160)
    assert by_user["ann"]["savings_pct"] == pytest.approx(142 / 256 * 100)
    by_part = {r["partition"]: r["savings_sbu"] for r in json.loads(
        jobsight("usage", "--db", str(work / "sv.duckdb"), "--by", "partition", *cfg, cwd=work))}
    assert by_part == {"thin": pytest.approx(48), "gpu": pytest.approx(232), "fat": pytest.approx(16), "other": pytest.approx(6)}
    week = json.loads(jobsight("usage", "--db", str(work / "sv.duckdb"), "--by", "week", *cfg, cwd=work))
    assert [(r["week"], r["sbu"], r["savings_sbu"]) for r in week] == [("2026-W47", pytest.approx(460), pytest.approx(302))]
    assert [(r["unpriced_jobs"], r["unpriced_wasted_sbu"]) for r in week] == [(0, 0)]    # every saving known
    # unknown savings weigh in neither: 294 saved of the 650 - 8 - 198 SBU whose savings are known
    # (a read uses the settings the database holds: `settings` applies BILLING's first)
    jobsight("settings", "--db", str(work / "sv.duckdb"), "--config", str(work / "billing.toml"), cwd=work)
    billing = ["--config", str(work / "billing.toml"), "--format", "json"]
    (total,) = json.loads(jobsight("usage", "--db", str(work / "sv.duckdb"), "--by", "cluster", *billing, cwd=work))
    assert (total["sbu"], total["savings_sbu"]) == (pytest.approx(650), pytest.approx(294))
    assert total["savings_pct"] == pytest.approx(294 / 444 * 100)
    # beside it, what the total leaves out: 908 and 909, both CPU-driven, 1 of 4 and 2 of 16
    # core-hours busy: 8 x 0.75 + 198 x 0.875 wasted
    assert (total["unpriced_jobs"], total["unpriced_wasted_sbu"]) == (2, pytest.approx(6 + 173.25))
    by_user = {r["user"]: r for r in json.loads(jobsight("usage", "--db", str(work / "sv.duckdb"), "--by", "user",
                                                         *billing, cwd=work))}
    assert {u: (r["unpriced_jobs"], r["unpriced_wasted_sbu"]) for u, r in by_user.items()} == {
        "ann": (1, pytest.approx(6)), "bob": (1, pytest.approx(173.25))}
    csv = jobsight("usage", "--db", str(work / "sv.duckdb"), "--by", "user", "--config", str(work / "billing.toml"),
                   "--format", "csv", cwd=work).splitlines()
    header = csv[0].split(",")
    assert [dict(zip(header, line.split(",")))["unpriced_jobs"] for line in csv[1:]] == ["1", "1"]


def test_flags_sorted_by_savings_and_job_report(work):
    db, cfg = str(work / "sv.duckdb"), str(work / "table.toml")
    jobsight("settings", "--db", db, "--config", cfg, cwd=work)    # a read uses the settings the database holds
    flags = json.loads(jobsight("flags", "--db", db, "--config", cfg, "--sort", "savings", "--format", "json", cwd=work))
    order = list(dict.fromkeys(r["job_id"] for r in flags))
    assert order == ["906", "902", "901", "909", "905", "903", "908", "904"]    # 128, 96, 24, 24 (901 first: 40% more waste), 16, 8, 6, 0
    text = jobsight("job", "--db", db, "--config", cfg, "902", cwd=work)
    assert ("Would have fit: --partition=thin --gres=none\n"
            "  charged 64.0 SBU instead of 160.0: following the advice would have saved 96.0 SBU (60%)") in text
    jobsight("settings", "--db", db, "--config", str(work / "billing.toml"), cwd=work)
    text = jobsight("job", "--db", db, "--config", str(work / "billing.toml"), "909", cwd=work)
    assert "savings: unknown (the TRESBillingWeights known for partition thin give billing=16" in text


def test_reports_and_dashboard_summaries_agree(work):
    cfg = parse_config(TABLE)
    db = Database.open(work / "sv.duckdb", cfg)
    try:
        data = gather(db, iso_week(2026, 47), from_config(cfg))
        admin, ann = data.build("admin", "cluster"), data.build("user", "ann")
        assert admin.totals["savings_sbu"] == pytest.approx(302) and ann.totals["savings_sbu"] == pytest.approx(142)
        assert admin.totals["savings_pct"] == pytest.approx(302 / 460 * 100)
        top = {j["job_id"]: j for j in admin.top_jobs}
        assert top["906"]["savings_sbu"] == pytest.approx(128)
        assert top["906"]["sbatch_lines"] == "#SBATCH --partition=mig\n#SBATCH --gres=gpu:1"
        assert "Following the advice would have saved 302.0 SBU (66% of the burn)." in admin.summary
        dash = queries.totals(db, Scope("admin", "root"), Filters())
        assert (dash["savings_sbu"], dash["savings_pct"]) == (pytest.approx(302), pytest.approx(302 / 460 * 100))
        bob = queries.entity_table(db, Scope("admin", "root"), Filters(), by="user").set_index("name")
        assert bob.loc["bob", "savings_sbu"] == pytest.approx(160)
    finally:
        db.close()


def test_the_dashboard_job_page_shows_what_would_have_fit(work):
    from jobsight.dashboard.pages import job as page
    db = Database.open(work / "sv.duckdb", parse_config(TABLE))
    try:
        text = json.dumps(page.render(db, Scope("user", "ann"), "sv", "902"), default=str)
        assert "--partition=thin --gres=none" in text
        assert "charged 64.0 SBU instead of 160.0: following the advice would have saved 96.0 SBU (60 % of its charge)" in text
        # bob's job is not ann's to see, its advice neither; 907 has none
        assert "No such job" in json.dumps(page.render(db, Scope("user", "ann"), "sv", "906"), default=str)
        assert "Would have fit" not in json.dumps(page.render(db, Scope("admin", "root"), "sv", "907"), default=str)
    finally:
        db.close()


def test_stored_savings_equal_a_full_recompute_after_a_change_of_weights(work, tmp_path):
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes((work / "sv.duckdb").read_bytes())
    cheaper = {"advice": {**BILLING["advice"], "billing_weights": {**BILLING["advice"]["billing_weights"],
                                                                   "mig": "CPU=1.0,GRES/gpu=2"}}}
    db = Database.open(copy, parse_config(BILLING))
    db.close()
    db = Database.open(copy, parse_config(cheaper))      # mig weighs 2 a GPU: 906 -> (4 + 2) x 2 h = 12
    try:
        assert db.value("SELECT sbu_if_fitted FROM job_savings WHERE job_id = '906'") == pytest.approx(12)
        before = db.execute("SELECT * FROM job_savings ORDER BY ALL").fetchall()
        store.refresh(db.con, full=True)
        assert db.execute("SELECT * FROM job_savings ORDER BY ALL").fetchall() == before
    finally:
        db.close()


# ----------------------------------------------------------------------------- billing weights

def test_tres_billing_weights_parse_as_slurm_reads_them():
    assert billing_weights.parse_weights("CPU=1.0,Mem=0.25G,GRES/gpu=32") == {"cpu": 1.0, "mem": 0.25, "gres/gpu": 32.0}
    # memory without a unit is per MiB; K and T per KiB and TiB; per GiB here
    assert billing_weights.parse_weights("Mem=.25")["mem"] == 256.0
    assert billing_weights.parse_weights("Mem=1T")["mem"] == pytest.approx(1 / 1024)
    assert billing_weights.parse_weights("cpu=2,GRES/gpu:A100=4,Node=10") == {"cpu": 2.0, "gres/gpu:a100": 4.0, "node": 10.0}
    for bad in ("CPU", "CPU=x", "CPU=1G", ""):
        with pytest.raises(billing_weights.WeightsError):
            billing_weights.parse_weights(bad)
    # a number too large for a float, or made so by the unit, and a long word: each refused, the
    # message short whatever the value's length
    for bad, why in (("CPU=" + "9" * 400, "the weight is too large"), ("Mem=1e306K", "the weight is too large"),
                     ("9" * 5000 + "CPU=1.0", "not a TRES weight")):
        with pytest.raises(billing_weights.WeightsError, match=why) as err:
            billing_weights.parse_weights(bad)
        assert len(str(err.value)) < 200


def test_real_scontrol_show_partition_output():
    """fixtures/slurm/scontrol-show-partition.txt: `scontrol show partition -o` of the Slurm harness."""
    got = billing_weights.parse_scontrol_partitions((FIXTURES / "slurm" / "scontrol-show-partition.txt").read_text())
    assert got["cpu"] == {"cpu": 1.0, "mem": 0.25}
    assert got["gpu"] == {"cpu": 1.0, "mem": 0.25, "gres/gpu": 32.0}
    # a partition without TRESBillingWeights bills its CPUs
    assert billing_weights.parse_scontrol_partitions("PartitionName=debug Nodes=n1 State=UP\n") == {"debug": {"cpu": 1.0}}


def test_advice_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="advice.billing_weights.gpu: not a TRES weight: 'GPU'"):
        parse_config({"advice": {"billing_weights": {"gpu": "GPU"}}})
    with pytest.raises(ConfigError, match=r"unknown key advice.cpu \(known: "):
        parse_config({"advice": {"cpu": "thin"}})
    with pytest.raises(ConfigError, match="advice.fat_partitions must be a list"):
        parse_config({"advice": {"fat_partitions": "fat"}})
    with pytest.raises(ConfigError, match="advice.partitions_file: .*cannot read"):
        parse_config({"advice": {"partitions_file": str(tmp_path / "none.txt")}})
    (tmp_path / "parts.txt").write_text("PartitionName=a TRESBillingWeights=CPU=3\n")
    (tmp_path / "jobsight.toml").write_text('[advice]\npartitions_file = "parts.txt"\n')
    from jobsight.analytics.config import load_config
    assert load_config(tmp_path / "jobsight.toml").file_weights == {"a": {"cpu": 3.0}}   # beside the file


def test_config_weights_come_before_scontrol_s(work, tmp_path):
    """Weights scontrol gave for cluster sv: `other`'s are used (908: billed 4 for 4 cores, 1 core
    bills 1: 8 -> 2 SBU), thin's give way to jobsight.toml's (901 stays 32 -> 4)."""
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes((work / "sv.duckdb").read_bytes())
    db = Database.open(copy, parse_config(BILLING))
    try:
        weights = {"other": {"cpu": 1.0}, "thin": {"cpu": 9.0}}
        billing_weights.replace(db.con, billing_weights.rows(weights, "scontrol", "sv"), "scontrol", "sv")
        billing_weights.replace(db.con, billing_weights.rows({"other": {"cpu": 7.0}}, "scontrol", "c2"), "scontrol", "c2")
        db.refresh()
        got = dict(db.execute("SELECT job_id, sbu_if_fitted FROM job_savings WHERE job_id IN ('901', '908')").fetchall())
        assert got == {"901": pytest.approx(4), "908": pytest.approx(2)}
    finally:
        db.close()
