"""Job ids in the reports and e-mails link to the dashboard's job page when `[report] dashboard_url`
is set, and nowhere without it: HTML an <a> with the address HTML-escaped, Markdown a link, plain
text (the e-mails' text part) the address after the id. The address is the dashboard's job path
under its --url-prefix: opened through the real app served under that prefix, it shows the job."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from dash_pages import opens
from test_report_values import W47, build_db

from jobsight.analytics.config import parse_config
from jobsight.analytics.errors import UserError
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.html import render_html
from jobsight.analytics.reports.mailer import Delivery, message
from jobsight.analytics.reports.markdown import render_markdown
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.reports.text import render_text
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

BASE = "https://dash.example.org/jobsight"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = tmp_path_factory.mktemp("links") / "r.duckdb"
    con, cfg = build_db(path)
    try:
        plain = gather(con, W47, from_config(cfg))
        cfg.report["dashboard_url"] = BASE
        cfg.email["from"] = "jobsight@example.org"
        linked = gather(con, W47, from_config(cfg))
    finally:
        con.close()
    publish(path)
    return path, plain, linked


def _reports(ds):
    return [ds.build("user", "alice"), ds.build("account", "proj-a"), ds.build("admin", "cluster")]


def test_without_dashboard_url_no_links(world):
    _path, plain, _linked = world
    for rep in _reports(plain):
        assert rep.top_jobs and rep.job_url(rep.top_jobs[0]) is None
        assert "<a href" not in render_html(rep, charts=False) and f"<{BASE}" not in render_text(rep)
        assert "](" not in render_markdown(rep)


def test_every_listed_job_links_in_html_markdown_and_text(world):
    _path, _plain, linked = world
    for rep in _reports(linked):
        page, md, text = render_html(rep, charts=False), render_markdown(rep), render_text(rep)
        for j in rep.top_jobs:
            url = f"{BASE}/job?cluster=c1&id={j['job_id_raw']}"
            assert rep.job_url(j) == url
            assert f'<td><a href="{url.replace("&", "&amp;")}">{j["job_id"]}</a></td>' in page
            assert f"[{j['job_id']}]({url.replace('&', '&amp;')})" in md
            assert re.search(rf"^\d+\. Job {j['job_id']} <{re.escape(url)}>", text, flags=re.M)
        assert page.count("<a href=") == len(rep.top_jobs)      # the job ids, nothing else


def test_the_emails_both_parts_link(world):
    _path, _plain, linked = world
    rep = linked.build("user", "alice")
    msg = message(Delivery(rep, ["alice@example.org"]), linked.settings, "alice@example.org")
    text = msg.get_body(("plain",)).get_content()
    html = msg.get_body(("html",)).get_content()
    for j in rep.top_jobs:
        url = rep.job_url(j)
        assert f"Job {j['job_id']} <{url}>" in text and f'href="{url.replace("&", "&amp;")}"' in html


def test_the_link_opens_the_job_under_the_url_prefix(world):
    path, _plain, linked = world
    reader = SnapshotReader(path)
    try:
        app = create_app(reader, Auth("header", Roles.from_config({"admins": ["root"]})),
                         url_prefix=urlsplit(BASE).path + "/")
        rep = linked.build("admin", "cluster")
        for j in rep.top_jobs:
            url = urlsplit(rep.job_url(j))
            assert opens(app, f"{url.path}?{url.query}", "root") == j["job_id"]
    finally:
        reader.close()


def test_an_address_with_an_ampersand_is_escaped(world):
    _path, _plain, linked = world
    rep = linked.build("user", "alice")
    rep.dashboard_url = "https://dash.example.org/a&b/"
    page = render_html(rep, charts=False)
    assert 'href="https://dash.example.org/a&amp;b/job?cluster=c1&amp;id=' in page and "a&b/" not in page


@pytest.mark.parametrize("bad", ["javascript:alert(1)", "ftp://dash.example.org/", "https:///jobsight/",
                                 "https://dash.example.org/?next=x", "https://dash.example.org/#x",
                                 'https://dash.example.org/"><script>', "https://dash.example.org/a b/", ""])
def test_a_bad_dashboard_url_is_an_error(bad):
    cfg = parse_config({"report": {"dashboard_url": bad}})
    with pytest.raises(UserError, match="report.dashboard_url"):
        from_config(cfg)


def test_the_address_gets_its_slash():
    cfg = parse_config({"report": {"dashboard_url": "http://127.0.0.1:8050"}})
    assert from_config(cfg).dashboard_url == "http://127.0.0.1:8050/"
