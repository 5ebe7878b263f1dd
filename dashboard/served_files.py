"""What the dashboard serves from disk: the files inside its assets folder and Dash's own registered
scripts, nothing else.

Flask's static view refuses ``..`` in a path but follows symlinks, so a link in the assets folder
to a file or folder elsewhere would be served; here a path whose real location is outside the
folder is a 404. Dash answers a request for an unregistered component-suite file with an unhandled
exception (HTTP 500 and a traceback in the log for every probe of a scanner); here it is a 404 too.
So is a registered one that is not on disk: Dash registers a source map (``.js.map``) for every
script, and some packages ship without some of them.

plotly.js: a page's first chart loads it from Dash's path for the plotly package's bundle (4.8 MB,
every trace type). The dashboard draws bars and lines only, so that path serves plotly.js's
"basic" bundle (bar, scatter, pie; vendor/plotly-basic.min.js, its LICENSE beside it, 1.2 MB) of
the same major version: a quarter of the bytes for a fresh browser to fetch and compile, and a
fraction of the code to run before the first chart.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import flask
from dash.exceptions import DependencyException
from dash.fingerprint import check_fingerprint

SUITES = "_dash-component-suites/"
PLOTLY_PATH = ("plotly", "package_data/plotly.min.js")     # (package, path): what dcc.Graph loads
PLOTLY_BASIC = Path(__file__).with_name("vendor") / "plotly-basic.min.js"


def _not_found() -> flask.Response:
    return flask.Response("Not Found\n", status=404, mimetype="text/plain")


def install(server: flask.Flask, assets_folder: str | Path) -> None:
    root = Path(assets_folder).resolve()

    @server.before_request
    def _assets_stay_inside():
        # Dash names the assets blueprint after the URL prefix: "_dash_assets", "_jobsight_dash_assets"
        if not (flask.request.endpoint or "").endswith("dash_assets.static"):
            return None
        name = (flask.request.view_args or {}).get("filename", "")
        try:
            real = (root / name).resolve()
            inside = real.is_relative_to(root) and real.is_file()
        except (OSError, ValueError, RuntimeError):     # NUL byte, name too long, symlink loop
            inside = False
        return None if inside else _not_found()

    basic = PLOTLY_BASIC.read_bytes()
    tag = hashlib.sha256(basic).hexdigest()[:32]

    @server.before_request
    def _component_suite_file():
        rule = flask.request.url_rule
        if rule is None or SUITES not in rule.rule:
            return None
        args = flask.request.view_args or {}
        name = args.get("package_name", "")
        # Dash strips a fingerprint (name.v1_2_3m123.js) before it reads; an unfingerprinted path is
        # read as it is. Either way the file is a sibling of one of these names, or nothing.
        try:
            path = check_fingerprint(str(args.get("fingerprinted_path", "")))[0]
        except ValueError:
            path = None
        where = getattr(sys.modules.get(name), "__file__", None)
        if where:               # else not a loaded package: Dash's DependencyException, below
            try:
                found = path is not None and (Path(where).parent / path).is_file()
            except (OSError, ValueError):
                found = False
            if not found:
                return _not_found()
        if path is None or (name, path) != PLOTLY_PATH:
            return None
        if flask.request.headers.get("If-None-Match") == f'"{tag}"':
            return flask.Response(status=304)
        response = flask.Response(basic, mimetype="text/javascript")
        response.set_etag(tag)
        return response

    @server.errorhandler(DependencyException)
    def _unregistered_script(_exc):
        return _not_found()
