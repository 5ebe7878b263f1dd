"""The report window: an ISO week (2026-W47), `last` (the last complete ISO week), or --since/--until.

--since/--until mean what they mean for `jobsight usage` (a date in --until is the whole day,
inclusive), so a report and `jobsight usage` over the same options count the same days.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from jobsight.analytics.errors import UserError
from jobsight.analytics.queries.scope import parse_when

_ISO_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")


@dataclass(frozen=True)
class Period:
    label: str            # directory name: 2026-W47, or 2026-11-16_2026-11-22
    since: dt.datetime    # inclusive, UTC
    until: dt.datetime    # exclusive, UTC
    is_week: bool

    @property
    def length(self) -> dt.timedelta:
        return self.until - self.since

    def describe(self) -> str:
        last = self.until - dt.timedelta(seconds=1)
        days = f"{self.since:%a %d %b %Y} to {last:%a %d %b %Y}"
        return f"week {self.label} ({days})" if self.is_week else days

    def noun(self) -> str:
        return "week" if self.is_week else "period"


def iso_week(year: int, week: int) -> Period:
    try:
        monday = dt.date.fromisocalendar(year, week, 1)
    except ValueError:
        raise UserError(f"--week {year}-W{week:02d}: {year} has no ISO week {week}") from None
    start = dt.datetime.combine(monday, dt.time())
    return Period(f"{year}-W{week:02d}", start, start + dt.timedelta(days=7), True)


def resolve(week: str | None, since: str | None, until: str | None,
            today: dt.date | None = None) -> Period:
    """The window named by the options; `today` (UTC) is for `last` and defaults to now."""
    if week and (since or until):
        raise UserError("give either --week or --since/--until, not both")
    if week:
        if week == "last":
            today = today or dt.datetime.now(dt.timezone.utc).date()
            y, w, _ = (today - dt.timedelta(days=7)).isocalendar()
            return iso_week(y, w)
        m = _ISO_WEEK.match(week)
        if not m:
            raise UserError(f"--week {week!r}: use an ISO week like 2026-W47, or `last`")
        return iso_week(int(m.group(1)), int(m.group(2)))
    if not since:
        raise UserError("say which week: --week 2026-W47, --week last, or --since DATE [--until DATE]")
    start = parse_when(since)
    end = parse_when(until, end=True) if until else start + dt.timedelta(days=7)
    if end <= start:
        raise UserError(f"--until {until} is not after --since {since}")
    if start.time() != dt.time() or end.time() != dt.time():
        # usage is split by UTC day (usage_daily): a window must be whole days to match it
        raise UserError("--since/--until must be whole days (YYYY-MM-DD) for reports")
    label = f"{start:%Y-%m-%d}_{(end - dt.timedelta(days=1)):%Y-%m-%d}"
    return Period(label, start, end, False)
