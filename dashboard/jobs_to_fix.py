"""The "Jobs to fix" block at the top of the overview, a project's page and My jobs: the jobs of the
page's scope and filters that wasted the most SBU in its period (analytics/queries/to_fix.py, the
weekly report's list), each with its leading advice, the #SBATCH lines that would have fit and what
that request saves ("not priced" when unknown), the job id linking to the job's page.

A plain HTML table (at most N rows, nothing to sort or page) drawn as one component
(dashboard/text_table.py): the browser lays it out in one pass, where a grid measured every cell
to size its columns, and Dash's renderer handles one component, not one per cell and value. Seven columns fit 1400 px: a job's name and
state under its id, its flags under the advice, its SBU under its waste, its project under its
user. Texts wrap, nothing is cut; every value is a text node (data, never markup). Its "Download
CSV" link carries the rows' CSV itself (a data: URL, each text cell through
analytics/render.csv_safe), so downloading asks nothing of the server.

On the overview and a project's page it comes with the page (pages/overview.py), its callback runs
when a filter changes; on My jobs it is its own callback, beside the page's."""
from __future__ import annotations

from dash import Input, Output, State, dcc, html

from jobsight.analytics.links import job_path
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.queries.to_fix import jobs_to_fix
from jobsight.analytics.reports.settings import ReportSettings
from jobsight.dashboard import common, text_table

N = ReportSettings.top_jobs        # as many as a weekly report lists by default
# the table's columns: header -> the fields its cells show, the first one large, the others under it
# (a field's element has the class col-<field>); who ran the job only for a lead or an admin
COLUMNS = {"Job": ("job_id", "job_name", "state"), "Advice": ("lead_advice", "flag_codes"),
           "Would have fit": ("sbatch_lines",), "Saves": ("savings_sbu",), "Wasted": ("wasted_sbu", "sbu"),
           "User": ("user", "account"), "Partition": ("partition",)}
WHO = "User"                       # a user's own list shows the project alone there
# the CSV's columns: field -> header
CSV_COLUMNS = {"job_id": "Job", "lead_advice": "Advice", "sbatch_lines": "Would have fit", "savings_sbu": "Saves",
               "wasted_sbu": "Wasted", "sbu": "SBU", "flag_codes": "Flags", "job_name": "Name", "user": "User",
               "account": "Project", "partition": "Partition", "state": "State"}
SBU_FIELDS = ("savings_sbu", "wasted_sbu", "sbu")
NUMBER_COLUMNS = ("Saves", "Wasted")
NOT_PRICED = "not priced"          # an unknown saving; never 0 (a job without advice saves 0)
# a job that wasted SBU (its efficiencies under 100 %) without crossing any flag's threshold
NO_ADVICE = "No advice: no flag was raised"


def rows(listed: list[dict], root: str = "") -> list[dict]:
    """The block's rows: the jobs of ``listed`` (queries.to_fix) that wasted SBU, most wasted
    first; ``root``: the app's root path (its --url-prefix), the job pages' links are under it."""
    out = [dict(r) for r in listed if r["wasted_sbu"]]
    for r in out:
        r["href"] = root + job_path(r["cluster"], r["job_id_raw"]) if root else None
        r["start_time"] = None if r["start_time"] is None else f"{r['start_time']:%Y-%m-%d %H:%M}"
    return out


def shown(r: dict, field: str) -> str:
    """A field's text: SBU figures as "12,345.6 SBU" (the job's SBU "of 12,345.6 SBU" under its
    waste), an unknown saving "not priced"."""
    v = r.get(field)
    if field in SBU_FIELDS:
        if v is None:
            return NOT_PRICED if field == "savings_sbu" else ""
        return f"{'of ' if field == 'sbu' else ''}{common.number(v)} SBU"
    if field == "lead_advice" and not v:
        return NO_ADVICE
    return "" if v is None else str(v)


def _cell(r: dict, fields: tuple[str, ...]) -> list[dict]:
    """A cell's items (dashboard/text_table.py): its first field, then those of the others that
    have a value; the job id links to the job's page, an unknown saving's note is its title."""
    out = []
    for i, f in enumerate(fields):
        if i and r.get(f) in (None, ""):
            continue
        out.append(text_table.item(f, shown(r, f), href=r.get("href") if f == "job_id" else None,
                                   title=r.get("savings_note") if f == "savings_sbu" else None))
    return out


def csv_href(data: list[dict]) -> str:
    """The rows as a CSV file in a data: URL: numbers as stored, texts through csv_safe."""
    return text_table.csv_href(CSV_COLUMNS, data)


def table(table_id: str, data: list[dict], columns: dict[str, tuple[str, ...]]) -> html.Div:
    """The table ``table_id`` of ``data`` (``columns``: header -> fields) and its download link."""
    cols = [{"name": h, "className": "num" if h in NUMBER_COLUMNS else None} for h in columns]
    body = [[_cell(r, fields) for fields in columns.values()] for r in data]
    return html.Div([
        text_table.download(f"{table_id}-csv", "jobs-to-fix.csv", csv_href(data)),
        text_table.TextTable(id=table_id, className="fix-table", columns=cols, rows=body),
    ], className="grid-box")


def block(h, scope: Scope, f: Filters, table_id: str, root: str) -> list:
    """The heading, a line on what the list is, and its table (or a line saying no job wasted SBU)."""
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
                              id=f"{table_id}-none")]
    own = scope.role == "user"          # their own jobs: the project, no user
    columns = {("Project" if own and h == WHO else h): (("account",) if own and h == WHO else f) for h, f in COLUMNS.items()}
    return head + [table(table_id, data, columns)]


def holder(prefix: str, children: list | None = None) -> dcc.Loading:
    """Where a page puts the block: ``children`` (:func:`overview_block`) or what the callbacks of
    :func:`register` fill in."""
    return dcc.Loading(html.Div(children or [], id=f"{prefix}-fix", className="jobs-to-fix"), type="default")


def register(app, fixed: dict[str, str | None]) -> None:
    """The block's callbacks: on the overview-style pages ``fixed`` (prefix -> the filter its
    ``name`` fixes) and on My jobs."""
    for prefix, key in fixed.items():
        _register_overview(app, prefix, key)
    _register_jobs(app)


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def overview_block(prefix: str, key: str | None, root: str, since, until, user, account, partition, name) -> list:
    """The block of an overview-style page (``key``: the filter its ``name`` fixes) for its controls'
    values; ``root``: the app's root path."""
    name = _text(name)
    if key and not name:
        return []
    p = {k: v for k, v in dict(since=since, until=until, user=user, account=account,
                               partition=partition).items() if isinstance(v, str)}
    if key:
        p[key] = None
    f = common.filters_from(p, **({key: name} if key else {}))
    with common.handle() as h:
        return block(h, common.scope(), f, f"{prefix}-fix-table", root)


def _register_overview(app, prefix: str, key: str | None) -> None:
    # the page comes with its first block (pages/overview.py): this runs when a control changes
    @app.callback(Output(f"{prefix}-fix", "children"),
                  Input(f"{prefix}-period", "start_date"), Input(f"{prefix}-period", "end_date"),
                  Input(f"{prefix}-user", "value"), Input(f"{prefix}-account", "value"),
                  Input(f"{prefix}-partition", "value"), State(f"{prefix}-name", "data"), prevent_initial_call=True)
    @common.safe()
    def fix(since, until, user, account, partition, name):
        return overview_block(prefix, key, app.get_relative_path("/"), since, until, user, account, partition, name)


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
