"""The header's job search: a job id (JobIDRaw, or the JobID as printed, 123_4) or a part of a job
name. One job with that id opens its page; several, or names that match, are listed below the top
bar (newest first, at most LIMIT); nothing in the scope gives NOT_FOUND, the same text whether
the job does not exist or belongs to someone else."""
from __future__ import annotations

import pandas as pd
from dash import Input, Output, State, dcc, html, no_update

from jobsight.analytics.queries import job_lists as job_queries
from jobsight.dashboard import common

LIMIT = 20
NOT_FOUND = "Not found: no job you can see has this id or name."


def box() -> html.Div:
    return html.Div([
        html.Label("Find a job", htmlFor="search-box", className="visually-hidden"),
        dcc.Input(id="search-box", type="search", placeholder="Job id or name", debounce=False, n_submit=0,
                  maxLength=job_queries.MAX_TEXT, autoComplete="off", style={"width": "15em"}),
        html.Button("Find", id="search-go", n_clicks=0),
    ], className="search", role="search")


def _or_dash(v) -> str:
    return "-" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def _job_href(app, cluster: str, job_id_raw: str) -> str:
    return app.get_relative_path("/job") + common.make_search({"cluster": cluster, "id": job_id_raw})


def register(app) -> None:
    @app.callback(Output("search-results", "children"), Output("url", "href", allow_duplicate=True),
                  Input("search-box", "n_submit"), Input("search-go", "n_clicks"), State("search-box", "value"),
                  prevent_initial_call=True)
    @common.safe(fallback=lambda: (common.ERROR_TEXT, no_update), outputs=2)
    def find(_submitted, _clicked, text):
        text = text.strip() if isinstance(text, str) else ""
        if not text:
            return None, no_update
        with common.handle() as h:
            df, by_id = job_queries.find_jobs(h, common.scope(), text, LIMIT)
        if df.empty:
            return html.Div(NOT_FOUND, className="search-none", id="search-none", role="status"), no_update
        if by_id and len(df) == 1:
            return None, _job_href(app, df.at[0, "cluster"], df.at[0, "job_id_raw"])
        items = [html.Li([dcc.Link(str(r.job_id), href=_job_href(app, r.cluster, r.job_id_raw)),
                          html.Span(f" {_or_dash(r.job_name)}", className="search-name"),
                          html.Span(f" {_or_dash(r.user)}, {_or_dash(r.state)}, {_or_dash(r.start_time)[:16]}",
                                    className="hint")])
                 for r in df.itertuples()]
        head = "Jobs with this id" if by_id else f"Jobs whose name contains it (newest first, at most {LIMIT})"
        return html.Div([html.Div(head, className="hint"), html.Ul(items)], className="search-list",
                        id="search-list"), no_update

    # leaving the page closes the list (in the browser: no request)
    app.clientside_callback("function (p) { return null; }", Output("search-results", "children", allow_duplicate=True),
                            Input("url", "pathname"), prevent_initial_call=True)
