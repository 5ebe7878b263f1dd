"""HTML report: a page that opens offline, on a phone and on paper.

Plotly's JS (4.8 MB) never comes from a CDN. Reports written to a folder load one local copy of it
that sits next to them (``plotly_src``: ``plotly-<version>.min.js``, written by
``write_plotly_js``), so each report is a few hundred KB; a self-contained report embeds it once
in <head>. Each chart is a div plus its data. The e-mail
variant (charts=False) carries no script at all and draws the daily burn as CSS bars, since mail
clients run no JavaScript. Every user-supplied string goes through html.escape; chart labels too,
because Plotly reads tags (<b>, <br>) in labels as markup.
"""
from __future__ import annotations

import datetime as dt
import functools
import html
import json
import os
from pathlib import Path

from jobsight.analytics.render import terminal_safe
from jobsight.analytics.reports.files import atomic_write
from jobsight.analytics.reports.report import Report
from jobsight.analytics.reports.sections import Section, fmt, headline, sections

USED, WASTED, UNRATED = "#2b8a3e", "#e8590c", "#adb5bd"

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #fff; --card: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
main { max-width: 1100px; margin: 0 auto; padding: 16px; }
h1 { font-size: 1.35rem; margin: 0 0 4px; }
.period { color: var(--muted); margin: 0; }
.data-age.old { color: #b35900; font-weight: 600; }
h2 { font-size: 1.1rem; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.summary { font-size: 1.02rem; background: var(--card); border-left: 4px solid #0969da; padding: 10px 14px; margin: 12px 0; }
.kpis { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 8px; margin: 12px 0; }
.kpi { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; }
.kpi .v { font-size: 1.3rem; font-weight: 600; font-variant-numeric: tabular-nums; }
.kpi .k { color: var(--muted); font-size: .82rem; }
.kpi.wasted .v { color: #bc4c00; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; width: auto; min-width: 60%; font-size: .88rem; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--card); }
table.fit { width: 100%; }
table.fit th, table.fit td { padding: 4px 5px; }
table.fit td.wrap { overflow-wrap: anywhere; min-width: 6em; }
table.fit td.stack { white-space: nowrap; font-size: .82rem; font-variant-numeric: tabular-nums; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.d { white-space: nowrap; }
td code, .sbatch { font: .82rem ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre; }
.note, footer { color: var(--muted); font-size: .82rem; }
.chart { width: 100%; min-height: 300px; }
.bar { display: inline-block; height: 10px; vertical-align: middle; }
tr.over td { background: #ffe3e3; color: #a51d2d; font-weight: 600; }
tr.warn td { background: #fff3bf; }
@media (max-width: 600px) {
  main { padding: 10px; } body { font-size: 14px; }
  .kpis { grid-template-columns: repeat(2, 1fr); }
  th, td { padding: 3px 5px; }
}
@media print {
  body { font-size: 11pt; } main { max-width: none; padding: 0; }
  .scroll { overflow: visible; }
  section, .kpis, table, .chart { break-inside: avoid; }
  h2 { break-after: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""


def esc(value) -> str:
    return html.escape(terminal_safe(str(value)), quote=True)


@functools.lru_cache(maxsize=1)
def plotly_js_bytes() -> bytes:
    """Plotly's JS, UTF-8 encoded once: it is ~4.8 MB and not ASCII, so re-encoding it per report
    would cost more than the rest of the report."""
    from plotly.offline import get_plotlyjs
    return get_plotlyjs().encode("utf-8")


LAYOUT = {"margin": {"l": 50, "r": 10, "t": 30, "b": 40}, "height": 320, "autosize": True, "barmode": "stack",
          "legend": {"orientation": "h", "y": 1.12, "traceorder": "normal"}, "paper_bgcolor": "#fff", "plot_bgcolor": "#fff",
          "font": {"family": "system-ui, sans-serif", "size": 12},
          "xaxis": {"type": "category", "automargin": True},
          "yaxis": {"title": {"text": "SBU"}, "gridcolor": "#e6e9ed", "rangemode": "tozero", "automargin": True}}
# Fit the charts to the width the page finally has (a phone's viewport can settle after they are drawn).
# On paper, show the folded daily figures too.
RESIZE = ("<script>window.addEventListener('load',function(){document.querySelectorAll('.js-plotly-plot')"
          ".forEach(function(g){Plotly.Plots.resize(g);});});"
          "window.addEventListener('beforeprint',function(){document.querySelectorAll('details')"
          ".forEach(function(d){d.open=true;});});</script>")
LIBRARY_MARK = "\x00plotly-library\x00"   # cannot occur in the page: esc() shows control characters


def plotly_js_name() -> str:
    """The shared copy's file name: the version in it, so reports of another plotly keep theirs."""
    from plotly.offline import get_plotlyjs_version
    return f"plotly-{get_plotlyjs_version()}.min.js"


def write_plotly_js(folder: str | os.PathLike) -> str:
    """Plotly's JS as ``folder/plotly_js_name()`` (written when missing or different, through a
    temporary name so that a reader never sees half of it); returns the name for ``plotly_src``."""
    name = plotly_js_name()
    path = Path(folder) / name
    data = plotly_js_bytes()
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return name
    except FileNotFoundError:
        pass
    atomic_write(path, [data])
    return name
CONFIG = {"displayModeBar": False, "responsive": True}


def _script_json(obj) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' can end the element or open a comment."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _chart(div_id: str, x: list[str], series: list[tuple[str, list[float], str]]) -> str:
    """A stacked bar chart drawn by the embedded Plotly (figure JSON written directly: building
    plotly.graph_objects figures costs ~100 ms each, too slow for 1,000 reports)."""
    traces = [{"type": "bar", "name": name, "x": x, "y": [round(v, 3) for v in ys], "marker": {"color": colour}}
              for name, ys, colour in series]
    spec = _script_json({"data": traces, "layout": LAYOUT, "config": CONFIG})
    return (f'<div class="chart"><div id="{div_id}" style="height:320px;width:100%"></div>'
            f'<script>(function(){{var f={spec};Plotly.newPlot("{div_id}",f.data,f.layout,f.config);}})();</script></div>')


def _daily_chart(rep: Report) -> str:
    return _chart("chart-daily", [f"{d['day']:%a %d %b}" for d in rep.daily],
                  [(name, [d[key] for d in rep.daily], colour) for key, name, colour in
                   (("used_sbu", "used", USED), ("wasted_sbu", "wasted", WASTED), ("unrated_sbu", "unrated", UNRATED))])


def _trend_chart(rep: Report) -> str:
    return _chart("chart-trend", [esc(w["label"]) for w in rep.trend],
                  [("burned, not wasted", [w["sbu"] - w["wasted_sbu"] for w in rep.trend], USED),
                   ("wasted", [w["wasted_sbu"] for w in rep.trend], WASTED)])


def _group_chart(rows: list[dict], key: str, div_id: str, limit: int = 15) -> str:
    rows = rows[:limit]
    return _chart(div_id, [esc(r.get(key)) for r in rows],
                  [("burned, not wasted", [(r["sbu"] or 0) - (r["wasted_sbu"] or 0) for r in rows], USED),
                   ("wasted", [r["wasted_sbu"] or 0 for r in rows], WASTED)])


def _css_bars(rep: Report) -> str:
    """The daily burn as CSS bars, for the e-mail variant."""
    top = max([d["sbu"] for d in rep.daily] + [1e-9])
    rows = []
    for d in rep.daily:
        bars = "".join(f'<span class="bar" style="width:{d[k] / top * 200:.0f}px;background:{c}"></span>'
                       for k, c in (("used_sbu", USED), ("wasted_sbu", WASTED), ("unrated_sbu", UNRATED)) if d[k] > 0)
        rows.append(f'<tr><td>{esc(fmt(d["day"], "day"))}</td><td>{bars}</td>'
                    + "".join(f'<td class="n">{fmt(d[k], "num")}</td>' for k in ("used_sbu", "wasted_sbu", "unrated_sbu", "sbu"))
                    + "</tr>")
    legend = (f'<p class="note"><span class="bar" style="width:10px;background:{USED}"></span> used '
              f'<span class="bar" style="width:10px;background:{WASTED}"></span> wasted '
              f'<span class="bar" style="width:10px;background:{UNRATED}"></span> unrated</p>')
    head = "<tr><th>Day</th><th></th><th>Used</th><th>Wasted</th><th>Unrated</th><th>Total SBU</th></tr>"
    return legend + f'<div class="scroll"><table><thead>{head}</thead><tbody>' + "".join(rows) + "</tbody></table></div>"


def _data_age(rep: Report) -> str:
    """The 'Data up to' line under the period; class old when more than a day old."""
    if not rep.data_line:
        return ""
    old = " old" if rep.data_age and rep.data_age.old else ""
    return f'<p class="period data-age{old}" id="data-age">{esc(rep.data_line)}</p>'


def _cell(value, kind: str) -> str:
    if kind == "code":
        lines = "\n".join(esc(line) for line in str(value).splitlines())   # esc() would show \n literally
        return f'<td><code class="sbatch">{lines}</code></td>' if value else "<td>-</td>"
    cls = ' class="n"' if kind in ("num", "saving", "pct", "int") else ' class="d"' if kind == "date" else ""
    return f"<td{cls}>{esc(fmt(value, kind))}</td>"


# Tables of many columns made to fit the page's width rather than scroll sideways: their names wrap
# anywhere, flag lists after an underscore, and their efficiencies share one cell, a line each.
FIT = ("top_jobs",)
WRAP = ("job_name",)
BREAK_AFTER_UNDERSCORE = ("flag_codes",)
STACK = {"cpu_eff_pct": "CPU", "gpu_util_pct": "GPU", "mem_eff_pct": "Mem", "time_eff_pct": "Time"}


def _fit_cell(value, kind: str, key: str, url: str | None = None) -> str:
    if key == "job_id" and url:         # the job's dashboard page ([report] dashboard_url)
        return f'<td><a href="{esc(url)}">{esc(fmt(value, kind))}</a></td>'
    if key in WRAP:
        return f'<td class="wrap">{esc(fmt(value, kind))}</td>'
    if key in BREAK_AFTER_UNDERSCORE:
        return f"<td>{esc(fmt(value, kind)).replace('_', '_<wbr>')}</td>"
    return _cell(value, kind)


def _stack_cell(row: dict, cols: list) -> str:
    lines = [f"{STACK[c.key]} {esc(fmt(row.get(c.key), c.kind))}" for c in cols if row.get(c.key) is not None]
    return f'<td class="stack">{"<br>".join(lines) or "-"}</td>'


def _row(r: dict) -> str:
    """A row's start tag: an allocation used up is highlighted (budget rows carry `alert`)."""
    return {"over": '<tr class="over">', "warn": '<tr class="warn">'}.get(r.get("alert"), "<tr>")


def _table(sec: Section, rep: Report | None = None) -> str:
    """The section's table; the job ids of a FIT table link to their dashboard pages when ``rep``
    has a dashboard_url."""
    if not sec.rows:
        return f'<p class="note">{esc(sec.empty)}</p>'
    note = f'<p class="note">{esc(sec.note)}</p>' if sec.note else ""
    if sec.key not in FIT:
        head = "".join(f"<th>{esc(c.header)}</th>" for c in sec.cols)
        body = "".join(_row(r) + "".join(_cell(r.get(c.key), c.kind) for c in sec.cols) + "</tr>" for r in sec.rows)
        return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}'
    cols = [c for c in sec.cols if c.key not in STACK]
    stacked = [c for c in sec.cols if c.key in STACK]
    head = "".join(f"<th>{esc(c.header)}</th>" for c in cols) + ("<th>Efficiency</th>" if stacked else "")
    link = rep.job_url if rep is not None else (lambda _r: None)
    body = "".join("<tr>" + "".join(_fit_cell(r.get(c.key), c.kind, c.key, link(r)) for c in cols)
                   + (_stack_cell(r, stacked) if stacked else "") + "</tr>" for r in sec.rows)
    return f'<div class="scroll"><table class="fit"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}'


def render_html(rep: Report, charts: bool = True, generated: dt.datetime | None = None,
                plotly_src: str | None = None) -> str:
    return render_html_bytes(rep, charts, generated, plotly_src).decode("utf-8")


def render_html_bytes(rep: Report, charts: bool = True, generated: dt.datetime | None = None,
                      plotly_src: str | None = None) -> bytes:
    return b"".join(render_html_chunks(rep, charts, generated, plotly_src))


def render_html_chunks(rep: Report, charts: bool = True, generated: dt.datetime | None = None,
                       plotly_src: str | None = None) -> list[bytes]:
    """The page as UTF-8 pieces to write in turn (no 5 MB copy per report). With charts, Plotly's
    library is loaded from ``plotly_src`` (a path relative to the page, see write_plotly_js), or,
    without it, sits once in <head> between the two halves."""
    generated = generated or dt.datetime.now(dt.timezone.utc)
    kpis = "".join(
        f'<div class="kpi{" wasted" if c.key in ("wasted_sbu", "wasted_pct") else ""}">'
        f'<div class="v">{esc(fmt(v, c.kind))}</div><div class="k">{esc(c.header)}</div></div>'
        for c, v in headline(rep))
    parts = []
    for sec in sections(rep):
        chart = ""
        if sec.key == "daily":
            chart = _daily_chart(rep) if charts else _css_bars(rep)
        elif charts and sec.key == "trend":
            chart = _trend_chart(rep)
        elif charts and sec.key in ("accounts", "partitions") and sec.rows:
            chart = _group_chart(sec.rows, sec.key[:-1] if sec.key == "partitions" else "account", f"chart-{sec.key}")
        table = "" if sec.key == "daily" and not charts else _table(sec, rep)   # the bars carry the figures
        if sec.key == "daily" and charts:
            table = f"<details><summary>Daily figures</summary>{table}</details>"
        parts.append(f'<section id="{sec.key}"><h2>{esc(sec.title)}</h2>{chart}{table}</section>')
    script = ("" if not charts else f'<script src="{esc(plotly_src)}"></script>' if plotly_src
              else '<script type="text/javascript">' + LIBRARY_MARK + "</script>")
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(rep.title)}</title>
<style>{CSS}</style>
{script}
</head>
<body>
<main>
<header><h1>{esc(rep.heading)}</h1><p class="period">{esc(rep.period.describe())}</p>{_data_age(rep)}</header>
<p class="summary" id="summary">{esc(rep.summary)}</p>
<div class="kpis" id="headline">{kpis}</div>
{"".join(parts)}
<footer><p>Generated by jobsight on {generated:%Y-%m-%d %H:%M} UTC. SBU: billing units as charged.
Wasted SBU: the charge times the idle share of the resource that drove it (GPU, CPU or memory).
Efficiencies are allocation-weighted: each job counts with the core-, GPU- or GiB-hours it held.</p></footer>
</main>
{RESIZE if charts else ""}
</body>
</html>
"""
    if not charts or plotly_src:
        return [page.encode("utf-8")]
    before, after = page.split(LIBRARY_MARK, 1)
    return [before.encode("utf-8"), plotly_js_bytes(), after.encode("utf-8")]
