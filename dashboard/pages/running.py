"""Running now (/running): the jobs running in the requester's scope (an admin: all; a project
lead: their own and their projects'; a user: their own), as of the latest published snapshot, with
their utilisation at their latest samples; the jobs wasting now first: GPUs idle for
flags.running_gpu_idle_min minutes or more, with the SBU per hour they burn. Each job id links to
the job's page."""
from __future__ import annotations

from dash import Input, Output, dcc, html, no_update

from jobsight.analytics.queries import running as running_queries
from jobsight.analytics.queries.scope import Scope
from jobsight.dashboard import common, grids

P = "run"
LIMIT = 500
JOBS = [grids.link("job_id", "Job", pinned="left", minWidth=110), grids.text("user", "User"),
        grids.text("account", "Project"), grids.text("partition", "Partition"), grids.text("job_name", "Name", minWidth=140),
        grids.num("gpus_idle_now", "GPUs idle now", 0), grids.num("idle_sbu_per_h", "Idle SBU/h", 2, " SBU/h"),
        grids.num("sbu_per_h", "SBU/h", 2, " SBU/h"), grids.num("gpu_util_now_pct", "GPU util now", 1, " %"),
        grids.num("cpu_util_now_pct", "CPU now", 1, " %"), grids.num("ngpus", "GPUs", 0), grids.num("ncpus", "Cores", 0),
        grids.num("elapsed_h", "Elapsed", 2, " h"), grids.num("sbu", "SBU so far", 2, " SBU"),
        grids.text("start_time", "Start (UTC)", minWidth=140), grids.text("last_sample", "Last sample (UTC)", minWidth=140)]
GPUS = [grids.link("job_id", "Job", pinned="left", minWidth=110), grids.text("user", "User"), grids.text("host", "Host"),
        grids.num("gpu_index", "GPU", 0), grids.text("device", "Device", minWidth=200),
        grids.num("idle_min", "Idle for", 0, " min"), grids.num("util_pct", "Util now", 1, " %"),
        grids.text("last_time", "Last sample (UTC)", minWidth=140)]


def _when(df, *cols: str):
    for c in cols:
        df[c] = df[c].astype(str).str.slice(0, 16).replace({"NaT": None, "None": None})


def _links(data: list[dict], href: str) -> list[dict]:
    for r in data:
        r["href"] = href + common.make_search({"cluster": r["cluster"], "id": r["job_id_raw"]}) if href else None
    return data


def content(h, scope: Scope, user: str | None, wasting_only: bool, href: str = "") -> tuple[list[dict], list[dict], str]:
    """The jobs grid's rows, the idle GPUs grid's rows and the status line."""
    df, t = running_queries.running_jobs(h, scope, user, wasting_only, LIMIT)
    df, total = df.copy(), t["matching"]
    _when(df, "start_time", "last_sample")
    df["elapsed_h"] = df["elapsed_s"] / 3600
    gpus = running_queries.idle_gpus(h, scope, user, LIMIT).copy()
    _when(gpus, "last_time")
    if not t["jobs"]:
        status = "No running jobs in this view (as of the latest ingest)."
    else:
        shown = f"; showing the first {len(df):,}" if total > len(df) else ""
        status = (f"{t['jobs']:,} running job{'s' if t['jobs'] != 1 else ''} burning {t['sbu_per_h']:,.1f} SBU/h; "
                  f"{t['gpus_idle_now']:,} of {t['gpus']:,} GPUs idle now in {t['wasting_jobs']:,} job"
                  f"{'s' if t['wasting_jobs'] != 1 else ''}, {t['idle_sbu_per_h']:,.1f} SBU/h"
                  + (f"; latest sample {str(t['last_sample'])[:16]} UTC" if t["last_sample"] else "") + shown)
    return (_links(grids.records(df.drop(columns=["elapsed_s"])), href), _links(grids.records(gpus), href), status)


SHOW = [{"label": "all running jobs", "value": "running"}, {"label": "only those wasting now", "value": "wasting"}]


def layout(params: dict[str, str], scope: Scope) -> html.Div:
    wide = scope.role != "user"
    with common.handle() as h:
        minutes = running_queries.idle_minutes(h)
        users = running_queries.users(h, scope) if wide else []
    user = params.get("user") if params.get("user") in users else None
    state = "wasting" if params.get("state") == "wasting" else "running"
    controls = [html.Div([html.Label("Show", htmlFor=f"{P}-state"),
                          dcc.RadioItems(id=f"{P}-state", options=SHOW, value=state, inline=True)], className="control")]
    if wide:
        controls.insert(0, common.dropdown(P, "user", "User", users, user))
    hidden = [] if wide else [dcc.Dropdown(id=f"{P}-user", style={"display": "none"})]
    return html.Div([
        html.H2("Running now"),
        html.P(f"The running jobs you can see, as of the latest ingest, with their utilisation at their latest "
               f"samples; first those wasting now: GPUs idle (under the idle threshold) for {minutes:g} minutes or more, "
               "with the SBU per hour they burn. Click a job id to open the job.", className="hint"),
        html.Div(controls + hidden, className="controls"),
        dcc.Loading(html.Div([html.Div(id=f"{P}-status", className="status"),
                              grids.grid(f"{P}-jobs", JOBS, "running-jobs.csv", page_size=25),
                              html.H3("GPUs idle now"),
                              grids.grid(f"{P}-gpus", GPUS, "idle-gpus.csv", page_size=25)]), type="default"),
    ])


INPUTS = [Input(f"{P}-user", "value"), Input(f"{P}-state", "value")]


def register(app) -> None:
    @app.callback(Output(f"{P}-jobs", "rowData"), Output(f"{P}-gpus", "rowData"), Output(f"{P}-status", "children"),
                  Output(f"{P}-jobs", "columnDefs"), Output(f"{P}-gpus", "columnDefs"), *INPUTS)
    @common.safe(fallback=lambda: ([], [], common.ERROR_TEXT, no_update, no_update))
    def fill(user, state):
        scope = common.scope()
        # a plain user sees their own jobs whatever is asked; a lead or admin the chosen user's, or all
        who = scope.user if scope.role == "user" else (user if isinstance(user, str) and user else None)
        with common.handle() as h:
            jobs, gpus, status = content(h, scope, who, state == "wasting", app.get_relative_path("/job"))
        return jobs, gpus, status, grids.defs(JOBS, jobs), grids.defs(GPUS, gpus)

    @app.callback(Output("url", "search", allow_duplicate=True), *INPUTS, prevent_initial_call=True)
    @common.safe(fallback=lambda: no_update)
    def sync_url(user, state):
        return common.make_search({"user": user if isinstance(user, str) else None,
                                   "state": "wasting" if state == "wasting" else None})

    grids.register_download(app, f"{P}-jobs")
    grids.register_download(app, f"{P}-gpus")
