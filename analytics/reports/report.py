"""One report: its subject, period and rows, as every renderer (HTML, Markdown, text, CSV, mail) reads it."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from jobsight.analytics.links import job_url
from jobsight.analytics.queries.data_age import DataAge
from jobsight.analytics.reports.period import Period

ADMIN_NAME = "cluster"
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._@+-]")
# A name this long or longer is cut: a stem stays far below NAME_MAX (255 bytes) with its kind,
# hash, extension, e-mail recipient number and the folder's temporary names.
MAX_SLUG = 100
HASH_CHARS = 12     # 48 bits of SHA-256: a name made to take another's file needs ~2**48 tries


def file_stem(kind: str, name: str) -> str:
    """<kind>-<name> as one path component that no other name of that kind maps to.

    A name of at most MAX_SLUG safe characters (not starting with a dot) is used as it is. Any
    other gets a readable slug (unsafe characters as '_', cut to MAX_SLUG) plus '~' and a hash of
    the whole name: '~' is never in a name used as it is, so `proj a`, `proj/a` and `proj_a` map
    to three files."""
    slug = _UNSAFE_FILE_CHARS.sub("_", name)[:MAX_SLUG] or "_"
    if slug.startswith("."):
        slug = "_" + slug[1:]
    if slug == name:
        return f"{kind}-{name}"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{kind}-{slug}~{digest}"


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
    data_age: DataAge | None = None                        # how old the database's data was when gathered
    dashboard_url: str | None = None                       # [report] dashboard_url: job ids link there

    def job_url(self, job: dict) -> str | None:
        """The dashboard page of a listed job, or None without a dashboard_url."""
        if not self.dashboard_url or not job.get("job_id_raw"):
            return None
        return job_url(self.dashboard_url, job.get("cluster"), job["job_id_raw"])

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
    def data_line(self) -> str:
        """'Data up to <time> UTC', warning when that is more than a day old; '' when not known."""
        return "" if self.data_age is None else self.data_age.line(capital=True)

    @property
    def has_jobs(self) -> bool:
        return bool(self.totals.get("jobs"))
