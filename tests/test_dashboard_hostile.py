"""The dashboard against hostile names and hostile requests, through the real app (Flask test client).

Markup: Plotly draws a subset of HTML in trace names, hover text, tick labels and titles. A sidecar
host named <a href=...>CLICK</a>, a project named <b>...</b> and a partition named <i>...</i> reach
the figures only as character references (shown as those characters, never as a link or bold).

Errors: JSON nested 5,000 deep in a callback body is a 400, a source map Dash registers but that is
not on disk a 404; a date out of range and a URL with more than 50 query fields give a plain message.
Hypothesis fuzzes the URL query string (through the router and every page's callbacks, as the
browser would send the values) and callback bodies: never a 500, never a traceback in the log.
"""
from __future__ import annotations

import datetime as dt
import html
import json
import logging
import os
import string
from urllib.parse import quote

import pandas as pd
import pytest
from conftest import post_callback
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dashboard_queries import build_db

from jobsight.analytics.config import parse_config
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard import common, figures
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

HOST = "<a href='https://evil.example/login'>CLICK</a>"
ACCOUNT = "<b>bold-proj</b>"
PARTITION = "<i>it-part</i>"
DEVICE = 'GPU-<b>"dev"</b>'
T0 = dt.datetime(2026, 11, 16, 12, 0, 0)
GiB = 2**30
HOSTILE = (HOST, ACCOUNT, PARTITION, DEVICE)


def build_hostile_db(path):
    """test_dashboard_queries.build_db, plus job 90 of mallory in project ACCOUNT, partition
    PARTITION, with GPU and CPU samples from host HOST (GPU device DEVICE)."""
    build_db(path)
    con = Database.open(path, parse_config({}))
    row = dict(cluster="c1", job_id="90", job_id_raw="90", state="COMPLETED", source="test", start_time=T0,
               end_time=T0 + dt.timedelta(hours=1), elapsed_s=3600, timelimit_s=7200, ncpus=4, ngpus=1, billing=10,
               cpu_time_s=3600, mem_alloc_bytes=8 * GiB, mem_peak_bytes=GiB, user="mallory", account=ACCOUNT,
               partition=PARTITION, job_name=HOST)
    con.execute(f"INSERT INTO job ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in row)}) "
                f"VALUES ({', '.join('?' * len(row))})", list(row.values()))
    for device, gpu_index in ((DEVICE, 0), ("cpu", None)):
        for k in range(3):
            con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                        "mem_total_bytes, gpu_index, source) VALUES ('c1', '90', ?, ?, ?, 20, ?, ?, ?, 'sidecar')",
                        [HOST, device, T0 + dt.timedelta(seconds=10 * k), 2 * GiB, 8 * GiB, gpu_index])
    store.refresh(con)
    con.close()
    return path


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def faults(self) -> list[str]:
        """What a fault leaves in the log: an error, or any record carrying a traceback."""
        return [r.getMessage() for r in self.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    db = build_hostile_db(tmp_path_factory.mktemp("hostile") / "jobs.duckdb")
    publish(db)
    reader = SnapshotReader(db)
    a = create_app(reader, Auth("header", Roles.from_config({"admins": ["root"]})))
    yield a
    reader.close()


@pytest.fixture(scope="module")
def log():
    handler = Records()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


def post(app, key: str, values: dict, user: str = "root"):
    client = app.server.test_client()
    return post_callback(client, key, app.callback_map[key], lambda prop: values.get(prop), user)


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def graphs(node):
    """The `figure` of every chart in a Dash response (dcc.Graph, or dashboard/chart.py's Chart)."""
    if isinstance(node, dict):
        if node.get("type") in ("Graph", "Chart"):
            yield node["props"]["figure"]
        for v in node.values():
            yield from graphs(v)
    elif isinstance(node, list):
        for v in node:
            yield from graphs(v)


def assert_inert(fig: dict) -> list[str]:
    texts = list(strings(fig))
    raw = [s for s in texts if any(c in s for c in "<>\"'")]
    assert not raw, raw[:5]
    return [html.unescape(s) for s in texts]          # what Plotly shows


# -- markup ---------------------------------------------------------------------------------------

def test_figure_functions_escape_every_data_string():
    usage = pd.DataFrame({"period_start": pd.to_datetime([T0, T0]), "group": [ACCOUNT, PARTITION],
                          "sbu": [1.0, 2.0], "wasted_sbu": [0.5, 0.5]})
    eff = pd.DataFrame({"metric": [HOST], "bin": [10], "jobs": [3]})
    flags = pd.DataFrame({"code": [ACCOUNT], "severity": [PARTITION], "jobs": [2]})
    samples = pd.DataFrame({"host": [HOST, HOST], "device": [DEVICE, "cpu"], "gpu_index": [0, None],
                            "time": pd.to_datetime([T0, T0]), "util_pct": [10.0, 20.0],
                            "mem_used_bytes": [GiB, GiB], "mem_total_bytes": [4 * GiB, 8 * GiB]})
    figs = [figures.usage_figure(usage), figures.efficiency_figure(eff), figures.flag_count_figure(flags),
            *figures.job_figures(samples, {"ncpus": 4, "ngpus": 1}).values()]
    shown = [s for f in figs for s in assert_inert(f)]
    for name in (ACCOUNT, PARTITION, HOST):
        assert name in shown, name                           # displayed as the original characters
    assert f"GPU 0 {DEVICE} @ {HOST}" in shown
    assert figures.flag_count_figure(flags)["data"][0]["y"] == ["&#60;b&#62;bold-proj&#60;/b&#62;"]
    assert figures.inert("a & b") == "a &#38; b" and figures.inert([1.5, None]) == [1.5, None]


def test_pages_send_figures_without_markup(app):
    job = json.loads(post(app, "job-content.children", {"job-key.data": {"cluster": "c1", "id": "90"}}).data)
    figs = list(graphs(job))
    assert len(figs) == 4
    shown = {s for f in figs for s in assert_inert(f)}
    assert HOST in shown and f"GPU 0 {DEVICE} @ {HOST}" in shown
    for stack, name in (("account", ACCOUNT), ("partition", PARTITION)):
        page = json.loads(post(app, "ov-content.children", {"ov-grain.value": "day", "ov-stack.value": stack}).data)
        figs = list(graphs(page))
        assert len(figs) == 3
        names = [html.unescape(t["name"]) for t in figs[0]["data"]]
        assert name in names, names
        for f in figs:
            assert_inert(f)


# -- errors ---------------------------------------------------------------------------------------

def test_deep_json_is_a_bad_request(app, log):
    client = app.server.test_client()
    log.records.clear()
    for depth in (5000, 200, 40):
        deep = "[" * depth + "]" * depth
        body = '{"output": "page.children", "inputs": [{"id": "url", "property": "pathname", "value": ' + deep + \
               '}, {"id": "url", "property": "search", "value": null}], "changedPropIds": []}'
        r = client.post("/_dash-update-component", data=body, content_type="application/json",
                        headers={"X-Forwarded-User": "root"})
        assert r.status_code == 400, (depth, r.status_code)
    assert log.faults() == []


def test_registered_but_absent_source_map_is_not_found(app, log):
    client = app.server.test_client()
    assert client.get("/", headers={"X-Forwarded-User": "root"}).status_code == 200     # registers the scripts
    log.records.clear()
    missing = [(pkg, p) for pkg, paths in app.registered_paths.items() for p in paths if p.endswith(".map")]
    assert missing
    for pkg, p in missing + [("dash", "dcc/no-such.js.map"), ("nope", "x.js.map"), ("dash", "../../etc/passwd")]:
        r = client.get(f"/_dash-component-suites/{pkg}/{p}", headers={"X-Forwarded-User": "root"})
        assert r.status_code in (200, 404), (pkg, p, r.status_code)
    r = client.get("/_dash-component-suites/dash/dash-renderer/build/dash_renderer.min.js.map",
                   headers={"X-Forwarded-User": "root"})
    assert r.status_code == 404
    assert log.faults() == []


@pytest.mark.parametrize("key,values", [
    ("ov-content.children", {"ov-period.end_date": "9999-12-31"}),
    ("ov-content.children", {"ov-period.start_date": "0001-01-01"}),
    ("..ut-table.rowData...ut-status.children...ut-table.columnDefs..", {"ut-period.end_date": "9999-12-31"}),
    ("..fl-table.rowData...fl-status.children...fl-table.columnDefs..", {"fl-period.start_date": "9999-12-31"}),
])
def test_date_out_of_range_is_a_plain_message(app, log, key, values):
    log.records.clear()
    r = post(app, key, {"ov-grain.value": "day", "ov-stack.value": "account", **values})
    assert r.status_code == 200
    text = r.data.decode()
    assert "Dates from 1970-01-01 to 2199-12-31 only" in text and common.ERROR_TEXT not in text
    assert log.faults() == []


def test_too_many_query_fields_is_a_plain_message(app, log):
    log.records.clear()
    search = "?" + "&".join(f"f{i}=1" for i in range(60))
    r = post(app, "page.children", {"url.pathname": "/", "url.search": search})
    assert r.status_code == 200 and "more than 50 query fields" in r.data.decode()
    r = post(app, "page.children", {"url.pathname": "/", "url.search": "?until=9999-12-31"})
    assert r.status_code == 200 and common.ERROR_TEXT not in r.data.decode()
    assert log.faults() == []


def test_values_no_component_sends_are_read_as_cleared(app, log):
    log.records.clear()
    key = "..fl-table.rowData...fl-status.children...fl-table.columnDefs.."
    odd = post(app, key, {"fl-period.start_date": [None], "fl-user.value": [1, None], "fl-account.value": {"a": 1}})
    assert odd.status_code == 200
    assert odd.data == post(app, key, {}).data
    assert log.faults() == []


# -- fuzzing --------------------------------------------------------------------------------------

PARAMS = ["since", "until", "user", "account", "partition", "code", "severity", "grain", "stack", "name",
          "cluster", "id", "state"]
PATHS = ["/", "/user", "/project", "/users", "/projects", "/flagged", "/jobs", "/job", "/running", "/nope", ""]
odd_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
dates = st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)).map(dt.date.isoformat)
value = st.one_of(dates, odd_text, st.sampled_from(["9999-12-31", "0001-01-01", "2026-11-16", "alice", "bob",
                                                    ACCOUNT, PARTITION, "day", "week", "gpu_idle,cpu_low_eff",
                                                    "alarm", "c1", "90", "1", "", "%00", "%ff", "x" * 300]))
field = st.tuples(st.one_of(st.sampled_from(PARAMS), odd_text), value).map(
    lambda kv: f"{quote(kv[0])}={quote(kv[1])}")
search = st.one_of(
    st.lists(field, max_size=12).map(lambda fs: "?" + "&".join(fs)),
    st.lists(field, min_size=49, max_size=60).map(lambda fs: "?" + "&".join(fs)),
    st.text(st.sampled_from(string.printable + "é\u202e\x00"), max_size=80),
)
json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | odd_text,
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
                          max_leaves=12)
FUZZ = settings(max_examples=1000 if os.environ.get("JOBSIGHT_LONG") == "1" else 60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _value_for(prop: str, params: dict):
    """What the browser sends for an input, when the page came from a URL with ``params``."""
    cid, _, name = prop.partition(".")
    simple = {"start_date": "since", "end_date": "until"}
    if name in simple:
        return params.get(simple[name])
    if cid in ("url", "moved"):       # the address's path, and the page moved to (a path)
        return None
    if cid == "job-key":
        return {"cluster": params.get("cluster"), "id": params.get("id")}
    if cid.endswith("-name"):
        return params.get("name")
    if cid.endswith(("-code", "-severity")):
        return common.split_list(params.get(cid.rsplit("-", 1)[1]))
    if cid == "search-box" and name == "value":
        return params.get("id") or params.get("name")
    return params.get(cid.rsplit("-", 1)[1])


def _clean(log, r, ok=(200, 204, 400)):
    assert r.status_code in ok, (r.status_code, r.data[:300])
    assert b"Traceback" not in r.data
    assert log.faults() == [], log.faults()


@FUZZ
@given(search=search, path=st.sampled_from(PATHS), user=st.sampled_from(["root", "alice"]), data=st.data())
def test_fuzzed_query_strings(app, log, search, path, user, data):
    log.records.clear()
    _clean(log, post(app, "page.children", {"url.pathname": path, "url.search": search}, user))
    client = app.server.test_client()
    _clean(log, client.get("/" + path.lstrip("/") + search, headers={"X-Forwarded-User": user}),
           ok=(200, 308, 404))         # the index, a redirect for "//", nothing for a path beyond the app
    try:
        params = common.parse_search(search)
    except common.Unusable:
        return
    key = data.draw(st.sampled_from(sorted(k for k in app.callback_map if k != "page.children")))
    spec = app.callback_map[key]
    r = post_callback(client, key, spec, lambda prop: _value_for(prop, params), user)
    _clean(log, r)


@FUZZ
@given(body=json_value, raw=st.booleans())
def test_fuzzed_callback_bodies(app, log, body, raw):
    log.records.clear()
    client = app.server.test_client()
    data = json.dumps(body) if raw else "{" + json.dumps(body)[:50]
    _clean(log, client.post("/_dash-update-component", data=data, content_type="application/json",
                            headers={"X-Forwarded-User": "root"}))


@FUZZ
@given(data=st.data(), user=st.sampled_from(["root", "alice"]))
def test_fuzzed_callback_values(app, log, data, user):
    """Well-formed requests for every callback, each input and state any JSON value."""
    log.records.clear()
    key = data.draw(st.sampled_from(sorted(app.callback_map)))
    spec = app.callback_map[key]
    values = {f"{d['id']}.{d['property']}": data.draw(json_value) for d in spec["inputs"] + spec.get("state", [])}
    _clean(log, post(app, key, values, user))
