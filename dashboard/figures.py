"""Plotly figures from the data frames of dashboard/queries.py. Pure functions: no database, no Dash.

Names from the scheduler (projects, partitions, hosts, GPU ids) only ever appear in legends, axis
labels and hover text, which Plotly renders as text.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

GiB = 2**30


def _base(title: str, **layout) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, template="plotly_white", margin=dict(l=50, r=20, t=50, b=40),
                      legend=dict(orientation="h", y=-0.2), **layout)
    return fig


def empty(title: str, text: str = "No data for this selection") -> go.Figure:
    fig = _base(title)
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font=dict(size=16))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def usage_figure(df: pd.DataFrame, stack_label: str = "project") -> go.Figure:
    """Stacked bars of SBU burned per period and group, with the wasted SBU of all groups as a line."""
    title = f"SBU burned (stacked by {stack_label}) and wasted"
    if df.empty:
        return empty(title)
    fig = _base(title, barmode="stack", yaxis_title="SBU")
    for group, part in df.groupby("group", sort=True):
        fig.add_bar(x=part["period_start"], y=part["sbu"], name=str(group))
    wasted = df.groupby("period_start", as_index=False)["wasted_sbu"].sum()
    fig.add_scatter(x=wasted["period_start"], y=wasted["wasted_sbu"], name="wasted (all)",
                    mode="lines+markers", line=dict(color="black", dash="dot"))
    return fig


def efficiency_figure(df: pd.DataFrame) -> go.Figure:
    """Jobs per 10 % bin, one trace per metric."""
    title = "Efficiency distribution (jobs per 10 % bin)"
    if df.empty:
        return empty(title)
    fig = _base(title, barmode="group", xaxis_title="efficiency %", yaxis_title="jobs")
    labels = [f"{b}-{b + 10}" if b < 90 else "90+" for b in range(0, 100, 10)]
    for metric, part in df.groupby("metric", sort=False):
        counts = dict(zip(part["bin"].astype(int), part["jobs"]))
        fig.add_bar(x=labels, y=[int(counts.get(b, 0)) for b in range(0, 100, 10)], name=str(metric))
    return fig


def flag_count_figure(df: pd.DataFrame) -> go.Figure:
    title = "Flagged jobs by flag"
    if df.empty:
        return empty(title, "No flagged jobs")
    fig = _base(title, barmode="stack", xaxis_title="jobs")
    colours = {"alarm": "#c0392b", "warn": "#e67e22", "info": "#2980b9"}
    for sev, part in df.groupby("severity", sort=False):
        fig.add_bar(y=part["code"], x=part["jobs"], name=str(sev), orientation="h",
                    marker_color=colours.get(str(sev)))
    return fig


def _series_figure(title: str, ytitle: str) -> go.Figure:
    return _base(title, yaxis_title=ytitle, xaxis_title="time (UTC)", hovermode="x unified")


def _gpu_label(row_host: str, device: str, gpu_index) -> str:
    idx = "" if pd.isna(gpu_index) else f"GPU {int(gpu_index)} "
    return f"{idx}{device[:16]} @ {row_host}"


def job_figures(samples: pd.DataFrame, job: dict) -> dict[str, go.Figure]:
    """Four time-series figures for one job: GPU utilisation per GPU, GPU memory, CPU utilisation
    (% of the allocated cores) and memory, each with the allocation as a dashed line."""
    out: dict[str, go.Figure] = {}
    gpu = samples[samples["device"] != "cpu"]
    cpu = samples[samples["device"] == "cpu"]
    if gpu.empty:
        msg = "No GPU samples" if (job.get("ngpus") or 0) > 0 else "No GPUs in this job"
        out["gpu_util"] = empty("GPU utilisation", msg)
        out["gpu_mem"] = empty("GPU memory", msg)
    else:
        fu = _series_figure("GPU utilisation per GPU", "%")
        fm = _series_figure("GPU memory per GPU", "GiB")
        for (host, device), part in gpu.groupby(["host", "device"], sort=True):
            label = _gpu_label(host, device, part["gpu_index"].iloc[0])
            fu.add_scatter(x=part["time"], y=part["util_pct"], name=label, mode="lines")
            fm.add_scatter(x=part["time"], y=part["mem_used_bytes"] / GiB, name=label, mode="lines")
        t0, t1 = gpu["time"].min(), gpu["time"].max()
        fu.add_scatter(x=[t0, t1], y=[100, 100], name="allocation (100 % per GPU)", mode="lines",
                       line=dict(color="black", dash="dash"))
        total = gpu["mem_total_bytes"].max()
        if pd.notna(total):
            fm.add_scatter(x=[t0, t1], y=[total / GiB] * 2, name="device memory", mode="lines",
                           line=dict(color="black", dash="dash"))
        out["gpu_util"], out["gpu_mem"] = fu, fm
    if cpu.empty:
        out["cpu_util"] = empty("CPU utilisation", "No CPU samples")
        out["mem"] = empty("Memory", "No memory samples")
    else:
        fc = _series_figure("CPU utilisation (% of allocated cores)", "%")
        fmem = _series_figure("Memory per host", "GiB")
        for host, part in cpu.groupby("host", sort=True):
            fc.add_scatter(x=part["time"], y=part["util_pct"], name=str(host), mode="lines")
            fmem.add_scatter(x=part["time"], y=part["mem_used_bytes"] / GiB, name=str(host), mode="lines")
        t0, t1 = cpu["time"].min(), cpu["time"].max()
        ncpus = job.get("ncpus")
        fc.add_scatter(x=[t0, t1], y=[100, 100], mode="lines", line=dict(color="black", dash="dash"),
                       name=f"allocation ({ncpus} cores)" if ncpus else "allocation")
        limit = cpu["mem_total_bytes"].max()
        if pd.isna(limit) and job.get("mem_charged_bytes"):
            limit = job["mem_charged_bytes"] / max(job.get("nnodes") or 1, 1)
        if pd.notna(limit):
            fmem.add_scatter(x=[t0, t1], y=[limit / GiB] * 2, name="allocation (per host)", mode="lines",
                             line=dict(color="black", dash="dash"))
        out["cpu_util"], out["mem"] = fc, fmem
    return out
