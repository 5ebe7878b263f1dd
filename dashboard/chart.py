"""A bar chart as one Dash component without plotly.js: ``Chart`` (dashboard/assets/chart.js draws
it as SVG in the browser).

dcc.Graph loads plotly.js (1.2 MB of its basic bundle) when the first graph of a page renders, and
lays each chart out in script: in a browser with the scripts cached, the overview's three charts
took most of the main thread after its data had arrived (about 1.1 s for the first chart with
plotly.js's start-up, 0.5 s for each next, on a loaded machine), and a new browser also fetched
and compiled plotly.js. The overview, a user's and a project's page draw these instead and load no
plotly.js; the job page's time series keep dcc.Graph (zoom and hover over thousands of points).

Props: ``figure``, the same figure dict dcc.Graph takes (dashboard/figures.py builds it, every
string made inert there), of which it draws: bar traces (``barmode`` stack or group, vertical or
``orientation`` "h"), scatter traces over the same categories (a line, with markers for
"lines+markers", ``line.dash``), ``marker.color``, ``marker.opacity`` (a number or one per bar),
``hovertext``, the title, the axis titles and the annotations (as a note over the chart; a figure
without traces shows them as its message). Categories that are dates are drawn in date order with
short labels. Each bar and point has its category, series and value as a tooltip (an SVG
``<title>``, the browser's own); the legend's names are text. What a user no longer has there:
Plotly's zoom, pan, hover labels and PNG download.
"""
from __future__ import annotations

from typing import Any

from dash.development.base_component import Component

from jobsight.dashboard.text_table import NAMESPACE


class Chart(Component):
    _namespace = NAMESPACE
    _type = "Chart"
    _base_nodes = ["children"]
    _children_props: list[str] = []

    def __init__(self, id: str | None = None, figure: dict[str, Any] | None = None, className: str | None = None):
        self._prop_names = ["id", "figure", "className"]
        self._valid_wildcard_attributes = []
        self.available_properties = list(self._prop_names)
        self.available_wildcard_properties = []
        args = {k: v for k, v in dict(id=id, figure=figure, className=className).items() if v is not None}
        super().__init__(**args)
