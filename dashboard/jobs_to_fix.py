"""The "Jobs to fix" block at the top of the overview, a project's page and My jobs: the jobs of the
page's scope and filters that wasted the most SBU in its period (analytics/queries/to_fix.py, the
weekly report's list), each with its leading advice, the #SBATCH lines that would have fit and what
that request saves ("not priced" when unknown), the job id linking to the job's page.

Its own callback, beside the page's: the rest of the page does not wait for it."""
from __future__ import annotations

from dash import Input, Output, State, dcc, html

from jobsight.analytics.links import job_path
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.queries.to_fix import jobs_to_fix
from jobsight.analytics.reports.settings import ReportSettings
from jobsight.dashboard import common, grids

N = ReportSettings.top_jobs        # as many as a weekly report lists by default
PRE = {"whiteSpace": "pre-line"}
# an unknown saving reads "not priced", never 0 (a job without advice saves 0)
SAVES = {**grids.num("savings_sbu", "Saves", 1, " SBU", tooltipField="savings_note"),
         "valueFormatter": {"function": "params.value === null ? 'not priced' : jobsightNumber(params.value, 1, ' SBU')"}}
COLUMNS = [grids.link("job_id", "Job", pinned="left", minWidth=110),
           grids.text("lead_advice", "Advice", wrap=True, width=360),
           grids.text("sbatch_lines", "Would have fit", wrap=True, width=230,
                      cellStyle={**PRE, "fontFamily": "monospace"}),
           SAVES, grids.num("wasted_sbu", "Wasted", 1, " SBU"), grids.num("sbu", "SBU", 1, " SBU"),
           grids.text("flag_codes", "Flags"), grids.text("job_name", "Name")]
WHO = [grids.text("user", "User"), grids.text("account", "Project")]
WHERE = [grids.text("partition", "Partition"), grids.text("state", "State")]


def rows(listed: list[dict], root: str = "") -> list[dict]:
    """The block's rows: the jobs of ``listed`` (queries.to_fix) that wasted SBU, most wasted
    first; ``root``: the app's root path (its --url-prefix), the job pages' links are under it."""
    out = [dict(r) for r in listed if r["wasted_sbu"]]
    for r in out:
        r["href"] = root + job_path(r["cluster"], r["job_id_raw"]) if root else None
        r["start_time"] = None if r["start_time"] is None else f"{r['start_time']:%Y-%m-%d %H:%M}"
    return out


def block(h, scope: Scope, f: Filters, grid_id: str, root: str) -> list:
    """The heading, a line on what the list is, and its grid (or a line saying no job wasted SBU)."""
    listed = jobs_to_fix(h, scope, f, N)
    if not listed:          # no job in the view: the page says why
        return []
    data = rows(listed, root)
    head = [html.H3("Jobs to fix"),
            html.P("The jobs that wasted the most SBU in the period, most first: the advice that leads, the "
                   "#SBATCH lines that would have fit and the SBU that request would have saved. Click a job id "
                   "to open the job.", className="hint")]
    if not data:
        return head + [html.P("No job in this view wasted SBU in the period.", className="empty",
                              id=f"{grid_id}-none")]
    columns = COLUMNS + (WHO if scope.role != "user" else []) + WHERE
    return head + [grids.grid(grid_id, columns, "jobs-to-fix.csv", paginate=False, static=True, rows=data)]


def holder(prefix: str) -> dcc.Loading:
    """Where a page puts the block (filled by the callbacks of :func:`register`)."""
    return dcc.Loading(html.Div(id=f"{prefix}-fix", className="jobs-to-fix"), type="default")


def register(app, fixed: dict[str, str | None]) -> None:
    """The block's callbacks: on the overview-style pages ``fixed`` (prefix -> the filter its
    ``name`` fixes) and on My jobs."""
    for prefix, key in fixed.items():
        _register_overview(app, prefix, key)
    _register_jobs(app)


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _register_overview(app, prefix: str, key: str | None) -> None:
    @app.callback(Output(f"{prefix}-fix", "children"),
                  Input(f"{prefix}-period", "start_date"), Input(f"{prefix}-period", "end_date"),
                  Input(f"{prefix}-user", "value"), Input(f"{prefix}-account", "value"),
                  Input(f"{prefix}-partition", "value"), State(f"{prefix}-name", "data"))
    @common.safe()
    def fix(since, until, user, account, partition, name):
        name = _text(name)
        if key and not name:
            return []
        p = {k: v for k, v in dict(since=since, until=until, user=user, account=account,
                                   partition=partition).items() if isinstance(v, str)}
        if key:
            p[key] = None
        f = common.filters_from(p, **({key: name} if key else {}))
        with common.handle() as h:
            return block(h, common.scope(), f, f"{prefix}-fix-table", app.get_relative_path("/"))

    grids.register_download(app, f"{prefix}-fix-table")


def _register_jobs(app) -> None:
    from jobsight.dashboard.pages import jobs

    @app.callback(Output(f"{jobs.P}-fix", "children"), Input(f"{jobs.P}-user", "value"),
                  Input(f"{jobs.P}-state", "value"), Input(f"{jobs.P}-partition", "value"))
    @common.safe()
    def fix(user, state, partition):
        scope = common.scope()
        f = Filters(user=jobs.whose(scope, user), state=_text(state), partition=_text(partition))
        with common.handle() as h:
            return block(h, scope, f, f"{jobs.P}-fix-table", app.get_relative_path("/"))

    grids.register_download(app, f"{jobs.P}-fix-table")
