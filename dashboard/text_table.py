"""A whole table as one Dash component: ``TextTable`` (dashboard/assets/textTable.js draws it).

Dash's renderer does work per component on every update while a page loads (its layout crawled,
each component wrapped and watched for loading), so a table of html.Tr/html.Td/html.Div is
hundreds of components; this is one. Every value is text: the script puts each string in the page
as a text node (React's children), never as markup, and draws a link only for an ``href`` that
is a path on this site ("/..."), as dcc.Link would (the page changes without a reload).

Props: ``columns``: [{"name": header, "className": a class for the column's th and td, or None}];
``rows``: one list per row, a cell per column, each cell a list of items {"field", "text",
"href"?, "title"?}: the first item drawn large, the others under it (class "sub"), each in an
element of class ``col-<field>`` (a link for an item with an href, else a div); ``rowClassNames``:
a class (or None) per row.

Its "Download CSV" (:func:`download`) is a link holding the rows' CSV itself (a data: URL, each
text cell through analytics/render.csv_safe): downloading asks nothing of the server.
"""
from __future__ import annotations

import csv
import io
from urllib.parse import quote

from dash import html
from dash.development.base_component import Component

from jobsight.analytics.render import csv_safe

# the script's name for the component: window.jobsight.TextTable (dashboard/assets/textTable.js)
NAMESPACE = "jobsight"


class TextTable(Component):
    _namespace = NAMESPACE
    _type = "TextTable"
    _base_nodes = ["children"]
    _children_props: list[str] = []

    def __init__(self, id: str | None = None, className: str | None = None, columns: list[dict] | None = None,
                 rows: list[list[list[dict]]] | None = None, rowClassNames: list[str | None] | None = None):
        self._prop_names = ["id", "className", "columns", "rows", "rowClassNames"]
        self._valid_wildcard_attributes = []
        self.available_properties = list(self._prop_names)
        self.available_wildcard_properties = []
        args = {k: v for k, v in dict(id=id, className=className, columns=columns, rows=rows,
                                      rowClassNames=rowClassNames).items() if v is not None}
        super().__init__(**args)


def item(field: str, text: str, href: str | None = None, title: str | None = None) -> dict:
    """One value of a cell: its field (the element's class col-<field>), its text, a link or a title."""
    out = {"field": field, "text": text}
    if href:
        out["href"] = href
    if title:
        out["title"] = title
    return out


def csv_href(columns: dict[str, str], rows: list[dict]) -> str:
    """``rows`` as a CSV file in a data: URL (``columns``: field -> header): numbers as stored,
    texts through csv_safe."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\r\n")
    w.writerow(columns.values())
    for r in rows:
        w.writerow(["" if r.get(k) is None else csv_safe(r[k]) for k in columns])
    return "data:text/csv;charset=utf-8," + quote(out.getvalue())


def download(link_id: str, file_name: str, href: str) -> html.Div:
    """The "Download CSV" link above a table, as a grid's button looks."""
    return html.Div(html.A("Download CSV", id=link_id, className="csv-button", download=file_name, href=href,
                           title="The table's rows as a CSV file"), className="grid-tools")
