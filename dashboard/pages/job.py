"""One job (/job?cluster=c1&id=123): metadata, efficiencies, SBU and wasted SBU, flags with
advice, and the time series of its samples with the allocation drawn as a line."""
from __future__ import annotations

from dash import Input, Output, dcc, html

from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Scope
from jobsight.dashboard import common, figures

P = "job"
NOT_FOUND = "No such job, or not one you can see."
GiB = 2**30


def _hours(s) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 86400}-{s % 86400 // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 86400 else \
        f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _pct(x) -> str:
    return "unknown" if x is None or x != x else f"{x:.1f} %"


def _gib(b) -> str:
    return "-" if b is None or b != b else f"{b / GiB:.1f} GiB"


def _table(rows: list[tuple[str, object]]) -> html.Table:
    # every value goes in as a string child: Dash renders it as text, never as HTML
    return html.Table([html.Tr([html.Th(k), html.Td("-" if v is None else str(v))]) for k, v in rows],
                      className="kv")


def render(h, scope: Scope, cluster: str | None, job_id: str | None) -> list:
    if not job_id:
        return [html.P("No job id given.", className="empty")]
    j = queries.job(h, scope, cluster, job_id)
    if j is None:
        return [html.P(NOT_FOUND, className="empty")]
    running = j["state"] == "RUNNING"      # no exit code yet; its SBU is what it has burned so far
    ended = [("State", j["state"]), ("Exit code", j["exit_code"])] if not running else \
        [("State", "RUNNING (still running: figures so far)")]
    meta = _table([("Job", j["job_id"]), ("Cluster", j["cluster"]), ("Name", j["job_name"]), ("User", j["user"]),
                   ("Project", j["account"]), ("Partition", j["partition"]), ("QOS", j["qos"]),
                   *ended,
                   ("Submit / start / end (UTC)", f"{j['submit_time'] or '-'} / {j['start_time'] or '-'} / {j['end_time'] or '-'}"),
                   ("Elapsed / limit", f"{_hours(j['elapsed_s'])} / {_hours(j['timelimit_s'])}"),
                   ("Cores / nodes / GPUs", f"{j['ncpus'] or 0} / {j['nnodes'] or '-'} / {j['ngpus'] or 0}"
                                             + (f" ({j['gpu_type']})" if j["gpu_type"] else "")),
                   ("Nodes", j["node_list"])])
    # Slurm's gres/gpuutil and seff's GPU lines are one figure for the whole job, not each GPU's
    gpu_label = "GPU utilisation (job-level, not per GPU)" if j["gpu_util_source"] == "slurm-tres" else "GPU utilisation"
    gpus = [(gpu_label, _pct(j["gpu_util_pct"]) + (f" ({j['gpu_util_source']})" if j["gpu_util_source"] else "")),
            ("GPU memory peak", _pct(j["gpu_mem_peak_pct"])),
            ("Idle GPUs", j["gpus_idle"])] if j["ngpus"] or j["gpu_util_pct"] is not None else []   # none: a CPU job
    eff = _table([("CPU efficiency", _pct(j["cpu_eff_pct"]) + (f" ({j['cpu_eff_source']})" if j["cpu_eff_source"] else "")),
                  *gpus,
                  ("Memory", f"{_gib(j['mem_peak_bytes'])} peak of {_gib(j['mem_charged_bytes'])} ({_pct(j['mem_eff_pct'])})"),
                  ("Time efficiency", _pct(j["time_eff_pct"])),
                  ("SBU so far" if running else "SBU", f"{common.number(j['sbu'])} ({j['sbu_source']})"),
                  ("Wasted SBU", f"{common.number(j['wasted_sbu'])} (charge driven by {j['charge_driver']})")])
    flags = queries.job_flag_rows(h, scope, j["cluster"], j["job_id_raw"], j["user"])
    flag_list = html.Ul([html.Li([html.Strong(f"{f['severity']}: {f['code']}"), html.Span(" " + f["message"]),
                                  html.Div(["Advice: ", html.Code(f["advice"])], className="advice")],
                                 className=f"flag flag-{f['severity']}") for f in flags], id="job-flags") \
        if flags else html.P("No flags.", id="job-flags")
    fit = _fit(queries.job_fit(h, scope, j["cluster"], j["job_id_raw"]), j["sbu"])
    samples = queries.job_samples(h, scope, j["cluster"], j["job_id_raw"])
    if samples.empty:
        series = [html.P("No samples: this job has no sidecar or nvidia-smi time series.", id="job-no-samples",
                         className="empty")]
    else:
        figs = figures.job_figures(samples, j)
        series = [html.Div([dcc.Graph(figure=figs[k], id=f"job-fig-{k}", className="half",
                                      config={"displaylogo": False}) for k in pair], className="row")
                  for pair in (("gpu_util", "gpu_mem"), ("cpu_util", "mem")) if pair[0] in figs]
    moved = samples.attrs.get("samples_moved")
    if moved:       # `jobsight prune`: the figures above were computed from every sample
        where = f"Samples before {moved['before']:%Y-%m-%d %H:%M} UTC were moved to the Parquet lake {moved['lake']}"
        series.insert(0, html.P(f"{where}: the time series reads them from the lake." if moved["read"] else
                                f"{where}, which cannot be read now: the time series shows only the samples kept "
                                f"since ({moved['why']}).", id="job-samples-moved", className="empty"))
    return [html.H2(f"Job {j['job_id']}"),
            html.Div([html.Div([html.H3("Job"), meta], className="half"),
                      html.Div([html.H3("Efficiency and charge"), eff], className="half")], className="row"),
            html.H3("Flags"), flag_list, *fit, html.H3("Time series"), *series]


def _fit(s: dict | None, sbu) -> list:
    """'Would have fit': the request the advice adds up to and what it would have been charged."""
    if not s:
        return []
    req = s["fitted_request"] or "the same request (the advice changes no option)"
    if s["savings_sbu"] is None:
        price = f"savings: unknown ({s['savings_note'] or 'no price'})"
    else:
        share = f" ({s['savings_sbu'] / sbu * 100:.0f} % of its charge)" if sbu else ""
        price = (f"charged {common.number(s['sbu_if_fitted'], 1)} SBU instead of {common.number(sbu, 1)}: "
                 f"following the advice would have saved {common.number(s['savings_sbu'], 1)} SBU{share}")
        if s["savings_note"]:       # how it was priced, when not as the job was
            price += f" ({s['savings_note']})"
    return [html.H3("Would have fit"),
            html.Div([html.Code(req), html.P(price)], id="job-fit", className="advice")]


def layout(params: dict[str, str], scope: Scope) -> html.Div:
    return html.Div([dcc.Store(id=f"{P}-key", data={"cluster": params.get("cluster"), "id": params.get("id")}),
                     dcc.Loading(html.Div(id=f"{P}-content"), type="default")])


def register(app) -> None:
    @app.callback(Output(f"{P}-content", "children"), Input(f"{P}-key", "data"))
    @common.safe()
    def content(key):
        key = key if isinstance(key, dict) else {}
        cluster, job_id = key.get("cluster"), key.get("id")
        cluster = cluster if isinstance(cluster, str) and cluster else None
        job_id = job_id if isinstance(job_id, str) else None
        with common.handle() as h:
            return render(h, common.scope(), cluster, job_id)
