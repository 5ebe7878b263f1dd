"""Dashboard data layer (analytics/queries/summaries.py) and figures on a hand-made database.

The database (build_db, also used by the other dashboard tests), cluster c1, all COMPLETED:
  job 1  alice  proj-a  cpu  4 cores 2 h, billing 4  -> 8 SBU; TotalCPU 2 h -> CPU 25 % -> 6 wasted
         8 GiB allocated, 1 GiB peak; flags cpu_low_eff (alarm), cpu_serial_on_many, mem_oversized
  job 2  bob    proj-b  gpu  1 GPU, 8 cores 1 h, billing 100 -> 100 SBU; GPU samples 10 % -> 90 wasted;
         flag gpu_low_util (alarm, 10 < 15); job name is an HTML payload
  job 3  carol  proj-a  cpu  1 core 1 h (the next day), billing 1 -> 1 SBU, CPU 100 % -> 0 wasted; no flag
  job 4  bob    proj-b  gpu  2 GPUs 2 h, billing 200 -> 400 SBU; both GPUs at 0 % -> 400 wasted,
         2 idle GPUs x 2 h = 4 idle-GPU hours; flag gpu_idle (not also gpu_unused_devices or
         gpu_fits_smaller: an idle GPU job is told to drop its GPUs, not to use fewer or smaller ones)
Totals: 509 SBU, 496 wasted, 17 core-hours (8 + 8 + 1 + 0: job 4 has no ncpus), 5 GPU-hours, 3 flagged jobs.
"""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from jobsight.analytics.config import parse_config
from jobsight.analytics.queries import job_lists as job_queries
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.data_age import data_age
from jobsight.analytics.queries.job_lists import JobFilter
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard import figures

GiB = 2**30
T0 = dt.datetime(2026, 11, 16, 10, 0, 0)  # a Monday
XSS = '<img src=x onerror="alert(1)">'

ADMIN = Scope("admin", "root")
ALICE = Scope("user", "alice")
BOB = Scope("user", "bob")
DAVE_LEADS_A = Scope("lead", "dave", ("proj-a",))
NOBODY = Scope("user", "mallory")


def add_job(con, job_id, **kw):
    row = dict(cluster="c1", job_id=job_id, job_id_raw=job_id, state="COMPLETED", source="test",
               start_time=T0, partition="cpu", user="alice", account="proj-a")
    row.update(kw)
    row["end_time"] = row["start_time"] + dt.timedelta(seconds=row["elapsed_s"])
    cols = list(row)
    con.execute(f"INSERT INTO job ({', '.join(chr(34) + c + chr(34) for c in cols)}) VALUES ({', '.join('?' * len(cols))})",
                list(row.values()))


def add_samples(con, job_id, device, utils, mem_used, mem_total, start=T0, step_s=10, gpu_index=None):
    for i, u in enumerate(utils):
        con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                    "mem_total_bytes, gpu_index, source) VALUES ('c1', ?, 'n1', ?, ?, ?, ?, ?, ?, 'sidecar')",
                    [job_id, device, start + dt.timedelta(seconds=i * step_s), u, mem_used[i], mem_total, gpu_index])


def build_db(path: Path) -> Path:
    con = Database.open(path, parse_config({}))
    add_job(con, "1", elapsed_s=7200, timelimit_s=4 * 3600, ncpus=4, billing=4, cpu_time_s=7200,
            mem_alloc_bytes=8 * GiB, mem_peak_bytes=1 * GiB, job_name="prep")
    add_job(con, "2", user="bob", account="proj-b", partition="gpu", elapsed_s=3600, timelimit_s=7200, ncpus=8,
            ngpus=1, billing=100, cpu_time_s=8 * 3600, mem_alloc_bytes=16 * GiB, mem_peak_bytes=12 * GiB,
            job_name=XSS)
    add_samples(con, "2", "GPU-0000aaaa", [10, 10], [30e9, 30e9], 40e9, gpu_index=0)
    add_samples(con, "2", "cpu", [50, 70], [10 * GiB, 12 * GiB], 16 * GiB)
    add_job(con, "3", user="carol", start_time=T0 + dt.timedelta(days=1), elapsed_s=3600, timelimit_s=7200,
            ncpus=1, billing=1, cpu_time_s=3600, mem_alloc_bytes=2 * GiB, mem_peak_bytes=int(1.5 * GiB))
    add_job(con, "4", user="bob", account="proj-b", partition="gpu", elapsed_s=7200, ngpus=2, billing=200)
    add_samples(con, "4", "GPU-0000bbbb", [0, 0], [0, 0], 40e9, gpu_index=0)
    add_samples(con, "4", "GPU-0000cccc", [0, 0], [0, 0], 40e9, gpu_index=1)
    store.refresh(con)      # rows written by hand: compute their stored results, as an ingest does
    con.close()
    return path


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("dash") / "jobs.duckdb")


@pytest.fixture(scope="module", params=["views", "snapshot"])
def h(request, db_path):
    """The same questions against the live views and against a published snapshot's tables."""
    yield from _handle(request.param, db_path)


def _handle(kind: str, path: Path):
    """A read handle on the stored tables and views ("views") or on a freshly published snapshot."""
    if kind == "views":
        con = Database.open(path, read_only=True)
        yield Database.of(con)
        con.close()
    else:
        publish(path)
        reader = SnapshotReader(path)
        with reader.cursor() as handle:
            assert handle.value("SELECT current_database()") == "snap"     # the snapshot, not the file
            yield handle
        reader.close()


def test_totals_per_scope(h):
    t = queries.totals(h, ADMIN, Filters())
    assert t["sbu"] == pytest.approx(509) and t["wasted_sbu"] == pytest.approx(496)
    assert t["jobs"] == 4 and t["flagged_jobs"] == 3
    assert t["core_hours"] == pytest.approx(17) and t["gpu_hours"] == pytest.approx(5)
    assert t["idle_gpu_hours"] == pytest.approx(4)
    # jobs 1 and 4 have no saving known (no TRESBillingWeights for cpu or gpu): named beside the
    # total, with what they wasted (6 + 400); job 2's saving is known (0)
    assert (t["unpriced_jobs"], t["unpriced_wasted_sbu"]) == (2, pytest.approx(406))
    a = queries.totals(h, ALICE, Filters())
    assert (a["unpriced_jobs"], a["unpriced_wasted_sbu"]) == (1, pytest.approx(6))
    assert queries.totals(h, ADMIN, Filters(since=dt.date(2026, 11, 17), until=dt.date(2026, 11, 17)))["unpriced_jobs"] == 0
    assert (a["sbu"], a["wasted_sbu"], a["jobs"], a["flagged_jobs"]) == (pytest.approx(8), pytest.approx(6), 1, 1)
    d = queries.totals(h, DAVE_LEADS_A, Filters())
    assert (d["sbu"], d["jobs"]) == (pytest.approx(9), 2)
    n = queries.totals(h, NOBODY, Filters())
    assert (n["sbu"], n["jobs"], n["flagged_jobs"]) == (0, 0, 0)


def test_filters_narrow_and_cannot_widen_the_scope(h):
    assert queries.totals(h, ADMIN, Filters(account="proj-a"))["sbu"] == pytest.approx(9)
    assert queries.totals(h, ADMIN, Filters(partition="gpu"))["sbu"] == pytest.approx(500)
    # period: only Tuesday 2026-11-17 -> job 3
    assert queries.totals(h, ADMIN, Filters(since=dt.date(2026, 11, 17), until=dt.date(2026, 11, 17)))["sbu"] == pytest.approx(1)
    # alice asking for bob's jobs or project gets nothing
    assert queries.totals(h, ALICE, Filters(user="bob"))["sbu"] == 0
    assert queries.totals(h, ALICE, Filters(account="proj-b"))["jobs"] == 0
    assert queries.totals(h, DAVE_LEADS_A, Filters(account="proj-b"))["jobs"] == 0


def test_period_span_is_the_filters_or_the_data(h):
    assert queries.period_span(h, ADMIN, Filters()) == (dt.date(2026, 11, 16), dt.date(2026, 11, 17))
    assert queries.period_span(h, ADMIN, Filters(since=dt.date(2026, 11, 10))) == (dt.date(2026, 11, 10), dt.date(2026, 11, 17))
    assert queries.period_span(h, NOBODY, Filters()) is None
    assert queries.usage_over_time(h, DAVE_LEADS_A, Filters(), "week", "user")["group"].tolist() == ["alice", "carol"]


def test_usage_over_time_by_day_and_week(h):
    day = queries.usage_over_time(h, ADMIN, Filters(), "day", "account")
    got = {(str(r.period_start.date()), r.group): round(r.sbu, 6) for r in day.itertuples()}
    assert got == {("2026-11-16", "proj-a"): 8, ("2026-11-16", "proj-b"): 500, ("2026-11-17", "proj-a"): 1,
                   ("2026-11-17", "proj-b"): 0}
    # a period chosen wider than the jobs: every day of it is there, those without jobs at 0
    wide = queries.usage_over_time(h, ADMIN, Filters(since=dt.date(2026, 11, 14), until=dt.date(2026, 11, 20)))
    days = sorted({str(r.period_start.date()) for r in wide.itertuples()})
    assert days == [f"2026-11-{d}" for d in range(14, 21)]
    assert {(str(r.period_start.date()), r.group): round(r.sbu, 6) for r in wide.itertuples() if r.sbu} == {
        k: v for k, v in got.items() if v}
    assert len(wide) == 7 * 2 and (wide["wasted_sbu"] >= 0).all()
    week = queries.usage_over_time(h, ALICE, Filters(), "week", "partition")
    assert [(str(r.period_start.date()), r.group, r.sbu, r.wasted_sbu) for r in week.itertuples()] == \
        [("2026-11-16", "cpu", pytest.approx(8), pytest.approx(6))]


def test_entity_tables(h):
    users = queries.entity_table(h, ADMIN, Filters(), by="user").set_index("name")
    assert list(users.index) == ["bob", "alice", "carol"]            # by SBU
    assert users.loc["bob", "sbu"] == pytest.approx(500) and users.loc["bob", "flagged_jobs"] == 2
    assert users.loc["bob", "gpu_hours"] == pytest.approx(5)
    # GPU-hour weighted: job 2 10 % x 1 h, job 4 0 % x 4 h -> 2 %
    assert users.loc["bob", "gpu_util_pct"] == pytest.approx(2.0)
    assert users.loc["alice", "cpu_eff_pct"] == pytest.approx(25.0)
    projects = queries.entity_table(h, DAVE_LEADS_A, Filters(), by="account")
    assert projects["name"].tolist() == ["proj-a"] and projects["jobs"].tolist() == [2]
    assert queries.entity_table(h, ALICE, Filters(), by="user")["name"].tolist() == ["alice"]


def test_flagged_jobs_grid_filters(h):
    df, total = queries.flagged_jobs(h, ADMIN, Filters())
    assert total == 3 and len(df) == 3                                  # one row per job: 1, 2, 4
    assert df["job_id"].tolist() == ["4", "2", "1"]                     # most wasted first
    first = df.iloc[0]
    assert first["sbu"] == pytest.approx(400) and first["severity"] == "alarm"
    assert list(first["codes"]) == ["gpu_idle"]
    assert len(first["messages"]) == len(first["advice"]) == 1
    # the leading advice first (job_flags.advice_order): the cores that drove the charge, then --mem
    assert list(df.iloc[2]["codes"]) == ["cpu_low_eff", "cpu_serial_on_many", "mem_oversized"]
    assert len(df.iloc[2]["advice"]) == 3 and df.iloc[2]["advice"][2].startswith("--mem=2G: saves no SBU")
    df, total = queries.flagged_jobs(h, ADMIN, Filters(codes=("gpu_low_util",)))
    assert total == 1 and df.iloc[0]["messages"][0].startswith("GPU utilisation 10.0%")
    df, total = queries.flagged_jobs(h, ADMIN, Filters(severities=("warn",)))
    assert total == 1 and list(df.iloc[0]["codes"]) == ["mem_oversized"]   # the matching flags only
    df, total = queries.flagged_jobs(h, ADMIN, Filters(codes=("gpu_idle", "cpu_low_eff")))
    assert total == 2 and df["job_id"].tolist() == ["4", "1"]
    df, total = queries.flagged_jobs(h, ALICE, Filters())
    assert total == 1 and df["job_id"].tolist() == ["1"]
    assert queries.flagged_jobs(h, ALICE, Filters(user="bob"))[1] == 0
    assert queries.flagged_jobs(h, ADMIN, Filters(), limit=1)[0]["job_id"].tolist() == ["4"]


def test_flagged_jobs_carry_what_the_advice_would_save(h):
    df = queries.flagged_jobs(h, ADMIN, Filters())[0].set_index("job_id")
    assert df.loc["2", "savings_sbu"] == 0.0                            # the fitted request costs the same
    assert pd.isna(df.loc["1", "savings_sbu"]) and "TRESBillingWeights" in df.loc["1", "savings_note"]   # unknown


def test_my_jobs_newest_first_filtered_and_paged(h):
    def ids(scope, jf=None, offset=0, limit=100):
        df, total = job_queries.job_list(h, scope, jf or JobFilter(), offset, limit)
        return df["job_id"].tolist(), total
    assert ids(ALICE) == (["1"], 1)
    assert ids(ADMIN) == (["3", "1", "2", "4"], 4)                     # job 3 started a day later
    assert ids(ADMIN, offset=1, limit=2) == (["1", "2"], 4) and ids(ADMIN, offset=9) == ([], 4)
    assert ids(ALICE, JobFilter(user="bob")) == ([], 0)                # another user's: as if none
    assert ids(DAVE_LEADS_A) == (["3", "1"], 2)
    assert ids(ADMIN, JobFilter(code="gpu_idle")) == (["4"], 1)
    assert ids(ADMIN, JobFilter(state="COMPLETED", partition="gpu")) == (["2", "4"], 2)
    assert ids(ADMIN, JobFilter(user="bob", code="cpu_low_eff")) == ([], 0)
    df = job_queries.job_list(h, ADMIN, JobFilter(user="bob"))[0].set_index("job_id")
    assert df.loc["4", "codes"] == ["gpu_idle"] and df.loc["2", "job_name"] == XSS
    assert df.loc["4", "sbu"] == pytest.approx(400) and df.loc["2", "gpu_util_pct"] == pytest.approx(10)
    assert "savings_sbu" in df.columns
    assert job_queries.job_states(h, ALICE) == ["COMPLETED"] and job_queries.job_states(h, NOBODY) == []


def test_search_by_id_or_name_is_scoped(h):
    def found(scope, text):
        df, by_id = job_queries.find_jobs(h, scope, text)
        return df["job_id"].tolist(), by_id
    assert found(ALICE, "1") == (["1"], True)
    assert found(ALICE, "2") == found(ALICE, "no-such-job") == ([], False)     # bob's job: as if none
    assert found(ALICE, " PRE ") == (["1"], False)                      # part of the name, any case
    assert found(BOB, "<img") == (["2"], False) and found(ADMIN, "2") == (["2"], True)
    assert found(ALICE, "%") == ([], False) and found(ALICE, "") == ([], False)   # no wildcards
    assert found(DAVE_LEADS_A, "3") == (["3"], True)


def test_flag_counts_and_histogram(h):
    fc = queries.flag_counts(h, ADMIN, Filters())
    assert dict(zip(fc["code"], fc["jobs"]))["gpu_idle"] == 1 and fc["jobs"].sum() == 5
    hist = queries.efficiency_histogram(h, ADMIN, Filters())
    cpu = dict(zip(hist[hist.metric == "CPU"]["bin"], hist[hist.metric == "CPU"]["jobs"]))
    assert cpu == {20: 1, 90: 2}          # 25 % (job 1); 100 % (jobs 2, 3) in the last bin
    gpu = dict(zip(hist[hist.metric == "GPU"]["bin"], hist[hist.metric == "GPU"]["jobs"]))
    assert gpu == {0: 1, 10: 1}


def test_job_detail_and_samples_are_scoped(h):
    j = queries.job(h, BOB, "c1", "2")
    assert j["job_name"] == XSS and j["sbu"] == pytest.approx(100) and j["wasted_sbu"] == pytest.approx(90)
    assert queries.job(h, ALICE, "c1", "2") is None                     # same answer as a missing job
    assert queries.job(h, ALICE, "c1", "999") is None
    assert queries.job(h, ALICE, None, "1")["user"] == "alice"
    assert queries.job(h, DAVE_LEADS_A, "c1", "3")["user"] == "carol"
    s = queries.job_samples(h, BOB, "c1", "2")
    assert sorted(s["device"].unique()) == ["GPU-0000aaaa", "cpu"] and len(s) == 4
    assert queries.job_samples(h, ALICE, "c1", "2").empty
    assert queries.job_flag_rows(h, ALICE, "c1", "2") == []
    assert [f["code"] for f in queries.job_flag_rows(h, BOB, "c1", "2")] == ["gpu_low_util"]


def test_filter_options_only_show_the_scope(h):
    o = queries.filter_options(h, ALICE)
    assert o == {"user": ["alice"], "account": ["proj-a"], "partition": ["cpu"],
                 "code": ["cpu_low_eff", "cpu_serial_on_many", "mem_oversized"]}
    assert queries.filter_options(h, ADMIN)["user"] == ["alice", "bob", "carol"]


def test_job_figures_draw_allocation_and_say_no_samples(h):
    j = queries.job(h, BOB, "c1", "2")
    figs = figures.job_figures(queries.job_samples(h, BOB, "c1", "2"), j)
    names = [t["name"] for t in figs["gpu_util"]["data"]]
    assert names[-1].startswith("allocation") and figs["gpu_util"]["data"][0]["y"] == [10, 10]
    assert figs["gpu_util"]["data"][-1]["y"] == [100, 100]
    assert figs["gpu_util"]["layout"]["yaxis"]["range"] == [0, 100]    # utilisation: a fixed 0-100 % axis
    assert figs["cpu_util"]["layout"]["yaxis"]["range"] == [0, 100]
    assert figs["mem"]["data"][-1]["y"] == [16, 16]                     # limit 16 GiB
    assert figs["mem"]["data"][0]["y"] == [10, 12]                      # GiB used
    j1 = queries.job(h, ALICE, "c1", "1")
    figs = figures.job_figures(queries.job_samples(h, ALICE, "c1", "1"), j1)
    assert figs["cpu_util"]["layout"]["annotations"][0]["text"] == "No CPU samples"
    assert "gpu_util" not in figs and "gpu_mem" not in figs             # a CPU-only job: no GPU panels
    j4 = queries.job(h, BOB, "c1", "4")                                 # GPUs, but no GPU samples: said so
    figs = figures.job_figures(queries.job_samples(h, BOB, "c1", "4").iloc[0:0], j4)
    assert figs["gpu_util"]["layout"]["annotations"][0]["text"] == "No GPU samples"


def test_overview_figures():
    usage = pd.DataFrame({"period_start": pd.to_datetime(["2026-11-16", "2026-11-16", "2026-11-17"]),
                          "group": ["b", "a", "a"], "sbu": [5.0, 3.0, 1.0], "wasted_sbu": [1.0, 2.0, 0.5]})
    fig = figures.usage_figure(usage)
    assert [t["name"] for t in fig["data"]] == ["a", "b", "wasted (all)"]
    assert fig["data"][-1]["y"] == [3.0, 0.5]                           # wasted summed per day
    # 15 projects: the 11 largest each their own colour, the 4 smallest one grey "other"
    many = pd.DataFrame({"period_start": pd.to_datetime(["2026-11-16"] * 15), "group": [f"p{i:02d}" for i in range(15)],
                         "sbu": [float(100 - i) for i in range(15)], "wasted_sbu": [0.0] * 15})
    fig = figures.usage_figure(many)
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert [t["name"] for t in bars] == [f"p{i:02d}" for i in range(11)] + ["other (4)"]
    assert bars[-1]["y"] == [86 + 87 + 88 + 89.0] and len({t["marker"]["color"] for t in bars}) == 12
    # weekly bars: the first and last week only partly in the period (Wed 18 Nov to Tue 1 Dec) are lighter
    weeks = pd.DataFrame({"period_start": pd.to_datetime(["2026-11-16", "2026-11-23", "2026-11-30"]),
                          "group": ["a"] * 3, "sbu": [1.0, 2.0, 3.0], "wasted_sbu": [0.0] * 3})
    fig = figures.usage_figure(weeks, grain="week", span=(dt.date(2026, 11, 18), dt.date(2026, 12, 1)))
    assert fig["data"][0]["marker"]["opacity"] == [0.4, 1.0, 0.4]
    assert fig["data"][0]["hovertext"] == ["partial week: 5 of 7 days", "", "partial week: 2 of 7 days"]
    assert "partial week" in fig["layout"]["annotations"][0]["text"]
    whole = figures.usage_figure(weeks, grain="week", span=(dt.date(2026, 11, 16), dt.date(2026, 12, 6)))
    assert "opacity" not in whole["data"][0]["marker"] and "annotations" not in whole["layout"]
    month = figures.usage_figure(weeks.iloc[:1].assign(period_start=pd.to_datetime(["2026-11-01"])), grain="month",
                                 span=(dt.date(2026, 11, 1), dt.date(2026, 11, 24)))
    assert month["data"][0]["hovertext"] == ["partial month: 24 of 30 days"]
    hist = pd.DataFrame({"metric": ["CPU", "CPU"], "bin": [20.0, 90.0], "jobs": [1, 2]})
    assert figures.efficiency_figure(hist)["data"][0]["y"] == [0, 0, 1, 0, 0, 0, 0, 0, 0, 2]


def test_long_series_are_bucketed(tmp_path, monkeypatch):
    path = tmp_path / "long.duckdb"
    con = Database.open(path, parse_config({}))
    add_job(con, "9", elapsed_s=3600, ncpus=1)
    add_samples(con, "9", "cpu", [50.0] * 30, [GiB] * 30, 2 * GiB, step_s=60)
    monkeypatch.setattr(queries, "MAX_POINTS_PER_SERIES", 10)
    store.refresh(con)
    s = queries.job_samples(Database.of(con), ALICE, "c1", "9")
    assert 1 < len(s) <= 11 and set(s["util_pct"]) == {50.0}
    con.close()


def test_admin_grid_from_the_per_day_tops_is_exact(db_path, tmp_path):
    """With 1 job kept per day, the admin's unfiltered grid of 1 job must still equal the full sort,
    with all the job's flags."""
    copy = tmp_path / "top1.duckdb"
    shutil.copyfile(db_path, copy)
    con = duckdb.connect(str(copy))
    con.execute("CREATE OR REPLACE MACRO dash_flag_top_n() AS 1")
    con.execute("INSERT INTO metric_day_scope SELECT DISTINCT day FROM job_day")
    con.execute("DELETE FROM dash_flag_top")
    con.execute("INSERT INTO dash_flag_top SELECT * FROM calc_dash_flag_top")
    h = Database.of(con)
    assert con.execute("SELECT count(*) FROM dash_flag_top").fetchone()[0] == 1   # job 4's one flag
    df, total = queries.flagged_jobs(h, ADMIN, Filters(), limit=1)
    assert total == 3 and df["job_id"].tolist() == ["4"] and len(df.iloc[0]["codes"]) == 1
    con.close()


def test_the_grids_order_ranks_waste_then_burn_then_the_job(db_path):
    """JOB_ORDER is the SQL macro the per-day tops (53_dash_flag_top.sql) rank by: most wasted SBU
    first (none counting as 0), then most SBU (none last), then cluster and raw id."""
    con = duckdb.connect(str(db_path), read_only=True)
    rows = [("c1", "5", 2.0, 9.0), ("c1", "6", None, 3.0), ("c1", "7", 2.0, None), ("c0", "9", 2.0, 9.0),
            ("c1", "8", 0.0, 4.0), ("c1", "10", 2.0, 9.0), ("c1", "4", 7.5, 1.0)]
    values = ", ".join(f"('{c}', '{j}', {'NULL' if w is None else w}, {'NULL' if b is None else b})" for c, j, w, b in rows)
    got = [r[0] for r in con.execute(
        f"SELECT job_id_raw FROM (VALUES {values}) t(cluster, job_id_raw, wasted_sbu, sbu) "
        f"ORDER BY {queries.JOB_ORDER}").fetchall()]
    assert got == ["4", "9", "10", "5", "7", "8", "6"]
    con.close()


def test_job_lookup_by_printed_id_and_ambiguity(tmp_path):
    path = tmp_path / "two.duckdb"
    con = Database.open(path, parse_config({}))
    add_job(con, "7_1", job_id_raw="8", elapsed_s=60)               # array task: printed 7_1, raw 8
    add_job(con, "5", cluster="c2", elapsed_s=60)
    add_job(con, "5", elapsed_s=60)                                 # raw id 5 on two clusters
    store.refresh(con)
    h = Database.of(con)
    assert queries.job(h, ALICE, None, "7_1")["job_id_raw"] == "8"
    assert queries.job(h, ALICE, None, "8")["job_id"] == "7_1"
    assert queries.job(h, ALICE, None, "5") is None                 # ambiguous without the cluster
    assert queries.job(h, ALICE, "c2", "5")["cluster"] == "c2"
    assert queries.job_flag_rows(h, ALICE, "c1", "8", "alice") == []
    con.close()


def test_lead_grid_is_their_accounts_plus_their_own_jobs(h):
    bob_leads_a = Scope("lead", "bob", ("proj-a",))
    df, total = queries.flagged_jobs(h, bob_leads_a, Filters())
    assert total == 3 and df["job_id"].tolist() == ["4", "2", "1"]     # proj-a's job 1 and bob's own 2, 4
    df, total = queries.flagged_jobs(h, Scope("lead", "carol", ("proj-b",)), Filters())
    assert total == 2 and set(df["job_id"]) == {"2", "4"}           # carol has no flagged job herself
    _, total = queries.flagged_jobs(h, bob_leads_a, Filters(account="proj-b"))
    assert total == 2
    assert [p[0] for p in bob_leads_a.parts()][0] == "account IN (?)"


# A job across two midnights: s1 (alice, proj-a) runs Monday 22:00 to Wednesday 02:00, 28 h on one core
# at 25 % CPU: 28 SBU, 21 wasted, flagged; split by the hours in each day as the reports split it:
# Monday 2 h (2 SBU), Tuesday 24 h (24 SBU), Wednesday 2 h (2 SBU). s2 (bob, proj-b) runs Tuesday
# 10:00-11:00 at 100 %: 1 SBU, no flag. Before the split, all of s1 counted on Monday, its start.
MON, TUE, WED, THU = (dt.date(2026, 11, 16) + dt.timedelta(days=i) for i in range(4))


@pytest.fixture(scope="module", params=["views", "snapshot"])
def span(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("span") / "span.duckdb"
    con = Database.open(path, parse_config({}))
    add_job(con, "s1", start_time=dt.datetime(2026, 11, 16, 22), elapsed_s=28 * 3600, timelimit_s=30 * 3600, ncpus=1,
            billing=1, cpu_time_s=7 * 3600)
    add_job(con, "s2", user="bob", account="proj-b", start_time=dt.datetime(2026, 11, 17, 10), elapsed_s=3600,
            timelimit_s=7200, ncpus=1, billing=1, cpu_time_s=3600)
    store.refresh(con)
    con.close()
    yield from _handle(request.param, path)


def test_a_job_counts_in_every_period_it_ran_with_its_share(span):
    def t(since=None, until=None, **kw):
        r = queries.totals(span, ADMIN, Filters(since=since, until=until, **kw))
        return r["jobs"], r["flagged_jobs"], round(r["sbu"], 6), round(r["wasted_sbu"], 6)
    assert t() == (2, 1, 29, 21)
    assert t(MON, MON) == (1, 1, 2, 1.5)                # 2 of s1's 28 hours; 75 % of them wasted
    assert t(TUE, TUE) == (2, 1, 25, 18)                # s1 running since Monday counts on Tuesday too
    assert t(WED, WED) == (1, 1, 2, 1.5)
    assert t(TUE, WED) == (2, 1, 27, 19.5)              # s1 once, though it ran on both days
    assert t(MON, WED) == (2, 1, 29, 21)
    assert t(None, MON) == (1, 1, 2, 1.5)
    assert t(THU, None) == (0, 0, 0, 0)
    assert t(WED, WED, user="bob") == (0, 0, 0, 0)
    users = queries.entity_table(span, ADMIN, Filters(since=WED, until=WED), by="user")
    assert users[["name", "jobs", "flagged_jobs", "sbu"]].values.tolist() == [["alice", 1, 1, 2.0]]
    users = queries.entity_table(span, ADMIN, Filters(since=TUE, until=WED), by="user").set_index("name")
    assert users.loc["alice", "jobs"] == 1 and users.loc["alice", "sbu"] == 26 and users.loc["bob", "jobs"] == 1
    day = queries.usage_over_time(span, ADMIN, Filters(), "day", "account")
    assert {(str(r.period_start.date()), r.group): round(r.sbu, 6) for r in day.itertuples()} == \
        {("2026-11-16", "proj-a"): 2, ("2026-11-17", "proj-a"): 24, ("2026-11-17", "proj-b"): 1,
         ("2026-11-18", "proj-a"): 2, ("2026-11-16", "proj-b"): 0, ("2026-11-18", "proj-b"): 0}


def test_histogram_flag_counts_and_grid_take_the_jobs_that_ran(span):
    hist = queries.efficiency_histogram(span, ADMIN, Filters(since=TUE, until=WED))
    cpu = dict(zip(hist[hist.metric == "CPU"]["bin"], hist[hist.metric == "CPU"]["jobs"]))
    assert cpu == {20: 1, 90: 1}                        # s1 (25 %) once over its two days, s2 (100 %)
    assert queries.efficiency_histogram(span, ADMIN, Filters(since=THU)).empty
    fc = queries.flag_counts(span, ADMIN, Filters(since=WED, until=WED)).set_index("code")
    assert fc.loc["cpu_low_eff", "jobs"] == 1 and fc.loc["cpu_low_eff", "sbu"] == pytest.approx(2)
    for f in (Filters(since=WED, until=WED), Filters(since=MON, until=MON), Filters()):
        for who in (ADMIN, ALICE):                      # the admin's per-day tops, and a user's own rows
            df, total = queries.flagged_jobs(span, who, f)
            assert df["job_id"].tolist() == ["s1"] and total == 1
            assert len(df.iloc[0]["codes"]) == int(queries.flag_counts(span, ADMIN, Filters())["jobs"].sum())
    assert queries.flagged_jobs(span, ADMIN, Filters(since=THU))[1] == 0
    assert queries.flagged_jobs(span, BOB, Filters(since=WED, until=WED))[1] == 0


def test_job_page_of_a_cpu_job_shows_nothing_of_gpus(h):
    import json

    import plotly.utils

    from jobsight.dashboard.pages import job as page
    cpu = json.dumps(page.render(h, ADMIN, "c1", "1"), cls=plotly.utils.PlotlyJSONEncoder)
    gpu = json.dumps(page.render(h, ADMIN, "c1", "2"), cls=plotly.utils.PlotlyJSONEncoder)
    assert "GPU utilisation" not in cpu and "Idle GPUs" not in cpu and "job-fig-gpu" not in cpu
    assert "GPU utilisation" in gpu and "job-fig-gpu_util" in gpu and "job-fig-cpu_util" in gpu


def test_data_age_is_the_newest_accounting_time_and_old_after_a_day(h):
    # job 3 ends last: T0 + 1 day + 1 h; old only once now is more than a day after that
    newest = T0 + dt.timedelta(days=1, hours=1)
    fresh = data_age(h, now=newest + dt.timedelta(hours=24))
    assert (fresh.newest, fresh.old) == (newest, False)
    assert fresh.line() == "data up to 2026-11-17 11:00 UTC"
    stale = data_age(h, now=newest + dt.timedelta(hours=24, minutes=1))
    assert (stale.newest, stale.old) == (newest, True)
    assert stale.line() == "data up to 2026-11-17 11:00 UTC (more than a day old)"


def test_data_age_of_an_empty_database(tmp_path):
    con = Database.open(tmp_path / "empty.duckdb", parse_config({}))
    try:
        got = data_age(Database.of(con), now=T0)
    finally:
        con.close()
    assert (got.newest, got.old, got.line()) == (None, False, "no accounting data yet")


@pytest.mark.parametrize("scope", [ADMIN, ALICE, DAVE_LEADS_A], ids=["admin", "alice", "lead"])
def test_api_pages_are_the_first_jobs_of_the_whole_list(h, scope):
    """A page of the API's lists (a top-N sort, then its jobs' flags) is exactly the start of the
    whole list: each limit's flags are those of the first jobs of limit=0, `more` the rest; the job
    pages, followed by cursor, are every job in order with its flag codes."""
    from jobsight.analytics.queries.flags import SORTS, flag_rows
    for sort in SORTS:
        names, every, more = flag_rows(h, scope, Filters(), sort, 0)
        i, j = names.index("cluster"), names.index("job_id_raw")
        jobs = list(dict.fromkeys((r[i], r[j]) for r in every))
        assert more == 0 and jobs, sort
        for limit in range(1, len(jobs) + 2):
            _, rows, more = flag_rows(h, scope, Filters(), sort, limit)
            assert rows == [r for r in every if (r[i], r[j]) in set(jobs[:limit])], (sort, limit)
            assert more == (len(jobs) - limit if limit <= len(jobs) else 0), (sort, limit)
    codes = h.rows("SELECT cluster, job_id_raw, list(code ORDER BY code) AS codes FROM job_flags GROUP BY ALL")
    codes = {(r["cluster"], r["job_id_raw"]): list(r["codes"]) for r in codes}
    names, whole, key = job_queries.job_page(h, scope, Filters(), None, 1000)
    assert key is None and whole
    pages, after = [], None
    while True:
        names, rows, after = job_queries.job_page(h, scope, Filters(), after, 2)
        pages += rows
        if after is None:
            break
    c, j, k = names.index("cluster"), names.index("job_id_raw"), names.index("codes")
    assert pages == whole and any(r[k] for r in whole)
    assert all(r[k] == codes.get((r[c], r[j]), []) for r in whole)


def test_api_job_pages_of_a_period_are_the_jobs_that_ran_in_it(span):
    """The API's job page of a period lists, in order, the jobs that ran in it (the period rule),
    also a job that started days before (the page bounds start times by the period's end only)."""
    names, whole, _key = job_queries.job_page(span, ADMIN, Filters(), None, 1000)
    j = names.index("job_id_raw")
    ran = {MON: ["s1"], TUE: ["s2", "s1"], WED: ["s1"], THU: []}
    for since, until in [(d, d) for d in ran] + [(MON, TUE), (TUE, THU), (WED, THU)]:
        want = {x for d in ran if since <= d <= until for x in ran[d]}
        _n, rows, key = job_queries.job_page(span, ADMIN, Filters(since=since, until=until), None, 1000)
        assert [r[j] for r in rows] == [r[j] for r in whole if r[j] in want], (since, until)
        assert key is None
