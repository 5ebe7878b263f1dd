"""What a report shows, once for every format: titled tables of (column key, header, kind).

Kinds tell renderers how to print a value: num (SBU, hours), pct, int, text (user-supplied, to be
escaped), day, date (a calendar date), code (generated #SBATCH lines, shown as code).
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from jobsight.analytics.reports.report import Report


@dataclass(frozen=True)
class Col:
    key: str
    header: str
    kind: str = "num"


@dataclass
class Section:
    key: str                       # csv `section` value and html anchor
    title: str
    cols: list[Col]
    rows: list[dict]
    note: str = ""
    empty: str = "none"


HEADLINE = [Col("jobs", "Jobs", "int"), Col("sbu", "SBU burned"), Col("wasted_sbu", "SBU wasted"),
            Col("wasted_pct", "Wasted", "pct"), Col("unrated_sbu", "SBU unrated"),
            Col("savings_sbu", "SBU the advice saves", "saving"), Col("savings_pct", "Saved", "pct"),
            Col("cpu_eff_pct", "CPU efficiency", "pct"), Col("gpu_util_pct", "GPU utilisation", "pct"),
            Col("mem_eff_pct", "Memory efficiency", "pct"), Col("time_eff_pct", "Time-limit use", "pct"),
            Col("core_hours", "Core-hours"), Col("core_hours_unknown_jobs", "Jobs not in core-hours", "int"),
            Col("gpu_hours", "GPU-hours"), Col("gpu_hours_unknown_jobs", "Jobs not in GPU-hours", "int"),
            Col("idle_gpu_hours", "Idle GPU-hours")]
# shown only when some job was left out (an unknown number of cores or GPUs)
LEFT_OUT = ("core_hours_unknown_jobs", "gpu_hours_unknown_jobs")
EFFICIENCY = [Col("cpu_eff_pct", "CPU eff.", "pct"), Col("gpu_util_pct", "GPU util.", "pct"),
              Col("mem_eff_pct", "Mem eff.", "pct"), Col("time_eff_pct", "Time use", "pct")]
GROUP = [Col("jobs", "Jobs", "int"), Col("sbu", "SBU"), Col("wasted_sbu", "Wasted SBU"),
         Col("wasted_pct", "Wasted", "pct"), Col("savings_sbu", "Advice saves SBU", "saving")] + EFFICIENCY


BUDGET_USER = Col("user", "User's share", "text")
BUDGET = [Col("account", "Account", "text"), BUDGET_USER, Col("allocation_sbu", "Allocation SBU"),
          Col("burned_sbu", "Burned SBU"), Col("remaining_sbu", "Remaining SBU"),
          Col("used_pct", "Used", "pct"), Col("burn_rate_7d", "SBU/day, 7 days"), Col("burn_rate_30d", "SBU/day, 30 days"),
          Col("run_out_date", "Runs out", "date"), Col("period_end", "Resets", "date"),
          Col("remaining_at_reset_sbu", "Left at reset SBU"), Col("alert_shown", "Alert", "text")]


def headline(rep: Report) -> list[tuple[Col, Any]]:
    """The headline figures: all of HEADLINE, GPU ones only when GPUs were used (or jobs ran on an
    unknown number of them), the jobs left out of core- and GPU-hours beside them when there are any."""
    gpu = bool(rep.totals.get("gpu_hours") or rep.totals.get("gpu_hours_unknown_jobs"))
    return [(c, rep.totals.get(c.key)) for c in HEADLINE
            if (gpu or c.key not in ("gpu_util_pct", "gpu_hours", "idle_gpu_hours", "gpu_hours_unknown_jobs"))
            and (c.key not in LEFT_OUT or rep.totals.get(c.key))]


def sections(rep: Report) -> list[Section]:
    n = rep.period.noun()
    out = [Section("trend", f"This {n} and the {len(rep.trend) - 1} before",
                   [Col("label", n.capitalize(), "day"), Col("jobs", "Jobs", "int"), Col("sbu", "SBU"),
                    Col("wasted_sbu", "Wasted SBU"), Col("savings_sbu", "Advice saves SBU", "saving")] +
                   ([Col("idle_gpu_hours", "Idle GPU-hours")] if rep.kind == "admin" else []),
                   rep.trend),
           Section("daily", "Daily burn", [Col("day", "Day", "day"), Col("used_sbu", "Used SBU"),
                                           Col("wasted_sbu", "Wasted SBU"), Col("unrated_sbu", "Unrated SBU"),
                                           Col("sbu", "Total SBU")], rep.daily,
                   note="A job running across midnight counts on each day with its share of the time.")]
    if rep.budgets:
        b = rep.budgets[0]
        cols = BUDGET if any(r["user"] for r in rep.budgets) else [c for c in BUDGET if c is not BUDGET_USER]
        out.append(Section("budget", f"{'Budget' if len(rep.budgets) == 1 else 'Budgets'}: the {b['period']} "
                           f"from {b['period_start']:%Y-%m-%d}", cols, rep.budgets,
                           note=f"As of {b['as_of']:%Y-%m-%d}. Rates: SBU per day over the last 7 and 30 days; "
                                "the run-out date is the remaining SBU at the 30-day rate. OVER: the allocation "
                                "is used up (shown, never hidden)."))
    if rep.kind == "account":
        out.append(Section("members", "Members, most wasted first", [Col("user", "User", "text")] + GROUP,
                           rep.members, empty="no member ran jobs"))
    if rep.kind == "admin":
        out.append(Section("leaderboard", "Waste leaderboard (users)", [Col("user", "User", "text")] + GROUP, rep.leaderboard[:25],
                           empty="no jobs"))
        out.append(Section("accounts", "Burn by project (account)", [Col("account", "Account", "text")] + GROUP,
                           rep.accounts, empty="no jobs"))
        out.append(Section("partitions", "Burn by partition", [Col("partition", "Partition", "text")] + GROUP +
                           [Col("gpu_hours", "GPU-hours"), Col("idle_gpu_hours", "Idle GPU-hours")],
                           rep.partitions, empty="no jobs"))
    who = [] if rep.kind == "user" else [Col("user", "User", "text")]
    out.append(Section("top_jobs", "Jobs that wasted the most",
                       [Col("job_id", "Job", "text"), Col("job_name", "Name", "text")] + who +
                       [Col("wasted_sbu", "Wasted SBU"), Col("sbu", "SBU"),
                        Col("sbatch_lines", "Would have fit", "code"), Col("savings_sbu", "It saves SBU", "saving"),
                        Col("flag_codes", "Flags", "text"),
                        Col("partition", "Partition", "text"), Col("state", "State", "text")] + EFFICIENCY,
                       rep.top_jobs, empty="no jobs",
                       note="SBU, waste and savings inside this window; efficiencies are the whole job's. "
                            "\"Would have fit\" is the request the flags suggest; \"It saves\" what that "
                            "request would have been charged less (empty: unknown)."))
    out.append(Section("flags", "Flagged jobs by code", [Col("code", "Flag", "text"), Col("jobs", "Jobs", "int"),
                                                          Col("alarms", "Alarms", "int")],
                       rep.flag_counts, empty="no flagged jobs"))
    return out


def fmt(value: Any, kind: str) -> str:
    """A value as plain text (no escaping: renderers escape for their target)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not priced" if kind == "saving" else "-"   # an unknown saving is never shown as 0
    if kind == "pct":
        return f"{value:.1f}%"
    if kind == "int":
        return f"{int(value):,}"
    if kind in ("num", "saving"):
        return f"{value:,.1f}"
    if kind == "date" and isinstance(value, dt.date):
        return value.isoformat()
    if kind == "day" and isinstance(value, dt.datetime):
        return f"{value:%a %Y-%m-%d}"
    return str(value)
