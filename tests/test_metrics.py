"""Stored per-job metrics (sql/metrics/) on hand-made jobs: every expected number is worked out in the comments."""
from __future__ import annotations

import datetime as dt

import pytest

from jobsight.analytics.config import parse_config
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

GiB = 2**30
T0 = dt.datetime(2026, 11, 16, 22, 0, 0)  # a Monday, 22:00 UTC


def add_job(con, job_id, **kw):
    row = dict(cluster="c1", job_id=job_id, job_id_raw=job_id, state="COMPLETED", source="test",
               start_time=T0, partition="cpu", user="alice", account="proj-a")
    row.update(kw)
    if "elapsed_s" in row and "end_time" not in row:
        row["end_time"] = row["start_time"] + dt.timedelta(seconds=row["elapsed_s"])
    cols = list(row)
    con.execute(f"INSERT INTO job ({', '.join(chr(34) + c + chr(34) for c in cols)}) VALUES ({', '.join('?' * len(cols))})",
                list(row.values()))


def add_samples(con, job_id, device, utils, mem_used=None, mem_total=None, step_s=10, host="n1", source="sidecar"):
    for i, u in enumerate(utils):
        con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                    "mem_total_bytes, source) VALUES ('c1', ?, ?, ?, ?, ?, ?, ?, ?)",
                    [job_id, host, device, T0 + dt.timedelta(seconds=i * step_s), u,
                     None if mem_used is None else mem_used[i], mem_total, source])


@pytest.fixture
def con(tmp_path):
    c = Database.open(tmp_path / "m.duckdb", parse_config({}))
    yield c
    c.close()


def metrics(con, job_id):
    store.refresh(con)      # the rows above were written by hand, not by an ingest
    cur = con.execute("SELECT * FROM job_metrics WHERE job_id_raw = ?", [job_id])
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def flags(con, job_id):
    store.refresh(con)
    return {r[0]: r[1:] for r in con.execute(
        "SELECT code, severity, message, advice FROM job_flags WHERE job_id_raw = ?", [job_id]).fetchall()}


def test_serial_job_on_four_cores_with_oversized_memory_and_time(con):
    # 4 cores for 4 h with 4 h of CPU time: 1 core busy -> 25 %; 2 GiB peak of 32 GiB -> 6.25 %;
    # 4 h of a 24 h limit -> 16.7 %; billing 4 -> 16 SBU, CPU drives the charge -> 12 wasted.
    add_job(con, "1", elapsed_s=4 * 3600, timelimit_s=86400, ncpus=4, billing=4, cpu_time_s=4 * 3600,
            mem_alloc_bytes=32 * GiB, mem_peak_bytes=2 * GiB)
    m = metrics(con, "1")
    assert m["cpu_eff_pct"] == pytest.approx(25.0) and m["cpu_eff_source"] == "sacct"
    assert m["mem_eff_pct"] == pytest.approx(6.25) and m["mem_peak_source"] == "sacct"
    assert m["time_eff_pct"] == pytest.approx(100 * 4 / 24)
    assert m["sbu"] == pytest.approx(16.0) and m["sbu_source"] == "billing"
    assert m["wasted_sbu"] == pytest.approx(12.0) and m["charge_driver"] == "cpu"
    f = flags(con, "1")
    assert set(f) == {"cpu_low_eff", "cpu_serial_on_many", "mem_oversized", "time_oversized"}
    # ceil(2 GiB x 1.2); charged by billing without a Mem weight: it says it saves no SBU
    assert f["mem_oversized"][2].startswith("--mem=3G: saves no SBU")
    assert f["time_oversized"][2].startswith("--time=06:00:00")  # 4 h x 1.5
    assert f["cpu_serial_on_many"][0] == "alarm"


def test_gpu_job_one_of_two_gpus_idle(con):
    # GPU-a at 50 then 70 (10 s each) -> 60 %; GPU-b at 0 -> job mean 30 %, least-used 0 %, 1 idle.
    # billing 67 for 1 h -> 67 SBU; GPU drives the charge -> wasted 67 x 0.7 = 46.9.
    add_job(con, "2", elapsed_s=3600, timelimit_s=7200, ncpus=2, ngpus=2, gpu_type="a100", billing=67,
            cpu_time_s=3600, partition="gpu", mem_alloc_bytes=8 * GiB, mem_peak_bytes=1 * GiB)
    add_samples(con, "2", "GPU-a", [50, 70], mem_used=[1e9, 2e9], mem_total=40e9)
    add_samples(con, "2", "GPU-b", [0, 0], mem_used=[0, 0], mem_total=40e9)
    m = metrics(con, "2")
    assert m["gpu_util_pct"] == pytest.approx(30.0) and m["gpu_util_source"] == "sidecar"
    assert m["gpu_util_min_device_pct"] == pytest.approx(0.0)
    assert m["gpus_idle"] == 1
    assert m["gpu_mem_peak_pct"] == pytest.approx(5.0)    # 2e9 / 40e9
    assert m["wasted_sbu"] == pytest.approx(46.9)
    f = flags(con, "2")
    assert "gpu_unused_devices" in f and f["gpu_unused_devices"][2].startswith("--gres=gpu:1")
    assert "gpu_fits_smaller" in f and "gpu_idle" not in f and "gpu_low_util" not in f
    assert "cpu_low_eff" not in f  # CPU efficiency is not judged on GPU jobs


def test_time_weighting_and_gap_cap(con):
    # samples at 0 s (util 100) and 1000 s (util 0): the first weighs min(1000, 600 cap) = 600 s,
    # the last the gap before it, also capped at 600 -> plain 50 %. With a 10 s then 990 s spacing:
    # 100 x 10 + 0 x 600 + 0 x 600 over 1210 -> 0.826 %.
    add_job(con, "3", elapsed_s=1000, ncpus=1, ngpus=1, billing=1, partition="gpu")
    con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, source) VALUES "
                "('c1','3','n1','GPU-x',?,100,'sidecar'), ('c1','3','n1','GPU-x',?,0,'sidecar'), "
                "('c1','3','n1','GPU-x',?,0,'sidecar')",
                [T0, T0 + dt.timedelta(seconds=10), T0 + dt.timedelta(seconds=1000)])
    assert metrics(con, "3")["gpu_util_pct"] == pytest.approx(100 * 10 / 1210)


def test_sidecar_fills_cpu_and_memory_when_sacct_has_none(con):
    # no TotalCPU: the sidecar's cpu rows (util 40, 60 -> 50 %) and their peak (3 GiB of 4 GiB).
    add_job(con, "4", elapsed_s=600, ncpus=2, billing=2, mem_alloc_bytes=4 * GiB)
    add_samples(con, "4", "cpu", [40, 60], mem_used=[1 * GiB, 3 * GiB], mem_total=4 * GiB)
    m = metrics(con, "4")
    assert (m["cpu_eff_pct"], m["cpu_eff_source"]) == (pytest.approx(50.0), "sidecar")
    assert (m["mem_eff_pct"], m["mem_peak_source"]) == (pytest.approx(75.0), "sidecar")


def test_unknown_is_never_efficient(con):
    # nothing measured: efficiencies NULL, wasted NULL, and no efficiency flag either way
    add_job(con, "5", elapsed_s=3600, ncpus=8, billing=8)
    m = metrics(con, "5")
    assert m["cpu_eff_pct"] is None and m["mem_eff_pct"] is None and m["wasted_sbu"] is None
    assert m["sbu"] == pytest.approx(8.0)
    assert flags(con, "5") == {}


def test_short_jobs_get_no_efficiency_flags_but_failed_burn_counts(con):
    add_job(con, "6", elapsed_s=120, ncpus=8, billing=8, cpu_time_s=1, state="FAILED", exit_code="1:0")
    f = flags(con, "6")
    assert set(f) == {"failed_burn"}
    assert "FAILED (exit 1:0)" in f["failed_burn"][1]


def test_table_policy_snellius_minimum_and_memory_slots(tmp_path):
    cfg = parse_config({"charging": {"policy": "table", "preset": "snellius"}})
    con = Database.open(tmp_path / "t.duckdb", cfg)
    # rome: 1 SBU per core-hour, at least 16 cores: a 4-core job for 2 h is charged 32 SBU.
    add_job(con, "7", partition="rome", elapsed_s=7200, ncpus=4, mem_alloc_bytes=7 * GiB, cpu_time_s=4 * 7200)
    # 16 cores but 56 GiB: 56 / 1.75 = 32 cores' worth of memory -> 32 SBU per hour, memory drives it.
    add_job(con, "8", partition="rome", elapsed_s=3600, ncpus=16, mem_alloc_bytes=56 * GiB, mem_peak_bytes=14 * GiB)
    # gpu_a100: 128 SBU per GPU-hour; 1 GPU but 36 cores -> 2 GPUs' worth (18 cores per GPU).
    add_job(con, "9", partition="gpu_a100", elapsed_s=3600, ncpus=36, ngpus=1, gpu_type="a100")
    m7, m8, m9 = metrics(con, "7"), metrics(con, "8"), metrics(con, "9")
    assert (m7["sbu"], m7["sbu_source"], m7["charged_cores"]) == (pytest.approx(32.0), "table", 16)
    assert (m8["sbu"], m8["charge_driver"]) == (pytest.approx(32.0), "mem")
    assert m8["wasted_sbu"] == pytest.approx(32.0 * 0.75)   # 14 of 56 GiB used
    assert m9["sbu"] == pytest.approx(256.0)
    con.close()


def test_period_split_across_midnight_and_weeks(con):
    # 22:00 Sunday 15 Nov -> 02:00 Monday 16 Nov: half the SBU in each day and each ISO week.
    start = dt.datetime(2026, 11, 15, 22, 0)
    add_job(con, "10", start_time=start, elapsed_s=4 * 3600, ncpus=1, billing=10)
    store.refresh(con)
    days = con.execute("SELECT period_start::DATE, sbu FROM usage_daily WHERE job_id_raw = '10' ORDER BY 1").fetchall()
    assert days == [(dt.date(2026, 11, 15), pytest.approx(20.0)), (dt.date(2026, 11, 16), pytest.approx(20.0))]
    weeks = con.execute("SELECT strftime(period_start, '%G-W%V'), sbu FROM usage_weekly WHERE job_id_raw = '10' ORDER BY 1").fetchall()
    assert weeks == [("2026-W46", pytest.approx(20.0)), ("2026-W47", pytest.approx(20.0))]


def test_settings_change_thresholds(tmp_path):
    cfg = parse_config({"flags": {"cpu_low_eff_pct": 20}})
    con = Database.open(tmp_path / "s.duckdb", cfg)
    add_job(con, "11", elapsed_s=3600, ncpus=4, billing=4, cpu_time_s=4 * 3600 * 0.25)  # 25 %
    assert "cpu_low_eff" not in flags(con, "11")
    con.close()
    con = Database.open(tmp_path / "s.duckdb", parse_config({}))   # defaults: 65 %
    assert "cpu_low_eff" in flags(con, "11")
    con.close()


def test_unknown_cores_give_unknown_core_hours(con):
    # ran 2 h on a core count Slurm did not record: core-hours (and a core-hours charge) unknown, not 0;
    # a job that never ran (0 s) used 0 core-hours whatever its count
    add_job(con, "90", elapsed_s=7200, ncpus=None)
    add_job(con, "91", elapsed_s=0, ncpus=None, state="CANCELLED")
    add_job(con, "92", elapsed_s=7200, ncpus=3)
    ran, never, known = metrics(con, "90"), metrics(con, "91"), metrics(con, "92")
    assert ran["core_hours"] is None and ran["sbu"] is None
    assert never["core_hours"] == 0.0
    assert known["core_hours"] == pytest.approx(6.0)


def test_unknown_gpu_count_gives_unknown_gpu_hours(con):
    # ran 2 h with GPUs Slurm named but did not count: GPU-hours unknown, not 0; a CPU job used 0
    add_job(con, "93", elapsed_s=7200, ncpus=4, ngpus=None, req_tres="cpu=4,gres/gpu:a100=")
    add_job(con, "94", elapsed_s=7200, ncpus=4, ngpus=None, gpu_type="a100")
    add_job(con, "95", elapsed_s=7200, ncpus=4, ngpus=None, null_reasons='{"ngpus": "Slurm NO_VAL: not set"}')
    add_job(con, "96", elapsed_s=7200, ncpus=4, ngpus=None, alloc_tres="cpu=4,mem=8G,node=1")
    add_job(con, "97", elapsed_s=7200, ncpus=4, ngpus=2, alloc_tres="cpu=4,gres/gpu=2")
    add_job(con, "98", elapsed_s=0, ncpus=4, ngpus=None, gpu_type="a100", state="CANCELLED")
    assert [metrics(con, j)["gpu_hours"] for j in ("93", "94", "95")] == [None, None, None]
    assert metrics(con, "96")["gpu_hours"] == 0.0
    assert metrics(con, "97")["gpu_hours"] == pytest.approx(4.0)
    assert metrics(con, "98")["gpu_hours"] == 0.0


def test_usage_says_how_many_jobs_its_core_and_gpu_hours_leave_out(con):
    # two jobs across midnight (two job_day rows each) with unknown cores / GPUs, one known
    add_job(con, "80", elapsed_s=7200, ncpus=None, ngpus=None)
    add_job(con, "81", elapsed_s=7200, ncpus=4, ngpus=None, gpu_type="a100")
    add_job(con, "82", elapsed_s=3600, ncpus=2, ngpus=1)
    store.refresh(con)
    cur = con.execute("SELECT * FROM usage_summary('account', DATE '2026-11-16', DATE '2026-11-18')")
    (row,) = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
    assert (row["jobs"], row["core_hours_unknown_jobs"], row["gpu_hours_unknown_jobs"]) == (3, 1, 1)
    assert row["core_hours"] == pytest.approx(4 * 2 + 2 * 1)   # 81 and 82
    assert row["gpu_hours"] == pytest.approx(0 + 1 * 1)        # 80 named no GPUs: 0; 81 left out
