"""`jobsight job`: one job, seff/jobstats style: efficiencies, GPU table, SBU, flags and advice, and
what the request that would have fit is charged (job_savings). A multi-node job gets one CPU and
memory line per node (from the sidecar's samples). A job with samples but no accounting yet gets
its samples' summary and says that the accounting is missing (analytics/queries/samples.py)."""
from __future__ import annotations

import argparse
import textwrap

from jobsight.analytics import render
from jobsight.analytics.commands.options import add_db_options, scope_of


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p, server=True)
    p.add_argument("job", help="job id: 123, 123_4 (array task) or the raw id")
    p.add_argument("--cluster", help="when the id exists on several clusters")
    p.add_argument("--format", choices=("text", "json"), default="text")


WIDTH = 100      # the text report's lines fit a terminal this wide


def _fitted(lines: list[str]) -> str:
    """The lines, each longer than WIDTH wrapped at spaces, its continuation indented under it."""
    out = []
    for text in "\n".join(lines).split("\n"):
        if len(text) <= WIDTH:
            out.append(text)
            continue
        lead = " " * (len(text) - len(text.lstrip(" ")) + 4)
        out += textwrap.wrap(text, WIDTH, subsequent_indent=lead, break_on_hyphens=False)
    return "\n".join(out)


def _hms(seconds) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    mnt, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{mnt:02d}:{s:02d}"


def _gib(b) -> str:
    return "-" if b is None else f"{b / 2**30:.2f} GiB"


def _pct(v, source=None) -> str:
    if v is None:
        return "unknown (no data)"
    return f"{v:.1f}%" + (f"  [{source}]" if source else "")


def _node_lines(nodes: list[dict], nnodes=None) -> list[str]:
    """One CPU and memory line per node, as jobstats prints them."""
    t = render.terminal_safe
    if not nodes:
        return [] if (nnodes or 0) <= 1 else ["", f"Per node: no CPU samples of its {nnodes} nodes "
                                              "(the sidecar records one CPU and memory series per node)"]
    width = max(len(t(n["host"])) for n in nodes)
    out = ["", "Per node (sidecar):"]
    for n in nodes:
        limit = f" of {_gib(n['mem_limit_bytes'])}" if n["mem_limit_bytes"] else ""
        out.append(f"  {t(n['host']):<{width}}  CPU {_pct(n['cpu_util_pct'])}   memory peak {_gib(n['mem_peak_bytes'])}"
                   f"{limit}   ({n['n_samples']} samples)")
    return out


GPU_TABLE = ["host", "gpu_index", "device", "util_mean_pct", "util_max_pct", "mem_peak_gib", "mem_total_gib", "n_samples"]
GPU_HEADERS = ["host", "gpu", "device", "util mean %", "util max %", "mem peak GiB", "mem total GiB", "samples"]


def _gpu_lines(gpus: list[dict]) -> list[str]:
    if not gpus:
        return []
    rows = [{**g, **{f"{k}_gib": None if g[f"{k}_bytes"] is None else g[f"{k}_bytes"] / 2**30
                     for k in ("mem_peak", "mem_total")}} for g in gpus]
    data = [tuple(r.get(c) for c in GPU_TABLE) for r in rows]     # the device id is cut before anything else
    return ["", "GPUs:", render.table_of(GPU_TABLE, data, GPU_TABLE, GPU_HEADERS, width=WIDTH, cut_first=("device",))]


def _series_lines(series: dict) -> list[str]:
    t = render.terminal_safe
    if not series:
        return []
    lines = ["", "Utilisation over time (0-100%):"]
    labels = {dev: "CPU" if dev == "cpu" else t(dev[:-4]) + " CPU" if dev.endswith(" cpu") else t(dev)[:20]
              for dev in series}
    width = max(12, *(len(v) for v in labels.values()))
    for dev, vals in series.items():
        lines.append(f"  {labels[dev]:<{width}} {render.sparkline(vals)}")
    return lines


def _moved_line(moved: dict) -> str:
    """Where a pruned job's samples are (its figures above were computed from all of them)."""
    lake = render.terminal_safe(moved["lake"] or "")
    where = f"samples before {moved['before']:%Y-%m-%d %H:%M} UTC were moved to the Parquet lake {lake}"
    return (f"  ({where}: the series reads them from the lake)" if moved["read"] else
            f"  ({where}, which cannot be read now: the series shows only the samples kept since; "
            f"{render.terminal_safe(moved.get('why') or '')})")


def _owner(o: dict) -> str:
    return f"{render.terminal_safe(o['owner_user'])} (uid {o['owner_uid']})" if o["owner_user"] else f"uid {o['owner_uid']}"


def samples_report(m: dict) -> str:
    """A job with samples and no accounting: what its samples show, and why none of it counts yet."""
    t = render.terminal_safe
    lines = [f"Job ID: {t(m['job_id_raw'])}   Cluster: {t(m['cluster'])}",
             "Accounting: missing. No sacct, seff, PBS or LSF record of this job is in the database yet, so it has",
             "no SBU, efficiencies or flags, and its samples are in no report. Ingest its accounting (e.g.",
             "`jobsight ingest --from-sacct`) and they count."]
    for key, title in (("samples", "Samples (counted once the accounting arrives)"),
                       ("pending_samples", "Samples held, NOT counted (trust model, docs/ingest.md)")):
        s = m.get(key)
        if not s:
            continue
        lines += ["", f"{title}: {s['n_samples']} samples, {render.cell(s['first_time'])} to "
                      f"{render.cell(s['last_time'])} (UTC)"]
        if key == "pending_samples":
            lines.append("  from files of " + ", ".join(f"{_owner(o)}: {o['n_samples']}" for o in s["owners"])
                         + "; they count only if the accounting shows the job is that user's")
        lines += _node_lines(s["nodes"]) + _gpu_lines(s["gpus"]) + _series_lines(s["series"])
    return _fitted(lines)


def text_report(m: dict) -> str:
    if m.get("accounting", True) is None:
        return samples_report(m)
    t = render.terminal_safe
    running = m.get("state") == "RUNNING"      # no exit code yet; its SBU is what it has burned so far
    state = "State: RUNNING (still running: figures so far)" if running else \
        f"State: {t(m['state'] or '-')} (exit code {t(m['exit_code'] or '-')})"
    sbu_label = "SBU so far" if running else "SBU"
    gpus = f"{m['ngpus']} x {t(m['gpu_type'])}" if m.get("ngpus") and m.get("gpu_type") else str(m.get("ngpus") or 0)
    lines = [
        f"Job ID: {t(m['job_id'])} (raw {t(m['job_id_raw'])})   Cluster: {t(m['cluster'])}",
        f"Name: {t(m['job_name'] or '-')}",
        f"User/Account: {t(m['user'] or '-')} / {t(m['account'] or '-')}   "
        f"Partition: {t(m['partition'] or '-')}   QOS: {t(m['qos'] or '-')}",
        state,
        f"Nodes: {m['nnodes'] or '-'}   Cores: {m['ncpus'] or '-'}   GPUs: {gpus}   Memory: {_gib(m['mem_charged_bytes'])}",
        f"Start: {render.cell(m['start_time'])}   End: {render.cell(m['end_time'])}  (UTC)",
        f"Wall-clock: {_hms(m['elapsed_s'])} of {_hms(m['timelimit_s']) if m['timelimit_s'] else 'no'} limit   "
        f"Time efficiency: {_pct(m['time_eff_pct'])}",
        f"CPU efficiency: {_pct(m['cpu_eff_pct'], m['cpu_eff_source'])} of {_hms((m['elapsed_s'] or 0) * (m['ncpus'] or 0))} core-walltime",
        f"Memory efficiency: {_pct(m['mem_eff_pct'], m['mem_peak_source'])}  "
        f"({_gib(m['mem_peak_bytes'])} peak of {_gib(m['mem_charged_bytes'])})",
    ]
    if m.get("ngpus") or m["gpus"]:
        # Slurm's gres/gpuutil and seff's GPU lines are one figure for the whole job, not each GPU's
        job_level = " (job-level, not per GPU)" if m.get("gpu_util_source") == "slurm-tres" else ""
        lines.append(f"GPU utilisation{job_level}: {_pct(m['gpu_util_pct'], m['gpu_util_source'])}   "
                     f"idle GPUs: {m['gpus_idle'] if m['gpus_idle'] is not None else '-'}"
                     + (f"   energy: {m['gpu_energy_kwh']:.2f} kWh" if m.get("gpu_energy_kwh") else ""))
        lines.append(f"  least-used GPU: {_pct(m['gpu_util_min_device_pct'])}   "
                     f"peak GPU memory: {_pct(m['gpu_mem_peak_pct'])}")
    wasted = "unknown" if m["wasted_sbu"] is None else f"{m['wasted_sbu']:,.1f}"
    lines.append(f"{sbu_label}: {m['sbu']:,.1f} [{m['sbu_source']}]   wasted: {wasted}  (charged for {m['charge_driver']})"
                 if m["sbu"] is not None else f"{sbu_label}: unknown")
    lines += _node_lines(m.get("nodes") or [], m.get("nnodes")) + _gpu_lines(m["gpus"]) + _series_lines(m["series"])
    if m.get("samples_moved"):
        lines.append(_moved_line(m["samples_moved"]))
    if m.get("pending"):
        lines += ["", "Held samples, not counted: " + ", ".join(f"{o['n_samples']} from files of {_owner(o)}"
                                                            for o in m["pending"])
                  + " (a user's samples count only for their own jobs: docs/ingest.md, trust model)"]
    if m["flags"]:
        lines += ["", "Flags:"]
        for f in m["flags"]:
            lines.append(f"  [{t(f['severity'])}] {t(f['code'])}: {t(f['message'])}")
            lines.append(f"      advice: {t(f['advice'])}")
    else:
        lines += ["", "Flags: none"]
    lines += _savings_lines(m)
    return _fitted(lines)     # run() escapes anything a line above let through, before a terminal sees it


def _savings_lines(m: dict) -> list[str]:
    """The request the advice adds up to, and what it would have been charged."""
    s = m.get("savings")
    if not s:
        return []
    t = render.terminal_safe
    out = ["", f"Would have fit: {t(s['fitted_request']) or 'the same request (the advice changes no option)'}"]
    if s["savings_sbu"] is None:
        out.append(f"  savings: unknown ({t(s['savings_note'] or 'no price')})")
    else:
        share = f" ({s['savings_sbu'] / m['sbu'] * 100:.0f}%)" if m.get("sbu") else ""
        out.append(f"  charged {s['sbu_if_fitted']:,.1f} SBU instead of {m['sbu']:,.1f}: "
                   f"following the advice would have saved {s['savings_sbu']:,.1f} SBU{share}")
        if s["savings_note"]:       # how it was priced, when not as the job was
            out.append(f"  ({t(s['savings_note'])})")
    return out


def run(args: argparse.Namespace) -> int:
    from jobsight.analytics import client
    server = client.server_of(args)
    if server is not None:      # the server's answer is the same document, in the server's scope
        return show(client.get(server, ["jobs", args.cluster or client.ANY_CLUSTER, args.job]), args.format)
    # duckdb and the read API: only to read the database (not to parse options or to ask a server)
    from jobsight.analytics.queries import job as job_queries
    from jobsight.analytics.store.database import Database
    with Database.read(args.db, args.config) as db:
        m = job_queries.details(db, scope_of(db.config), args.job, args.cluster)
    return show(m, args.format)


def show(m: dict, fmt: str) -> int:
    """Print the job (the one renderer of the local and the client command)."""
    if fmt == "json":
        print(render.to_json(m))
    else:
        render.print_text(text_report(m))
    return 0
