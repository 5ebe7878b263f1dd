"""No grid of the dashboard cuts an SBU figure, a job id or a state at 1400 px: in real headless
Chromium (tests/test_dashboard_browser.py's harness), a 1400 x 900 window, every page as an admin,
a project lead and a researcher, each rendered cell of those columns is as wide as its text
(scrollWidth <= clientWidth), and so is every cell of the plain tables (the "jobs to fix", the
budgets), which fit the page. The data are built to be wide: array job ids of 13 characters,
OUT_OF_MEMORY and CANCELLED states, and millions of SBU (billing 99,999 for 72 h) in the jobs,
the totals and the budgets.
"""
from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from test_dashboard_browser import chromium, wait_for
from test_dashboard_queries import T0, GiB, add_job, add_samples

from jobsight.analytics.config import parse_config
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

pytestmark = pytest.mark.browser

# the columns that must never be cut: SBU figures, job ids and states (grid column ids)
WHOLE = ("job_id", "state", "sbu", "wasted_sbu", "savings_sbu", "allocation_sbu", "burned_sbu", "remaining_sbu",
         "remaining_at_reset_sbu", "sbu_per_h", "idle_sbu_per_h")
WIDTH, HEIGHT = 1400, 900
ROLES = {"admins": ["root"], "leads": {"proj-a": ["dave"]}}
PAGES = ["/", "/users", "/projects", "/flagged", "/jobs", "/running", "/user?name=alice", "/project?name=proj-a",
         "/job?cluster=c1&id=8407280_1234"]


def build_wide_db(path: Path) -> Path:
    con = Database.open(path, parse_config({"budgets": {"proj-a": 25_000_000, "proj-b": 1_000_000}}))
    add_job(con, "8407280_1234", job_id_raw="84072801234", state="OUT_OF_MEMORY", elapsed_s=72 * 3600,
            timelimit_s=96 * 3600, ncpus=128, billing=99_999, cpu_time_s=72 * 3600 * 20, mem_alloc_bytes=512 * GiB,
            mem_peak_bytes=500 * GiB, job_name="a-rather-long-job-name-for-a-grid")
    add_job(con, "8407281_77", job_id_raw="8407281077", user="bob", account="proj-b", partition="gpu_h100",
            elapsed_s=48 * 3600, timelimit_s=120 * 3600, ncpus=64, ngpus=8, billing=50_000, cpu_time_s=48 * 3600 * 8,
            mem_alloc_bytes=480 * GiB, mem_peak_bytes=40 * GiB)
    add_samples(con, "8407281077", "GPU-0000aaaa", [3, 4], [1e9, 1e9], 80e9, gpu_index=0)
    add_job(con, "8407282_17", job_id_raw="840728217", state="CANCELLED", elapsed_s=10 * 3600,
            timelimit_s=24 * 3600, ncpus=96, billing=12_345, cpu_time_s=10 * 3600, mem_alloc_bytes=256 * GiB,
            mem_peak_bytes=8 * GiB, start_time=T0 + dt.timedelta(days=1))
    add_job(con, "8407283", user="alice", state="RUNNING", elapsed_s=20 * 3600, ncpus=64, billing=64_000,
            cpu_time_s=3600, mem_alloc_bytes=128 * GiB, start_time=T0 + dt.timedelta(days=1))
    con.execute("UPDATE job SET end_time = NULL WHERE job_id = '8407283'")
    store.refresh(con)
    con.close()
    return path


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    """The app on waitress (tests/test_dashboard_browser.py's way), one server per role."""
    import importlib.util
    import threading

    from conftest import require_service
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    import waitress.server as waitress
    db = build_wide_db(tmp_path_factory.mktemp("widths") / "jobs.duckdb")
    publish(db)
    reader = SnapshotReader(db)
    servers, out = [], {}
    for user in ("root", "dave", "alice"):
        app = create_app(reader, Auth("header", Roles.from_config(ROLES)))

        def as_user(environ, start_response, wsgi=app.server.wsgi_app, who=user):
            environ["REMOTE_USER"] = who
            return wsgi(environ, start_response)
        server = waitress.create_server(as_user, host="127.0.0.1", port=0, threads=4)
        threading.Thread(target=server.run, daemon=True).start()
        servers.append(server)
        out[user] = f"http://127.0.0.1:{server.effective_port}"
    yield out
    for server in servers:
        server.close()
    reader.close()


CUT = """
const whole = arguments[0];
const cut = [];
for (const cell of document.querySelectorAll('.ag-cell')) {
    const col = cell.getAttribute('col-id');
    if (!whole.includes(col)) continue;
    for (const el of [cell, ...cell.querySelectorAll('.ag-cell-value, a, span')]) {
        if (el.scrollWidth > el.clientWidth + 1) {
            const grid = cell.closest('.grid');
            cut.push([grid ? grid.id : '', col, cell.textContent.trim(), el.scrollWidth, el.clientWidth]);
            break;
        }
    }
}
// the plain tables (jobs to fix, budgets): no cell cut, and the table no wider than the page
for (const cell of document.querySelectorAll('.fix-table td, .text-table td')) {
    if (cell.scrollWidth > cell.clientWidth + 1) {
        cut.push([cell.closest('table').id, '(cell)', cell.textContent.trim(), cell.scrollWidth, cell.clientWidth]);
    }
}
for (const t of document.querySelectorAll('.fix-table, .text-table')) {
    if (t.getBoundingClientRect().right > document.documentElement.clientWidth + 1) {
        cut.push([t.id, '(table)', '', Math.round(t.getBoundingClientRect().right), document.documentElement.clientWidth]);
    }
}
return cut;
"""
# the cells drawn, and whether Dash is still loading: one round trip, and no implicit wait (a
# find_elements of an absent element waits the driver's 2 s before it answers "none")
CELLS = ("return [document.querySelectorAll('.ag-cell, .fix-table td, .text-table td').length, "
         "document.querySelector('._dash-loading') !== null];")


def settle(browser, page: str):
    """The page drawn: its content in, the grids' rows rendered and sized (no change for 1 s)."""
    browser.wait_for_element("#page")
    last, stable_since = -1, time.monotonic()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        n, loading = browser.driver.execute_script(CELLS)
        if n != last:
            last, stable_since = n, time.monotonic()
        elif time.monotonic() - stable_since > 1.0 and not loading:
            return n
        time.sleep(0.2)
    return last


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("widths-dl")) as b:
        b.driver.set_window_size(WIDTH, HEIGHT)
        yield b


@pytest.mark.parametrize("user", ["root", "dave", "alice"])
def test_no_grid_cuts_an_sbu_figure_a_job_id_or_a_state(browser, urls, user):
    seen, cut = 0, []
    for page in PAGES:
        browser.driver.get(urls[user] + page)
        seen += settle(browser, page)
        wait_for(lambda: browser.driver.execute_script("return document.readyState") == "complete", what="load")
        cut += [(page, *c) for c in browser.driver.execute_script(CUT, list(WHOLE))]
    width = browser.driver.execute_script("return window.innerWidth")
    assert width <= WIDTH
    assert seen > 0, "no grid cell rendered on any page"
    assert cut == [], f"cells cut at {width} px: {cut}"
