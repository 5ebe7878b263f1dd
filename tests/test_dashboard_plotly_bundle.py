"""The path dcc.Graph loads plotly.js from serves plotly.js's "basic" bundle (dashboard/served_files.py):
the vendored file, of the plotly package's plotly.js major version, with an ETag that a second load
revalidates (304), behind the same authentication as every other path; and every trace type the
dashboard's figures draw is one of the bundle's (bar, scatter, pie)."""
from __future__ import annotations

import re

import pytest
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from test_dashboard_queries import build_db

from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard import figures, served_files
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

PATH = "/_dash-component-suites/plotly/package_data/plotly.min.js"
BASIC_TRACES = {"bar", "scatter", "pie"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    db = build_db(tmp_path_factory.mktemp("plotly-bundle") / "jobs.duckdb")
    publish(db)
    reader = SnapshotReader(db)
    app = create_app(reader, Auth("header", Roles.from_config({"admins": ["root"]})))
    yield app.server.test_client()
    reader.close()


def test_the_graphs_get_the_basic_bundle(client):
    basic = served_files.PLOTLY_BASIC.read_bytes()
    r = client.get(PATH, headers={"X-Forwarded-User": "root"})
    assert r.status_code == 200 and r.data == basic and r.mimetype == "text/javascript"
    version = re.search(rb"plotly\.js \(basic - minified\) v(\d+)\.", basic[:200])
    assert version and version.group(1).decode() == get_plotlyjs_version().split(".")[0]
    assert len(basic) < len(get_plotlyjs()) / 3                 # the whole bundle: 4.8 MB
    again = client.get(PATH, headers={"X-Forwarded-User": "root", "If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304 and again.data == b""
    assert client.get(PATH).status_code in (401, 403)           # no user: nothing served


def test_every_trace_type_drawn_is_in_the_bundle():
    import inspect
    kinds = set(re.findall(r'"type": "(\w+)"', inspect.getsource(figures)))
    assert kinds and kinds <= BASIC_TRACES, kinds - BASIC_TRACES
