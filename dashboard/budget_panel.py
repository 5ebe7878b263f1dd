"""The budgets block of the overview and of a project's page: each allocation in the requester's
scope (queries.budgets) with its burn, remaining SBU, burn rates, run-out date, the period's end
(the reset) and what will remain then at the 30-day rate, and alert. An
allocation used up is highlighted (row class ``budget-over``, marked OVER), never left out."""
from __future__ import annotations

import pandas as pd
from dash import html

from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Scope
from jobsight.dashboard import common, grids

PREFIXES = ("ov", "pj")       # the overview and the project page
USER_COLUMN = grids.text("user", "User's share")
COLUMNS = [grids.text("account", "Project", minWidth=120), USER_COLUMN,
           grids.num("allocation_sbu", "Allocation", 1, " SBU"), grids.num("burned_sbu", "Burned", 1, " SBU"),
           grids.num("remaining_sbu", "Remaining", 1, " SBU"), grids.num("used_pct", "Used", 1, " %"),
           grids.num("burn_rate_7d", "Rate 7 d", 1, " SBU/d"), grids.num("burn_rate_30d", "Rate 30 d", 1, " SBU/d"),
           grids.text("run_out_date", "Runs out"), grids.text("period_end", "Resets"),
           grids.num("remaining_at_reset_sbu", "Left at reset", 1, " SBU"), grids.text("alert_shown", "Alert")]
ROW_CLASSES = {"budget-over": "params.data.alert === 'over'", "budget-warn": "params.data.alert === 'warn'"}


def _rows(df: pd.DataFrame) -> list[dict]:
    out = grids.records(df)
    for r in out:
        for k in ("period_start", "period_end", "as_of", "run_out_date"):
            r[k] = None if r[k] is None else f"{r[k]:%Y-%m-%d}"
        r["alert_shown"] = r["alert"].upper()
    return out


def _cards(b: dict) -> html.Div:
    """The project's own allocation at a glance; the run-out date is the one the browser test reads."""
    over = b["alert"] == "over"
    run_out = b["run_out_date"] or ("spent" if b["remaining_sbu"] <= 0 else "not at this rate")
    return html.Div([
        common.card("Allocation", f"{common.number(b['allocation_sbu'])} SBU", "budget-allocation"),
        common.card("Remaining", f"{common.number(b['remaining_sbu'])} SBU" + (" — OVER" if over else ""),
                    "budget-remaining"),
        common.card("Used", f"{common.number(b['used_pct'])} %", "budget-used"),
        common.card("Burn rate, 30 days", f"{common.number(b['burn_rate_30d'])} SBU/day", "budget-rate"),
        common.card("Runs out", run_out, "budget-run-out"),
        common.card(f"Left at the reset, {b['period_end']}", f"{common.number(b['remaining_at_reset_sbu'])} SBU",
                    "budget-at-reset"),
    ], className="cards budget-cards" + (" budget-over" if over else ""))


def panel(h, scope: Scope, prefix: str, account: str | None = None) -> list:
    """The block's components; nothing when no allocation is in scope."""
    rows = _rows(queries.budgets(h, scope, account))
    if not rows:
        return []
    own = [r for r in rows if r["user"] is None]
    first = rows[0]
    head = [html.H3(f"{'Budget' if account else 'Budgets'}: the {first['period']} from {first['period_start']}, "
                    f"as of {first['as_of']}"),
            html.P("Burn in the allocation period so far; rates in SBU per day over the last 7 and 30 days; the "
                   "run-out date is the remaining SBU at the 30-day rate, and what is left at the reset (the period's end) is "
                   "what that rate leaves then. OVER: the allocation is used up.",
                   className="hint")]
    cards = [_cards(own[0])] if account and len(own) == 1 else []
    if cards and len(rows) == 1:        # the cards say it all
        return [html.Div(head + cards, className="budgets", id=f"{prefix}-budget-block")]
    columns = COLUMNS if any(r["user"] for r in rows) else [c for c in COLUMNS if c is not USER_COLUMN]
    grid = grids.grid(f"{prefix}-budgets", columns, "budgets.csv", page_size=25, rows=rows, row_classes=ROW_CLASSES)
    return [html.Div(head + cards + [grid], className="budgets", id=f"{prefix}-budget-block")]


def register(app) -> None:
    for prefix in PREFIXES:
        grids.register_download(app, f"{prefix}-budgets")
