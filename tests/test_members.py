"""A project's page lists its members by waste with the figures of the project's weekly report:
analytics/queries/reports.members (the dashboard's members block) and the report's Members table
are the same macro over the same days. Data: test_report_values.build_db, ISO week 2026-W47:
proj-a's members bob 67 SBU (46.9 wasted) and alice 36 SBU (22 wasted: job 1's 16 / 12, job 2's
20 / 10 inside the week), bob first.
"""
from __future__ import annotations

import datetime as dt

import pytest
from test_report_values import W47, build_db

from jobsight.analytics.queries.reports import members
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.settings import from_config
from jobsight.dashboard import members_panel

WEEK = dict(since=W47.since.date(), until=(W47.until - dt.timedelta(days=1)).date())
FIGURES = ("user", "jobs", "sbu", "wasted_sbu", "wasted_pct", "savings_sbu", "cpu_eff_pct", "gpu_util_pct",
           "mem_eff_pct", "time_eff_pct")


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    con, _cfg = build_db(tmp_path_factory.mktemp("members") / "r.duckdb")
    yield con
    con.close()


def test_the_project_page_members_are_the_reports(con):
    report = gather(con, W47, from_config(con.config)).build("account", "proj-a").members
    page = members(con, Scope("admin", "root"), Filters(account="proj-a", **WEEK))
    assert [r["user"] for r in page] == ["bob", "alice"]
    assert [(r["sbu"], r["wasted_sbu"]) for r in page] == [(pytest.approx(67), pytest.approx(46.9)),
                                                         (pytest.approx(36), pytest.approx(22))]
    assert [{k: r[k] for k in FIGURES} for r in page] == [{k: r[k] for k in FIGURES} for r in report]
    # the dashboard's block: the same rows, each member a link to their page
    rows = members_panel.rows(con, Scope("admin", "root"), Filters(account="proj-a", **WEEK))
    assert [(r["user"], r["href"], r["wasted_sbu"]) for r in rows] == [
        ("bob", "/user?name=bob", pytest.approx(46.9)), ("alice", "/user?name=alice", pytest.approx(22))]


def test_members_follow_the_scope_and_the_period(con):
    assert [r["user"] for r in members(con, Scope("user", "alice"), Filters(account="proj-a", **WEEK))] == ["alice"]
    lead = members(con, Scope("lead", "dave", ("proj-a",)), Filters(account="proj-a", **WEEK))
    assert [r["user"] for r in lead] == ["bob", "alice"]
    # the whole of job 2 (Sun 15 - Mon 16) and job 6 (2 Nov) when no period is chosen: alice 62 SBU
    everything = {r["user"]: r for r in members(con, Scope("admin", "root"), Filters(account="proj-a"))}
    assert everything["alice"]["sbu"] == pytest.approx(62) and everything["bob"]["sbu"] == pytest.approx(67)
    assert members(con, Scope("admin", "root"), Filters()) == []          # no project, no members
