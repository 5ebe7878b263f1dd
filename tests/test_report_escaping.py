"""User-supplied strings are inert in every report format: a job named <script>alert(1)</script>
is text in HTML, Markdown and e-mail; a job named =HYPERLINK(...) is neutralised in CSV."""
from __future__ import annotations

import csv
import io
import re

import pytest
from test_report_values import FORMULA, W47, XSS, build_db

from jobsight.analytics.reports.csvout import render_csv
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.html import render_html
from jobsight.analytics.reports.markdown import md_escape, render_markdown
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.reports.text import render_text

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    con, cfg = build_db(tmp_path_factory.mktemp("esc") / "e.duckdb")
    data = gather(con, W47, from_config(cfg))
    con.close()
    return data


def test_html_shows_script_name_as_text(ds):
    for rep in (ds.build("user", "alice"), ds.build("account", "proj-a"), ds.build("admin", "cluster")):
        for charts in (True, False):
            page = render_html(rep, charts=charts)
            assert XSS not in page and ESCAPED in page
            # the only scripts are Plotly's library and one per chart: none carries the job name
            for body in re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S):
                assert "alert(1)" not in body
            if not charts:
                assert "<script" not in page


def test_html_sbatch_lines_one_per_line(ds):
    page = render_html(ds.build("user", "alice"))
    assert '<code class="sbatch">#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n#SBATCH --mem=3G\n#SBATCH --time=06:00:00</code>' in page


def test_html_embeds_plotly_once_and_no_cdn(ds):
    page = render_html(ds.build("admin", "cluster"))
    from plotly.offline import get_plotlyjs
    assert page.count(get_plotlyjs()[:2000]) == 1                    # the library, once
    assert page.count('class="chart"') == 4                          # trend, daily, accounts, partitions
    assert len(re.findall(r"<script[^>]*src=", page)) == 0          # nothing loaded from elsewhere
    assert "cdn.plot.ly" not in page.replace(get_plotlyjs(), "")     # only the library's unused topojson default
    assert '<meta name="viewport"' in page and "@media print" in page


def test_markdown_shows_script_name_as_text(ds):
    md = render_markdown(ds.build("user", "alice"))
    assert XSS not in md and ESCAPED in md
    # Markdown syntax in a name is escaped too: no link, no emphasis, no table break
    assert md_escape("[x](http://e)") == r"\[x\](http://e)"
    assert md_escape("a|b*c_d`e") == r"a\|b\*c\_d\`e"


def test_text_part_is_literal_and_terminal_safe(ds):
    text = render_text(ds.build("user", "alice"))
    assert XSS in text                                   # text/plain: shown as the characters it is
    carol = ds.build("user", "carol")
    carol.top_jobs = [dict(carol.top_jobs[0], job_name="evil\n\x1b[31mred")]
    text = render_text(carol)
    assert "\x1b" not in text and "evil\\n\\x1b[31mred" in text     # shown as escapes, one line


def test_csv_neutralises_formula(ds):
    out = render_csv(ds.build("user", "carol"))
    rows = list(csv.DictReader(io.StringIO(out)))
    names = [r["job_name"] for r in rows if r["section"] == "top_jobs"]
    assert names == ["'" + FORMULA]
    assert not any(cell.startswith(("=", "+", "@")) for r in rows for cell in r.values() if cell)
    # negative numbers stay numbers (only text cells are neutralised): none here, but a name is text
    admin = list(csv.DictReader(io.StringIO(render_csv(ds.build("admin", "cluster")))))
    assert "'" + FORMULA in [r["job_name"] for r in admin if r["section"] == "top_jobs"]


def test_file_names_cannot_escape_the_folder():
    from jobsight.analytics.reports.report import file_stem
    assert file_stem("user", "../../etc/passwd") == "user-_._.._etc_passwd~3754d6cb3a38"
    assert file_stem("account", ".hidden") == "account-_hidden~1692419006a8"
    assert "/" not in file_stem("user", "a/b") and file_stem("user", "") == "user-_~e3b0c44298fc"
