"""The demo data generator (analytics/demo): deterministic, every pattern present, and the
files agree with each other (sidecar CPU rows vs sacct TotalCPU, GPU samples inside the job)."""
from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jobsight.analytics.demo import END, generate
from jobsight.analytics.demo.cluster import PART, compress_nodes
from jobsight.analytics.demo.dumps import windows
from jobsight.analytics.demo.formats import duration, mem_tres, total_cpu
from jobsight.analytics.demo.model import Job, Run, Step, view
from jobsight.collector.csv_schema import HEADER

AMS = ZoneInfo("Europe/Amsterdam")

PATTERN_TAGS = {
    # GPU behaviour
    "efficient_training", "dataloader_bound", "two_phase_finetune", "notebook_idle", "multi_gpu_one_used",
    "mig_sized", "inference_bursts", "gpu_lost_mid_run", "nvidia_smi_log",
    # CPU and memory
    "serial_on_many", "mem_10x", "time_20x", "well_sized", "multi_node_sidecars", "mpi_multistep",
    # scheduler life cycle
    "array", "array_pending_tail", "failed", "timeout", "oom", "cancelled_sidecar_truncated", "requeued",
    "cancelled_pending", "pending", "interactive", "pipe_in_name", "utf8_name",
}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gen") / "data"
    return out, generate(out, jobs=200, days=7, seed=11)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _by_tag(manifest: dict, tag: str) -> list[str]:
    return [jid for jid, t in manifest["truth"].items() if tag in t["tags"]]


def _sacct_rows(root: Path) -> list[dict]:
    rows = []
    for p in sorted((root / "sacct").glob("*.txt")):
        lines = p.read_text(encoding="utf-8").splitlines()
        cols = lines[0].split("|")
        k, n = cols.index("JobName"), len(cols)
        for line in lines[1:]:
            f = line.split("|")
            if len(f) > n:          # a job name with the delimiter in it: the one free-text column
                f = f[:k] + ["|".join(f[k:k + len(f) - n + 1])] + f[k + len(f) - n + 1:]
            rows.append(dict(zip(cols, f)))
    return rows


# ------------------------------------------------------------------------------------------ determinism

def test_same_seed_gives_identical_bytes(tmp_path, small):
    out, _ = small
    again = tmp_path / "again"
    generate(again, jobs=200, days=7, seed=11)
    a, b = _files(out), _files(again)
    assert list(a) == list(b)
    assert a == b


def test_other_seed_gives_other_data(tmp_path, small):
    out, _ = small
    other = tmp_path / "other"
    generate(other, jobs=200, days=7, seed=12)
    (a,) = [p.read_bytes() for p in (out / "sacct").glob("*.txt")]
    (b,) = [p.read_bytes() for p in (other / "sacct").glob("*.txt")]
    assert a != b


def test_regenerating_replaces_the_previous_files(tmp_path):
    out = tmp_path / "d"
    first = generate(out, jobs=60, days=3, seed=1)
    second = generate(out, jobs=60, days=3, seed=2)
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {"manifest.json"}
    assert on_disk == set(second["files"])
    assert set(first["files"]) != set(second["files"])   # sidecar names carry job ids, pids and times


# ------------------------------------------------------------------------------------------ coverage

def test_every_pattern_is_present_in_a_small_run(small):
    _, m = small
    tags = {t for job in m["truth"].values() for t in job["tags"]}
    assert PATTERN_TAGS <= tags, sorted(PATTERN_TAGS - tags)
    assert len(m["truth"]) <= 200
    # the job count counts array tasks; tasks not started yet collapse into one pending record
    assert m["arguments"]["n_records"] == 200


def test_every_format_is_written(small):
    out, m = small
    dirs = {rel.split("/", 1)[0] for rel in m["files"]}
    assert dirs == {"sacct", "sacct-json", "sidecar", "nvidia-smi", "seff", "slurm"}
    assert all((out / rel).stat().st_size == size for rel, size in m["files"].items())


def test_sacct_text_shows_the_life_cycle(small):
    out, m = small
    rows = _sacct_rows(out)
    states = {r["State"].split(" by ")[0] for r in rows if "." not in r["JobID"]}
    assert {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "PENDING", "REQUEUED"} <= states
    assert any(r["State"].startswith("CANCELLED by 4") for r in rows)        # by the owner's uid
    pend = [r for r in rows if "_[" in r["JobID"]]
    assert pend and pend[0]["State"] == "PENDING" and pend[0]["Start"] == "Unknown"
    assert pend[0]["NodeList"] == "None assigned"
    # an array task's JobIDRaw is its own id; the last task keeps the array's id
    (arr,) = _by_tag(m, "array")[:1] or [None]
    tasks = [r for r in rows if r["JobID"].startswith(m["truth"][arr]["printed_id"].split("_")[0] + "_")
             and "." not in r["JobID"] and "[" not in r["JobID"]]
    assert len({r["JobIDRaw"] for r in tasks}) == len(tasks) >= 2
    # the requeued job: an earlier REQUEUED record and the final one with Restarts=1 (sacct -D)
    rq = _by_tag(m, "requeued")[0]
    recs = [r for r in rows if r["JobIDRaw"] == rq]
    assert [r["State"] for r in recs][-2:] == ["REQUEUED", "COMPLETED"] and recs[-1]["Restarts"] == "1"


def test_billing_follows_snellius_weights(small):
    out, _ = small
    seen = set()
    for r in _sacct_rows(out):
        if "." in r["JobID"] or not r["AllocTRES"]:
            continue
        tres = dict(item.split("=") for item in r["AllocTRES"].split(","))
        cpus, gpus = int(tres["cpu"]), int(tres.get("gres/gpu", 0))
        expected = {"rome": cpus, "genoa": cpus, "fat_rome": int(cpus * 1.5), "gpu_a100": 128 * gpus,
                    "gpu_h100": 192 * gpus}[r["Partition"]]
        assert int(tres["billing"]) == expected, r["JobID"]
        seen.add(r["Partition"])
    assert seen == {"rome", "genoa", "fat_rome", "gpu_a100", "gpu_h100"}


def test_truncated_sidecar_and_lost_gpu(small):
    out, m = small
    jid = _by_tag(m, "cancelled_sidecar_truncated")[0]
    (csv_path,) = [out / rel for rel in m["files"] if f"-{jid}-" in rel and rel.endswith(".csv")]
    data = csv_path.read_bytes()
    assert not data.endswith(b"\n")                      # killed mid-line
    assert data.split(b"\n")[0].decode() == HEADER
    lost = _by_tag(m, "gpu_lost_mid_run")[0]
    paths = [out / rel for rel in m["files"] if f"-{lost}-" in rel and rel.endswith(".csv")]
    rows = [r for p in paths for r in csv.DictReader(p.open(encoding="utf-8"))]
    last = {}
    for r in rows:
        last[r["device"]] = max(last.get(r["device"], ""), r["time"])
    gpu_last = sorted(v for k, v in last.items() if k != "cpu")
    assert len(gpu_last) >= 2 and gpu_last[0] < gpu_last[-1]   # one GPU stopped answering early


def test_multi_node_job_has_one_sidecar_per_node(small):
    out, m = small
    jid = _by_tag(m, "multi_node_sidecars")[0]
    metas = [json.loads((out / rel).read_text()) for rel in m["files"] if f"-{jid}-" in rel and rel.endswith(".meta.json")]
    assert len(metas) >= 2 and len({x["host"] for x in metas}) == len(metas)
    assert all(x["job_id"] == jid and x["cluster"] == "demo" and x["schema_version"] == 1 for x in metas)


# ------------------------------------------------------------------------------------------ consistency

def _local(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=AMS).astimezone(timezone.utc)


def _cpu_seconds(text: str) -> float:
    """sacct TotalCPU: MM:SS.mmm, HH:MM:SS or D-HH:MM:SS."""
    days, _, clock = text.rpartition("-")
    parts = [float(x) for x in clock.split(":")]
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def test_sidecar_cpu_rows_agree_with_sacct_total_cpu(small):
    out, m = small
    rows = {r["JobIDRaw"]: r for r in _sacct_rows(out) if "." not in r["JobID"] and r["State"] == "COMPLETED"}
    checked = 0
    for rel in m["files"]:
        if not rel.endswith(".csv") or not rel.startswith("sidecar/"):
            continue
        jid = rel.split("-")[2]
        r = rows.get(jid)
        if r is None or r["NNodes"] != "1":
            continue
        util = [float(x["util_pct"]) for x in csv.DictReader((out / rel).open(encoding="utf-8")) if x["device"] == "cpu"]
        total = _cpu_seconds(r["TotalCPU"])
        eff = 100 * total / (int(r["ElapsedRaw"]) * int(r["NCPUS"]))
        assert sum(util) / len(util) == pytest.approx(eff, abs=1.0), jid
        checked += 1
    assert checked >= 5


def test_gpu_samples_lie_within_the_job(small):
    out, m = small
    rows = {r["JobIDRaw"]: r for r in _sacct_rows(out) if "." not in r["JobID"]}
    checked = 0
    for rel in m["files"]:
        if not rel.endswith(".csv") or not rel.startswith("sidecar/"):
            continue
        r = rows.get(rel.split("-")[2])
        if r is None or r["End"] == "Unknown":
            continue
        data = (out / rel).read_text(encoding="utf-8")
        if not data.endswith("\n"):
            data = data[: data.rindex("\n") + 1]          # the line cut short by the kill
        times = [x["time"] for x in csv.DictReader(data.splitlines())]
        first, last = (datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
                       for t in (times[0], times[-1]))
        assert _local(r["Start"]) <= first and last <= _local(r["End"]), rel
        checked += 1
    assert checked >= 5


# ------------------------------------------------------------------------------------------ pieces

def test_formats_as_slurm_prints_them():
    assert duration(59) == "00:00:59" and duration(90061) == "1-01:01:01"
    assert total_cpu(312.345) == "05:12.345" and total_cpu(3725) == "01:02:05"
    assert mem_tres(28 * 2**30) == "28G" and mem_tres(1750 * 2**20) == "1750M"
    assert compress_nodes(["tcn3", "tcn4", "tcn5", "tcn9"]) == "tcn[3-5,9]" and compress_nodes(["gcn1"]) == "gcn1"


def test_a_dump_sees_the_job_as_it_was_then():
    part = PART["rome"]
    step = Step("batch", "batch", 1000, 5000, "COMPLETED", "0:0", 16, 1, 1, ["tcn1"], 100.0, 1, 1)
    j = Job(seq=0, job_id_raw=7, job_id="7", array_job_id=None, array_task_id=None, name="x", user="u", uid=1,
            group="g", account="a", partition=part, qos="normal", submit=500, eligible=500, timelimit_s=9000,
            ncpus=16, nnodes=1, ntasks=1, ngpus=0, mem_req=1, pattern="cpu_generic", cpu_eff=0.5, mem_peak=1,
            runs=[Run(1000, 5000, "COMPLETED", "0:0", ["tcn1"], [step])])
    assert view(j, 400) == []
    assert [v.state for v in view(j, 800)] == ["PENDING"]
    (running,) = view(j, 3000)
    assert running.state == "RUNNING" and running.end is None and running.steps[0].cpu_s == 0.0
    (done,) = view(j, 6000)
    assert done.state == "COMPLETED" and done.end == 5000 and done.steps[0].cpu_s == 100.0


def test_weekly_windows_cover_the_span():
    assert windows(0, 10 * 86400) == [(0, 7 * 86400), (7 * 86400, 10 * 86400)]


def test_default_window_ends_on_a_fixed_date():
    assert datetime.fromtimestamp(END, timezone.utc) == datetime(2026, 11, 18, 14, tzinfo=timezone.utc)
