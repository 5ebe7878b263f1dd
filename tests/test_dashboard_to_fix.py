""""Jobs to fix" on the overview, a project's page and My jobs, through the real app (Flask test
client, header auth, the Dash callbacks POSTed as the browser sends them), on the demo generator's
cluster, against the weekly report's "jobs that wasted the most" for the same scope and period:

- the same jobs in the same order, with the same wasted SBU and saving as the table shows them
  ("12,345.6 SBU"; "not priced" where the report says "not priced"), for the cluster, every
  project and every user, every week and the whole span; the CSV download holds the same rows;
- a user sees only their own jobs (another user's name in the filter changes nothing), a lead only
  their own and their projects';
- each job id links to the job's page (under --url-prefix too), and that page shows the job;
- Flagged jobs has the advice right beside the job id.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
from urllib.parse import parse_qs, unquote, urlsplit

import duckdb
import pytest
from dash_pages import find, opens, post
from demo_db import demo_db

from jobsight.analytics.queries import summaries
from jobsight.analytics.queries.scope import Scope
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.period import Period, iso_week
from jobsight.analytics.reports.settings import ReportSettings
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader
from jobsight.dashboard import common, jobs_to_fix
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

ADMIN, LEAD = "root", "lead-of-one"
N = jobs_to_fix.N


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    db, config = demo_db(tmp_path_factory.mktemp("to-fix"), jobs=300, days=21, seed=3)
    con = duckdb.connect(str(db), read_only=True)
    first, last = con.execute("SELECT min(day), max(day) FROM job_day").fetchone()
    users = [r[0] for r in con.execute('SELECT DISTINCT "user" FROM job_day ORDER BY 1').fetchall()]
    accounts = [r[0] for r in con.execute("SELECT DISTINCT account FROM job_day ORDER BY 1").fetchall()]
    con.close()
    weeks = sorted({day.isocalendar()[:2] for day in (first.date() + dt.timedelta(days=i)
                                                       for i in range((last - first).days + 1))})
    assert len(users) >= 5 and len(accounts) >= 3 and len(weeks) >= 3
    return {"db": db, "config": config, "users": users, "accounts": accounts, "weeks": weeks,
            "span": (first.date(), last.date())}


def _app(world, prefix: str = "/"):
    reader = SnapshotReader(world["db"])
    roles = Roles.from_config({"admins": [ADMIN], "leads": {world["accounts"][0]: [LEAD]}})
    return create_app(reader, Auth("header", roles), url_prefix=prefix), reader


@pytest.fixture(scope="module")
def app(world):
    app, reader = _app(world)
    yield app
    reader.close()


@pytest.fixture(scope="module")
def reports(world):
    """The report's list per (period, kind, name): period a week or the whole span."""
    periods = {w: iso_week(*w) for w in world["weeks"]}
    first, last = world["span"]
    periods["span"] = Period("span", dt.datetime.combine(first, dt.time()), dt.datetime.combine(last + dt.timedelta(days=1),
                                                                                         dt.time()), False)
    con = Database.open(world["db"], str(world["config"]))
    out = {}
    try:
        for key, period in periods.items():
            ds = gather(con, period, ReportSettings())
            for kind, names in (("admin", ["cluster"]), ("account", world["accounts"]), ("user", world["users"])):
                for name in names:
                    out[(key, kind, name)] = ds.build(kind, name).top_jobs
    finally:
        con.close()
    return periods, out


def _days(period: Period) -> dict:
    return {"start_date": f"{period.since:%Y-%m-%d}", "end_date": f"{period.until - dt.timedelta(days=1):%Y-%m-%d}"}


def table_rows(table: dict) -> list[dict]:
    """A serialised TextTable's rows (dashboard/text_table.py) as {field: text}, the job link's
    ``href`` (and the job's raw id in it) and an item's ``title`` as ``<field>_title``."""
    assert table["type"] == "TextTable" and table["namespace"] == "jobsight"
    out = []
    for cells in table["props"]["rows"]:
        row: dict = {}
        for item in (it for cell in cells for it in cell):
            row[item["field"]] = item["text"]
            if item.get("title"):
                row[f"{item['field']}_title"] = item["title"]
            if item.get("href"):
                row["href"] = item["href"]
                row["job_id_raw"] = parse_qs(urlsplit(row["href"]).query)["id"][0]
        out.append(row)
    return out


def fix_rows(app, prefix: str, who: str, period: Period | None = None, **values) -> list[dict] | None:
    """The block's table rows (the cells' texts) as ``who`` on page ``prefix`` (ov, pj, jobs) with
    the filters ``values`` (``name``: the project page's); None: no block (no job in the view)."""
    sent = {f"{prefix}-{k}.value": v for k, v in values.items() if k != "name"}
    if period is not None:
        sent.update({f"{prefix}-period.{k}": v for k, v in _days(period).items()})
    if "name" in values:
        sent[f"{prefix}-name.data"] = values["name"]
    out = post(app, f"{prefix}-fix.children", sent, who)[f"{prefix}-fix"]["children"]
    table = find(out, f"{prefix}-fix-table")
    if table is not None:
        return table_rows(table)
    return None if not out else []


def sbu(x: float | None) -> str:
    """An SBU figure as every face prints it; an unknown saving "not priced"."""
    return "not priced" if x is None else f"{x:,.1f} SBU"


def expected(report_list: list[dict]) -> list[tuple]:
    return [(j["job_id_raw"], sbu(j["wasted_sbu"]), sbu(j["savings_sbu"]))
            for j in report_list if j["wasted_sbu"]][:N]


def shown(rows: list[dict] | None) -> list[tuple]:
    return [(r["job_id_raw"], r["wasted_sbu"], r["savings_sbu"]) for r in rows or []]


def same(got: list[tuple], want: list[tuple]) -> bool:
    return got == want


def test_the_list_is_the_weekly_reports_for_the_cluster_and_each_project(app, reports):
    periods, lists = reports
    checked = 0
    for key, period in periods.items():
        want = expected(lists[(key, "admin", "cluster")])
        assert want, key          # every period of the demo has jobs that wasted SBU
        assert same(shown(fix_rows(app, "ov", ADMIN, period)), want), key
        for account in {a for (k, kind, a) in lists if k == key and kind == "account"}:
            want = expected(lists[(key, "account", account)])
            got = fix_rows(app, "pj", ADMIN, period, name=account)
            assert same(shown(got), want), (key, account)
            assert same(shown(fix_rows(app, "ov", ADMIN, period, account=account)), want), (key, account)
            checked += bool(want)
    assert checked >= 6


def test_the_list_is_the_users_report_and_only_their_jobs(app, world, reports):
    periods, lists = reports
    other = world["users"][-1]
    savings = []
    for user in world["users"]:
        for key, period in periods.items():
            want = expected(lists[(key, "user", user)])
            rows = fix_rows(app, "ov", user, period)
            assert same(shown(rows), want), (user, key)
            # another user's name in the filter cannot widen a user's scope
            assert same(shown(fix_rows(app, "ov", user, period, user=other)), want if user == other else [])
            assert all("user" not in r for r in rows or [])     # their own list: no User column
            savings += [r["savings_sbu"] for r in rows or []]
        # My jobs: the user's own jobs over all their data (no period there)
        mine = fix_rows(app, "jobs", user)
        assert same(shown(mine), expected(lists[("span", "user", user)])), user
        assert same(shown(fix_rows(app, "jobs", user, user=other)), shown(mine))
    assert "not priced" in savings and any(s != "not priced" for s in savings)     # both compared above


def test_a_lead_sees_their_projects_jobs_only(app, world, reports):
    periods, lists = reports
    led = world["accounts"][0]
    for key, period in periods.items():
        rows = fix_rows(app, "ov", LEAD, period)
        assert same(shown(rows), expected(lists[(key, "account", led)])), key   # the lead ran no job
        assert all(r["account"] == led for r in rows or [])
        for account in world["accounts"][1:]:
            assert not shown(fix_rows(app, "pj", LEAD, period, name=account))
    lead_jobs = fix_rows(app, "jobs", LEAD)
    assert lead_jobs and {r["account"] for r in lead_jobs} == {led}


def test_each_row_has_advice_sbatch_lines_and_a_saving_or_not_priced(app, reports):
    periods, lists = reports
    rows = fix_rows(app, "ov", ADMIN, periods["span"])
    assert len(rows) == N
    wasted = [j["wasted_sbu"] for j in lists[("span", "admin", "cluster")] if j["wasted_sbu"]][:N]
    assert [r["wasted_sbu"] for r in rows] == [sbu(w) for w in sorted(wasted, reverse=True)]
    flagged = [r for r in rows if r.get("flag_codes")]
    assert flagged and all(r["lead_advice"] for r in flagged)
    assert any(r["sbatch_lines"] and r["sbatch_lines"].startswith("#SBATCH --") for r in flagged)
    for r in rows:
        if r["savings_sbu"] == "not priced":        # unknown: the cell's title says why
            assert r["savings_sbu_title"]
        assert r["sbu"].startswith("of ") and r["sbu"].endswith(" SBU") and r["job_id"] and r["user"] and r["account"]
    # the leading advice is the first advice the job's page lists
    with app.server.config[common.READER_KEY].cursor() as h:
        for r in flagged:
            cluster = parse_qs(urlsplit(r["href"]).query)["cluster"][0]
            first = summaries.job_flag_rows(h, Scope.admin(), cluster, r["job_id_raw"])[0]
            assert r["lead_advice"] == first["advice"]


def test_the_download_holds_the_rows(app, reports):
    periods, _lists = reports
    out = post(app, "ov-fix.children", {f"ov-period.{k}": v for k, v in _days(periods["span"]).items()},
               ADMIN)["ov-fix"]["children"]
    link = find(out, "ov-fix-table-csv")["props"]
    assert link["download"] == "jobs-to-fix.csv" and link["href"].startswith("data:text/csv;charset=utf-8,")
    got = list(csv.DictReader(io.StringIO(unquote(link["href"].split(",", 1)[1]))))
    rows = fix_rows(app, "ov", ADMIN, periods["span"])
    assert [g["Job"] for g in got] == [r["job_id"] for r in rows]
    assert [sbu(float(g["Wasted"])) for g in got] == [r["wasted_sbu"] for r in rows]
    assert [g["Saves"] and sbu(float(g["Saves"])) or "not priced" for g in got] == [r["savings_sbu"] for r in rows]


def test_job_ids_link_to_the_job_page(app, world, reports):
    periods, _lists = reports
    for user, prefix, values in ((ADMIN, "ov", {}), (world["users"][0], "jobs", {}),
                                 (ADMIN, "pj", {"name": world["accounts"][1]})):
        rows = fix_rows(app, prefix, user, periods["span"] if prefix != "jobs" else None, **values)
        assert rows
        for r in rows[:3]:
            assert opens(app, r["href"], user) == r["job_id"]


def test_links_follow_the_url_prefix(world, reports):
    periods, _lists = reports
    app, reader = _app(world, "/jobsight/")
    try:
        rows = fix_rows(app, "ov", ADMIN, periods["span"])
        assert rows and all(r["href"].startswith("/jobsight/job?cluster=demo&id=") for r in rows)
        assert opens(app, rows[0]["href"], ADMIN) == rows[0]["job_id"]
    finally:
        reader.close()


def test_flagged_jobs_show_the_advice_beside_the_job_id(app):
    page = post(app, "page.children", {"url.pathname": "/flagged", "url.search": ""}, ADMIN)
    grid = find(page["page"]["children"], "fl-table")
    fields = [c["field"] for c in grid["props"]["columnDefs"]]
    assert fields[:2] == ["job_id", "advice"]
