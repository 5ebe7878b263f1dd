"""A whole table as one Dash component: ``TextTable`` (dashboard/assets/textTable.js draws it).

Dash's renderer does work per component on every update while a page loads (its layout crawled,
each component wrapped and watched for loading), so a table of html.Tr/html.Td/html.Div is
hundreds of components; this is one. Every value is text: the script puts each string in the page
as a text node (React's children), never as markup, and draws a link only for an ``href`` that
is a path on this site ("/..."), as dcc.Link would (the page changes without a reload).

Props: ``columns``: [{"name": header, "className": a class for the column's th and td, or None}];
``rows``: one list per row, a cell per column, each cell a list of items {"field", "text",
"href"?, "title"?}: the first item drawn large, the others under it (class "sub"), each in an
element of class ``col-<field>`` (a link for an item with an href, else a div).
"""
from __future__ import annotations

from dash.development.base_component import Component

# the script's name for the component: window.jobsight.TextTable (dashboard/assets/textTable.js)
NAMESPACE = "jobsight"


class TextTable(Component):
    _namespace = NAMESPACE
    _type = "TextTable"
    _base_nodes = ["children"]
    _children_props: list[str] = []

    def __init__(self, id: str | None = None, className: str | None = None, columns: list[dict] | None = None,
                 rows: list[list[list[dict]]] | None = None):
        self._prop_names = ["id", "className", "columns", "rows"]
        self._valid_wildcard_attributes = []
        self.available_properties = list(self._prop_names)
        self.available_wildcard_properties = []
        args = {k: v for k, v in dict(id=id, className=className, columns=columns, rows=rows).items() if v is not None}
        super().__init__(**args)


def item(field: str, text: str, href: str | None = None, title: str | None = None) -> dict:
    """One value of a cell: its field (the element's class col-<field>), its text, a link or a title."""
    out = {"field": field, "text": text}
    if href:
        out["href"] = href
    if title:
        out["title"] = title
    return out
