"""The members block of a project's page: the project's members, most wasted first, with the
figures of the Members table of the project's weekly report (analytics/queries/reports.members:
the same macro over the page's period, filters and the asker's scope). Each member links to the
user's page."""
from __future__ import annotations

from dash import html

from jobsight.analytics.queries.reports import members
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.dashboard import common, grids

PREFIX = "pj"
COLUMNS = [grids.link("user", "Member", pinned="left", minWidth=120), grids.num("jobs", "Jobs", 0),
           grids.num("sbu", "SBU", 1, " SBU"), grids.num("wasted_sbu", "Wasted", 1, " SBU"),
           grids.num("wasted_pct", "Wasted share", 1, " %"), grids.num("savings_sbu", "Advice saves", 1, " SBU"),
           grids.num("cpu_eff_pct", "CPU eff", 1, " %"), grids.num("gpu_util_pct", "GPU util", 1, " %"),
           grids.num("mem_eff_pct", "Mem eff", 1, " %"), grids.num("time_eff_pct", "Time eff", 1, " %")]
FIELDS = [c["field"] for c in COLUMNS]


def rows(h, scope: Scope, f: Filters) -> list[dict]:
    out = []
    for r in members(h, scope, f):
        row = {k: r.get(k) for k in FIELDS}
        row["href"] = "/user" + common.make_search({"name": r["user"]}) if r["user"] else None
        out.append(row)
    return out


def panel(h, scope: Scope, f: Filters) -> list:
    """The block's components; nothing when no member ran jobs in the view."""
    data = rows(h, scope, f)
    if not data:
        return []
    head = [html.H3("Members, most wasted first"),
            html.P("The project's members in the period, as its weekly report lists them: SBU burned and "
                   "wasted, what following the advice would have saved, and their efficiencies.", className="hint")]
    grid = grids.grid(f"{PREFIX}-members", COLUMNS, "members.csv", page_size=25, rows=data,
                      sort=("wasted_sbu", "desc"))
    return [html.Div(head + [grid], className="members", id=f"{PREFIX}-members-block")]


def register(app) -> None:
    grids.register_download(app, f"{PREFIX}-members")
