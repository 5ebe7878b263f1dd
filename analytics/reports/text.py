"""Plain-text report: the text/plain part of the emails. Terminal-safe (control characters shown
as escapes); everything else is literal text, which a mail client shows as text."""
from __future__ import annotations

import textwrap

from analytics.render import table, terminal_safe
from analytics.reports.data import Report
from analytics.reports.sections import fmt, headline, sections


def render_text(rep: Report) -> str:
    out = [terminal_safe(rep.title), "=" * min(len(rep.title), 78), ""]
    out += textwrap.wrap(terminal_safe(rep.summary), 78) + [""]
    width = max(len(c.header) for c, _ in headline(rep))
    out += [f"{c.header + ':':<{width + 1}} {fmt(v, c.kind)}" for c, v in headline(rep)] + [""]
    for sec in sections(rep):
        out += [sec.title, "-" * len(sec.title)]
        if not sec.rows:
            out += [sec.empty, ""]
            continue
        rows = [{c.key: fmt(r.get(c.key), c.kind).replace("\n", "; ") for c in sec.cols} for r in sec.rows]
        out += [table(rows, [c.key for c in sec.cols], [c.header for c in sec.cols]), ""]
    return "\n".join(out) + "\n"
