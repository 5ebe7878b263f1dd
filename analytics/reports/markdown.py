"""Markdown report (GitHub-flavoured tables). User-supplied strings are inert: HTML special
characters become entities and Markdown punctuation is backslash-escaped, so a job named
`<script>alert(1)</script>` or `[x](http://evil)` shows as that text."""
from __future__ import annotations

import html
import re

from jobsight.analytics.render import terminal_safe
from jobsight.analytics.reports.report import Report
from jobsight.analytics.reports.sections import fmt, headline, sections

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")
_SBATCH_SAFE = re.compile(r"^[#A-Za-z0-9=:,._/ -]+$")


def md_escape(value) -> str:
    text = terminal_safe(str(value))          # newlines and escapes shown, not acted on
    return html.escape(_MD_SPECIAL.sub(r"\\\1", text), quote=False)


def md_cell(value, kind: str) -> str:
    if kind == "code" and value:
        lines = str(value).splitlines()
        if all(_SBATCH_SAFE.match(line) for line in lines):
            return "<br>".join(f"`{line}`" for line in lines)
        return md_escape("; ".join(lines))
    return md_escape(fmt(value, kind))


def md_link(text: str, url: str | None) -> str:
    """``text`` (already escaped) as a link to ``url`` ([report] dashboard_url's job page: no blank,
    bracket or quote, checked when read; its query percent-encoded), or as it is without one."""
    return f"[{text}]({html.escape(url, quote=True)})" if url else text


def render_markdown(rep: Report) -> str:
    out = [f"# {md_escape(rep.title)}", ""]
    if rep.data_line:
        out += [md_escape(rep.data_line), ""]
    out += [md_escape(rep.summary), ""]
    out += ["| " + " | ".join(md_escape(c.header) for c, _ in headline(rep)) + " |",
            "|" + "|".join("---:" for _ in headline(rep)) + "|",
            "| " + " | ".join(md_cell(v, c.kind) for c, v in headline(rep)) + " |", ""]
    for sec in sections(rep):
        out += [f"## {md_escape(sec.title)}", ""]
        if not sec.rows:
            out += [f"_{md_escape(sec.empty)}_", ""]
            continue
        out.append("| " + " | ".join(md_escape(c.header) for c in sec.cols) + " |")
        out.append("|" + "|".join("---:" if c.kind in ("num", "saving", "pct", "int") else "---" for c in sec.cols) + "|")
        for r in sec.rows:
            out.append("| " + " | ".join(md_link(md_cell(r.get(c.key), c.kind), rep.job_url(r))
                                         if c.key == "job_id" and sec.key == "top_jobs" else md_cell(r.get(c.key), c.kind)
                                         for c in sec.cols) + " |")
        out.append("")
        if sec.note:
            out += [md_escape(sec.note), ""]
    return terminal_safe("\n".join(out), keep="\n") + "\n"     # the whole text, as the cells are
