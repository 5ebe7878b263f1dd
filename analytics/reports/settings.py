"""[report] and [email] in jobsight.toml, checked once so that a typo is an error, not a silent default.

    [report]
    top_jobs = 10              # jobs listed by wasted SBU
    trend_weeks = 4            # earlier windows compared with the report's own
    budget_period = "month"    # what a [budgets] figure covers: week | month | quarter | year
    budget_start = 2026-01-01  # where the periods start (default: calendar weeks, months, ...)
    dashboard_url = "https://jobsight.example.org/jobsight/"   # job ids link to their dashboard page

    [email]
    from = "jobsight@example.org"
    user_address = "{user}@example.org"     # template; [email.addresses] overrides per user
    admins = ["hpc-admins@example.org"]      # the admin report's recipients
    smtp = "localhost:25"                    # used by --email without --smtp/--eml-dir
    subject_prefix = "[jobsight]"
    [email.addresses]
    alice = "alice.smith@example.org"

Project (account) reports go to the account's leads: [roles] leads = {proj-astro = ["carol"]}.
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jobsight.analytics.config import BUDGET_PERIODS, Config  # noqa: F401 - BUDGET_PERIODS: for the docs test
from jobsight.analytics.errors import UserError, shown


@dataclass
class ReportSettings:
    top_jobs: int = 10
    trend_weeks: int = 4
    sender: str | None = None
    user_address: str | None = None
    addresses: dict[str, str] = field(default_factory=dict)
    admins: list[str] = field(default_factory=list)
    smtp: str = "localhost:25"
    subject_prefix: str = "[jobsight]"
    leads: dict[str, list[str]] = field(default_factory=dict)   # account -> users, from [roles]
    cluster: str | None = None
    dashboard_url: str | None = None      # the dashboard's address (its --url-prefix included), or no links

    def address_of(self, user: str) -> str | None:
        if user in self.addresses:
            return self.addresses[user]
        if self.user_address:
            return self.user_address.format(user=user)
        return None


def _where(cfg: Config) -> str:
    return str(cfg.path) if cfg.path else "config"


# A report lists at most MAX_TOP_JOBS jobs (its page stays readable) and compares at most
# MAX_TREND_WEEKS earlier windows (ten years; far more would reach dates before year 1).
MAX_TOP_JOBS, MAX_TREND_WEEKS = 1000, 520


def _int(cfg: Config, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UserError(f"{_where(cfg)}: {key} must be a whole number from {low} to {high}, got {shown(value)}")
    return value


def _str(cfg: Config, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"{_where(cfg)}: {key} must be a non-empty string, got {value!r}")
    return value


def _dashboard_url(cfg: Config, value: Any) -> str:
    """An http(s) address with a host and no query or fragment, ending in "/"; no blank, quote,
    angle bracket or control character, so that it can stand in HTML, Markdown and plain text."""
    url = _str(cfg, "report.dashboard_url", value)
    parts = urlsplit(url)
    if (parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment
            or any(c.isspace() or not c.isprintable() or c in '"<>`\\()[]' for c in url)):
        raise UserError(f"{_where(cfg)}: report.dashboard_url must be the dashboard's http(s) address, "
                        f"e.g. https://jobsight.example.org/jobsight/ (no query, blanks or quotes), got {shown(url)}")
    return url if url.endswith("/") else url + "/"


def from_config(cfg: Config) -> ReportSettings:
    s = ReportSettings(cluster=cfg.cluster)
    for key, value in cfg.report.items():
        if key == "top_jobs":
            s.top_jobs = _int(cfg, "report.top_jobs", value, 1, MAX_TOP_JOBS)
        elif key == "trend_weeks":
            s.trend_weeks = _int(cfg, "report.trend_weeks", value, 1, MAX_TREND_WEEKS)
        elif key == "dashboard_url":
            s.dashboard_url = _dashboard_url(cfg, value)
        elif key in ("budget_period", "budget_start"):
            pass        # checked where it is read: analytics/config.py (the budget settings)
        else:
            raise UserError(f"{_where(cfg)}: unknown key report.{key} "
                            "(known: budget_period, budget_start, dashboard_url, top_jobs, trend_weeks)")
    for key, value in cfg.email.items():
        if key == "from":
            s.sender = _str(cfg, "email.from", value)
        elif key == "user_address":
            s.user_address = _str(cfg, "email.user_address", value)
            if "{user}" not in value:
                raise UserError(f"{_where(cfg)}: email.user_address must contain {{user}}, got {value!r}")
            try:    # only a bare {user}: a format spec like {user:>999999999} would build a huge string
                bare = all((f, spec, conv) == ("user", "", None)
                           for _, f, spec, conv in string.Formatter().parse(value) if f is not None)
            except ValueError:     # an unmatched brace
                bare = False
            if not bare:
                raise UserError(f"{_where(cfg)}: email.user_address may use only {{user}}, got {value!r}")
        elif key == "addresses":
            if not isinstance(value, dict):
                raise UserError(f"{_where(cfg)}: email.addresses must be a table user = \"address\"")
            s.addresses = {str(u): _str(cfg, f"email.addresses.{u}", a) for u, a in value.items()}
        elif key == "admins":
            if not isinstance(value, list):
                raise UserError(f"{_where(cfg)}: email.admins must be a list of addresses")
            s.admins = [_str(cfg, "email.admins[]", a) for a in value]
        elif key == "smtp":
            s.smtp = _str(cfg, "email.smtp", value)
        elif key == "subject_prefix":
            s.subject_prefix = str(value)
        else:
            raise UserError(f"{_where(cfg)}: unknown key email.{key} "
                            "(known: addresses, admins, from, smtp, subject_prefix, user_address)")
    leads = cfg.roles.get("leads", {}) if isinstance(cfg.roles, dict) else {}
    if not isinstance(leads, dict):
        raise UserError(f"{_where(cfg)}: roles.leads must be a table account = [users]")
    for account, users in leads.items():
        s.leads[str(account)] = [str(u) for u in (users if isinstance(users, list) else [users])]
    return s
