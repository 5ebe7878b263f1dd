"""My jobs (/jobs): the requester's own jobs, newest first, PAGE at a time, filtered by state,
partition and flag; project leads and admins may choose another user of their scope, or all of it.
Each job id links to the job's page."""
from __future__ import annotations

from dash import Input, Output, State, ctx, dcc, html, no_update

from jobsight.analytics.queries import job_lists as job_queries
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.job_lists import JobFilter
from jobsight.analytics.queries.scope import Scope
from jobsight.dashboard import common, grids, jobs_to_fix

P = "jobs"
PAGE = 100
MAX_PAGE = 10**6
COLUMNS = [grids.link("job_id", "Job", pinned="left", minWidth=110), grids.text("job_name", "Name"),
           grids.text("state", "State"), grids.text("start_time", "Start (UTC)"),
           grids.num("sbu", "SBU", 2, " SBU"), grids.num("wasted_sbu", "Wasted", 2, " SBU")]
# what following the advice would have saved (blank: no advice, or unknown: the tooltip says why)
SAVINGS = grids.num("savings_sbu", "Savings", 2, " SBU", tooltipField="savings_note")
MORE = [grids.num("cpu_eff_pct", "CPU eff", 1, " %"), grids.num("gpu_util_pct", "GPU util", 1, " %"),
        grids.num("mem_eff_pct", "Mem eff", 1, " %"), grids.num("time_eff_pct", "Time eff", 1, " %"),
        grids.text("codes", "Flags"), grids.num("elapsed_h", "Elapsed", 2, " h"), grids.num("ncpus", "Cores", 0),
        grids.num("ngpus", "GPUs", 0), grids.text("partition", "Partition"), grids.text("account", "Project")]
USER = grids.text("user", "User")


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def whose(scope: Scope, user) -> str | None:
    """Whose jobs: a plain user's own, always; for a lead or admin the chosen user (None: all)."""
    return scope.user if scope.role == "user" else _text(user)


def rows(h, scope: Scope, jf: JobFilter, page: int, href: str = "") -> tuple[list[dict], int, int]:
    """The grid's rows of page ``page`` (the last one when it is past the end), how many jobs match,
    and the page shown."""
    df, total = job_queries.job_list(h, scope, jf, page * PAGE, PAGE)
    if total and df.empty and page:
        page = (total - 1) // PAGE
        df, total = job_queries.job_list(h, scope, jf, page * PAGE, PAGE)
    df = df.copy()
    df["start_time"] = df["start_time"].astype(str).str.slice(0, 16).replace({"NaT": None, "None": None})
    df["elapsed_h"] = df["elapsed_s"] / 3600
    df["codes"] = [", ".join(v) for v in df["codes"]]
    data = grids.records(df.drop(columns=["elapsed_s"]))
    for r in data:
        r["href"] = href + common.make_search({"cluster": r["cluster"], "id": r["job_id_raw"]}) if href else None
    return data, total, page


def columns(h, scope: Scope) -> list[dict]:
    """The grid's columns: the savings when the database has them, the user for a lead or admin."""
    return (COLUMNS + ([SAVINGS] if "job_savings" in h.tables else []) + MORE
            + ([USER] if scope.role != "user" else []))


def layout(params: dict[str, str], scope: Scope) -> html.Div:
    wide = scope.role != "user"
    with common.handle() as h:
        opts = queries.filter_options(h, scope)
        states = job_queries.job_states(h, scope)
        # a lead or admin starts from their own jobs when they have any, else from all they can see
        user = params.get("user") if params.get("user") in opts["user"] else \
            scope.user if wide and job_queries.has_jobs(h, scope, scope.user) else None
        cols = columns(h, scope)
    pick = lambda key, values: params.get(key) if params.get(key) in values else None  # noqa: E731
    controls = [common.dropdown(P, "state", "State", states, pick("state", states)),
                common.dropdown(P, "partition", "Partition", opts["partition"], pick("partition", opts["partition"])),
                common.dropdown(P, "code", "Flag", opts["code"], pick("code", opts["code"]))]
    if wide:
        controls.insert(0, common.dropdown(P, "user", "User", opts["user"], user))
    hidden = [] if wide else [dcc.Dropdown(id=f"{P}-user", style={"display": "none"})]
    grid = grids.grid(f"{P}-table", cols, "jobs.csv", paginate=False, static=True)
    pager = html.Div([html.Button("‹ Newer", id=f"{P}-newer", n_clicks=0, disabled=True),
                      html.Span(id=f"{P}-status", className="status"),
                      html.Button("Older ›", id=f"{P}-older", n_clicks=0, disabled=True)], className="pager")
    return html.Div([
        html.H2("My jobs" if not wide or user == scope.user else "Jobs"),
        html.P(f"Newest first, {PAGE} a page; click a job id to open the job. The download holds the page's rows.",
               className="hint"),
        html.Div(controls + hidden, className="controls"),
        jobs_to_fix.holder(P),      # its callback: dashboard/jobs_to_fix.py (registered with the overview's)
        dcc.Store(id=f"{P}-page", data=0),
        dcc.Loading(html.Div([pager, grid]), type="default"),
    ])


INPUTS = [Input(f"{P}-user", "value"), Input(f"{P}-state", "value"), Input(f"{P}-partition", "value"),
          Input(f"{P}-code", "value")]


def register(app) -> None:
    @app.callback(Output(f"{P}-table", "rowData"), Output(f"{P}-status", "children"), Output(f"{P}-page", "data"),
                  Output(f"{P}-newer", "disabled"), Output(f"{P}-older", "disabled"),
                  Output(f"{P}-table", "columnDefs"),
                  *INPUTS, Input(f"{P}-newer", "n_clicks"), Input(f"{P}-older", "n_clicks"), State(f"{P}-page", "data"))
    @common.safe(fallback=lambda: ([], common.ERROR_TEXT, 0, True, True, no_update))
    def content(user, state, partition, code, _newer, _older, page):
        page = page if isinstance(page, int) and 0 <= page < MAX_PAGE else 0
        step = {f"{P}-newer": -1, f"{P}-older": 1}.get(ctx.triggered_id)     # a filter changed: the first page
        page = max(page + step, 0) if step else 0
        scope = common.scope()
        jf = JobFilter(user=whose(scope, user), state=_text(state), partition=_text(partition), code=_text(code))
        with common.handle() as h:
            data, total, page = rows(h, scope, jf, page, app.get_relative_path("/job"))
            # your own jobs, no filter, and none at all: how jobs get in, not "no match"
            newcomer = not total and jf == JobFilter(user=scope.user) and not job_queries.has_jobs(h, scope, scope.user)
            defs = grids.defs(columns(h, scope), data, static=True)
        if newcomer:
            return [], common.no_jobs_yet(), 0, True, True, defs
        if not total:
            return [], "No jobs match these filters.", 0, True, True, defs
        first = page * PAGE + 1
        status = f"Jobs {first:,}–{first + len(data) - 1:,} of {total:,}"
        return data, status, page, page == 0, first + len(data) > total, defs

    @app.callback(Output("url", "search", allow_duplicate=True), *INPUTS, prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def sync_url(user, state, partition, code):
        return common.make_search({k: _text(v) for k, v in
                                   dict(user=user, state=state, partition=partition, code=code).items()})

    grids.register_download(app, f"{P}-table")
