"""The dashboard in real headless Chromium (Dash's test browser, selenium + Debian's chromedriver),
served by waitress as in production, on the database of test_dashboard_queries.build_db.

Each page loads with no browser console errors; the overview fetches no AG Grid bundle, and a
move to a page with a grid fetches it and draws the grid; a filter changes the numbers and lands in the URL;
clicking a flagged job opens its time series; names with HTML in them (a host <a href=...>, a
project <b>...</b>) show in the plots and the grids as text, never as a link, bold or italics.
Logged in as alice (behind a proxy that sets REMOTE_USER), a researcher finds her jobs on My jobs,
opens one by its id from the header's search, gets "Not found" for bob's job id, downloads
the grid as a CSV file whose content is checked, and sees her project's budget with its run-out
date, her own share of it highlighted as over budget, and not bob's project's. Needs chromium + chromedriver
(scripts/browser-setup.sh start): skipped locally without them, failed under CI.
"""
from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import io
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import require_service
from test_dashboard_hostile import ACCOUNT, DEVICE, HOST, PARTITION, build_hostile_db
from test_dashboard_queries import build_db

from jobsight.analytics.config import parse_config
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

pytestmark = pytest.mark.browser


def as_user(wsgi_app, user: str):
    """A stand-in for the authenticating reverse proxy: every request is ``user``'s (REMOTE_USER)."""
    def app(environ, start_response):
        environ["REMOTE_USER"] = user
        return wsgi_app(environ, start_response)
    return app


def _serve(db, user: str | None = None):
    """The app over ``db`` on waitress: --auth none (everyone admin), or as ``user`` (--auth header)."""
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    import waitress.server as waitress
    publish(db)
    reader = SnapshotReader(db)
    app = create_app(reader, Auth("header", Roles.from_config({"admins": ["root"]})) if user else Auth("none", Roles()))
    server = waitress.create_server(as_user(app.server.wsgi_app, user) if user else app.server,
                                    host="127.0.0.1", port=0, threads=4)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.effective_port}"
    server.close()
    reader.close()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    yield from _serve(build_db(tmp_path_factory.mktemp("browser") / "jobs.duckdb"))


# proj-a burned 9 SBU on 16-17 Nov (0.3 a day over the 30 days to the 17th): 91 left run out 91 / 0.3
# days after 18 Nov 00:00; alice's share burned 8 of 5; proj-b 500 of 200
BUDGETS = {"budgets": {"proj-a": 100, "proj-b": 200, "proj-a/alice": 5}}
RUN_OUT = (dt.datetime(2026, 11, 18) + dt.timedelta(days=91 / 0.3)).date().isoformat()


def with_budgets(db: Path) -> Path:
    Database.open(db, parse_config(BUDGETS)).close()
    return db


@pytest.fixture(scope="module")
def alice_url(tmp_path_factory):
    yield from _serve(with_budgets(build_db(tmp_path_factory.mktemp("browser-alice") / "jobs.duckdb")), user="alice")


@pytest.fixture(scope="module")
def hostile_url(tmp_path_factory):
    yield from _serve(build_hostile_db(tmp_path_factory.mktemp("browser-hostile") / "jobs.duckdb"))


def chromium(download_path: Path):
    """Dash's test browser on headless Chromium, downloading to ``download_path`` (a context manager)."""
    require_service(bool(shutil.which("chromium") and shutil.which("chromedriver")),
                    "chromium/chromedriver not installed (run scripts/browser-setup.sh start as root)")
    require_service(importlib.util.find_spec("selenium") is not None,
                    "selenium not installed (pip install 'dash[testing]')")
    from dash.testing.browser import Browser
    return Browser("chrome", headless=True, download_path=str(download_path), percy_run=False, wait_timeout=20)


@pytest.fixture(scope="module")
def module_browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("browser-downloads")) as b:
        yield b


@pytest.fixture
def browser(module_browser):
    """The module's one Chromium (starting one takes seconds), on a blank page, its console log
    read: get_logs() gives this test's. The pages keep nothing in the browser between visits (no
    cookies, no persisted component state), and each test downloads another file."""
    module_browser.driver.get("about:blank")
    module_browser.reset_log_timestamp()
    return module_browser


def at_once(browser, selector: str) -> list:
    """The elements matching ``selector`` now. find_elements waits the driver's implicit 2 s when
    there are none; a check that nothing is there is made once what would hold it is drawn."""
    wait = browser.driver.timeouts.implicit_wait
    browser.driver.implicitly_wait(0)
    try:
        return browser.driver.find_elements("css selector", selector)
    finally:
        browser.driver.implicitly_wait(wait)


def visit(browser, url):
    browser.driver.get(url)
    browser.wait_for_element("#page")


def grid_cells(browser, grid: str, column: str) -> list[str]:
    """The texts of a grid's cells in one column (rows rendered on the current page)."""
    return [c.text.strip() for c in browser.find_elements(f"#{grid} .ag-center-cols-container .ag-cell[col-id='{column}'], "
                                                          f"#{grid} .ag-pinned-left-cols-container .ag-cell[col-id='{column}']")]


def table_cells(browser, table: str, field: str) -> list[str]:
    """The texts of a plain table's values of one field (their elements' class ``col-<field>``)."""
    return [c.text.strip() for c in browser.find_elements(f"#{table} .col-{field}")]


def wait_for(predicate, timeout: float = 20, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def downloaded(folder: Path, name: str) -> str:
    """The text of a finished download (Chromium writes NAME.crdownload first)."""
    path = folder / name
    wait_for(lambda: path.is_file() and not (folder / (name + ".crdownload")).exists() and path.stat().st_size,
             what=f"the download {name}")
    return path.read_bytes().decode("utf-8-sig")       # no newline translation: a CR in a cell stays


@pytest.mark.parametrize("path, selector, text", [
    ("/", "#total-sbu", "509.0"),
    ("/users", "#ut-status", "3 users"),
    ("/projects", "#pt-status", "2 projects"),
    ("/flagged", "#fl-status", "3 flagged jobs"),
    ("/jobs", "#jobs-status", "Jobs 1–4 of 4"),
    ("/job?cluster=c1&id=2", "#job-content h2", "Job 2"),
    ("/job?cluster=c1&id=1", "#job-no-samples", "No samples"),
    ("/user?name=bob", "#total-sbu", "500.0"),
    ("/project?name=proj-a", "#total-sbu", "9.0"),
])
def test_each_page_loads_without_console_errors(browser, server_url, path, selector, text):
    visit(browser, server_url + path)
    browser.wait_for_contains_text(selector, text)
    assert browser.get_logs() == []


def test_filter_changes_the_numbers_and_the_url(browser, server_url):
    visit(browser, server_url + "/")
    browser.wait_for_text_to_equal("#total-sbu", "509.0")
    dropdown = browser.wait_for_element("#ov-account")
    dropdown.click()
    option = browser.wait_for_element("[role='option']:not([aria-disabled='true'])")
    options = browser.find_elements("[role='option']")
    [o for o in options if o.text.strip() == "proj-a"][0].click()
    browser.wait_for_text_to_equal("#total-sbu", "9.0")
    assert "account=proj-a" in browser.driver.current_url
    assert option is not None
    # the URL alone reproduces the view (a shared link)
    visit(browser, server_url + "/?account=proj-b")
    browser.wait_for_text_to_equal("#total-sbu", "500.0")
    assert browser.get_logs() == []


def test_clicking_a_flagged_job_opens_its_time_series(browser, server_url):
    visit(browser, server_url + "/flagged")
    browser.wait_for_contains_text("#fl-status", "3 flagged jobs")
    wait_for(lambda: grid_cells(browser, "fl-table", "job_id"), what="the flagged grid's rows")
    assert grid_cells(browser, "fl-table", "job_id") == ["4", "2", "1"]       # one row per job, most wasted first
    assert grid_cells(browser, "fl-table", "codes")[0] == "gpu_idle"
    links = browser.find_elements("#fl-table .ag-cell[col-id='job_id'] a")
    [a for a in links if a.text.strip() == "2"][0].click()
    browser.wait_for_element("#job-fig-gpu_util")
    browser.wait_for_contains_text("#job-content h2", "Job 2")
    assert "/job?" in browser.driver.current_url and "id=2" in browser.driver.current_url
    # the per-GPU trace and the allocation line are drawn
    browser.wait_for_element("#job-fig-gpu_util .scatterlayer .trace")
    assert len(browser.find_elements("#job-fig-gpu_util .scatterlayer .trace")) == 2
    # the HTML payload in the job name is shown as text (an <img> would have fired onerror)
    assert 'onerror="alert(1)"' in browser.find_element("#job-content table").text
    assert at_once(browser, "#job-content img") == []                    # in the table just read
    assert browser.get_logs() == []


def test_clicking_a_user_opens_the_user_page(browser, server_url):
    visit(browser, server_url + "/users")
    browser.wait_for_contains_text("#ut-status", "3 users")
    wait_for(lambda: grid_cells(browser, "ut-table", "name"), what="the users grid's rows")
    assert grid_cells(browser, "ut-table", "sbu") == ["500.0 SBU", "8.0 SBU", "1.0 SBU"]     # right-aligned, units
    cells = browser.find_elements("#ut-table .ag-cell[col-id='name'] a")
    [c for c in cells if c.text.strip() == "alice"][0].click()
    browser.wait_for_text_to_equal("#total-sbu", "8.0")
    url = browser.driver.current_url
    assert "/user?" in url and "name=alice" in url
    assert browser.get_logs() == []


def _grid_bundle_requests(browser) -> list[str]:
    """The page's requests for AG Grid's main bundle (dash_ag_grid.min.js) since it was loaded."""
    return browser.driver.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })"
        ".filter(function (n) { return /dash_ag_grid[^/]*[.]js/.test(n) && n.indexOf('/dash_ag_grid/') >= 0"
        " && !/async-|[.]map/.test(n); });")


def test_the_grid_bundle_comes_with_the_first_grid(browser, server_url):
    """The overview draws no grid and fetches no AG Grid bundle; the top bar's link to a page with
    a grid (a move in the page, no new document) fetches it once and draws the grid."""
    visit(browser, server_url + "/")
    browser.wait_for_text_to_equal("#total-sbu", "509.0")
    assert _grid_bundle_requests(browser) == []
    [a for a in browser.find_elements(".topbar a") if a.text.strip() == "Users"][0].click()
    browser.wait_for_contains_text("#ut-status", "3 users")
    wait_for(lambda: grid_cells(browser, "ut-table", "name"), what="the users grid's rows")
    assert grid_cells(browser, "ut-table", "sbu") == ["500.0 SBU", "8.0 SBU", "1.0 SBU"]
    assert len(_grid_bundle_requests(browser)) == 1
    assert browser.get_logs() == []


def _plot_markup(browser, root: str) -> list[str]:
    """Elements made from markup inside the plots under ``root`` (Plotly's, or the overview's
    charts drawn without it, dashboard/chart.py): links, bold, italics."""
    found = [f"a: {e.text}" for e in browser.find_elements(f"{root} .main-svg a")]   # after up to 2 s (none)
    found += [f"{e.tag_name}: {e.text}" for e in at_once(browser, f"{root} .chart a, {root} .chart b, {root} .chart i")]
    for e in at_once(browser, f"{root} .main-svg tspan"):
        style = (e.get_attribute("style") or "").replace(" ", "")
        if "font-weight:bold" in style or "font-style:italic" in style:
            found.append(f"tspan {style}: {e.text}")
    return found


def test_names_with_markup_are_text_in_the_plots(browser, hostile_url):
    visit(browser, hostile_url + "/job?cluster=c1&id=90")
    browser.wait_for_element("#job-fig-cpu_util .legendtext")
    legend = [e.text for e in browser.find_elements("#job-content .legendtext")]
    assert HOST in legend and f"GPU 0 {DEVICE} @ {HOST}" in legend, legend      # shown as typed
    assert _plot_markup(browser, "#job-content") == []
    for search, name in (("", ACCOUNT), ("?stack=partition", PARTITION)):
        visit(browser, hostile_url + "/" + search)
        browser.wait_for_element("#fig-usage .legendtext")
        legend = [e.text for e in browser.find_elements("#fig-usage .legendtext")]
        assert name in legend, legend
        assert _plot_markup(browser, "#page") == []
        # the overview's charts are drawn without plotly.js: the page fetched none
        names = browser.driver.execute_script("return performance.getEntriesByType('resource').map(r => r.name)")
        assert names and not [n for n in names if "plotly" in n], names
        tips = [e.get_attribute("textContent") for e in browser.find_elements("#fig-usage rect title")]
        assert any(name in t for t in tips), tips[:5]           # each bar's tooltip names its group, as text
    assert browser.get_logs() == []


def test_names_with_markup_are_text_in_the_grids(browser, hostile_url):
    visit(browser, hostile_url + "/flagged?user=mallory")
    wait_for(lambda: grid_cells(browser, "fl-table", "job_id"), what="the flagged grid's rows")
    assert grid_cells(browser, "fl-table", "job_name") == [HOST]          # the name as typed, as text
    assert grid_cells(browser, "fl-table", "account") == [ACCOUNT]
    links = browser.find_elements("#fl-table .ag-root a")
    assert [a.text for a in links] == ["90"]                              # the job link only
    assert at_once(browser, "#fl-table .ag-root b, #fl-table .ag-root i") == []     # in the rows just read
    assert browser.get_logs() == []


def test_alice_finds_her_jobs_searches_and_downloads_a_csv(browser, alice_url):
    visit(browser, alice_url + "/jobs")
    browser.wait_for_contains_text("#jobs-status", "Jobs 1–1 of 1")
    wait_for(lambda: grid_cells(browser, "jobs-table", "job_id"), what="My jobs' rows")
    assert grid_cells(browser, "jobs-table", "job_id") == ["1"]           # hers only: not bob's 2 and 4, not carol's 3
    assert grid_cells(browser, "jobs-table", "sbu") == ["8.0 SBU"]          # one decimal, as every face
    assert grid_cells(browser, "jobs-table", "codes") == ["cpu_low_eff, cpu_serial_on_many, mem_oversized"]
    assert "alice (user)" in browser.find_element(".topbar .who").text

    # the grid as a CSV file: its rows, numbers as stored
    browser.find_element("#jobs-table-csv").click()
    rows = list(csv.DictReader(io.StringIO(downloaded(Path(browser.download_path), "jobs.csv"))))
    assert [(r["Job"], r["Name"], r["State"], r["Partition"], r["Project"], r["Start (UTC)"]) for r in rows] == \
        [("1", "prep", "COMPLETED", "cpu", "proj-a", "2026-11-16 10:00")]
    assert (float(rows[0]["SBU"]), float(rows[0]["Wasted"]), float(rows[0]["CPU eff"])) == (8.0, 6.0, 25.0)
    assert rows[0]["Flags"] == "cpu_low_eff, cpu_serial_on_many, mem_oversized"

    # the header's search: her job by id opens it; bob's job id is not found, as a missing one is
    box = browser.find_element("#search-box")
    box.send_keys("1\n")
    browser.wait_for_contains_text("#job-content h2", "Job 1")
    assert "/job?" in browser.driver.current_url and "id=1" in browser.driver.current_url
    for other in ("2", "999"):
        box = browser.find_element("#search-box")
        box.clear()
        box.send_keys(other + "\n")
        browser.wait_for_contains_text("#search-none", "Not found")
        assert "/job?cluster=c1&id=1" in browser.driver.current_url       # still on her job
    assert browser.get_logs() == []


def test_alice_sees_her_projects_run_out_date(browser, alice_url):
    visit(browser, alice_url + "/project?name=proj-a")
    browser.wait_for_text_to_equal("#budget-run-out", RUN_OUT)
    assert browser.find_element("#budget-remaining").text == "91.0 SBU"
    # two allocations: a plain table (dashboard/text_table.py), a cell's element of class col-<field>
    wait_for(lambda: table_cells(browser, "pj-budgets", "account"), what="the budget table's rows")
    assert table_cells(browser, "pj-budgets", "user") == ["", "alice"]
    assert table_cells(browser, "pj-budgets", "run_out_date") == [RUN_OUT, ""]
    assert table_cells(browser, "pj-budgets", "remaining_sbu") == ["91.0 SBU", "-3.0 SBU"]
    # her share is used up: highlighted and marked, not hidden
    over = browser.find_elements("#pj-budgets tr.budget-over")
    assert [r.find_element("css selector", ".col-alert_shown").text for r in over] == ["OVER"]
    assert over[0].value_of_css_property("background-color") == "rgba(255, 227, 227, 1)"
    visit(browser, alice_url + "/")          # the overview: her project's, not bob's
    wait_for(lambda: table_cells(browser, "ov-budgets", "account"), what="the overview's budgets")
    assert table_cells(browser, "ov-budgets", "account") == ["proj-a", "proj-a"]
    assert browser.get_logs() == []
