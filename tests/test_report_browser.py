"""The HTML reports in real headless Chromium with the network disabled: charts drawn by Plotly,
embedded in a self-contained report or loaded from the one local copy next to reports written to a
folder, headline numbers in the page, a screenshot taken, no console message at all; and the
top-jobs table fitting the page's width (measured through selenium and chromedriver).

The network is cut twice: Chromium runs in an empty network namespace (`unshare -n`, when the
kernel lets us) and resolves no host name through a dead proxy, so a CDN reference would show as a
console error. Chromium comes from scripts/browser-setup.sh (apt chromium); missing, the test skips
locally and fails under CI (require_service).
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require_service
from test_report_values import W47, build_db

from jobsight.analytics.commands.report import write_files
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.html import plotly_js_name, render_html_bytes
from jobsight.analytics.reports.settings import from_config

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
         "--no-first-run", "--disable-extensions", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000"]


def _offline_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


def chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    cmd = _offline_prefix() + [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    """Console messages of the page: Chromium's own chrome:// pages log too (e.g. its new-tab
    composebox on a slow network), those are not ours."""
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line and not re.search(r"source: (chrome|chrome-untrusted|devtools)://", line)]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    require_service(CHROMIUM is not None, "chromium not installed (run scripts/browser-setup.sh start as root)")
    d = tmp_path_factory.mktemp("browser")
    con, cfg = build_db(d / "b.duckdb")
    ds = gather(con, W47, from_config(cfg))
    con.close()
    reports = {kind: ds.build(kind, name) for kind, name in (("user", "alice"), ("admin", "cluster"))}
    out = {}
    for kind, rep in reports.items():              # single files, Plotly embedded
        path = d / f"{kind}-{rep.period.label}.html"
        path.write_bytes(render_html_bytes(rep))
        out["single", kind] = path
    written, _failed = write_files(list(reports.values()), ["html"], d / "folder")     # one shared plotly.js
    for kind, rep in reports.items():
        out["folder", kind] = next(p for p in written if p.name == f"{rep.stem}.html")
        assert (out["folder", kind].parent / plotly_js_name()).is_file()
    return out


@pytest.mark.parametrize("mode", ["single", "folder"])
@pytest.mark.parametrize("kind, numbers, charts", [
    # alice: 36.0 SBU burned, 22.0 wasted = 61.1 %, CPU 500/18 = 27.8 %
    ("user", ["36.0", "22.0", "61.1%", "27.8%"], 2),
    # cluster: 107.0 burned, 68.9 wasted, 4.0 unrated, 1.0 idle GPU-hour
    ("admin", ["107.0", "68.9", "4.0", "1.0"], 4),
])
def test_report_renders_offline(pages, tmp_path, kind, numbers, charts, mode):
    url = pages[mode, kind].as_uri()
    dom = chromium(tmp_path, url, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_lines(dom.stderr) == []
    html = dom.stdout
    # Plotly drew every chart: each gets its own <svg class="main-svg">
    drawn = set(re.findall(r'<div id="(chart-[a-z]+)"[^>]*class="[^"]*js-plotly-plot', html))
    assert len(drawn) == charts, drawn
    headline = re.search(r'<div class="kpis" id="headline">(.*?)</div>\s*<section', html, re.S).group(1)
    text = re.sub(r"<[^>]+>", " ", headline)
    for n in numbers:
        assert re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", text), (n, text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html     # the job name, as text
    if mode == "folder":
        assert f'<script src="{plotly_js_name()}"></script>' in html and pages[mode, kind].stat().st_size < 300_000
        return                                                  # the screenshots are the same page
    shot = tmp_path / f"{kind}.png"
    res = chromium(tmp_path, url, f"--screenshot={shot}", "--window-size=1100,2600")
    assert res.returncode == 0 and console_lines(res.stderr) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    phone = tmp_path / f"{kind}-phone.png"
    res = chromium(tmp_path, url, f"--screenshot={phone}", "--window-size=390,2600")
    assert res.returncode == 0 and phone.stat().st_size > 20_000


def test_top_jobs_table_fits_the_page(pages):
    """At a laptop's and a desktop's width no table scrolls sideways, the top jobs' included."""
    require_service(CHROMIUM is not None and shutil.which("chromedriver") is not None
                    and importlib.util.find_spec("selenium") is not None,
                    "chromium/chromedriver/selenium not installed (run scripts/browser-setup.sh start as root)")
    from selenium import webdriver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options)
    try:
        for width in (1440, 1100):
            driver.set_window_size(width, 900)
            for kind in ("user", "admin"):
                driver.get(pages["folder", kind].as_uri())
                sizes = driver.execute_script(
                    "var o = {}; document.querySelectorAll('section').forEach(function (s) {"
                    "  var d = s.querySelector('.scroll'); if (d) o[s.id] = [d.scrollWidth, d.clientWidth]; });"
                    "o.charts = document.querySelectorAll('.js-plotly-plot').length; return o;")
                assert sizes.pop("charts") == (2 if kind == "user" else 4)
                assert "top_jobs" in sizes
                wide = {k: v for k, v in sizes.items() if v[0] > v[1]}
                assert not wide, (width, kind, wide)
    finally:
        driver.quit()
