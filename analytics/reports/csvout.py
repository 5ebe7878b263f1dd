"""CSV report for pipelines: one file, one row per table row, a `section` column saying which table
(totals, trend, daily, budget, members, leaderboard, accounts, partitions, top_jobs, flags).
Raw values at full precision, written by the CLI's one CSV writer (render.to_csv): text cells that a
spreadsheet would run as a formula are neutralised, cells holding a CR or LF are quoted."""
from __future__ import annotations

from jobsight.analytics.render import to_csv
from jobsight.analytics.reports.report import Report
from jobsight.analytics.reports.sections import HEADLINE, sections

COLUMNS = ["report", "window", "section", "rank", "label", "day", "user", "account", "partition", "job_id",
           "job_name", "state", "code", "jobs", "alarms", "sbu", "used_sbu", "wasted_sbu", "wasted_pct",
           "unrated_sbu", "savings_sbu", "savings_pct", "core_hours", "core_hours_unknown_jobs", "gpu_hours",
           "gpu_hours_unknown_jobs",
           "idle_gpu_hours", "cpu_eff_pct", "gpu_util_pct",
           "mem_eff_pct", "time_eff_pct", "flag_codes", "sbatch_lines", "period", "period_start", "allocation_sbu",
           "burned_sbu", "remaining_sbu", "used_pct", "burn_rate_7d", "burn_rate_30d", "run_out_date", "period_end",
           "remaining_at_reset_sbu", "alert"]


def render_csv(rep: Report, terminal: bool = False) -> str:
    """``terminal``: the text goes to a terminal (control characters shown as escapes)."""
    base = {"report": rep.stem, "window": rep.period.label}
    rows = [{**base, "section": "totals", "rank": 1, **{c.key: rep.totals.get(c.key) for c in HEADLINE}}]
    for sec in sections(rep):
        for i, r in enumerate(sec.rows, 1):
            rows.append({**base, "section": sec.key, "rank": i, **{c: r.get(c) for c in COLUMNS if c in r}})
    return to_csv(rows, COLUMNS, terminal=terminal)
