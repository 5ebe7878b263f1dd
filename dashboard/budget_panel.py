"""The budgets block of the overview and of a project's page: each allocation in the requester's
scope (queries.budgets) with its burn, remaining SBU, burn rates, run-out date, the period's end
(the reset) and what will remain then at the 30-day rate, and alert. An
allocation used up is highlighted (row class ``budget-over``, marked OVER), never left out.

As many allocations as fit one page (PAGE) are a plain table, one component
(dashboard/text_table.py), with its CSV in its download link; more are a grid, to sort, filter and
page (dashboard/grids.py)."""
from __future__ import annotations

import pandas as pd
from dash import html

from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Scope
from jobsight.dashboard import common, grids, text_table

PREFIXES = ("ov", "pj")       # the overview and the project page
USER_COLUMN = grids.text("user", "User's share")
COLUMNS = [grids.text("account", "Project", minWidth=120), USER_COLUMN,
           grids.num("allocation_sbu", "Allocation", 1, " SBU"), grids.num("burned_sbu", "Burned", 1, " SBU"),
           grids.num("remaining_sbu", "Remaining", 1, " SBU"), grids.num("used_pct", "Used", 1, " %"),
           grids.num("burn_rate_7d", "Rate 7 d", 1, " SBU/d"), grids.num("burn_rate_30d", "Rate 30 d", 1, " SBU/d"),
           grids.text("run_out_date", "Runs out"), grids.text("period_end", "Resets"),
           grids.num("remaining_at_reset_sbu", "Left at reset", 1, " SBU"), grids.text("alert_shown", "Alert")]
ROW_CLASSES = {"budget-over": "params.data.alert === 'over'", "budget-warn": "params.data.alert === 'warn'"}
ALERT_CLASSES = {"over": "budget-over", "warn": "budget-warn"}      # the same, for the plain table
PAGE = 25                     # rows of a page of the grid; up to as many, a plain table


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
    if len(rows) <= PAGE:
        table = _table(f"{prefix}-budgets", columns, rows)
    else:
        table = grids.grid(f"{prefix}-budgets", columns, "budgets.csv", page_size=PAGE, rows=rows,
                           row_classes=ROW_CLASSES)
    return [html.Div(head + cards + [table], className="budgets", id=f"{prefix}-budget-block")]


def _table(table_id: str, columns: list[dict], rows: list[dict]) -> html.Div:
    """The rows as a plain table: each cell the text the grid would show (12,345.6 SBU), in an
    element of class col-<field>; a row over or near its allocation has the grid's row class."""
    cols = [{"name": c["headerName"], "className": "num" if c.get("type") == "rightAligned" else None} for c in columns]
    body = [[[text_table.item(c["field"], grids.shown(c, r.get(c["field"])))] for c in columns] for r in rows]
    return html.Div([
        text_table.download(f"{table_id}-csv", "budgets.csv",
                            text_table.csv_href({c["field"]: c["headerName"] for c in columns}, rows)),
        text_table.TextTable(id=table_id, className="text-table", columns=cols, rows=body,
                             rowClassNames=[ALERT_CLASSES.get(r["alert"]) for r in rows]),
    ], className="grid-box")


def register(app) -> None:
    for prefix in PREFIXES:
        grids.register_download(app, f"{prefix}-budgets")
