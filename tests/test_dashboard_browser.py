"""The dashboard in real headless Chromium (Dash's test browser, selenium + Debian's chromedriver),
served by waitress as in production, on the database of test_dashboard_queries.build_db.

Each page loads with no browser console errors; a filter changes the numbers and lands in the URL;
clicking a flagged job opens its time series; names with HTML in them (a host <a href=...>, a
project <b>...</b>) show in the plots as text, never as a link, bold or italics. Needs chromium +
chromedriver (scripts/browser-setup.sh start): skipped locally without them, failed under CI.
"""
from __future__ import annotations

import importlib.util
import shutil
import threading

import pytest
from conftest import require_service
from test_dashboard_hostile import ACCOUNT, DEVICE, HOST, PARTITION, build_hostile_db
from test_dashboard_queries import build_db

from jobsight.analytics.snapshot import SnapshotReader, publish
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

pytestmark = pytest.mark.browser


def _serve(db):
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    import waitress.server as waitress
    publish(db)
    reader = SnapshotReader(db)
    app = create_app(reader, Auth("none", Roles()))
    server = waitress.create_server(app.server, host="127.0.0.1", port=0, threads=4)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.effective_port}"
    server.close()
    reader.close()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    yield from _serve(build_db(tmp_path_factory.mktemp("browser") / "jobs.duckdb"))


@pytest.fixture(scope="module")
def hostile_url(tmp_path_factory):
    yield from _serve(build_hostile_db(tmp_path_factory.mktemp("browser-hostile") / "jobs.duckdb"))


@pytest.fixture
def browser(tmp_path):
    require_service(bool(shutil.which("chromium") and shutil.which("chromedriver")),
                    "chromium/chromedriver not installed (run scripts/browser-setup.sh start as root)")
    require_service(importlib.util.find_spec("selenium") is not None,
                    "selenium not installed (pip install 'dash[testing]')")
    from dash.testing.browser import Browser
    with Browser("chrome", headless=True, download_path=str(tmp_path), percy_run=False, wait_timeout=20) as b:
        yield b


def visit(browser, url):
    browser.driver.get(url)
    browser.wait_for_element("#page")


@pytest.mark.parametrize("path, selector, text", [
    ("/", "#total-sbu", "509.0"),
    ("/users", "#ut-status", "3 users"),
    ("/projects", "#pt-status", "2 projects"),
    ("/flagged", "#fl-status", "7 flags"),
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
    browser.wait_for_contains_text("#fl-status", "7 flags")
    cells = browser.find_elements("#fl-table td[data-dash-column='job_id']")
    target = [c for c in cells if c.text.strip() == "2"][0]
    target.click()
    browser.wait_for_element("#job-fig-gpu_util")
    browser.wait_for_contains_text("#job-content h2", "Job 2")
    assert "/job?" in browser.driver.current_url and "id=2" in browser.driver.current_url
    # the per-GPU trace and the allocation line are drawn
    browser.wait_for_element("#job-fig-gpu_util .scatterlayer .trace")
    assert len(browser.find_elements("#job-fig-gpu_util .scatterlayer .trace")) == 2
    # the HTML payload in the job name is shown as text (an <img> would have fired onerror)
    assert 'onerror="alert(1)"' in browser.find_element("#job-content table").text
    assert browser.find_elements("#job-content img") == []
    assert browser.get_logs() == []


def test_clicking_a_user_opens_the_user_page(browser, server_url):
    visit(browser, server_url + "/users")
    browser.wait_for_contains_text("#ut-status", "3 users")
    cells = browser.find_elements("#ut-table td[data-dash-column='name']")
    [c for c in cells if c.text.strip() == "alice"][0].click()
    browser.wait_for_text_to_equal("#total-sbu", "8.0")
    url = browser.driver.current_url
    assert "/user?" in url and "name=alice" in url
    assert browser.get_logs() == []


def _plot_markup(browser, root: str) -> list[str]:
    """Elements Plotly made from markup inside the plots under ``root``: links, bold, italics."""
    found = [f"a: {e.text}" for e in browser.find_elements(f"{root} .main-svg a")]
    for e in browser.find_elements(f"{root} .main-svg tspan"):
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
    assert browser.get_logs() == []
