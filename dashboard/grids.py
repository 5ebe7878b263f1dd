"""The dashboard's tables: dash-ag-grid grids with one look and one CSV download.

Columns are text, numbers (right-aligned, thousands separators, a unit) or links to a page of the
dashboard. Numbers are formatted as every face of jobsight prints them: SBU figures (and SBU
rates) with one decimal. No column of an SBU figure, a job id or a state is ever narrower than
such a value needs (MIN_WIDTHS, SBU_MIN_WIDTH).

Column widths are set here, from the rows (:func:`defs`), not measured by the grid in the browser:
AG Grid's auto-size renders every cell again off-screen and reads its size, which took longer
than everything else of drawing a page. A grid whose rows a callback sets gets its column
definitions from the same callback, sized to those rows. The widths are those of the widest font
the dashboard is drawn in (DejaVu Sans, the fallback of a system without IBM Plex Sans, Segoe UI or
Roboto), in bold, so a narrower font only leaves room.

Cells are rendered as text by the grid (never as HTML); a link cell is an <a> made by the
JobsightLink renderer (assets/dashAgGridFunctions.js) around the cell's text, to a path the
server built (the row's ``href`` field), never to one from the data.

Every grid has a "Download CSV" button: the grid's own CSV export of its rows (after the grid's
filters and sorting, all pages), with numbers as they are stored and every text cell passed
through jobsightCsvCell, the formula guard of analytics/render.csv_safe: a cell a spreadsheet would
run as a formula (= + - @, after leading blanks and controls) starts with an apostrophe.
"""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

import dash_ag_grid as dag
from dash import Input, Output, html
from dash.fingerprint import build_fingerprint

CSV_CELL = {"function": "jobsightCsvCell(params)"}

# AG Grid's main bundle (1.3 MB) only for a page that draws a grid: "dynamic" keeps it served but out
# of every page's <script> list; assets/agGridOnDemand.js loads it when the first grid mounts.
BUNDLE = "dash_ag_grid.min.js"
for _resource in dag._js_dist:
    if _resource.get("relative_package_path") == BUNDLE:
        _resource["dynamic"] = True


def bundle_meta(prefix: str) -> dict:
    """The page's <meta> naming the bundle's URL for assets/agGridOnDemand.js, fingerprinted as Dash
    names the scripts it lists (package version, file time), so a browser caches it for a year."""
    modified = int(Path(dag.__file__).with_name(BUNDLE).stat().st_mtime)
    return {"name": "jobsight-ag-grid",
            "content": f"{prefix}_dash-component-suites/dash_ag_grid/"
                       + build_fingerprint(BUNDLE, dag.__version__, modified)}


def text(field: str, header: str, wrap: bool = False, width: int | None = None, **extra: Any) -> dict:
    col = {"field": field, "headerName": header, "cellDataType": "text", "filter": "agTextColumnFilter"}
    if wrap:        # a long text: fixed width, wrapped, the row as tall as it needs
        col.update(wrapText=True, autoHeight=True, width=width or 380, minWidth=200)
    elif width:
        col["minWidth"] = width
    return {**col, **extra}


# the narrowest a column of these fields may be, in px (the text and the cell padding): a
# 13-character array job id (12345678_1234), OUT_OF_MEMORY; a number column in SBU: 99,999,999.9 SBU
MIN_WIDTHS = {"job_id": 150, "state": 170}
SBU_MIN_WIDTH = 160
SBU_DIGITS = 1


# advance widths at the grid's 14 px, of DejaVu Sans (the widest of each group); bold text (a
# highlighted row) is up to BOLD times as wide
_CHAR_PX = {c: px for chars, px in ((" ',.:;/\\|IJijl", 4.8), ("!()-[]frt", 5.8), ("*?_`csz", 7.7),
                                    ("0123456789${}abdeghknopquvxyEFLPSTY", 8.95), ("ABCKRVXZ", 9.8),
                                    ("#+<=>^~&DGHNOQUw", 11.75)) for c in chars}
_WIDE_PX = 14.0                     # M, W, m, %, @ and any other character
PAD_PX = 34                         # the cell's padding and border, both sides
HEADER_PAD_PX = 54                  # a header's padding, border and its sort icon (its label is not bold)
BOLD = 1.1
MAX_WIDTH = 480                     # a longer text is cut at this width (its full text in the CSV)


def text_px(text: str) -> float:
    """How wide ``text`` is drawn in a grid cell, without padding (px)."""
    return sum(_CHAR_PX.get(c, _WIDE_PX) for c in text)


def num(field: str, header: str, digits: int = 1, unit: str = "", **extra: Any) -> dict:
    """A number column: right-aligned, e.g. 12,345.6 with ``unit`` (" %", " h") after it. SBU
    figures (a unit starting with SBU) have SBU_DIGITS decimals whatever ``digits`` says."""
    unit = unit.replace("\\", "").replace("'", "")
    if unit.strip().startswith("SBU"):
        digits = SBU_DIGITS
        extra["minWidth"] = max(extra.get("minWidth", 0), SBU_MIN_WIDTH)
    return {"field": field, "headerName": header, "cellDataType": "number", "type": "rightAligned",
            "filter": "agNumberColumnFilter", "context": {"digits": int(digits), "unit": unit},
            "valueFormatter": {"function": f"jobsightNumber(params.value, {int(digits)}, '{unit}')"}, **extra}


def shown(col: dict, value: Any) -> str:
    """A cell's text as the grid shows it: numbers as jobsightNumber formats them (12,345.6 SBU)."""
    if value is None or value == "":
        return ""
    ctx = col.get("context") or {}
    if "digits" in ctx and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return f"{value:,.{ctx['digits']}f}{ctx['unit']}"
    return str(value)


def width(col: dict, rows: list[dict] | None) -> int:
    """A column's width: its header's or its widest cell's among ``rows``, at least its minWidth."""
    px = text_px(col.get("headerName") or "") + HEADER_PAD_PX
    for r in rows or ():
        px = max(px, text_px(shown(col, r.get(col["field"]))) * BOLD + PAD_PX)
    return int(min(max(px, col.get("minWidth", 0), DEFAULT_COLUMN["minWidth"]), max(MAX_WIDTH, col.get("minWidth", 0))))


def link(field: str, header: str, href_field: str = "href", **extra: Any) -> dict:
    """A text column whose cells link to the row's ``href_field`` (a path of this app)."""
    return {**text(field, header, **extra), "cellRenderer": "JobsightLink",
            "cellRendererParams": {"hrefField": href_field}}


DEFAULT_COLUMN = {"sortable": True, "resizable": True, "floatingFilter": True, "minWidth": 70}
# a page of rows the server chose: sorting or filtering it in the browser would only reorder the page
STATIC_COLUMN = {"sortable": False, "resizable": True, "minWidth": 70}


def defs(columns: list[dict], rows: list[dict] | None = None, static: bool = False,
         sort: tuple[str, str] | None = None) -> list[dict]:
    """The grid's column definitions: each column as wide as its header and its cells among
    ``rows`` (a wrapped text keeps its width); ``static``: no filters; ``sort``: (field, direction)."""
    columns = [{**c, "minWidth": max(c.get("minWidth", 0), MIN_WIDTHS[c["field"]])} if c["field"] in MIN_WIDTHS else c
               for c in columns]
    if static:
        columns = [{**c, "filter": False} for c in columns]
    if sort:
        columns = [{**c, "sort": sort[1]} if c["field"] == sort[0] else c for c in columns]
    return [c if c.get("wrapText") else {**c, "width": width(c, rows)} for c in columns]


def grid(grid_id: str, columns: list[dict], file_name: str, page_size: int = 50,
         sort: tuple[str, str] | None = None, paginate: bool = True, static: bool = False,
         rows: list[dict] | None = None, row_classes: dict[str, str] | None = None, **options: Any) -> html.Div:
    """The grid ``grid_id`` (its rows: ``rows``, or the ``rowData`` a callback sets, with the
    ``columnDefs`` of :func:`defs` for them) with its download button ``<grid_id>-csv`` (wired by
    :func:`register_download`). ``static``: no sorting or filtering (rows paged by the server);
    ``row_classes``: CSS class -> the JavaScript condition on ``params.data`` that gives a row that
    class; ``options``: more AG Grid options."""
    columns = defs(columns, rows, static, sort)
    grid_options = {"pagination": paginate, "paginationPageSize": page_size,
                    "paginationPageSizeSelector": False, "domLayout": "autoHeight", "animateRows": False,
                    "enableCellTextSelection": True, "ensureDomOrder": True, "suppressCellFocus": True,
                    "suppressColumnVirtualisation": True, **options}
    table = dag.AgGrid(
        id=grid_id, rowData=rows or [], columnDefs=columns, dashGridOptions=grid_options,
        rowClassRules=row_classes or {},
        defaultColDef=STATIC_COLUMN if static else DEFAULT_COLUMN,
        csvExportParams={"fileName": file_name, "processCellCallback": CSV_CELL},
        style={"width": "100%"}, className="grid")
    return html.Div([
        html.Div(html.Button("Download CSV", id=f"{grid_id}-csv", className="csv-button", n_clicks=0,
                             title="The grid's rows (after its filters and sorting) as a CSV file"),
                 className="grid-tools"),
        table,
    ], className="grid-box")


def register_download(app, grid_id: str) -> None:
    """The button exports in the browser: a client-side callback, no request to the server."""
    app.clientside_callback(
        "function (n) { return n ? true : window.dash_clientside.no_update; }",
        Output(grid_id, "exportDataAsCsv"), Input(f"{grid_id}-csv", "n_clicks"), prevent_initial_call=True)


def records(df) -> list[dict]:
    """A data frame as grid rows: missing values as null, numbers as numbers."""
    return df.astype(object).where(df.notna(), None).to_dict("records")
