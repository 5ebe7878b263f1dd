"""My jobs, the header's job search and the grids, through the real app (Flask test client, header
auth, the Dash callbacks POSTed as the browser sends them), on test_dashboard_queries.build_db.

My jobs: a user's own jobs only, newest first, paged with Newer/Older (the page size made 2 here);
a lead or admin picks a user or sees all their scope. Search: an id of one of your jobs opens it;
another user's id is "Not found", word for word as an id that exists nowhere; a name part lists
jobs, the name as text. Grids: every table of every page is an AG Grid with a CSV button, the
formula guard in its export, numbers right-aligned with a unit, and rows that link only to paths
the server built.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest
from conftest import post_callback
from test_dashboard_queries import XSS, build_db

from jobsight.analytics.queries import data_age as data_age_module
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard import grids
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles
from jobsight.dashboard.pages import jobs
from jobsight.dashboard.search import NOT_FOUND

JOBS = "..jobs-table.rowData...jobs-status.children...jobs-page.data...jobs-newer.disabled...jobs-older.disabled...jobs-table.columnDefs.."


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    db = build_db(tmp_path_factory.mktemp("jobs") / "jobs.duckdb")
    publish(db)
    reader = SnapshotReader(db)
    yield create_app(reader, Auth("header", Roles.from_config({"admins": ["root"], "leads": {"proj-a": ["dave"]}})))
    reader.close()


def post(app, key: str, values: dict, user: str) -> dict:
    r = post_callback(app.server.test_client(), key, app.callback_map[key], lambda prop: values.get(prop), user)
    assert r.status_code == 200, r.data[:300]
    return json.loads(r.data)["response"]


def click(app, key: str, values: dict, user: str, prop: str) -> dict:
    """The callback as the browser calls it after a click on ``prop``."""
    spec = app.callback_map[key]
    body = {"output": key, "outputs": [{"id": o.split(".", 1)[0], "property": o.split(".", 1)[1]}
                                       for o in key.strip(".").split("...")],
            "inputs": [{**i, "value": values.get(f"{i['id']}.{i['property']}")} for i in spec["inputs"]],
            "state": [{**s, "value": values.get(f"{s['id']}.{s['property']}")} for s in spec.get("state", [])],
            "changedPropIds": [prop]}
    r = app.server.test_client().post("/_dash-update-component", data=json.dumps(body), content_type="application/json",
                                      headers={"X-Forwarded-User": user})
    assert r.status_code == 200, r.data[:300]
    return json.loads(r.data)["response"]


def my_jobs(app, who: str, **values) -> tuple[list[str], str, dict]:
    """My jobs as ``who``, with the filters ``values`` (user, state, partition, code)."""
    out = post(app, JOBS, {f"jobs-{k}.value": v for k, v in values.items()}, who)
    return [r["job_id"] for r in out["jobs-table"]["rowData"]], out["jobs-status"]["children"], out


def search_key(app) -> str:
    return next(k for k, v in app.callback_map.items() if k.startswith("..search-results") and "callback" in v)


def search(app, user: str, text) -> dict:
    return post(app, search_key(app), {"search-box.value": text, "search-box.n_submit": 1}, user)


# -- My jobs ----------------------------------------------------------------------------------------

def test_my_jobs_are_the_users_own_newest_first(app):
    ids, status, out = my_jobs(app, "alice")
    assert ids == ["1"] and status == "Jobs 1–1 of 1"
    assert out["jobs-newer"]["disabled"] and out["jobs-older"]["disabled"]
    row = out["jobs-table"]["rowData"][0]
    assert (row["sbu"], row["wasted_sbu"], row["cpu_eff_pct"], row["elapsed_h"]) == (8.0, 6.0, 25.0, 2.0)
    assert row["codes"] == "cpu_low_eff, cpu_serial_on_many, mem_oversized" and row["href"] == "/job?cluster=c1&id=1"
    assert my_jobs(app, "alice", user="bob")[0] == ["1"]        # a plain user's list is always their own
    assert my_jobs(app, "bob")[0] == ["2", "4"]
    assert my_jobs(app, "mallory")[0] == []                      # no jobs at all: told how jobs get in (below)


def test_leads_and_admins_choose_whose_jobs(app):
    assert my_jobs(app, "root")[0] == ["3", "1", "2", "4"]      # cleared: every job, newest first
    assert my_jobs(app, "root", user="bob", partition="gpu", code="gpu_idle")[0] == ["4"]
    assert my_jobs(app, "root", state="COMPLETED", partition="cpu")[0] == ["3", "1"]
    assert my_jobs(app, "dave")[0] == ["3", "1"]                # proj-a: carol's and alice's
    assert my_jobs(app, "dave", user="bob")[0] == []            # not in his projects: nothing


def test_my_jobs_layout_by_role(app):
    def layout(user):
        out = post(app, "page.children", {"url.pathname": "/jobs", "url.search": ""}, user)
        return json.dumps(out)
    as_alice, as_root = layout("alice"), layout("root")
    assert '"My jobs"' in as_alice and '"display": "none"' in as_alice          # no user choice
    assert '"label": "bob"' in as_root and '"label": "bob"' not in as_alice


def test_older_and_newer_page_through(app, monkeypatch):
    monkeypatch.setattr(jobs, "PAGE", 2)
    ids, status, out = my_jobs(app, "root")
    assert ids == ["3", "1"] and status == "Jobs 1–2 of 4" and out["jobs-page"]["data"] == 0
    assert out["jobs-newer"]["disabled"] and not out["jobs-older"]["disabled"]
    out = click(app, JOBS, {"jobs-page.data": 0}, "root", "jobs-older.n_clicks")
    assert [r["job_id"] for r in out["jobs-table"]["rowData"]] == ["2", "4"]
    assert out["jobs-status"]["children"] == "Jobs 3–4 of 4" and out["jobs-older"]["disabled"]
    out = click(app, JOBS, {"jobs-page.data": 7}, "root", "jobs-older.n_clicks")      # past the end: the last page
    assert out["jobs-page"]["data"] == 1
    out = click(app, JOBS, {"jobs-page.data": 1}, "root", "jobs-newer.n_clicks")
    assert [r["job_id"] for r in out["jobs-table"]["rowData"]] == ["3", "1"]
    out = click(app, JOBS, {"jobs-page.data": 1, "jobs-state.value": "COMPLETED"}, "root", "jobs-state.value")
    assert out["jobs-page"]["data"] == 0                          # a filter changed: the first page


# -- search -----------------------------------------------------------------------------------------

def test_search_opens_your_job_and_hides_others(app):
    assert search(app, "alice", " 1 ") == {"search-results": {"children": None}, "url": {"href": "/job?cluster=c1&id=1"}}
    theirs, nowhere = search(app, "alice", "2"), search(app, "alice", "no-such-job")
    assert theirs == nowhere and NOT_FOUND in json.dumps(theirs) and "url" not in theirs
    assert search(app, "bob", "2")["url"]["href"] == "/job?cluster=c1&id=2"
    assert search(app, "dave", "3")["url"]["href"] == "/job?cluster=c1&id=3"     # his project's
    assert search(app, "alice", "") == {"search-results": {"children": None}}


def test_search_by_name_lists_jobs_as_text(app):
    out = search(app, "root", "<img")
    text = json.dumps(out)
    assert "url" not in out and '"href": "/job?cluster=c1&id=2"' in text
    spans = [c for c in _walk(out) if c.get("type") == "Span"]
    assert any(XSS in c["props"]["children"] for c in spans)      # the name as a string: text, not markup
    assert not [c for c in _walk(out) if c.get("type") in ("Img", "Iframe", "Markdown")]
    assert NOT_FOUND in json.dumps(search(app, "alice", "<img"))  # bob's job name, as if none


def _walk(node):
    if isinstance(node, dict):
        if "type" in node and "props" in node:
            yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


# -- grids ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/users", "/projects", "/flagged", "/jobs"])
def test_every_table_is_a_grid_with_a_guarded_csv_download(app, path):
    page = post(app, "page.children", {"url.pathname": path, "url.search": ""}, "root")
    tree = list(_walk(page))
    grid_nodes = [c for c in tree if c["type"] == "AgGrid"]
    assert grid_nodes and not [c for c in tree if c["type"] == "DataTable"]
    buttons = {c["props"].get("id") for c in tree if c["type"] == "Button"}
    for g in grid_nodes:
        p = g["props"]
        assert f"{p['id']}-csv" in buttons
        assert p["csvExportParams"]["processCellCallback"] == grids.CSV_CELL
        assert p["csvExportParams"]["fileName"].endswith(".csv") and not p.get("dangerously_allow_code")
        for col in p["columnDefs"]:
            if col.get("cellDataType") == "number":
                assert col["type"] == "rightAligned" and "jobsightNumber" in col["valueFormatter"]["function"]
            assert col.get("cellRenderer") in (None, "JobsightLink")


def test_grid_rows_link_to_pages_the_server_built(app):
    users = post(app, "..ut-table.rowData...ut-status.children...ut-table.columnDefs..", {}, "root")["ut-table"]["rowData"]
    assert {r["name"]: r["href"] for r in users} == {"bob": "/user?name=bob", "alice": "/user?name=alice",
                                                     "carol": "/user?name=carol"}
    flagged = post(app, "..fl-table.rowData...fl-status.children...fl-table.columnDefs..", {}, "root")
    assert [r["job_id"] for r in flagged["fl-table"]["rowData"]] == ["4", "2", "1"]
    assert flagged["fl-status"]["children"] == "3 flagged jobs"
    assert {r["href"] for r in flagged["fl-table"]["rowData"]} == {f"/job?cluster=c1&id={i}" for i in ("1", "2", "4")}


# -- how old the data is ----------------------------------------------------------------------------

DATA_AGE = "..data-age.children...data-age.className.."      # renewed on a move to another page


@pytest.mark.parametrize("path", ["/", "/jobs", "/flagged", "/running", "/job"])
def test_every_page_says_how_old_the_data_is(app, path):
    # the line sits in the shell every page is drawn in
    shell = app.server.test_client().get("/_dash-layout", headers={"X-Forwarded-User": "alice"})
    assert shell.status_code == 200 and '"id": "data-age"' in shell.get_data(as_text=True).replace('":"', '": "')
    # build_db's newest accounting time is job 3's end, 17 Nov 11:00; the tests run later than a day after
    # the line comes with the shell (no request on the page's load), and the callback renews it on a move
    assert "Data up to 2026-11-17 11:00 UTC (more than a day old)" in shell.get_data(as_text=True)
    for who in ("alice", "root", "mallory"):
        out = post(app, DATA_AGE, {"moved.data": path}, who)["data-age"]
        assert out == {"children": "Data up to 2026-11-17 11:00 UTC (more than a day old)", "className": "data-age old"}


def test_data_within_a_day_is_not_called_old(app, monkeypatch):
    monkeypatch.setattr(data_age_module, "utc_now", lambda: dt.datetime(2026, 11, 18, 10, 0))
    out = post(app, DATA_AGE, {"moved.data": "/"}, "alice")["data-age"]
    assert out == {"children": "Data up to 2026-11-17 11:00 UTC", "className": "data-age"}


# -- a user with no jobs at all ---------------------------------------------------------------------

def _text_of(node) -> str:
    if isinstance(node, dict):
        return _text_of(node.get("props", {}).get("children"))
    if isinstance(node, list):
        return " ".join(_text_of(c) for c in node)
    return "" if node is None else str(node)


def test_a_user_with_no_jobs_is_told_how_jobs_get_in(app):
    _ids, status, _out = my_jobs(app, "mallory")
    assert status["props"]["id"] == "no-jobs-yet"
    told = _text_of(status)
    assert 'jobsight sidecar run --out "$HOME/jobsight" -- CMD' in told and "site's ingest" in told
    overview = post(app, "ov-content.children", {}, "mallory")["ov-content"]["children"]
    assert [c["props"].get("id") for c in overview] == ["no-jobs-yet"]
    assert 'jobsight sidecar run --out "$HOME/jobsight" -- CMD' in _text_of(overview)


def test_no_match_for_filters_is_still_said_so(app):
    # a filter set, or someone who has jobs: the plain "no match", not the newcomer's text
    assert my_jobs(app, "mallory", state="RUNNING")[1] == "No jobs match these filters."
    assert my_jobs(app, "alice", state="RUNNING")[1] == "No jobs match these filters."
    overview = post(app, "ov-content.children", {"ov-period.start_date": "2027-01-01"}, "mallory")["ov-content"]
    assert _text_of(overview["children"]) == "No jobs in this view for the selected period and filters."
    overview = post(app, "ov-content.children", {"ov-period.start_date": "2027-01-01"}, "alice")["ov-content"]
    assert "sidecar" not in _text_of(overview["children"])
