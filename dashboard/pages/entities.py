"""Users (/users) and Projects (/projects): sortable, filterable grids; each name links to the
user's or project's page (/user?name=..., /project?name=...)."""
from __future__ import annotations

from dash import Input, Output, dcc, html, no_update

from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.dashboard import common, grids

# page id prefix -> (path, grouping column, heading, the page a row opens)
INSTANCES = {
    "ut": ("/users", "user", "Users", "/user"),
    "pt": ("/projects", "account", "Projects", "/project"),
}
COLUMNS = [grids.link("name", "Name", pinned="left", minWidth=140),
           grids.num("jobs", "Jobs", 0), grids.num("sbu", "SBU", 1, " SBU"), grids.num("wasted_sbu", "Wasted", 1, " SBU"),
           grids.num("savings_sbu", "Advice saves", 1, " SBU"),
           grids.num("gpu_hours", "GPU-hours", 1, " h"), grids.num("core_hours", "Core-hours", 1, " h"),
           grids.num("cpu_eff_pct", "CPU eff", 1, " %"), grids.num("gpu_util_pct", "GPU util", 1, " %"),
           grids.num("mem_eff_pct", "Mem eff", 1, " %"), grids.num("time_eff_pct", "Time eff", 1, " %"),
           grids.num("flagged_jobs", "Flagged jobs", 0)]
SORT = ("sbu", "desc")


def rows(h, scope: Scope, f: Filters, by: str, href: str = "") -> list[dict]:
    """The grid's rows; ``href``: the path of the page a name links to (its rows get href=...?name=)."""
    data = grids.records(queries.entity_table(h, scope, f, by=by))
    for r in data:
        r["href"] = href + common.make_search({"name": r["name"]}) if href and r["name"] != "(none)" else None
    return data


def layout(prefix: str, params: dict[str, str], scope: Scope) -> html.Div:
    _path, by, heading, _target = INSTANCES[prefix]
    with common.handle() as h:
        opts = queries.filter_options(h, scope)
    controls = [common.period_control(prefix, params)] + common.scope_filter_controls(prefix, params, opts, skip=(by,))
    return html.Div([
        html.H2(heading),
        html.P("Click a name to open its page. Filter in the row under the headers; click a header to sort.",
               className="hint"),
        html.Div(controls, className="controls"),
        dcc.Loading(html.Div([html.Div(id=f"{prefix}-status", className="status"),
                              grids.grid(f"{prefix}-table", COLUMNS, f"{heading.lower()}.csv", page_size=25,
                                         sort=SORT)]), type="default"),
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

    @app.callback(Output(f"{prefix}-table", "rowData"), Output(f"{prefix}-status", "children"),
                  Output(f"{prefix}-table", "columnDefs"), *inputs)
    @common.safe(fallback=lambda: ([], common.ERROR_TEXT, no_update))
    def content(since, until, *values):
        f = common.filters_from({k: v for k, v in params_of(since, until, *values).items() if isinstance(v, str)})
        with common.handle() as h:
            data = rows(h, common.scope(), f, by, app.get_relative_path(target))
        return data, ("No jobs in this view for the selected period and filters." if not data
                      else f"{len(data):,} {'users' if by == 'user' else 'projects'}"), grids.defs(COLUMNS, data, sort=SORT)

    @app.callback(Output("url", "search", allow_duplicate=True), *inputs, prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def sync_url(since, until, *values):
        return common.make_search(params_of(since, until, *values))

    grids.register_download(app, f"{prefix}-table")
