"""`jobsight job`, `jobsight flags` and `jobsight usage` end to end: a database built with
`jobsight ingest` from fixtures/crosscheck/commands-sacct.txt (sacct --parsable2) and the sidecar CSV of
job 503, then the commands as users run them. Every expected number is worked out below.

The jobs (cluster xc, default config: slurm-billing, default flag thresholds):
  501    alice proj-a cpu  4 cores, 4 h of a 1-day limit, TotalCPU 4 h, 2 GiB peak of 32 GiB, billing 4
         cpu 4h/(4h x 4) = 25 %, mem 2/32 = 6.25 %, time 4/24 = 16.7 %, SBU 4 x 4 = 16, wasted 16 x 0.75 = 12
  502_4  bob   proj-b cpu  array task (raw 510), 1 core, 2 h of 3 h, TotalCPU 1:55, 3 GiB of 4 GiB, billing 1
         cpu 6900/7200 = 95.83 %, SBU 2, wasted 2 x (1 - 0.958333) = 0.083333
  503    alice proj-a gpu  2 x a100, 2 cores, Sun 15 Nov 23:00 -> Mon 16 Nov 01:00 (crosses ISO weeks 46/47),
         billing 66 -> SBU 132; sidecar: GPU 0 at 80 %, GPU 1 at 0 % -> mean 40 %, wasted 132 x 0.6 = 79.2
  504    bob   proj-b cpu  FAILED 1:0, 8 cores, 30 min of 1 h, TotalCPU 3:50:00, billing 8
         cpu 13800/14400 = 95.83 %, SBU 4, wasted 4 x (1 - 0.958333) = 0.166667
Totals: SBU 16 + 2 + 132 + 4 = 154; wasted 12 + 0.083333 + 79.2 + 0.166667 = 91.45.
"""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, jobsight_cmd

CROSS = FIXTURES / "crosscheck"
SACCT = CROSS / "commands-sacct.txt"
SIDECAR = CROSS / "jobsight-xc-503-gpu01-20261115T230000Z-4711.csv"


def jobsight(*args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    cmd = jobsight_cmd()
    env = {k: v for k, v in os.environ.items() if k != "JOBSIGHT_CONFIG"}
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    if ok:
        assert proc.returncode == 0, f"jobsight {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    work = tmp_path_factory.mktemp("cmds")      # no jobsight.toml here: the built-in defaults apply
    db = work / "c.duckdb"
    out = jobsight("ingest", "--db", str(db), "--timezone", "UTC", str(SACCT), str(SIDECAR), cwd=work).stdout
    assert "15 stored, 0 updated, 0 rejected" in out   # 9 sacct rows (4 jobs, 5 steps) + 6 sidecar samples
    return work, db


def run(env, *args) -> str:
    work, db = env
    return jobsight(args[0], "--db", str(db), *args[1:], cwd=work).stdout


def view_columns(env, view: str) -> list[str]:
    con = duckdb.connect(str(env[1]), read_only=True)
    try:
        return [d[0] for d in con.execute(f"SELECT * FROM {view} LIMIT 0").description]
    finally:
        con.close()


# ------------------------------------------------------------------------------------------ job

def test_job_text_report_serial_job(env):
    text = run(env, "job", "501")
    assert "Job ID: 501 (raw 501)   Cluster: xc" in text
    assert "Wall-clock: 04:00:00 of 1-00:00:00 limit   Time efficiency: 16.7%" in text   # 4 / 24
    assert "CPU efficiency: 25.0%  [sacct] of 16:00:00 core-walltime" in text            # 4 h x 4 cores
    assert "Memory efficiency: 6.2%  [sacct]  (2.00 GiB peak of 32.00 GiB)" in text      # 6.25 printed .1f
    assert "SBU: 16.0 [billing]   wasted: 12.0  (charged for cpu)" in text
    assert "[alarm] cpu_serial_on_many: About one core busy (1.00) of 4 allocated" in text
    assert "advice: --mem=3G" in text            # ceil(2 GiB x 1.2)
    assert "advice: --time=06:00:00" in text     # 4 h x 1.5


def test_job_text_report_gpu_job(env):
    text = run(env, "job", "503")
    # (80 + 0) / 2; least-used 0; 30e9 / 40e9; energy (72000 + 36000) J / 3.6e6 = 0.03 kWh
    # two lines, so that the report fits 100 columns
    assert ("GPU utilisation: 40.0%  [sidecar]   idle GPUs: 1   energy: 0.03 kWh\n"
            "  least-used GPU: 0.0%   peak GPU memory: 75.0%") in text
    assert "SBU: 132.0 [billing]   wasted: 79.2  (charged for gpu)" in text
    assert "Utilisation over time" in text and "GPU-aaaaaaaa" in text
    assert "[alarm] gpu_unused_devices: 1 of 2 GPUs idle (least-used GPU at 0.0%)" in text


@pytest.mark.parametrize("job", ["501", "502_4", "503", "504"])
def test_job_text_fits_100_columns(env, job):
    """Long advice wraps, its continuation indented; the GPU table cuts the device id, never a number."""
    text = run(env, "job", job)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    if job == "503":
        assert "advice: --gres=gpu:1 (or make the code use all GPUs: DistributedDataParallel, one task per\n" in text
        gpus = text.split("GPUs:\n")[1].split("\n\n")[0].splitlines()
        assert [line.split()[-1] for line in gpus[2:]] == ["3", "3"]      # samples per GPU, whole


def test_job_json_fields_are_view_columns_and_flags_objects(env):
    m = json.loads(run(env, "job", "501", "--format", "json"))
    assert set(view_columns(env, "job_metrics")) <= set(m)
    assert set(m) - set(view_columns(env, "job_metrics")) == {"flags", "gpus", "steps", "series", "savings", "nodes",
                                                              "pending", "samples_moved"}
    assert m["cpu_eff_pct"] == pytest.approx(25.0) and m["mem_eff_pct"] == pytest.approx(6.25)
    assert m["time_eff_pct"] == pytest.approx(100 * 4 / 24)
    assert m["sbu"] == pytest.approx(16.0) and m["wasted_sbu"] == pytest.approx(12.0)
    assert all(set(f) == {"code", "severity", "message", "advice"} for f in m["flags"])
    assert {f["code"]: f["severity"] for f in m["flags"]} == {
        "cpu_low_eff": "alarm", "cpu_serial_on_many": "alarm", "mem_oversized": "warn", "time_oversized": "warn"}
    # 1 core (serial), ceil(2 GiB x 1.2) = 3 GiB, 4 h x 1.5; charged by Slurm's billing, whose weights
    # for partition cpu nothing here gives: the savings are unknown, never guessed
    s = m["savings"]
    assert s["fitted_request"] == "--ntasks=1 --cpus-per-task=1 --mem=3G --time=06:00:00"
    assert s["sbu_if_fitted"] is None and s["savings_sbu"] is None
    assert s["savings_note"] == "no TRESBillingWeights known for partition cpu"


def test_job_id_forms(env):
    by_task = json.loads(run(env, "job", "502_4", "--format", "json"))
    by_raw = json.loads(run(env, "job", "510", "--format", "json"))
    assert by_task["job_id"] == by_raw["job_id"] == "502_4" and by_task["job_id_raw"] == by_raw["job_id_raw"] == "510"
    assert by_task["cpu_eff_pct"] == pytest.approx(100 * 6900 / 7200)
    assert by_task["flags"] == []
    proc = jobsight("job", "--db", str(env[1]), "999", cwd=env[0], ok=False)
    assert proc.returncode != 0 and "no job '999'" in proc.stderr


# ---------------------------------------------------------------------------------------- flags

def codes(rows) -> set[tuple[str, str]]:
    return {(r["job_id"], r["code"]) for r in rows}


ALL_FLAGS = {("501", "cpu_low_eff"), ("501", "cpu_serial_on_many"), ("501", "mem_oversized"),
             ("501", "time_oversized"), ("503", "gpu_unused_devices"), ("504", "failed_burn")}


def test_flags_json_all_and_field_names(env):
    rows = json.loads(run(env, "flags", "--format", "json"))
    assert codes(rows) == ALL_FLAGS
    assert all(set(r) <= set(view_columns(env, "job_flags_savings")) for r in rows)
    # slurm-billing without TRESBillingWeights: unknown, but for 504 whose failed_burn advice resizes
    # nothing (the same request, the same billing: 0 saved)
    assert {r["job_id"]: r["savings_sbu"] for r in rows} == {"501": None, "503": None, "504": 0.0}
    burn = next(r for r in rows if r["code"] == "failed_burn")
    assert burn["message"] == "FAILED (exit 1:0) after 0.5 h: 4.0 SBU burned" and burn["severity"] == "info"
    assert rows[0]["job_id"] == "503"    # most wasted SBU first (79.2)


@pytest.mark.parametrize("args, expected", [
    (["--user", "alice"], {c for c in ALL_FLAGS if c[0] in ("501", "503")}),
    (["--user", "bob"], {("504", "failed_burn")}),
    (["--account", "proj-b"], {("504", "failed_burn")}),
    (["--partition", "gpu"], {("503", "gpu_unused_devices")}),
    (["--flag", "failed_burn", "--flag", "mem_oversized"], {("504", "failed_burn"), ("501", "mem_oversized")}),
    # a job counts in every day it ran in: 501 runs on 9 Nov, 504 on 11 Nov, 503 from 15 Nov 23:00 to 16 Nov
    (["--since", "2026-11-11"], {("504", "failed_burn"), ("503", "gpu_unused_devices")}),
    (["--until", "2026-11-10"], {c for c in ALL_FLAGS if c[0] == "501"}),
    (["--since", "2026-11-10", "--until", "2026-11-14"], {("504", "failed_burn")}),
    (["--since", "2026-11-15", "--until", "2026-11-15"], {("503", "gpu_unused_devices")}),   # ran on the 15th, ended the 16th
    (["--since", "2026-11-16", "--until", "2026-11-16"], {("503", "gpu_unused_devices")}),
])
def test_flags_filters(env, args, expected):
    assert codes(json.loads(run(env, "flags", "--format", "json", *args))) == expected


def test_flags_csv_and_table(env):
    rows = list(csv.DictReader(io.StringIO(run(env, "flags", "--format", "csv", "--user", "bob"))))
    assert len(rows) == 1 and rows[0]["code"] == "failed_burn" and rows[0]["job_id_raw"] == "504"
    assert float(rows[0]["sbu"]) == pytest.approx(4.0)
    assert float(rows[0]["wasted_sbu"]) == pytest.approx(4 * (1 - 13800 / 14400))
    # advice is jobsight's own text: its leading option is written as it is (analytics/render.py)
    mem = list(csv.DictReader(io.StringIO(run(env, "flags", "--format", "csv", "--flag", "mem_oversized"))))
    assert mem[0]["advice"].startswith("--mem=3G: saves no SBU")     # memory is not charged here
    table = run(env, "flags", "--partition", "gpu")
    assert "gpu_unused_devices" in table and "501" not in table


def test_flags_table_one_line_per_job_within_100_columns(env):
    """501's four flags are one line, its codes joined, so the SBU column adds up: 132 + 16 + 4."""
    work, db = env
    environ = {k: v for k, v in os.environ.items() if k != "JOBSIGHT_CONFIG"} | {"COLUMNS": "100"}
    out = subprocess.run([*jobsight_cmd(), "flags", "--db", str(db)], capture_output=True, text=True, timeout=120,
                         cwd=work, env=environ, check=True).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["503", "501", "504"]                 # each job once, most wasted first
    assert sum(float(r[2].replace(",", "")) for r in rows) == pytest.approx(154 - 2)   # 502_4 has no flag
    assert lines[3].split()[5].startswith("cpu_low_eff,")                # its codes joined
    wide = run(env, "flags", "--wide")
    line_501 = next(line for line in wide.splitlines() if line.startswith("501 "))
    assert "cpu_low_eff, cpu_serial_on_many, mem_oversized, time_oversized" in line_501
    assert "--mem=3G" in line_501 and "--time=06:00:00" in line_501      # every flag's advice, uncut
    # --limit counts jobs: 503's and 501's flags whole, and the note says how many jobs are left
    proc = jobsight("flags", "--db", str(db), "--limit", "2", "--format", "json", cwd=work)
    assert codes(json.loads(proc.stdout)) == {c for c in ALL_FLAGS if c[0] in ("501", "503")}
    assert "1 more jobs; --limit 0 for all" in proc.stderr
    assert run(env, "flags", "--user", "nobody").strip() == "no flagged jobs"


# ---------------------------------------------------------------------------------------- usage

def usage(env, by, *extra) -> dict[str, dict]:
    return {r[by]: r for r in json.loads(run(env, "usage", "--by", by, "--format", "json", *extra))}


def total_sbu(env) -> float:
    con = duckdb.connect(str(env[1]), read_only=True)
    try:
        return con.execute("SELECT sum(sbu) FROM job_metrics").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("by, expected", [
    ("user", {"alice": 16 + 132, "bob": 2 + 4}),
    ("account", {"proj-a": 148, "proj-b": 6}),
    ("partition", {"cpu": 16 + 2 + 4, "gpu": 132}),
    # 503 runs 1 h in W46 (Sun 23:00-24:00) and 1 h in W47: 66 SBU in each
    ("week", {"2026-W46": 16 + 2 + 4 + 66, "2026-W47": 66}),
])
def test_usage_sums(env, by, expected):
    rows = usage(env, by)
    assert {k: r["sbu"] for k, r in rows.items()} == pytest.approx(expected)
    assert sum(r["sbu"] for r in rows.values()) == pytest.approx(total_sbu(env)) == pytest.approx(154.0)
    assert sum(r["wasted_sbu"] for r in rows.values()) == pytest.approx(12 + 2 / 24 + 79.2 + 4 / 24)


def test_usage_week_split_details(env):
    rows = usage(env, "week")
    w46, w47 = rows["2026-W46"], rows["2026-W47"]
    assert (w46["jobs"], w47["jobs"]) == (4, 1)
    assert w46["core_hours"] == pytest.approx(16 + 2 + 4 + 2) and w47["core_hours"] == pytest.approx(2)
    assert w46["gpu_hours"] == pytest.approx(2) and w47["gpu_hours"] == pytest.approx(2)
    assert w47["wasted_sbu"] == pytest.approx(39.6)           # half of 79.2
    assert w47["wasted_pct"] == pytest.approx(60.0)


def test_usage_since_cuts_a_job_at_the_boundary(env):
    # from Monday 16 Nov: only 503's second hour (its share of time in the window)
    rows = usage(env, "user", "--since", "2026-11-16")
    assert {k: r["sbu"] for k, r in rows.items()} == pytest.approx({"alice": 66.0})


def test_usage_csv(env):
    rows = list(csv.DictReader(io.StringIO(run(env, "usage", "--by", "partition", "--format", "csv"))))
    assert [r["partition"] for r in rows] == ["gpu", "cpu"]     # most SBU first
    assert [float(r["sbu"]) for r in rows] == pytest.approx([132.0, 22.0])


def test_usage_table_says_how_old_the_data_is_and_json_csv_do_not(env):
    # the newest accounting time: 503's end, 2026-11-16 01:00; "now" in these tests is later than a day after it
    assert run(env, "usage", "--by", "user").splitlines()[-1] == "data up to 2026-11-16 01:00 UTC (more than a day old)"
    assert set(usage(env, "user")) == {"alice", "bob"}          # JSON: the rows alone
    assert "data up to" not in run(env, "usage", "--by", "user", "--format", "csv")


def test_usage_by_week_with_a_window_inside_a_week(env):
    # --since Wednesday 11 Nov: W46 keeps what ran from then on: 504 (4 SBU, 11 Nov) and 503's Sunday hour
    # (66); W47 503's Monday hour (66). The same window by user: 132 + 4 = 136 in all.
    rows = usage(env, "week", "--since", "2026-11-11")
    assert {k: r["sbu"] for k, r in rows.items()} == pytest.approx({"2026-W46": 70.0, "2026-W47": 66.0})
    assert sum(r["sbu"] for r in usage(env, "user", "--since", "2026-11-11").values()) == pytest.approx(136.0)
    # --until 10 Nov (the whole day): 501 (16) and 502_4 (2) only, not the rest of W46
    rows = usage(env, "week", "--until", "2026-11-10")
    assert {k: r["sbu"] for k, r in rows.items()} == pytest.approx({"2026-W46": 18.0})
