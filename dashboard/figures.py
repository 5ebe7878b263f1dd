"""Plotly figures from the data frames of analytics/queries/summaries.py. Pure functions: no database, no Dash.

Figures are plain dicts in Plotly's JSON form ({"data": [...], "layout": {...}}), which dcc.Graph
takes as they are: building them through plotly.graph_objects validates every trace and cost
200-1000 ms per page at cluster scale.

Plotly renders a subset of HTML (<a href>, <b>, <i>, <br>, <span style>...) in every text it draws:
trace names in the legend and hover labels, hover text, category tick labels, titles. Names from
the scheduler (projects, partitions, hosts, GPU ids) are data, so every string of a figure passes
through :func:`inert` in :func:`_fig`: ``& < > " '`` become numeric character references, which
Plotly shows as the characters themselves (it decodes ``&#60;`` but not ``&quot;``).
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

GiB = 2**30
Figure = dict[str, Any]
_ENTITIES = str.maketrans({"&": "&#38;", "<": "&#60;", ">": "&#62;", '"': "&#34;", "'": "&#39;"})
# what Plotly draws as text from a trace: these keys (strings or lists of strings) are escaped
TEXT_KEYS = ("name", "text", "hovertext", "x", "y", "customdata", "legendgroup", "ids")


def inert(value: Any) -> Any:
    """A string (or the strings in a list) as text to Plotly: markup characters as entities."""
    if isinstance(value, str):
        return value.translate(_ENTITIES)
    if isinstance(value, (list, tuple)):
        strings = "".join(v for v in value if isinstance(v, str))      # one pass over a long series
        if not any(c in strings for c in "&<>\"'"):
            return value
        return [inert(v) for v in value]
    return value


def _times(s: pd.Series) -> list[str]:
    return pd.to_datetime(s).dt.strftime("%Y-%m-%d %H:%M:%S").tolist()


def _nums(s: pd.Series) -> list:
    return [None if pd.isna(v) else float(v) for v in s.tolist()]


def _fig(title: str, data: list[dict], **layout) -> Figure:
    """The figure, with every text Plotly would draw from the traces, the titles and the
    annotations made inert (the one place: a new trace or axis gets it too)."""
    # the title at the left: the mode bar (zoom, download) sits at the right, over a centred title of a half chart
    base = {"title": {"text": title, "x": 0.01, "xanchor": "left"}, "template": "plotly_white",
            "margin": {"l": 50, "r": 20, "t": 50, "b": 40},
            "legend": {"orientation": "h", "y": -0.2}}
    base.update(layout)
    data = [{k: inert(v) if k in TEXT_KEYS else v for k, v in tr.items()} for tr in data]
    base["title"] = {**base["title"], "text": inert(base["title"]["text"])}
    for key, axis in base.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis.get("title"), dict):
            base[key] = {**axis, "title": {**axis["title"], "text": inert(axis["title"].get("text"))}}
        if key.startswith(("xaxis", "yaxis")) and "ticktext" in axis:
            base[key] = {**base[key], "ticktext": inert(axis["ticktext"])}
    if "annotations" in base:
        base["annotations"] = [{**a, "text": inert(a.get("text"))} for a in base["annotations"]]
    return {"data": data, "layout": base}


def empty(title: str, text: str = "No data for this selection") -> Figure:
    return _fig(title, [], annotations=[{"text": text, "showarrow": False, "xref": "paper", "yref": "paper",
                                         "x": 0.5, "y": 0.5, "font": {"size": 16}}],
                xaxis={"visible": False}, yaxis={"visible": False})


# Stacked groups get these colours, each its own; past as many groups, the smallest are one "other".
PALETTE = ["#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880",
           "#FF97FF", "#FECB52", "#8C564B", "#1F3A5F"]
OTHER_COLOUR = "#BDBDBD"
GRAIN_NAMES = {"week": "week", "month": "month"}


def top_groups(rows: list[tuple], n: int = len(PALETTE)) -> tuple[list[tuple], str | None]:
    """``rows`` (period start, group, sbu, wasted sbu) with the groups past the ``n - 1`` largest
    (by SBU; ties by name) summed per period into one, when there are more than ``n``; and that
    group's name (None: none)."""
    totals: dict = {}
    for _t, g, v, _w in rows:
        totals[g] = totals.get(g, 0.0) + (v or 0.0)
    if len(totals) <= n:
        return rows, None
    ranked = sorted(sorted(totals), key=lambda g: -totals[g])
    keep = set(ranked[:n - 1])
    other = f"other ({len(ranked) - len(keep)})"
    small: dict = {}
    out = []
    for t, g, v, w in rows:
        if g in keep:
            out.append((t, g, v, w))
        else:
            s = small.setdefault(t, [0.0, 0.0])
            s[0] += v or 0.0
            s[1] += w or 0.0
    return out + [(t, other, v, w) for t, (v, w) in small.items()], other


def bucket_end(start: dt.date, grain: str) -> dt.date:
    if grain == "week":
        return start + dt.timedelta(days=6)
    if grain == "month":
        return (start.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)
    return start


def partial_days(start: dt.date, grain: str, span: tuple[dt.date, dt.date] | None) -> int | None:
    """How many days of the week or month starting ``start`` are inside ``span`` (first, last day
    of the period), when not all of them are; None for a whole one."""
    if span is None or grain not in GRAIN_NAMES:
        return None
    end = bucket_end(start, grain)
    lo, hi = max(start, span[0]), min(end, span[1])
    inside = (hi - lo).days + 1
    return inside if inside < (end - start).days + 1 else None


def usage_figure(df: pd.DataFrame, stack_label: str = "project", grain: str = "day",
                 span: tuple[dt.date, dt.date] | None = None) -> Figure:
    """Stacked bars of SBU burned per period and group, with the wasted SBU of all groups as a line.
    Each group has its own colour (the smallest beyond PALETTE's share one, "other"). A week or month
    only partly inside ``span`` (the period's first and last day) is drawn lighter and says so."""
    title = f"SBU burned (stacked by {stack_label}) and wasted"
    if df.empty:
        return empty(title)
    # plain lists, one pass: the figure of a month by day and a dozen groups is built in a few ms
    # (pandas per group took 40-170 ms of every overview's answer)
    stamps = pd.to_datetime(df["period_start"]).tolist()
    rows, other = top_groups(list(zip(stamps, df["group"].tolist(), _nums(df["sbu"]), _nums(df["wasted_sbu"]))))
    text = {t: t.strftime("%Y-%m-%d %H:%M:%S") for t in set(stamps)}
    part = {t: partial_days(t.date(), grain, span) for t in text}
    by_group: dict[Any, list] = {}
    wasted: dict[Any, float] = {}
    for t, g, v, w in rows:
        by_group.setdefault(g, []).append((t, v))
        wasted[t] = wasted.get(t, 0.0) + (w or 0.0)
    data = []
    groups = sorted(g for g in by_group if g != other) + ([other] if other else [])
    for i, group in enumerate(groups):
        points = sorted(by_group[group], key=lambda p: p[0])
        bar = {"type": "bar", "x": [text[t] for t, _v in points], "y": [v for _t, v in points], "name": str(group),
               "marker": {"color": OTHER_COLOUR if group == other else PALETTE[i % len(PALETTE)]}}
        days = [part[t] for t, _v in points]
        if any(days):
            bar["marker"]["opacity"] = [0.4 if n else 1.0 for n in days]
            bar["hovertext"] = [f"partial {grain}: {n} of {(bucket_end(t.date(), grain) - t.date()).days + 1} days"
                                if n else "" for (t, _v), n in zip(points, days)]
        data.append(bar)
    order = sorted(wasted)
    data.append({"type": "scatter", "x": [text[t] for t in order], "y": [wasted[t] for t in order],
                 "name": "wasted (all)", "mode": "lines+markers", "line": {"color": "black", "dash": "dot"}})
    layout: dict = {"barmode": "stack", "yaxis": {"title": {"text": "SBU"}}}
    if any(part.values()):
        layout["annotations"] = [{"text": f"lighter bars: a partial {grain} (only part of it is in the period)",
                                  "showarrow": False, "xref": "paper", "yref": "paper", "x": 1, "y": 1.06,
                                  "xanchor": "right", "font": {"size": 11, "color": "#666"}}]
    return _fig(title, data, **layout)


BIN_LABELS = [f"{b}-{b + 10}" if b < 90 else "90+" for b in range(0, 100, 10)]


def efficiency_figure(df: pd.DataFrame) -> Figure:
    """Jobs per 10 % bin, one trace per metric."""
    title = "Efficiency distribution (jobs per 10 % bin)"
    if df.empty:
        return empty(title)
    data = []
    for metric, part in df.groupby("metric", sort=False):
        counts = dict(zip(part["bin"].astype(int), part["jobs"]))
        data.append({"type": "bar", "x": BIN_LABELS, "y": [int(counts.get(b, 0)) for b in range(0, 100, 10)],
                     "name": str(metric)})
    return _fig(title, data, barmode="group", xaxis={"title": {"text": "efficiency %"}},
                yaxis={"title": {"text": "jobs"}})


SEVERITY_COLOURS = {"alarm": "#c0392b", "warn": "#e67e22", "info": "#2980b9"}


def flag_count_figure(df: pd.DataFrame) -> Figure:
    title = "Flagged jobs by flag"
    if df.empty:
        return empty(title, "No flagged jobs")
    data = [{"type": "bar", "orientation": "h", "y": [str(c) for c in part["code"]], "x": _nums(part["jobs"]),
             "name": str(sev), "marker": {"color": SEVERITY_COLOURS.get(str(sev))}}
            for sev, part in df.groupby("severity", sort=False)]
    return _fig(title, data, barmode="stack", xaxis={"title": {"text": "jobs"}}, yaxis={"automargin": True})


def _series(title: str, ytitle: str, data: list[dict], percent: bool = False) -> Figure:
    """A time series; ``percent``: a utilisation axis, fixed at 0-100 % (higher only to show a value above)."""
    yaxis: dict = {"title": {"text": ytitle}}
    if percent:
        top = max([v for tr in data for v in tr["y"] if v is not None] + [100])
        yaxis.update(range=[0, top * (1.03 if top > 100 else 1)], ticksuffix=" %")
    return _fig(title, data, yaxis=yaxis, xaxis={"title": {"text": "time (UTC)"}}, hovermode="x unified")


def _line(x, y, name: str, dash: str | None = None) -> dict:
    tr = {"type": "scatter", "mode": "lines", "x": x, "y": y, "name": name}
    if dash:
        tr["line"] = {"color": "black", "dash": dash}
    return tr


def _gpu_label(host: str, device: str, gpu_index) -> str:
    idx = "" if pd.isna(gpu_index) else f"GPU {int(gpu_index)} "
    return f"{idx}{device[:16]} @ {host}"


def job_figures(samples: pd.DataFrame, job: dict) -> dict[str, Figure]:
    """The time-series figures of one job: GPU utilisation per GPU and GPU memory (none for a job
    without GPUs and GPU samples), CPU utilisation (% of the allocated cores) and memory, each with
    the allocation as a dashed line; utilisation on a 0-100 % axis."""
    out: dict[str, Figure] = {}
    gpu = samples[samples["device"] != "cpu"]
    cpu = samples[samples["device"] == "cpu"]
    if gpu.empty and (job.get("ngpus") or 0) > 0:
        out["gpu_util"] = empty("GPU utilisation", "No GPU samples")
        out["gpu_mem"] = empty("GPU memory", "No GPU samples")
    elif gpu.empty:
        pass                                  # a CPU-only job: no GPU panels
    else:
        util, mem = [], []
        for (host, device), part in gpu.groupby(["host", "device"], sort=True):
            label = _gpu_label(host, device, part["gpu_index"].iloc[0])
            x = _times(part["time"])
            util.append(_line(x, _nums(part["util_pct"]), label))
            mem.append(_line(x, _nums(part["mem_used_bytes"] / GiB), label))
        t = _times(pd.Series([gpu["time"].min(), gpu["time"].max()]))
        util.append(_line(t, [100, 100], "allocation (100 % per GPU)", "dash"))
        total = gpu["mem_total_bytes"].max()
        if pd.notna(total):
            mem.append(_line(t, [total / GiB] * 2, "device memory", "dash"))
        out["gpu_util"] = _series("GPU utilisation per GPU", "utilisation", util, percent=True)
        out["gpu_mem"] = _series("GPU memory per GPU", "GiB", mem)
    if cpu.empty:
        out["cpu_util"] = empty("CPU utilisation", "No CPU samples")
        out["mem"] = empty("Memory", "No memory samples")
    else:
        cu, mu = [], []
        for host, part in cpu.groupby("host", sort=True):
            x = _times(part["time"])
            cu.append(_line(x, _nums(part["util_pct"]), str(host)))
            mu.append(_line(x, _nums(part["mem_used_bytes"] / GiB), str(host)))
        t = _times(pd.Series([cpu["time"].min(), cpu["time"].max()]))
        ncpus = job.get("ncpus")
        cu.append(_line(t, [100, 100], f"allocation ({ncpus} cores)" if ncpus else "allocation", "dash"))
        limit = cpu["mem_total_bytes"].max()
        if pd.isna(limit) and job.get("mem_charged_bytes"):
            limit = job["mem_charged_bytes"] / max(job.get("nnodes") or 1, 1)
        if pd.notna(limit):
            mu.append(_line(t, [limit / GiB] * 2, "allocation (per host)", "dash"))
        out["cpu_util"] = _series("CPU utilisation (% of allocated cores)", "utilisation", cu, percent=True)
        out["mem"] = _series("Memory per host", "GiB", mu)
    return out
