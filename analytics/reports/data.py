"""Every number of every report, read from the report macros of sql/views/50_report.sql.

`gather` runs each macro once for the report window (plus the trend's earlier windows), over the
whole cluster or, when only some users' and accounts' reports are asked for, over those subjects'
jobs alone; `build` then picks one subject's rows. So 1,000 user reports cost the same handful of
queries as one, one user's report reads only that user's rows, and a user's report holds only rows
keyed by that user: nothing of other users (but the allocations of the accounts the user ran jobs
in, which the user shares). Python here only selects, orders and pads rows (days or weeks with no
jobs show as zero).
"""
from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobsight.analytics.queries.data_age import DataAge
from jobsight.analytics.queries.reports import most_wasted, report_rows
from jobsight.analytics.reports.period import Period
from jobsight.analytics.reports.report import Report
from jobsight.analytics.reports.settings import ReportSettings
from jobsight.analytics.reports.summary import summarise

if TYPE_CHECKING:
    from jobsight.analytics.store.database import Database

TOTAL_KEYS = ("jobs", "sbu", "wasted_sbu", "wasted_pct", "unrated_sbu", "savings_sbu", "savings_pct",
              "savings_unknown_sbu", "core_hours", "core_hours_unknown_jobs", "gpu_hours", "gpu_hours_unknown_jobs",
              "idle_gpu_hours", "cpu_eff_pct", "gpu_util_pct",
              "mem_eff_pct", "time_eff_pct")


def _key(scope: str, row: dict):
    return {"user": row.get("user"), "account": row.get("account"), "partition": row.get("partition"),
            "member": (row.get("account"), row.get("user")), "cluster": None}[scope]


def _index(rows: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["scope"], _key(r["scope"], r))].append(r)
    return out


@dataclass
class Dataset:
    period: Period
    settings: ReportSettings
    totals: dict[tuple, list[dict]]
    daily: dict[tuple, list[dict]]
    trend: dict[tuple, list[dict]]
    flags: dict[tuple, list[dict]]
    top: dict[tuple, list[dict]]          # (scope, key) -> its top jobs, most wasted first
    budgets: list[dict]                   # budget_status as of the window's last day
    members: dict[str, list[dict]] = field(default_factory=dict)   # account -> member rows
    # (users, accounts) gathered when not the whole cluster: the only reports this data can build
    only: tuple[frozenset, frozenset] | None = None
    data_age: DataAge | None = None       # the newest accounting time, as every report of the run says it

    def __post_init__(self):
        for (scope, key), rows in self.totals.items():
            if scope == "member":
                self.members.setdefault(key[0], []).extend(rows)

    def subjects(self, kind: str) -> list[str]:
        """Users or accounts that ran jobs in the window, by name."""
        if self.only is not None:
            raise ValueError("the data of some subjects only: gather the whole cluster to list them all")
        return sorted(k for (scope, k) in self.totals if scope == kind and k is not None)

    def build(self, kind: str, name: str) -> Report:
        if self.only is not None and name not in {"user": self.only[0], "account": self.only[1]}.get(kind, ()):
            raise ValueError(f"{kind} {name}: not gathered (gather({kind}s=[...]) or the whole cluster)")
        s, p = self.settings, self.period
        scope, key = ("cluster", None) if kind == "admin" else (kind, name)
        totals_row = (self.totals.get((scope, key)) or [{}])[0]
        totals = {k: totals_row.get(k) for k in TOTAL_KEYS}
        totals["jobs"] = totals["jobs"] or 0
        totals["sbu"] = totals["sbu"] or 0.0
        top = self.top.get((scope, key), [])
        flags = sorted(self.flags.get((scope, key), []), key=lambda r: (-r["jobs"], r["code"]))
        rep = Report(kind=kind, name=name, period=p, cluster=s.cluster, totals=totals,
                     trend=self._trend(scope, key), daily=self._daily(scope, key),
                     top_jobs=top, flag_counts=flags, data_age=self.data_age, dashboard_url=s.dashboard_url)
        if kind == "account":
            rep.members = sorted(self.members.get(name, []), key=most_wasted)
            rep.budgets = [b for b in self.budgets if b["account"] == name]
        elif kind == "user":
            ran_in = {acc for (acc, user) in (k for (sc, k) in self.totals if sc == "member") if user == name}
            rep.budgets = [b for b in self.budgets
                           if b["user"] == name or (b["user"] is None and b["account"] in ran_in)]
        else:
            rep.budgets = list(self.budgets)
        if kind == "admin":
            rep.partitions = sorted((rows[0] for (sc, _k), rows in self.totals.items() if sc == "partition"),
                                    key=lambda r: (-(r["sbu"] or 0), str(r["partition"])))
            rep.accounts = sorted((rows[0] for (sc, _k), rows in self.totals.items() if sc == "account"),
                                  key=lambda r: (-(r["sbu"] or 0), str(r["account"])))
            rep.leaderboard = sorted((rows[0] for (sc, _k), rows in self.totals.items() if sc == "user"),
                                     key=most_wasted)
        rep.summary = summarise(rep)
        return rep

    def _daily(self, scope: str, key) -> list[dict]:
        by_day = {r["day"]: r for r in self.daily.get((scope, key), [])}
        out, day = [], self.period.since
        while day < self.period.until:
            r = by_day.get(day, {})
            out.append({"day": day, "sbu": r.get("sbu") or 0.0, "used_sbu": r.get("used_sbu") or 0.0,
                        "wasted_sbu": r.get("wasted_sbu") or 0.0, "unrated_sbu": r.get("unrated_sbu") or 0.0})
            day += dt.timedelta(days=1)
        return out

    def _trend(self, scope: str, key) -> list[dict]:
        by_back = {r["windows_back"]: r for r in self.trend.get((scope, key), [])}
        out = []
        for back in range(self.settings.trend_weeks, -1, -1):
            start = self.period.since - back * self.period.length
            r = by_back.get(back, {})
            label = f"{start:%G-W%V}" if self.period.is_week else f"{start:%Y-%m-%d}"
            out.append({"windows_back": back, "window_start": start, "label": label,
                        "jobs": r.get("jobs") or 0, "sbu": r.get("sbu") or 0.0,
                        "wasted_sbu": r.get("wasted_sbu") or 0.0,
                        # a week whose jobs' advice could not be priced saves an unknown amount, not 0
                        "savings_sbu": r.get("savings_sbu") if r else 0.0,
                        "idle_gpu_hours": r.get("idle_gpu_hours") or 0.0})
        return out


def gather(db: Database, period: Period, settings: ReportSettings, users: list[str] | None = None,
           accounts: list[str] | None = None) -> Dataset:
    """Run the report macros once for this window: over the whole cluster, or with ``users`` /
    ``accounts`` over those users' and accounts' jobs only (then only their reports can be built).

    The totals, days, trend and flag counts add up the per-day summaries (dash_day, dash_flag_day);
    the top jobs are ranked over job_day's rows of the window, their flags read from job_flags."""
    since, until = period.since, period.until
    only = None if users is None and accounts is None else (frozenset(users or ()), frozenset(accounts or ()))
    names = (None, None) if only is None else (sorted(only[0]), sorted(only[1]))
    rows = report_rows(db, since, until, names, settings.trend_weeks, settings.top_jobs)
    totals, daily, trend, flag_counts, top = (rows[k] for k in ("totals", "daily", "trend", "flag_counts", "top"))
    budgets = rows["budgets"]
    return Dataset(period, settings, _index(totals), _index(daily), _index(trend), _index(flag_counts),
                   _index_top(top, settings.top_jobs), budgets, only=only, data_age=rows["data_age"])


def _index_top(rows: list[dict], n: int) -> dict[tuple, list[dict]]:
    """Each job under its user, its account and the cluster where it ranks within the top n."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for scope, rank in (("user", "rank_user"), ("account", "rank_account"), ("cluster", "rank_cluster")):
        for j in rows:
            if j[rank] <= n:
                out[(scope, _key(scope, j))].append(j)
        for (sc, _k), jobs in out.items():
            if sc == scope:
                jobs.sort(key=lambda j, r=rank: j[r])
    return out
