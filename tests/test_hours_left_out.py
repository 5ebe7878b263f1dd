"""Core- and GPU-hour totals say how many jobs they could not count (jobs that ran on an unknown
number of cores or GPUs), alike in `jobsight usage`, the weekly reports and the dashboard's tiles.

Week 2026-W47, cluster c1:
  1 alice proj-a  4 cores, no GPU, Mon 23:00 for 2 h (across midnight)  -> 8 core-hours, 0 GPU-hours
  2 alice proj-a  cores unknown, no GPU named, Mon 23:00 for 2 h        -> core-hours unknown
  3 bob   proj-b  4 cores, a100 GPUs of unknown count, Tue 10:00, 2 h  -> 8 core-hours, GPU-hours unknown
  4 bob   proj-b  2 cores, 1 GPU, Tue 12:00, 1 h                        -> 2 core-hours, 1 GPU-hour
"""
from __future__ import annotations

import datetime as dt

import pytest

from jobsight.analytics.config import parse_config
from jobsight.analytics.queries import summaries
from jobsight.analytics.queries import usage as usage_queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.reports.csvout import render_csv
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.markdown import render_markdown
from jobsight.analytics.reports.period import iso_week
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.reports.text import render_text
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.dashboard.pages import overview

W47 = iso_week(2026, 47)
MON = dt.datetime(2026, 11, 16)
ADMIN = Scope("admin", "root")


def _job(con, job_id, user, account, start, hours, ncpus, **kw):
    row = dict(cluster="c1", job_id=job_id, job_id_raw=job_id, state="COMPLETED", source="test", user=user,
               account=account, partition="cpu", start_time=start, elapsed_s=int(hours * 3600),
               end_time=start + dt.timedelta(hours=hours), ncpus=ncpus, billing=ncpus, **kw)
    cols = ", ".join(f'"{c}"' for c in row)
    con.execute(f"INSERT INTO job ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("hours") / "h.duckdb"
    con = Database.open(path, parse_config({}))
    _job(con, "1", "alice", "proj-a", MON + dt.timedelta(hours=23), 2, 4)
    _job(con, "2", "alice", "proj-a", MON + dt.timedelta(hours=23), 2, None)
    _job(con, "3", "bob", "proj-b", MON + dt.timedelta(days=1, hours=10), 2, 4, ngpus=None, gpu_type="a100")
    _job(con, "4", "bob", "proj-b", MON + dt.timedelta(days=1, hours=12), 1, 2, ngpus=1)
    store.refresh(con)
    yield con
    con.close()


def _usage(db, by: str, f: Filters) -> dict:
    cols, rows = usage_queries.usage(Database.of(db.con), ADMIN, f, by)
    return {r[0]: dict(zip(cols, r)) for r in rows}


def test_usage_reports_and_tiles_count_the_same_jobs_left_out(db):
    week = Filters(since=dt.date(2026, 11, 16), until=dt.date(2026, 11, 22))
    u = _usage(db, "cluster", week)["c1"]
    assert (u["core_hours"], u["core_hours_unknown_jobs"]) == (pytest.approx(18), 1)
    assert (u["gpu_hours"], u["gpu_hours_unknown_jobs"]) == (pytest.approx(1), 1)
    # the dashboard's totals: job 2 ran on two days, counted once
    t = summaries.totals(Database.of(db.con), ADMIN, week)
    assert (t["core_hours"], t["core_hours_unknown_jobs"]) == (pytest.approx(18), 1)
    assert (t["gpu_hours"], t["gpu_hours_unknown_jobs"]) == (pytest.approx(1), 1)
    # from Tuesday on: job 2 still ran (its second hour), job 3 too
    tue = Filters(since=dt.date(2026, 11, 17), until=dt.date(2026, 11, 22))
    tt = summaries.totals(Database.of(db.con), ADMIN, tue)
    assert (tt["core_hours_unknown_jobs"], tt["gpu_hours_unknown_jobs"]) == (1, 1)
    assert tt["core_hours"] == pytest.approx(4 + 8 + 2)
    # per user: alice's total leaves out job 2, bob's GPU-hours job 3
    a = summaries.totals(Database.of(db.con), Scope("user", "alice"), week)
    b = summaries.totals(Database.of(db.con), Scope("user", "bob"), week)
    assert (a["core_hours_unknown_jobs"], a["gpu_hours_unknown_jobs"]) == (1, 0)
    assert (b["core_hours_unknown_jobs"], b["gpu_hours_unknown_jobs"]) == (0, 1)
    by_user = _usage(db, "user", week)
    assert {k: (r["core_hours_unknown_jobs"], r["gpu_hours_unknown_jobs"]) for k, r in by_user.items()} == {
        "alice": (1, 0), "bob": (0, 1)}
    # the tiles say it beside the totals
    assert overview._left_out(t["core_hours_unknown_jobs"], "cores") == "not counted: 1 job (unknown cores)"
    assert overview._left_out(0, "GPUs") is None


def test_weekly_reports_say_what_the_hours_leave_out(db):
    ds = gather(db, W47, from_config(db.config))
    admin = ds.build("admin", "cluster").totals
    assert (admin["core_hours"], admin["core_hours_unknown_jobs"]) == (pytest.approx(18), 1)
    assert (admin["gpu_hours"], admin["gpu_hours_unknown_jobs"]) == (pytest.approx(1), 1)
    alice, bob = ds.build("user", "alice"), ds.build("user", "bob")
    assert (alice.totals["core_hours_unknown_jobs"], alice.totals["gpu_hours_unknown_jobs"]) == (1, 0)
    assert (bob.totals["core_hours_unknown_jobs"], bob.totals["gpu_hours_unknown_jobs"]) == (0, 1)
    # beside the totals in every form: text, Markdown, CSV, and the summary
    text = render_text(alice)
    assert "Jobs not in core-hours: 1" in text and "Jobs not in GPU-hours" not in text
    assert "Not counted: 1 job on an unknown number of cores (not in the core-hours)." in alice.summary
    assert "Jobs not in GPU-hours" in render_markdown(bob) and "GPU-hours" in render_markdown(bob)
    assert "1 job on an unknown number of GPUs" in bob.summary
    header, totals_row = render_csv(ds.build("admin", "cluster")).splitlines()[:2]
    row = dict(zip(header.split(","), totals_row.split(",")))
    assert (row["core_hours_unknown_jobs"], row["gpu_hours_unknown_jobs"]) == ("1", "1")
