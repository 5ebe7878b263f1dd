"""Plain-text report: the text/plain part of the emails. Terminal-safe (control characters shown
as escapes); everything else is literal text, which a mail client shows as text."""
from __future__ import annotations

import textwrap

from jobsight.analytics.render import terminal_safe
from jobsight.analytics.reports.report import Report
from jobsight.analytics.reports.sections import fmt, headline, sections


def render_text(rep: Report) -> str:
    out = [terminal_safe(rep.title), "=" * min(len(rep.title), 78), ""]
    if rep.data_line:
        out += [rep.data_line, ""]
    out += textwrap.wrap(terminal_safe(rep.summary), 78) + [""]
    width = max(len(c.header) for c, _ in headline(rep))
    out += [f"{c.header + ':':<{width + 1}} {fmt(v, c.kind)}" for c, v in headline(rep)] + [""]
    for sec in sections(rep):
        out += [sec.title, "-" * len(sec.title)]
        if not sec.rows:
            out += [sec.empty, ""]
            continue
        show_user = any(c.key == "user" for c in sec.cols)
        out += [_jobs(sec.rows, show_user, rep) if sec.key == "top_jobs" else _table(sec), ""]
    return terminal_safe("\n".join(out), keep="\n") + "\n"   # and whatever a line above let through


def _table(sec) -> str:
    """Aligned columns, numbers to the right; cells terminal-safe, multi-line cells joined by '; '."""
    body = [[terminal_safe(fmt(r.get(c.key), c.kind).replace("\n", "; ")) for c in sec.cols] for r in sec.rows]
    heads = [c.header for c in sec.cols]
    widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(heads)]
    right = [c.kind in ("num", "saving", "pct", "int") for c in sec.cols]

    def line(cells):
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(cells, widths, right)).rstrip()
    return "\n".join([line(heads), line(["-" * w for w in widths])] + [line(row) for row in body])


def _jobs(rows: list[dict], show_user: bool, rep: Report) -> str:
    """Top jobs as short blocks: a table this wide does not fit a mail window. With a
    dashboard_url, the job's page follows its id, in angle brackets as plain text has links."""
    out = []
    for i, j in enumerate(rows, 1):
        name = f" ({j['job_name']})" if j.get("job_name") else ""
        who = f" by {j['user']}" if show_user and j.get("user") else ""
        url = rep.job_url(j)
        link = f" <{url}>" if url else ""
        out.append(f"{i}. Job {j['job_id']}{link}{name}{who}, {j.get('partition') or '-'}, {j.get('state') or '-'}: "
                   f"{fmt(j.get('wasted_sbu'), 'num')} of {fmt(j.get('sbu'), 'num')} SBU wasted")
        effs = [f"{label} {fmt(j.get(k), 'pct')}" for k, label in (("cpu_eff_pct", "CPU"), ("gpu_util_pct", "GPU"),
                ("mem_eff_pct", "memory"), ("time_eff_pct", "time limit")) if j.get(k) is not None]
        if effs:
            out.append("   " + ", ".join(effs))
        if j.get("flag_codes"):
            out.append(f"   Flags: {j['flag_codes']}")
        if j.get("sbatch_lines"):
            out.append("   Would have fit:")
            out += [f"     {line}" for line in j["sbatch_lines"].splitlines()]
        if j.get("savings_sbu"):
            out.append(f"   Following the advice would have saved {fmt(j['savings_sbu'], 'num')} SBU")
    return "\n".join(terminal_safe(line) for line in out)   # a newline in a job name stays visible as \\n
