"""One report: its subject, period and rows, as every renderer (HTML, Markdown, text, CSV, mail) reads it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jobsight.analytics.reports.period import Period

ADMIN_NAME = "cluster"
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._@+-]")


def file_stem(kind: str, name: str) -> str:
    """<kind>-<name> with the name made safe as one path component (no '/', no leading dot)."""
    safe = _UNSAFE_FILE_CHARS.sub("_", name) or "_"
    if safe.startswith("."):
        safe = "_" + safe[1:]
    return f"{kind}-{safe}"


@dataclass
class Report:
    kind: str                    # user | account | admin
    name: str                    # user name, account name, or "cluster"
    period: Period
    cluster: str | None
    totals: dict[str, Any]
    trend: list[dict]            # oldest window first; the last is the report window
    daily: list[dict]            # one row per day of the window
    top_jobs: list[dict]
    flag_counts: list[dict]
    members: list[dict] = field(default_factory=list)      # account: per user, most wasted first
    budgets: list[dict] = field(default_factory=list)      # budget_status rows the subject may see
    partitions: list[dict] = field(default_factory=list)   # admin
    accounts: list[dict] = field(default_factory=list)     # admin
    leaderboard: list[dict] = field(default_factory=list)  # admin: users by wasted SBU
    summary: str = ""

    @property
    def stem(self) -> str:
        return file_stem(self.kind, self.name)

    @property
    def heading(self) -> str:
        who = {"user": f"user {self.name}", "account": f"project {self.name}",
               "admin": f"cluster {self.cluster}" if self.cluster else "the cluster"}[self.kind]
        return f"jobsight {'weekly' if self.period.is_week else ''} report for {who}".replace("  ", " ")

    @property
    def title(self) -> str:
        return f"{self.heading}: {self.period.describe()}"

    @property
    def has_jobs(self) -> bool:
        return bool(self.totals.get("jobs"))
