"""Who may see what, and which jobs a question is about: one ``Scope`` and one ``Filters`` for every
face (the command line, reports, the dashboard, the API), and the one period rule.

The period rule: periods are UTC days, and a job belongs to every period it ran in. Sums split a
job's SBU, waste and hours across the days it ran in (job_day); a count counts a job once in a
period when it ran in it (its first_day and last_day, stored with its flags, overlap the period).
Values are always bound parameters, never pasted into SQL.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from jobsight.analytics.errors import UserError

ROLES = ("admin", "lead", "user")


def parse_when(text: str, end: bool = False) -> dt.datetime:
    """A command-line date (YYYY-MM-DD: its midnight, or with ``end`` the next one) or date/time."""
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            return dt.datetime.combine(day + dt.timedelta(days=1 if end else 0), dt.time())
        return dt.datetime.fromisoformat(text.replace("Z", "")).replace(tzinfo=None)
    except ValueError:
        raise UserError(f"not a date or date/time: {text!r} (use YYYY-MM-DD or YYYY-MM-DDTHH:MM)") from None


@dataclass(frozen=True)
class Scope:
    """Who is asking. admin: everything; lead: own jobs and the jobs of ``accounts``; user: own jobs."""
    role: str
    user: str
    accounts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")

    @classmethod
    def admin(cls, user: str = "") -> "Scope":
        """Everything: the command line's scope, for whoever may read the database file."""
        return cls("admin", user)

    def sql(self, alias: str = "") -> tuple[str, list]:
        """SQL condition (for a relation with "user" and account columns) and its parameters."""
        a = f"{alias}." if alias else ""
        if self.role == "admin":
            return "TRUE", []
        if not self.user:
            return "FALSE", []
        if self.role == "lead" and self.accounts:
            return f'({a}"user" = ? OR list_contains(?::VARCHAR[], {a}account))', [self.user, list(self.accounts)]
        return f'{a}"user" = ?', [self.user]

    def parts(self) -> list[tuple[str, list]]:
        """The scope as disjoint conditions whose union is sql(), each one an equality or IN list
        that row-group statistics can use (an OR of two columns cannot): for a lead, the accounts'
        rows, and the lead's own rows in other (or no) accounts."""
        if self.role != "lead" or not self.user or not self.accounts:
            return [self.sql()]
        marks = ", ".join("?" for _ in self.accounts)
        return [(f"account IN ({marks})", list(self.accounts)),
                (f'"user" = ? AND (account IS NULL OR account NOT IN ({marks}))', [self.user, *self.accounts])]


@dataclass(frozen=True)
class Filters:
    """The page's filters (from the URL). ``until`` is inclusive (the whole day)."""
    since: dt.date | None = None
    until: dt.date | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    codes: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    cluster: str | None = None
    state: str | None = None

    @classmethod
    def from_times(cls, since: str | None = None, until: str | None = None, **kw) -> "Filters":
        """Filters from the command line's --since/--until (a date, or a date/time: the day it falls
        in; --until inclusive), and the other filters by name."""
        lo = parse_when(since).date() if since else None
        hi = (parse_when(until, end=True) - dt.timedelta(microseconds=1)).date() if until else None
        return cls(since=lo, until=hi, **{k: v for k, v in kw.items() if v not in (None, "", ())})

    @property
    def until_ts(self) -> dt.datetime | None:
        """The midnight after the period's last day; None for no upper bound."""
        return dt.datetime.combine(self.until + dt.timedelta(days=1), dt.time()) if self.until else None

    @property
    def since_ts(self) -> dt.datetime | None:
        """The period's first day (midnight UTC), for dash_jobs_in_period; None for no lower bound."""
        return dt.datetime.combine(self.since, dt.time()) if self.since else None

    def where(self, scope: Scope, alias: str = "", scope_sql: tuple[str, list] | None = None,
              ran: bool = False) -> tuple[str, list]:
        """' WHERE ...' with the scope first (``scope_sql``: one of scope.parts()), then the
        filters; parameters in order. The period selects the rows whose ``day`` is in it, or, with
        ``ran``, the rows of jobs that ran in it (``first_day``/``last_day``: rows of a job, which
        never ran when they are NULL)."""
        a = f"{alias}." if alias else ""
        sc, params = scope_sql if scope_sql is not None else scope.sql(alias)
        params = list(params)
        clauses = [sc]
        lo, hi = ("last_day", "first_day") if ran else ("day", "day")
        if ran:
            clauses.append(f"{a}first_day IS NOT NULL")
        if self.since:
            clauses.append(f"{a}{lo} >= ?")
            params.append(self.since_ts)
        if self.until:
            clauses.append(f"{a}{hi} < ?")
            params.append(dt.datetime.combine(self.until + dt.timedelta(days=1), dt.time()))
        for value, col in ((self.user, '"user"'), (self.account, "account"), (self.partition, '"partition"'),
                           (self.cluster, "cluster"), (self.state, "state")):
            if value:
                clauses.append(f"{a}{col} = ?")
                params.append(value)
        return " WHERE " + " AND ".join(clauses), params
