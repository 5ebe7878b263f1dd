"""The report window: ISO weeks, `last`, --since/--until."""
from __future__ import annotations

import datetime as dt

import pytest

from jobsight.analytics.errors import UserError
from jobsight.analytics.reports.period import resolve


def test_iso_week_is_monday_to_monday():
    p = resolve("2026-W47", None, None)
    assert (p.since, p.until, p.label) == (dt.datetime(2026, 11, 16), dt.datetime(2026, 11, 23), "2026-W47")
    # 2026 starts on a Thursday, so it has an ISO week 53, which ends in January 2027
    p = resolve("2026-W53", None, None)
    assert (p.since, p.until) == (dt.datetime(2026, 12, 28), dt.datetime(2027, 1, 4))
    with pytest.raises(UserError, match="no ISO week 53"):
        resolve("2027-W53", None, None)


def test_last_is_the_last_complete_week():
    assert resolve("last", None, None, today=dt.date(2026, 11, 23)).label == "2026-W47"   # Monday
    assert resolve("last", None, None, today=dt.date(2026, 11, 22)).label == "2026-W46"   # Sunday: W47 not over
    assert resolve("last", None, None, today=dt.date(2027, 1, 4)).label == "2026-W53"


def test_since_until_whole_days_inclusive():
    p = resolve(None, "2026-11-01", "2026-11-30")
    assert (p.since, p.until, p.label, p.is_week) == (dt.datetime(2026, 11, 1), dt.datetime(2026, 12, 1),
                                                     "2026-11-01_2026-11-30", False)
    assert resolve(None, "2026-11-01", None).until == dt.datetime(2026, 11, 8)
    with pytest.raises(UserError, match="whole days"):
        resolve(None, "2026-11-01T12:00", "2026-11-02")
    with pytest.raises(UserError, match="not after"):
        resolve(None, "2026-11-05", "2026-11-01")
    with pytest.raises(UserError, match="either --week or"):
        resolve("last", "2026-11-01", None)
    with pytest.raises(UserError, match="say which week"):
        resolve(None, None, None)
