"""Overview (/), and the same charts scoped to one user (/user?name=) or project (/project?name=):
SBU burned vs wasted over time, totals, efficiency distributions, flag counts, idle-GPU hours; the
overview and a project's page also show the budgets in scope (dashboard/budget_panel.py)."""
from __future__ import annotations

from dash import Input, Output, State, dcc, get_relative_path, html

from jobsight.analytics.queries import job_lists as job_queries
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.dashboard import budget_panel, common, figures, jobs_to_fix, members_panel
from jobsight.dashboard.chart import Chart

# page id prefix -> (path, the filter the page's `name` fixes, heading)
INSTANCES = {
    "ov": ("/", None, "Overview"),
    "us": ("/user", "user", "User"),
    "pj": ("/project", "account", "Project"),
}
GRAINS = [{"label": "daily", "value": "day"}, {"label": "weekly", "value": "week"}, {"label": "monthly", "value": "month"}]
STACKS = [{"label": "by project", "value": "account"}, {"label": "by partition", "value": "partition"}]
# the project page stacks its members too, by default
MEMBER_STACKS = STACKS + [{"label": "by member", "value": "user"}]
STACK_LABELS = {"account": "project", "partition": "partition", "user": "member"}
FIX_PREFIXES = ("ov", "pj")     # the pages that start with the jobs to fix (dashboard/jobs_to_fix.py)


def stacks(prefix: str) -> tuple[list[dict], str]:
    """The stacking choices of a page and its default."""
    return (MEMBER_STACKS, "user") if prefix == "pj" else (STACKS, "account")


def render(h, scope: Scope, f: Filters, grain: str, stack: str) -> list:
    """The page body for a scope and filters: totals cards and the three charts."""
    t = queries.totals(h, scope, f)
    if t["jobs"] == 0 and t["sbu"] == 0:
        if scope.role == "user" and f == Filters() and not job_queries.has_jobs(h, scope, scope.user):
            return [common.no_jobs_yet()]       # no job at all, no filter: how jobs get in
        return [html.P("No jobs in this view for the selected period and filters.", className="empty")]
    cards = html.Div([
        common.card("SBU burned", common.number(t["sbu"]), "total-sbu"),
        common.card("SBU wasted", common.number(t["wasted_sbu"]), "total-wasted"),
        # what following the flags' advice would have saved, and its share of the burn it priced;
        # never 0 when no saving is known, and the jobs it leaves out named beside it
        common.card("SBU the advice would save",
                    "not priced" if t["savings_pct"] is None else common.number(t["savings_sbu"]), "total-savings",
                    _unpriced(t)),
        common.card("Share of the burn", "-" if t["savings_pct"] is None else f"{t['savings_pct']:.0f} %", "savings-pct"),
        common.card("Jobs run", f"{t['jobs']:,}", "total-jobs"),       # that ran in the period, as the reports count
        common.card("Flagged jobs", f"{t['flagged_jobs']:,}", "total-flagged"),
        # with the jobs the sums could not count (an unknown number of cores / GPUs) beside them
        common.card("Core-hours", common.number(t["core_hours"]), "total-core-hours",
                    _left_out(t["core_hours_unknown_jobs"], "cores")),
        common.card("GPU-hours", common.number(t["gpu_hours"]), "total-gpu-hours",
                    _left_out(t["gpu_hours_unknown_jobs"], "GPUs")),
        common.card("Idle-GPU hours", common.number(t["idle_gpu_hours"]), "total-idle-gpu"),
    ], className="cards")
    usage = figures.usage_figure(queries.usage_over_time(h, scope, f, grain, stack), STACK_LABELS[stack], grain,
                                 queries.period_span(h, scope, f))
    # drawn without plotly.js (dashboard/chart.py): the page loads none
    return [
        cards,
        Chart(figure=usage, id="fig-usage"),
        html.Div([
            Chart(figure=figures.efficiency_figure(queries.efficiency_histogram(h, scope, f)), id="fig-eff",
                  className="half"),
            Chart(figure=figures.flag_count_figure(queries.flag_counts(h, scope, f)), id="fig-flags",
                  className="half"),
        ], className="row"),
    ]


def _left_out(n: int, what: str) -> str | None:
    """What a core- or GPU-hours total leaves out: the jobs that ran on an unknown number of `what`."""
    if not n:
        return None
    return f"not counted: {'1 job' if n == 1 else f'{n:,} jobs'} (unknown {what})"


def _unpriced(t: dict) -> str | None:
    """What a savings total leaves out: the jobs whose saving is unknown, and what they wasted."""
    if not t["unpriced_jobs"]:
        return None
    jobs = "1 job" if t["unpriced_jobs"] == 1 else f"{t['unpriced_jobs']:,} jobs"
    return f"not priced: {jobs}, {common.number(t['unpriced_wasted_sbu'])} SBU wasted"


def layout(prefix: str, params: dict[str, str], scope: Scope) -> html.Div:
    path, fixed, heading = INSTANCES[prefix]
    name = params.get("name") if fixed else None
    with common.handle() as h:
        opts = queries.filter_options(h, scope)
    title = f"{heading}: {name}" if name else heading
    choices, default = stacks(prefix)
    allowed = [c["value"] for c in choices]
    controls = [common.period_control(prefix, params),
                html.Div([html.Label("Grain", htmlFor=f"{prefix}-grain"),
                          dcc.Dropdown(id=f"{prefix}-grain", options=GRAINS, clearable=False,
                                       value=params.get("grain") if params.get("grain") in ("day", "week", "month") else "day")],
                         className="control"),
                html.Div([html.Label("Stack", htmlFor=f"{prefix}-stack"),
                          dcc.Dropdown(id=f"{prefix}-stack", options=choices, clearable=False,
                                       value=params.get("stack") if params.get("stack") in allowed else default)],
                         className="control")]
    controls += common.scope_filter_controls(prefix, params, opts, skip=(fixed,) if fixed else ())
    hidden = [dcc.Dropdown(id=f"{prefix}-{fixed}", style={"display": "none"})] if fixed else []
    # the first screen comes with the page: what the callbacks below would answer for the values
    # the controls start with (they run when a control changes, not on the page's load)
    v = initial_values(prefix, html.Div(controls + hidden))
    fix = []
    if prefix in FIX_PREFIXES:
        fix = common.safe()(jobs_to_fix.overview_block)(prefix, fixed, get_relative_path("/"), v["since"], v["until"],
                                                         v["user"], v["account"], v["partition"], name)
    body = common.safe()(content)(prefix, fixed, *(v[k] for k in INPUT_PROPS), name)
    return html.Div([
        html.H2(title),   # a name from the scheduler, as text
        dcc.Store(id=f"{prefix}-name", data=name),
        html.Div(controls + hidden, className="controls"),
        *([jobs_to_fix.holder(prefix, fix)] if prefix in FIX_PREFIXES else []),
        dcc.Loading(html.Div(body, id=f"{prefix}-content"), type="default"),
    ])


# the callbacks' inputs: (the name in content's arguments, the control's id suffix, its property)
INPUTS = [("since", "period", "start_date"), ("until", "period", "end_date"), ("grain", "grain", "value"),
          ("stack", "stack", "value"), ("user", "user", "value"), ("account", "account", "value"),
          ("partition", "partition", "value")]
INPUT_PROPS = [name for name, _suffix, _prop in INPUTS]


def initial_values(prefix: str, controls) -> dict:
    """What the page's controls start with, as their callbacks receive it (None: no such control)."""
    by_id = {getattr(c, "id", None): c for c in controls._traverse()}
    return {name: getattr(by_id.get(f"{prefix}-{suffix}"), prop, None) for name, suffix, prop in INPUTS}


def register(app) -> None:
    for prefix, (_path, fixed, _heading) in INSTANCES.items():
        _register_instance(app, prefix, fixed)
    budget_panel.register(app)
    members_panel.register(app)
    jobs_to_fix.register(app, {p: INSTANCES[p][1] for p in FIX_PREFIXES})


def content(prefix: str, fixed: str | None, since, until, grain, stack, user, account, partition, name) -> list:
    """The page's body (totals, budgets, members, charts) for the controls' values."""
    name = name if isinstance(name, str) else None     # a crafted request may send any JSON
    p = _params(fixed, since, until, grain, stack, user, account, partition, name)
    if fixed and not name:
        return [html.P("No name given.", className="empty")]
    f = common.filters_from({k: v for k, v in p.items() if isinstance(v, str)}, **({fixed: name} if fixed else {}))
    grain = grain if grain in ("day", "week", "month") else "day"
    choices, default = stacks(prefix)
    stack = stack if stack in [c["value"] for c in choices] else default
    with common.handle() as h:
        body = render(h, common.scope(), f, grain, stack)
        if prefix == members_panel.PREFIX:      # the members by waste, as the project's report lists them
            body[1:1] = members_panel.panel(h, common.scope(), f)
        if prefix in budget_panel.PREFIXES:    # the budgets right under the totals
            body[1:1] = budget_panel.panel(h, common.scope(), prefix, f.account)
        return body


def _params(fixed, since, until, grain, stack, user, account, partition, name) -> dict:
    p = dict(since=since, until=until, grain=grain, stack=stack, user=user, account=account, partition=partition)
    if fixed:
        p[fixed] = None
        p["name"] = name
    return p


def _register_instance(app, prefix: str, fixed: str | None) -> None:
    inputs = [Input(f"{prefix}-{suffix}", prop) for _name, suffix, prop in INPUTS]

    # the page comes with its first body (layout above): this runs when a control changes
    @app.callback(Output(f"{prefix}-content", "children"), *inputs, State(f"{prefix}-name", "data"),
                  prevent_initial_call=True)
    @common.safe()
    def body(since, until, grain, stack, user, account, partition, name):
        return content(prefix, fixed, since, until, grain, stack, user, account, partition, name)

    # the address as _params and make_search write it (the fixed filter left out, the name last)
    keys = [None if name == fixed else name for name in INPUT_PROPS] + (["name"] if fixed else [None])
    common.sync_search(app, keys, *inputs, State(f"{prefix}-name", "data"))
