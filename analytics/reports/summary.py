"""The one-paragraph plain-language summary at the top of a report.

Plain text with user-supplied names in it: each renderer escapes it for its own target.
"""
from __future__ import annotations

from jobsight.analytics.reports.report import Report


def sbu(v: float | None) -> str:
    return "unknown" if v is None else f"{v:,.1f} SBU"


def pct(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.0f}%"


def _trend_sentence(rep: Report, whose: str) -> str:
    earlier = rep.trend[:-1]
    if not earlier:
        return ""
    avg = sum(w["sbu"] for w in earlier) / len(earlier)
    n = len(earlier)
    unit = f"{n} {rep.period.noun()}s" if n > 1 else f"{rep.period.noun()}"
    if avg <= 0:
        return f" {whose} previous {unit} burned nothing."
    ratio = rep.totals["sbu"] / avg
    if ratio >= 2:
        compared = f"{ratio:.1f} times"
    elif round(abs(ratio - 1) * 100) == 0:
        # "0% more" or "0% less" would follow the last bits of two float sums
        compared = "about the same as"
    else:
        compared = f"{abs(ratio - 1) * 100:.0f}% {'more' if ratio >= 1 else 'less'} than"
    return (f" That is {compared} {whose.lower()} average of {sbu(avg)} per {rep.period.noun()} "
            f"over the previous {unit}.")


def _efficiency_sentence(t: dict) -> str:
    parts = [f"CPU {pct(t['cpu_eff_pct'])}"]
    if t.get("gpu_hours"):
        parts.append(f"GPU {pct(t['gpu_util_pct'])}")
    parts += [f"memory {pct(t['mem_eff_pct'])}", f"time limit {pct(t['time_eff_pct'])}"]
    return " Allocation-weighted efficiency: " + ", ".join(parts) + "."


def _left_out_sentence(t: dict) -> str:
    """The jobs the core- and GPU-hours could not count: they ran on an unknown number of cores, GPUs."""
    parts = [f"{n:,} job{'s' if n != 1 else ''} on an unknown number of {what} ({total})"
             for n, what, total in ((t.get("core_hours_unknown_jobs"), "cores", "not in the core-hours"),
                                    (t.get("gpu_hours_unknown_jobs"), "GPUs", "not in the GPU-hours")) if n]
    return (" Not counted: " + "; ".join(parts) + ".") if parts else ""


def _worst_job_sentence(rep: Report) -> str:
    if not rep.top_jobs or not rep.top_jobs[0].get("wasted_sbu"):
        return ""
    j = rep.top_jobs[0]
    name = f" ({j['job_name']})" if j.get("job_name") else ""
    owner = f" of {j['user']}" if rep.kind != "user" else ""
    s = f" The most wasteful job was {j['job_id']}{name}{owner}, with {sbu(j['wasted_sbu'])} wasted"
    if j.get("sbatch_lines"):
        s += "; asking for " + " ".join(line.removeprefix("#SBATCH ") for line in j["sbatch_lines"].splitlines())
        s += " would have fit"
    return s + "."


def _savings_sentence(t: dict) -> str:
    if t.get("savings_sbu") is None or t.get("savings_pct") is None:
        return ""
    text = (f" Following the advice would have saved {sbu(t['savings_sbu'])} "
            f"({t['savings_pct']:.0f}% of the burn")
    if t.get("savings_unknown_sbu"):
        text += f"; the advice to jobs that burned {sbu(t['savings_unknown_sbu'])} could not be priced"
    return text + ")."


def summarise(rep: Report) -> str:
    t = rep.totals
    when = rep.period.describe()
    subject = {"user": "you", "account": f"project {rep.name}", "admin": "the cluster"}[rep.kind]
    whose = {"user": "Your", "account": "Its", "admin": "Its"}[rep.kind]
    if not t["jobs"]:
        return f"In {when} {subject} ran no jobs, so nothing was burned or wasted."
    ran = "you ran" if rep.kind == "user" else f"{subject} ran"
    text = f"In {when} {ran} {t['jobs']:,} job{'s' if t['jobs'] != 1 else ''} that burned {sbu(t['sbu'])}"
    if t["wasted_sbu"] is not None:
        text += (f", of which {sbu(t['wasted_sbu'])} ({t['wasted_pct']:.0f}% of the rated burn) "
                 "paid for resources that sat idle")
    text += "."
    if t.get("unrated_sbu"):
        text += f" {sbu(t['unrated_sbu'])} could not be rated (no CPU time or GPU samples recorded)."
    text += _trend_sentence(rep, whose)
    text += _efficiency_sentence(t)
    text += _left_out_sentence(t)
    text += _savings_sentence(t)
    if t.get("idle_gpu_hours"):
        text += f" GPUs sat idle for {t['idle_gpu_hours']:,.1f} GPU-hours."
    text += _worst_job_sentence(rep)
    for b in rep.budgets:
        if b["user"] is None and (rep.kind == "account" or rep.kind == "user"):
            text += _budget_sentence(b, "Its" if rep.kind == "account" else f"Project {b['account']}'s")
    return text


def _budget_sentence(b: dict, whose: str) -> str:
    """The account's allocation as of the window's last day: left, or OVER, and when it runs out."""
    head = f" {whose} {b['period']}ly allocation of {sbu(b['allocation_sbu'])}"
    if b["alert"] == "over":
        return (f"{head} is OVER budget: {sbu(b['burned_sbu'])} burned since {b['period_start']:%Y-%m-%d}, "
                f"{sbu(-b['remaining_sbu'])} beyond it.")
    text = f"{head} has {sbu(b['remaining_sbu'])} left ({b['used_pct']:.0f}% used)"
    if b["run_out_date"] is not None:
        text += (f"; at the last 30 days' rate ({sbu(b['burn_rate_30d'])} a day) it runs out on "
                 f"{b['run_out_date']:%Y-%m-%d}")
    return text + "." + _reset_sentence(b)


def _reset_sentence(b: dict) -> str:
    """What the last 30 days' rate leaves at the period's end, when the allocation resets."""
    left = b.get("remaining_at_reset_sbu")
    if left is None or b.get("period_end") is None:
        return ""
    reset = f" It resets on {b['period_end']:%Y-%m-%d}"
    if left < 0:
        return f"{reset}; at that rate it is {sbu(-left)} over by then."
    return f"{reset} with {sbu(left)} left at that rate."
