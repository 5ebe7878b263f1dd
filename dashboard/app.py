"""The Dash app: a top bar, one dcc.Location and a router that renders the page for the path.

Pages live in dashboard/pages/; each exposes ``layout(...)`` and ``register(app)`` (its callbacks,
registered on this app object rather than globally, so that several apps can live in one process,
as in the tests). Every request passes dashboard/auth.py first; every callback asks the data layer
with the request's scope.
"""
from __future__ import annotations

import logging
from pathlib import Path

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import UnsupportedRelativePath

from jobsight.analytics.links import JOB_PAGE
from jobsight.analytics.queries.data_age import data_age
from jobsight.analytics.store.snapshot import SnapshotReader
from jobsight.dashboard import api, callback_requests, common, grids, prometheus, search, served_files
from jobsight.dashboard.auth import Auth, current_scope, install
from jobsight.dashboard.pages import entities, flagged, job, jobs, overview, running

log = logging.getLogger("jobsight.dashboard")

NAV = [("/", "Overview"), ("/jobs", "My jobs"), ("/users", "Users"), ("/projects", "Projects"),
       ("/flagged", "Flagged jobs"), ("/running", "Running now")]


def page_for(path: str, params: dict[str, str]):
    """Layout of the page at ``path`` (without the URL prefix) for the request's scope."""
    scope = current_scope()
    path = "/" + path.strip("/")
    for prefix, (p, _fixed, _heading) in overview.INSTANCES.items():
        if path == p:
            return overview.layout(prefix, params, scope)
    for prefix, (p, *_rest) in entities.INSTANCES.items():
        if path == p:
            return entities.layout(prefix, params, scope)
    if path == "/flagged":
        return flagged.layout(params, scope)
    if path == "/running":
        return running.layout(params, scope)
    if path == "/jobs":
        return jobs.layout(params, scope)
    if path == "/" + JOB_PAGE:        # analytics/links.py: the path every link to a job is built with
        return job.layout(params, scope)
    return html.Div([html.H2("Page not found"), dcc.Link("Back to the overview", href="/")])


def create_app(reader: SnapshotReader, auth: Auth, url_prefix: str = "/", debug: bool = False) -> dash.Dash:
    prefix = "/" + url_prefix.strip("/") + "/" if url_prefix.strip("/") else "/"
    assets = Path(__file__).with_name("assets")
    app = dash.Dash(__name__, title="jobsight", url_base_pathname=prefix, suppress_callback_exceptions=True,
                    assets_folder=str(assets), update_title=None, serve_locally=True,
                    meta_tags=[grids.bundle_meta(prefix)])
    app.server.config[common.READER_KEY] = reader
    # first: nothing, not even a 404, before the user is known (or the metrics token checked)
    install(app.server, auth, token_paths=frozenset({prefix + prometheus.PATH}), json_prefix=prefix + api.PATH)
    served_files.install(app.server, assets)
    callback_requests.install(app.server, lambda: app.callback_map, prefix + "_dash-update-component")
    prometheus.install(app, prefix)
    api.install(app, prefix)

    def age_line() -> tuple[str, str]:
        """How old the data is (the whole database's newest accounting time): the line, its class."""
        with common.handle() as h:
            age = data_age(h)
        return age.line(capital=True), "data-age old" if age.old else "data-age"

    def shell():
        scope = current_scope()
        who = f"{scope.user} ({scope.role}" + (f" of {', '.join(scope.accounts)}" if scope.accounts else "") + ")"
        # the line comes with the shell (no request on a page's load); the callback below renews it
        line, cls = common.safe(fallback=lambda: ("", "data-age"), outputs=2)(age_line)()
        return html.Div([
            dcc.Location(id="url", refresh="callback-nav"),
            html.Nav([dcc.Link(label, href=app.get_relative_path(path)) for path, label in NAV]
                     + [search.box(), html.Span(who, className="who")], className="topbar"),
            html.Div(line, id="data-age", className=cls),
            dcc.Store(id="moved"),
            html.Div(id="search-results"),
            html.Div(id="page"),
        ])

    app.layout = shell

    @app.callback(Output("page", "children"), Input("url", "pathname"), State("url", "search"))
    @common.safe()
    def route(pathname, search):
        try:
            path = app.strip_relative_path(pathname or "/") or ""
        except UnsupportedRelativePath:      # a crafted request: a path outside the app's prefix
            path = "/not-found"
        return page_for(path, common.parse_search(search))

    # dcc.Location sets its pathname when it mounts, which runs a callback on it on every load: this
    # one, in the browser, passes on only a move to another page (the first path it sees is the load's)
    app.clientside_callback("""function (path) {
        var seen = window.jobsightPath;
        window.jobsightPath = path;
        return seen === undefined || seen === path ? window.dash_clientside.no_update : path;
    }""", Output("moved", "data"), Input("url", "pathname"))

    @app.callback(Output("data-age", "children"), Output("data-age", "className"), Input("moved", "data"),
                  prevent_initial_call=True)
    @common.safe(fallback=lambda: ("", "data-age"), outputs=2)
    def data_age_line(_moved):
        """Every page the user moves to: how old the data is now."""
        return age_line()

    overview.register(app)
    entities.register(app)
    flagged.register(app)
    running.register(app)
    jobs.register(app)
    job.register(app)
    search.register(app)
    return app
