"""HTML reports written to a folder share one local copy of Plotly next to them, so each report
stays small (<= 300 KB) and still opens offline; `--self-contained` makes single files that embed
it. The top-jobs table is laid out to fit the page (tests/test_report_browser.py measures it in
Chromium)."""
from __future__ import annotations

import re

import pytest
from test_report_values import build_db, run_cli

from jobsight.analytics.reports.html import plotly_js_bytes, plotly_js_name

MAX_REPORT_BYTES = 300_000
WEEK = ["--week", "2026-W47", "--for", "all-users", "--for", "all-accounts", "--for", "admin", "--format", "html"]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("files") / "f.duckdb"
    build_db(path)[0].close()
    return path


def test_reports_in_a_folder_share_one_plotly(db, tmp_path):
    out = tmp_path / "reports"
    rc, _out, err = run_cli(["report", "--db", str(db), *WEEK, "--out", str(out)])
    assert rc == 0, err
    folder = out / "2026-W47"
    pages = sorted(folder.glob("*.html"))
    assert len(pages) == 6                      # alice, bob, carol; proj-a, proj-b; admin
    lib = folder / plotly_js_name()
    assert sorted(p.name for p in folder.iterdir()) == sorted([p.name for p in pages] + [lib.name])
    assert lib.read_bytes() == plotly_js_bytes()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert page.stat().st_size <= MAX_REPORT_BYTES, (page.name, page.stat().st_size)
        assert re.findall(r"<script[^>]*src=\"([^\"]+)\"", text) == [lib.name]   # the local copy, nothing else
        assert plotly_js_bytes()[:2000].decode("utf-8", "ignore") not in text
    # a second run leaves the copy as it is (not rewritten)
    before = lib.stat()
    rc, _out, err = run_cli(["report", "--db", str(db), *WEEK, "--out", str(out)])
    assert rc == 0, err
    assert (lib.stat().st_ino, lib.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # a damaged copy is written again
    lib.write_bytes(b"broken")
    run_cli(["report", "--db", str(db), *WEEK, "--out", str(out)])
    assert lib.read_bytes() == plotly_js_bytes()


def test_self_contained_reports_embed_plotly(db, tmp_path):
    out = tmp_path / "single"
    rc, _out, err = run_cli(["report", "--db", str(db), "--week", "2026-W47", "--for", "admin", "--format", "html",
                             "--out", str(out), "--self-contained"])
    assert rc == 0, err
    files = list((out / "2026-W47").iterdir())
    assert [f.name for f in files] == ["admin-cluster.html"]
    text = files[0].read_text(encoding="utf-8")
    assert files[0].stat().st_size > len(plotly_js_bytes()) and "<script src=" not in text


def test_top_jobs_table_is_laid_out_to_fit(db, tmp_path):
    out = tmp_path / "fit"
    run_cli(["report", "--db", str(db), "--week", "2026-W47", "--for", "admin", "--format", "html", "--out", str(out)])
    text = (out / "2026-W47" / "admin-cluster.html").read_text(encoding="utf-8")
    top = re.search(r'<section id="top_jobs">(.*?)</section>', text, re.S).group(1)
    assert '<table class="fit">' in top and "<th>Efficiency</th>" in top and "<th>CPU eff.</th>" not in top
    # job 1: CPU 25 %, no GPU, memory 2 of 32 GiB = 6.2 %, 4 h of 24 h = 16.7 %: one cell, a line each
    assert '<td class="stack">CPU 25.0%<br>Mem 6.2%<br>Time 16.7%</td>' in top
    assert "cpu_<wbr>serial_<wbr>on_<wbr>many" in top
