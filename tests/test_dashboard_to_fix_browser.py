""""Jobs to fix" in real headless Chromium, served by waitress, on test_dashboard_queries.build_db:
the overview starts with the jobs that wasted SBU, most first (job 3 wasted nothing: not listed),
an unknown saving reads "not priced" and a known one its figure (0.0 too), the #SBATCH lines one a
line; alice (behind the proxy) sees only her job, on the overview and on My jobs, and its id opens
its page. Needs chromium + chromedriver (scripts/browser-setup.sh start): skipped locally without
them, failed under CI."""
from __future__ import annotations

import pytest
from test_dashboard_browser import _serve, chromium, visit, wait_for
from test_dashboard_queries import build_db

pytestmark = pytest.mark.browser


def cells(browser, table: str, column: str) -> list[str]:
    """The texts of a table's fields of one kind (their elements' class ``col-<field>``), row by row."""
    return [c.text.strip() for c in browser.find_elements(f"#{table} .col-{column}")]


@pytest.fixture
def browser(tmp_path):
    with chromium(tmp_path) as b:
        yield b


@pytest.fixture(scope="module")
def admin_url(tmp_path_factory):
    yield from _serve(build_db(tmp_path_factory.mktemp("fix-browser") / "jobs.duckdb"))


@pytest.fixture(scope="module")
def alice_url(tmp_path_factory):
    yield from _serve(build_db(tmp_path_factory.mktemp("fix-browser-alice") / "jobs.duckdb"), user="alice")


def test_the_overview_starts_with_the_jobs_to_fix(browser, admin_url):
    visit(browser, admin_url + "/")
    ids = wait_for(lambda: cells(browser, "ov-fix-table", "job_id"), what="the jobs to fix")
    assert ids == ["4", "2", "1"]
    assert cells(browser, "ov-fix-table", "savings_sbu") == ["not priced", "0.0 SBU", "not priced"]
    assert cells(browser, "ov-fix-table", "wasted_sbu") == ["400.0 SBU", "90.0 SBU", "6.0 SBU"]
    sbatch = cells(browser, "ov-fix-table", "sbatch_lines")
    assert sbatch[2].splitlines() == ["#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=1", "#SBATCH --mem=2G"]
    advice = cells(browser, "ov-fix-table", "lead_advice")
    assert advice[0].startswith("Check that the code really uses the GPU")
    # above the totals: the first thing under the filters
    fix = browser.find_element("#ov-fix").location["y"]
    browser.wait_for_element("#total-sbu")
    assert fix < browser.find_element("#total-sbu").location["y"]
    assert browser.get_logs() == []


def test_alice_sees_her_job_and_opens_it(browser, alice_url):
    for path, grid in (("/", "ov-fix-table"), ("/jobs", "jobs-fix-table")):
        visit(browser, alice_url + path)
        assert wait_for(lambda g=grid: cells(browser, g, "job_id"), what=f"{grid}'s rows") == ["1"]
    [a for a in browser.find_elements("#jobs-fix-table a.col-job_id") if a.text.strip() == "1"][0].click()
    browser.wait_for_contains_text("#job-content h2", "Job 1")
    assert "/job?" in browser.driver.current_url and "id=1" in browser.driver.current_url
    assert browser.get_logs() == []
