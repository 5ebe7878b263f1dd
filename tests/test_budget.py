"""Budgets (sql/views/55_budget.sql): allocations from [budgets] and from a saved `sacctmgr show
assoc`, their burn, burn rates, run-out date and alert, and where they show (`jobsight usage
--budget`, the reports, the dashboard's queries and budget block). The Slurm side is
tests/test_slurm_budget.py.

Data: test_report_values.build_db (slurm-billing, SBU = billing x hours), as of Sun 22 Nov 2026
(until Mon 23), budget period the month of November:
  proj-a  job 6 alice Nov 2 6 SBU; job 2 alice Nov 15 22:00-02:00 40 SBU (20 on the 15th, 20 on the
          16th); job 1 alice Nov 16 22:00 16 SBU; job 3 bob Nov 17 67 SBU -> 129 burned.
          7 days (16-22 Nov): 20 + 16 + 67 = 103 -> 14.714/day; 30 days: 129 -> 4.3/day.
          Allocation 1000: 871 left, at 4.3/day 202.56 days after 23 Nov 00:00 -> 2027-06-13.
  alice in proj-a: 6 + 40 + 16 = 62 burned, 7 days 20 + 16 = 36; allocation 50 -> over.
  proj-b  job 5 dave Nov 10 8 SBU, job 4 carol Nov 18 4 SBU -> 12; allocation 10 -> over.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil

import duckdb
import pytest
from test_dashboard_queries import ADMIN, ALICE, BOB, DAVE_LEADS_A
from test_dashboard_queries import build_db as build_dash_db
from test_report_values import W47, build_db, run_cli

from jobsight.analytics.config import ConfigError, load_config, parse_config
from jobsight.analytics.ingest import budgets
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.reports.csvout import render_csv
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.html import render_html
from jobsight.analytics.reports.markdown import render_markdown
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.store.database import Database
from jobsight.dashboard import budget_panel, grids

CONFIG = {"budgets": {"proj-a": 1000, "proj-a/alice": 50, "proj-b": 10}, "report": {"budget_period": "month"}}
UNTIL = dt.date(2026, 11, 23)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget") / "jobs.duckdb"
    con, _cfg = build_db(path, CONFIG)
    yield con, path
    con.close()


def status(con, until=UNTIL) -> dict:
    return {(r["account"], r["user"]): r for r in con.rows("SELECT * FROM budget_status(?)", [until])}


def test_config_budgets_burn_rates_run_out_and_alert(db):
    s = status(db[0])
    a = s[("proj-a", None)]
    assert (a["source"], a["period_start"], a["period_end"], a["as_of"]) == \
        ("config", dt.date(2026, 11, 1), dt.date(2026, 12, 1), dt.date(2026, 11, 22))
    assert (a["allocation_sbu"], a["burned_sbu"], a["remaining_sbu"]) == (1000, pytest.approx(129), pytest.approx(871))
    assert a["used_pct"] == pytest.approx(12.9)
    assert a["burn_rate_7d"] == pytest.approx(103 / 7) and a["burn_rate_30d"] == pytest.approx(4.3)
    assert a["run_out_date"] == (dt.datetime(2026, 11, 23) + dt.timedelta(days=871 / 4.3)).date() == dt.date(2027, 6, 13)
    assert a["alert"] == "ok"
    # the allocation resets on 1 Dec, 8 days after 23 Nov: at 4.3 a day 871 - 34.4 will be left
    assert (a["days_to_reset"], a["remaining_at_reset_sbu"]) == (8, pytest.approx(871 - 4.3 * 8))
    alice = s[("proj-a", "alice")]      # her share: her jobs only
    assert (alice["burned_sbu"], alice["burn_rate_7d"]) == (pytest.approx(62), pytest.approx(36 / 7))
    assert (alice["remaining_sbu"], alice["run_out_date"], alice["alert"]) == (pytest.approx(-12), None, "over")
    b = s[("proj-b", None)]
    assert (b["burned_sbu"], b["used_pct"], b["alert"], b["run_out_date"]) == (pytest.approx(12), pytest.approx(120), "over", None)
    assert b["burn_rate_30d"] == pytest.approx(12 / 30)
    assert b["remaining_at_reset_sbu"] == pytest.approx(-2 - 12 / 30 * 8)      # further over by the reset
    # a day later nothing more burned: the 7-day window (17-23 Nov) has lost Nov 16: job 2's 20 and
    # job 1's first 8 (it ran 2 h on each day); bob's 67 and job 1's other 8 remain
    later = status(db[0], dt.date(2026, 11, 24))[("proj-a", None)]
    assert later["burn_rate_7d"] == pytest.approx((8 + 67) / 7) and later["burned_sbu"] == pytest.approx(129)
    # no burn in the last 30 days: no rate, no run-out date
    quiet = status(db[0], dt.date(2027, 2, 1))[("proj-a", None)]
    assert (quiet["burned_sbu"], quiet["burn_rate_30d"], quiet["run_out_date"], quiet["alert"]) == (0, 0, None, "ok")


@contextlib.contextmanager
def settings(con, **values):
    """The module's database with some budget settings changed for a while (the view reads them)."""
    names = {k: "budget." + k if k != "factor" else "charging.factor" for k in values}
    old = {r[0]: r[1:] for r in con.execute("SELECT name, value, text FROM setting").fetchall()}
    try:
        for k, v in values.items():
            con.execute(f"UPDATE setting SET {'text' if isinstance(v, str) else 'value'} = ? WHERE name = ?", [v, names[k]])
        yield
    finally:
        for k in values:
            con.execute("UPDATE setting SET value = ?, text = ? WHERE name = ?", [*old[names[k]], names[k]])


def test_alert_levels_are_settings(db):
    con = db[0]
    con.execute("UPDATE budget SET amount = 150 WHERE account = 'proj-a' AND \"user\" IS NULL")
    try:
        with settings(con, warn_pct=85):
            assert status(con)[("proj-a", None)]["alert"] == "warn"          # 129 / 150 = 86 %
        with settings(con, warn_pct=90):
            assert status(con)[("proj-a", None)]["alert"] == "ok"
        with settings(con, over_pct=80, warn_pct=70):
            assert status(con)[("proj-a", None)]["alert"] == "over"
    finally:
        con.execute("UPDATE budget SET amount = 1000 WHERE account = 'proj-a' AND \"user\" IS NULL")


@pytest.mark.parametrize("period, start, day, want", [
    ("month", "2001-01-01", "2026-11-22", ("2026-11-01", "2026-12-01")),
    ("week", "2001-01-01", "2026-11-22", ("2026-11-16", "2026-11-23")),       # ISO week: Monday
    ("week", "2026-11-18", "2026-11-22", ("2026-11-18", "2026-11-25")),       # from a Wednesday
    ("quarter", "2001-01-01", "2026-12-06", ("2026-10-01", "2027-01-01")),
    ("quarter", "2026-01-15", "2026-11-22", ("2026-10-15", "2027-01-15")),
    ("year", "2025-07-01", "2026-06-30", ("2025-07-01", "2026-07-01")),
    ("year", "2001-01-01", "2026-12-06", ("2026-01-01", "2027-01-01")),
    ("month", "2026-01-31", "2026-03-15", ("2026-02-28", "2026-03-31")),      # the 31st: February's last day
    ("month", "2027-01-01", "2026-11-22", ("2026-11-01", "2026-12-01")),      # a start in the future
])
def test_allocation_periods(db, period, start, day, want):
    with settings(db[0], period=period, start=start):
        got = db[0].execute("SELECT period_start, period_end FROM budget_periods(?)", [dt.date.fromisoformat(day)]).fetchone()
    assert tuple(map(str, got)) == want


def test_budget_start_from_the_config(db):
    cfg = parse_config({"report": {"budget_period": "week", "budget_start": dt.date(2026, 11, 17)}})
    got = {n: t for n, _v, t in cfg.settings() if n in ("budget.period", "budget.start")}
    assert got == {"budget.period": "week", "budget.start": "2026-11-17"}
    with settings(db[0], period="week", start="2026-11-17"):
        a = status(db[0])[("proj-a", None)]           # Tue 17 - Tue 24: bob's 67 and job 1's 8 of the 17th
    assert (a["period_start"], a["burned_sbu"]) == (dt.date(2026, 11, 17), pytest.approx(75))


ASSOC = """\
Cluster|Account|User|GrpTRESMins
c1|root||
c1|proj-a||cpu=100,billing=120000
c1|proj-a|alice|
c1|proj-b|carol|billing=600
"""


def test_sacctmgr_file_budgets_in_billing_minutes(db, tmp_path):
    (tmp_path / "assoc.txt").write_text(ASSOC)
    (tmp_path / "jobsight.toml").write_text('[budget_options]\nassoc_file = "assoc.txt"\n')
    cfg = load_config(tmp_path / "jobsight.toml")
    assert cfg.file_budgets == {("c1", "proj-a", None): 120000.0, ("c1", "proj-b", "carol"): 600.0}
    con = db[0]
    try:
        budgets.replace(con, budgets.rows(cfg.file_budgets, "file"), "file")
        # billing-minutes / 60 = billing-hours, x charging.factor = SBU (the slurm-billing rule)
        with settings(con, factor=0.5):
            s = status(con)
        assert {k: (r["source"], r["allocation_sbu"]) for k, r in s.items()} == {
            ("proj-a", None): ("config", 1000.0), ("proj-a", "alice"): ("config", 50.0),
            ("proj-b", None): ("config", 10.0), ("proj-b", "carol"): ("file", 5.0)}   # [budgets] first
        assert s[("proj-b", "carol")]["burned_sbu"] == pytest.approx(4)                # carol's job 4
        con.execute("DELETE FROM budget WHERE source = 'config' AND account = 'proj-a' AND \"user\" IS NULL")
        # sacctmgr's own rows come after the file's, for their cluster only
        budgets.replace(con, budgets.rows({("c1", "proj-a", None): 60.0, ("other", "proj-b", "carol"): 1200.0},
                                          "sacctmgr"), "sacctmgr", "c1")
        s = status(con)
        assert (s[("proj-a", None)]["source"], s[("proj-a", None)]["allocation_sbu"]) == ("file", 2000.0)
        assert s[("proj-b", "carol")]["source"] == "file"
        con.execute("DELETE FROM budget WHERE source = 'file'")
        s = status(con)
        assert (s[("proj-a", None)]["source"], s[("proj-a", None)]["allocation_sbu"]) == ("sacctmgr", 1.0)
        assert s[("proj-a", None)]["burned_sbu"] == pytest.approx(129) and s[("proj-a", None)]["alert"] == "over"
        assert (s[("proj-b", "carol")]["cluster"], s[("proj-b", "carol")]["burned_sbu"]) == ("other", 0)
    finally:
        con.execute("DELETE FROM budget WHERE source <> 'config'")
        budgets.replace(con, con.config.budget_rows(), "config")


@pytest.mark.parametrize("text, needle", [
    ("c1|proj-a||billing=5|x\n", "line 1: 5 fields"),
    ("proj-a||billing=lots\n", "line 1: billing='lots' is not a number"),
    ("a|b\n", "line 1: 2 fields"),
    ("c1||alice|billing=5\n", "line 1: no account"),
])
def test_bad_assoc_lines_are_named(tmp_path, text, needle):
    (tmp_path / "assoc.txt").write_text(text)
    cfg = tmp_path / "jobsight.toml"
    cfg.write_text('[budget_options]\nassoc_file = "assoc.txt"\n')
    with pytest.raises(ConfigError, match=f"{cfg}, line 2: budget_options.assoc_file: .*assoc.txt: {needle}"):
        load_config(cfg)


def test_usage_budget_marks_the_overrun(db, tmp_path):
    path = db[1]
    db[0].execute("CHECKPOINT")             # readers read the snapshot: a copy (the fixture holds the database)
    shutil.copyfile(path, f"{path}.snapshot")
    cfg = tmp_path / "jobsight.toml"        # the fixture's budgets: the ones the database holds
    cfg.write_text('[budgets]\nproj-a = 1000\n"proj-a/alice" = 50\nproj-b = 10\n')
    rc, out, err = run_cli(["usage", "--db", str(path), "--config", str(cfg), "--budget", "--until", "2026-11-22"])
    assert rc == 0, err
    lines = {tuple(line.split()[:2]): line for line in out.splitlines()[3:]}
    assert lines[("proj-a", "-")].split()[2:] == ["2026-11-01", "1,000.0", "129.0", "871.0", "12.9", "14.7", "4.3",
                                                  "2027-06-13", "2026-12-01", "836.6", "OK"]
    assert lines[("proj-b", "-")].split()[-4:] == ["-", "2026-12-01", "-5.2", "OVER"]
    assert lines[("proj-a", "alice")].endswith("OVER")
    assert "budgets as of 2026-11-22" in out
    rc, out, _ = run_cli(["usage", "--db", str(path), "--config", str(cfg), "--budget", "--until", "2026-11-22", "--user", "carol",
                          "--format", "json"])
    got = json.loads(out)
    assert [(r["account"], r["user"], r["alert"], r["remaining_sbu"]) for r in got] == [("proj-b", None, "over", -2.0)]
    rc, _, err = run_cli(["usage", "--db", str(path), "--config", str(cfg), "--budget", "--since", "2026-11-01"])
    assert rc == 2 and "--budget" in err


def test_reports_show_the_budgets_and_highlight_the_overrun(db):
    con = db[0]
    ds = gather(con, W47, from_config(con.config))
    b = ds.build("account", "proj-b")
    assert [(r["account"], r["user"], r["alert"]) for r in b.budgets] == [("proj-b", None, "over")]
    assert "OVER budget" in b.summary
    html = render_html(b, charts=False)
    assert '<tr class="over"><td>proj-b</td>' in html and "<td>OVER</td>" in html
    assert "## Budget: the month from 2026-11-01" in render_markdown(b)
    assert "| proj-b | 10.0 | 12.0 | -2.0 | 120.0% | 0.6 | 0.4 | - | 2026-12-01 | -5.2 | OVER |" in render_markdown(b)
    assert ",budget,1,,,,proj-b," in render_csv(b) and ",over\n" in render_csv(b)
    a = ds.build("account", "proj-a")
    assert [(r["user"], r["alert"]) for r in a.budgets] == [(None, "ok"), ("alice", "over")]
    assert "has 871.0 SBU left (13% used); at the last 30 days' rate (4.3 SBU a day) it runs out on 2027-06-13" in a.summary
    assert "It resets on 2026-12-01 with 836.6 SBU left at that rate." in a.summary
    # a user's report: the allocations of the accounts the user ran in, and the user's own share
    assert [(r["account"], r["user"]) for r in ds.build("user", "alice").budgets] == [("proj-a", None), ("proj-a", "alice")]
    assert [(r["account"], r["user"]) for r in ds.build("user", "carol").budgets] == [("proj-b", None)]
    assert "Project proj-b's monthly allocation of 10.0 SBU is OVER budget" in ds.build("user", "carol").summary
    assert len(ds.build("admin", "cluster").budgets) == 3


@pytest.fixture(scope="module")
def dash_db(tmp_path_factory):
    """test_dashboard_queries' data (alice and carol in proj-a 9 SBU, bob in proj-b 500 SBU, 16-17 Nov)."""
    path = build_dash_db(tmp_path_factory.mktemp("dash-budget") / "jobs.duckdb")
    con = duckdb.connect(str(path))      # [budgets] as an open with them writes them
    budgets.replace(con, parse_config({"budgets": {"proj-a": 100, "proj-b": 200, "proj-a/carol": 0.5}}).budget_rows(),
                    "config")
    con.close()
    con = Database.open(path, read_only=True)
    yield Database.of(con)
    con.close()


def test_dashboard_budgets_follow_the_scope(dash_db):
    def seen(scope, account=None):
        return [(r["account"], r["user"]) for r in grids.records(queries.budgets(dash_db, scope, account))]
    everything = [("proj-a", None), ("proj-a", "carol"), ("proj-b", None)]
    assert seen(ADMIN) == everything
    assert seen(ALICE) == [("proj-a", None)]                     # the account she ran in, not carol's share
    assert seen(BOB) == [("proj-b", None)]
    assert seen(DAVE_LEADS_A) == [("proj-a", None), ("proj-a", "carol")]
    assert seen(ALICE, "proj-b") == [] and seen(ADMIN, "proj-b") == [("proj-b", None)]
    a = queries.budgets(dash_db, ALICE).iloc[0]
    # as of Tue 17 Nov, the last day with jobs: 9 SBU burned, 0.3 a day over 30 days, 91 left
    assert (a["burned_sbu"], a["burn_rate_30d"]) == (pytest.approx(9), pytest.approx(0.3))
    assert a["run_out_date"].date() == (dt.datetime(2026, 11, 18) + dt.timedelta(days=91 / 0.3)).date()


def test_dashboard_budget_block_highlights_the_overrun(dash_db, monkeypatch):
    # as many allocations as fit a page: a plain table (dashboard/text_table.py), texts as shown
    [block] = budget_panel.panel(dash_db, ADMIN, "ov")
    table = block.children[-1].children[1]
    assert table.id == "ov-budgets" and table.rowClassNames == [None, "budget-over", "budget-over"]
    rows = [{it["field"]: it["text"] for cell in row for it in cell} for row in table.rows]
    assert [(r["account"], r["alert_shown"]) for r in rows] == [("proj-a", "OK"), ("proj-a", "OVER"), ("proj-b", "OVER")]
    assert rows[2]["remaining_sbu"] == "-300.0 SBU" and rows[0]["user"] == ""
    # more: the grid, to sort, filter and page
    monkeypatch.setattr(budget_panel, "PAGE", 2)
    [block] = budget_panel.panel(dash_db, ADMIN, "ov")
    grid = block.children[-1].children[1]
    assert grid.id == "ov-budgets" and grid.rowClassRules["budget-over"] == "params.data.alert === 'over'"
    assert [(r["account"], r["alert_shown"]) for r in grid.rowData] == [("proj-a", "OK"), ("proj-a", "OVER"),
                                                                        ("proj-b", "OVER")]
    assert grid.dashGridOptions["paginationPageSize"] == 2
    [block] = budget_panel.panel(dash_db, BOB, "pj", "proj-b")
    cards = block.children[2]
    assert "budget-over" in cards.className
    assert [c.children[1].children for c in cards.children][1] == "-300.0 SBU — OVER"
    # as of 17 Nov at 500 / 30 a day, the 13 days to the reset on 1 Dec overspend it further
    reset = cards.children[-1]
    assert reset.children[0].children == "Left at the reset, 2026-12-01"
    assert reset.children[1].children == f"{-300 - 500 / 30 * 13:,.1f} SBU"
    assert budget_panel.panel(dash_db, ALICE, "pj", "proj-b") == []
