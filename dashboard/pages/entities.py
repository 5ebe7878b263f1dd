"""Users (/users) and Projects (/projects): sortable, filterable tables; a click on a row opens the
user's or project's page (/user?name=..., /project?name=...)."""
from __future__ import annotations

from dash import Input, Output, State, dash_table, dcc, html, no_update

from jobsight.dashboard import common, queries
from jobsight.dashboard.queries import Filters, Scope

# page id prefix -> (path, grouping column, heading, the page a row opens)
INSTANCES = {
    "ut": ("/users", "user", "Users", "/user"),
    "pt": ("/projects", "account", "Projects", "/project"),
}
COLUMNS = [("name", "Name", "text"), ("jobs", "Jobs", "numeric"), ("sbu", "SBU", "numeric"),
           ("wasted_sbu", "Wasted SBU", "numeric"), ("gpu_hours", "GPU-hours", "numeric"),
           ("core_hours", "Core-hours", "numeric"), ("cpu_eff_pct", "CPU eff %", "numeric"),
           ("gpu_util_pct", "GPU util %", "numeric"), ("mem_eff_pct", "Mem eff %", "numeric"),
           ("time_eff_pct", "Time eff %", "numeric"), ("flagged_jobs", "Flagged jobs", "numeric")]


def rows(h, scope: Scope, f: Filters, by: str) -> list[dict]:
    df = queries.entity_table(h, scope, f, by=by)
    df = df.astype(object).where(df.notna(), None)
    return df.to_dict("records")


def table(prefix: str) -> dash_table.DataTable:
    return dash_table.DataTable(
        id=f"{prefix}-table", columns=[{"name": n, "id": c, "type": t} for c, n, t in COLUMNS], data=[],
        sort_action="native", filter_action="native", page_action="native", page_size=25,
        sort_by=[{"column_id": "sbu", "direction": "desc"}],
        style_cell={"textAlign": "left", "fontFamily": "inherit", "padding": "4px"},
        style_data_conditional=[{"if": {"column_id": "name"}, "textDecoration": "underline", "cursor": "pointer"}],
        tooltip_delay=0)


def layout(prefix: str, params: dict[str, str], scope: Scope) -> html.Div:
    _path, by, heading, _target = INSTANCES[prefix]
    with common.handle() as h:
        opts = queries.filter_options(h, scope)
    controls = [common.period_control(prefix, params)] + common.scope_filter_controls(prefix, params, opts, skip=(by,))
    return html.Div([
        html.H2(heading),
        html.P("Click a name to open its page. Type in the row under the headers to filter "
               "(e.g. > 100 under SBU); click a header to sort.", className="hint"),
        html.Div(controls, className="controls"),
        dcc.Loading(html.Div([html.Div(id=f"{prefix}-status", className="status"), table(prefix)]), type="default"),
    ])


def register(app) -> None:
    for prefix, (_path, by, _heading, target) in INSTANCES.items():
        _register_instance(app, prefix, by, target)


def _register_instance(app, prefix: str, by: str, target: str) -> None:
    other = [k for k in ("user", "account", "partition") if k != by]
    inputs = [Input(f"{prefix}-period", "start_date"), Input(f"{prefix}-period", "end_date")] + \
             [Input(f"{prefix}-{k}", "value") for k in other]

    def params_of(since, until, *values):
        return dict(since=since, until=until, **dict(zip(other, values)))

    @app.callback(Output(f"{prefix}-table", "data"), Output(f"{prefix}-status", "children"), *inputs)
    @common.safe(fallback=lambda: ([], common.ERROR_TEXT))
    def content(since, until, *values):
        f = common.filters_from({k: v for k, v in params_of(since, until, *values).items() if isinstance(v, str)})
        with common.handle() as h:
            data = rows(h, common.scope(), f, by)
        return data, ("No jobs in this view for the selected period and filters." if not data
                      else f"{len(data):,} {'users' if by == 'user' else 'projects'}")

    @app.callback(Output("url", "search", allow_duplicate=True), *inputs, prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def sync_url(since, until, *values):
        return common.make_search(params_of(since, until, *values))

    @app.callback(Output("url", "href", allow_duplicate=True), Input(f"{prefix}-table", "active_cell"),
                  State(f"{prefix}-table", "derived_viewport_data"), prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def open_row(cell, viewport):
        if not cell or not viewport or not 0 <= cell.get("row", -1) < len(viewport):
            return no_update
        name = viewport[cell["row"]].get("name")
        if not isinstance(name, str) or not name:
            return no_update
        # the row's page applies the scope again: a forged name shows nothing
        return app.get_relative_path(target) + common.make_search({"name": name})
