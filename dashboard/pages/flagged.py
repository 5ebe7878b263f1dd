"""Flagged jobs (/flagged): one row per job with its flags, message and advice, filtered by flag
code, severity, user, project, partition and period; each job id links to the job's page."""
from __future__ import annotations

from dash import Input, Output, dcc, html, no_update

from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.dashboard import common, grids

P = "fl"
LIMIT = 500
PRE = {"whiteSpace": "pre-line"}      # one line per flag
# the advice right beside the job id: what to change is the first thing a row says
ADVICE = grids.text("advice", "Advice", wrap=True, cellStyle=PRE)
COLUMNS = [grids.link("job_id", "Job", pinned="left", minWidth=110), ADVICE,
           grids.text("severity", "Severity", cellClassRules={"severity-alarm": {"function": "params.value === 'alarm'"}}),
           grids.text("codes", "Flags", wrap=True, width=200),
           grids.num("wasted_sbu", "Wasted", 2, " SBU"), grids.num("sbu", "SBU", 2, " SBU")]
# what following the advice would have saved (blank: no advice, or unknown: the tooltip says why)
SAVINGS = grids.num("savings_sbu", "Savings", 2, " SBU", tooltipField="savings_note")
MORE = [grids.text("user", "User"), grids.text("account", "Project"), grids.text("partition", "Partition"),
        grids.text("job_name", "Job name"), grids.text("state", "State"), grids.text("start_time", "Start (UTC)"),
        grids.text("messages", "Messages", wrap=True, cellStyle=PRE)]


def columns(h) -> list[dict]:
    """The grid's columns: the savings when the database has them."""
    return COLUMNS + ([SAVINGS] if "job_savings" in h.tables else []) + MORE


def rows(h, scope: Scope, f: Filters, limit: int = LIMIT, href: str = "") -> tuple[list[dict], int]:
    """One row per job: its flags, messages and advice one per line; ``href``: the job page's path."""
    df, total = queries.flagged_jobs(h, scope, f, limit=limit)
    df = df.copy()
    df["start_time"] = df["start_time"].astype(str).str.slice(0, 16)
    for c in ("messages", "advice"):        # one line per flag: "code: text"
        df[c] = ["\n".join(f"{code}: {v}" for code, v in zip(codes, vals) if v) for codes, vals in zip(df["codes"], df[c])]
    df["codes"] = [", ".join(codes) for codes in df["codes"]]
    data = grids.records(df.drop(columns=["severities"]))
    for r in data:
        r["href"] = href + common.make_search({"cluster": r["cluster"], "id": r["job_id_raw"]}) if href else None
    return data, total


def layout(params: dict[str, str], scope: Scope) -> html.Div:
    with common.handle() as h:
        opts = queries.filter_options(h, scope)
    codes = [c for c in common.split_list(params.get("code")) if c in opts["code"]]
    sevs = [s for s in common.split_list(params.get("severity")) if s in common.SEVERITIES]
    controls = [common.period_control(P, params),
                common.dropdown(P, "code", "Flag", opts["code"], codes, multi=True),
                common.dropdown(P, "severity", "Severity", common.SEVERITIES, sevs, multi=True)]
    controls += common.scope_filter_controls(P, params, opts)
    with common.handle() as h:
        grid = grids.grid(f"{P}-table", columns(h), "flagged-jobs.csv", page_size=25)
    return html.Div([
        html.H2("Flagged jobs"),
        html.P(f"The flagged jobs that ran in the period, most wasted SBU first, at most {LIMIT}, each with the "
               "flags that match the filters; click a job id to open the job.", className="hint"),
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
    @app.callback(Output(f"{P}-table", "rowData"), Output(f"{P}-status", "children"),
                  Output(f"{P}-table", "columnDefs"), *INPUTS)
    @common.safe(fallback=lambda: ([], common.ERROR_TEXT, no_update))
    def content(*values):
        p = params_of(*values)
        f = common.filters_from({k: (",".join(v) if isinstance(v, list) else v) for k, v in p.items()
                                 if isinstance(v, (str, list))})
        with common.handle() as h:
            data, total = rows(h, common.scope(), f, href=app.get_relative_path("/job"))
            defs = grids.defs(columns(h), data)
        if not total:
            return [], "No flagged jobs in this view for the selected period and filters.", defs
        shown = f" (showing the first {len(data):,})" if total > len(data) else ""
        return data, f"{total:,} flagged job{'s' if total != 1 else ''}{shown}", defs

    @app.callback(Output("url", "search", allow_duplicate=True), *INPUTS, prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def sync_url(*values):
        return common.make_search(params_of(*values))

    grids.register_download(app, f"{P}-table")
