"""Flagged jobs (/flagged): a grid of flags with their message and advice, filtered by flag code,
severity, user, project, partition and period; a click on a row opens the job."""
from __future__ import annotations

from dash import Input, Output, State, dash_table, dcc, html, no_update

from jobsight.dashboard import common, queries
from jobsight.dashboard.queries import Filters, Scope

P = "fl"
LIMIT = 500
COLUMNS = [("job_id", "Job", "text"), ("severity", "Severity", "text"), ("code", "Flag", "text"),
           ("user", "User", "text"), ("account", "Project", "text"), ("partition", "Partition", "text"),
           ("job_name", "Job name", "text"), ("state", "State", "text"), ("start_time", "Start (UTC)", "text"),
           ("sbu", "SBU", "numeric"), ("wasted_sbu", "Wasted SBU", "numeric"),
           ("message", "Message", "text"), ("advice", "Advice", "text")]


def rows(h, scope: Scope, f: Filters, limit: int = LIMIT) -> tuple[list[dict], int]:
    df, total = queries.flagged_jobs(h, scope, f, limit=limit)
    df = df.copy()
    df["start_time"] = df["start_time"].astype(str).str.slice(0, 16)
    for c in ("sbu", "wasted_sbu"):
        df[c] = df[c].round(2)
    df = df.astype(object).where(df.notna(), None)
    return df.to_dict("records"), total


def layout(params: dict[str, str], scope: Scope) -> html.Div:
    with common.handle() as h:
        opts = queries.filter_options(h, scope)
    codes = [c for c in common.split_list(params.get("code")) if c in opts["code"]]
    sevs = [s for s in common.split_list(params.get("severity")) if s in common.SEVERITIES]
    controls = [common.period_control(P, params),
                common.dropdown(P, "code", "Flag", opts["code"], codes, multi=True),
                common.dropdown(P, "severity", "Severity", common.SEVERITIES, sevs, multi=True)]
    controls += common.scope_filter_controls(P, params, opts)
    grid = dash_table.DataTable(
        id=f"{P}-table", columns=[{"name": n, "id": c, "type": t} for c, n, t in COLUMNS], data=[],
        sort_action="native", page_action="native", page_size=50,
        style_cell={"textAlign": "left", "fontFamily": "inherit", "padding": "4px", "whiteSpace": "normal",
                    "height": "auto", "maxWidth": "28em"},
        style_data_conditional=[
            {"if": {"column_id": "job_id"}, "textDecoration": "underline", "cursor": "pointer"},
            {"if": {"filter_query": '{severity} = "alarm"', "column_id": "severity"}, "color": "#c0392b", "fontWeight": "bold"},
        ])
    return html.Div([
        html.H2("Flagged jobs"),
        html.P(f"The flags of the jobs that ran in the period, most wasted SBU first, at most {LIMIT} rows; "
               "click a job id to open the job.", className="hint"),
        html.Div(controls, className="controls"),
        dcc.Loading(html.Div([html.Div(id=f"{P}-status", className="status"), grid]), type="default"),
    ])


INPUTS = [Input(f"{P}-period", "start_date"), Input(f"{P}-period", "end_date"), Input(f"{P}-code", "value"),
          Input(f"{P}-severity", "value"), Input(f"{P}-user", "value"), Input(f"{P}-account", "value"),
          Input(f"{P}-partition", "value")]


def params_of(since, until, code, severity, user, account, partition) -> dict:
    as_list = lambda v: [x for x in (v if isinstance(v, list) else [v] if v else []) if isinstance(x, str)]  # noqa: E731
    return dict(since=since, until=until, code=as_list(code), severity=as_list(severity), user=user,
                account=account, partition=partition)


def register(app) -> None:
    @app.callback(Output(f"{P}-table", "data"), Output(f"{P}-status", "children"), *INPUTS)
    @common.safe(fallback=lambda: ([], common.ERROR_TEXT))
    def content(*values):
        p = params_of(*values)
        f = common.filters_from({k: (",".join(v) if isinstance(v, list) else v) for k, v in p.items()
                                 if isinstance(v, (str, list))})
        with common.handle() as h:
            data, total = rows(h, common.scope(), f)
        if not total:
            return [], "No flagged jobs in this view for the selected period and filters."
        return data, f"{total:,} flags" + (f" (showing the first {len(data):,})" if total > len(data) else "")

    @app.callback(Output("url", "search", allow_duplicate=True), *INPUTS, prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def sync_url(*values):
        return common.make_search(params_of(*values))

    @app.callback(Output("url", "href", allow_duplicate=True), Input(f"{P}-table", "active_cell"),
                  State(f"{P}-table", "derived_viewport_data"), prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def open_job(cell, viewport):
        if not cell or not viewport or not 0 <= cell.get("row", -1) < len(viewport):
            return no_update
        row = viewport[cell["row"]]
        cluster, job_id = row.get("cluster"), row.get("job_id_raw")
        if not isinstance(cluster, str) or not isinstance(job_id, str):
            return no_update
        return app.get_relative_path("/job") + common.make_search({"cluster": cluster, "id": job_id})
