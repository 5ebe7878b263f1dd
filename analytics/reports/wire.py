"""A Report as a JSON document and back: what the API's /report route answers and what `jobsight
report --server` renders with the same renderers as the local command (HTML, Markdown, CSV).

The document is the Report's fields as they are, times written by analytics/render.py's to_json
(ISO-8601 UTC with Z; a DATE as YYYY-MM-DD). Reading it back, a value becomes a datetime or a date
by its key (the report macros' column names), never by what a text looks like: a job named
2026-11-16 stays text."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any

from jobsight.analytics.queries.data_age import DataAge
from jobsight.analytics.reports.period import Period
from jobsight.analytics.reports.report import Report

# keys holding a TIMESTAMP (a datetime) and a DATE in the report's rows and its period
DATETIME_KEYS = frozenset({"since", "until", "window_start", "day", "start_time", "end_time", "submit_time", "newest"})
DATE_KEYS = frozenset({"period_start", "period_end", "as_of", "run_out_date"})
_DATETIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_DATE = re.compile(r"\d{4}-\d\d-\d\d")


def document(rep: Report) -> dict:
    """The report's fields as plain values (to_json writes the times)."""
    out = {f.name: getattr(rep, f.name) for f in dataclasses.fields(rep)}
    out["period"] = dataclasses.asdict(rep.period)
    out["data_age"] = None if rep.data_age is None else {"newest": rep.data_age.newest, "old": rep.data_age.old}
    return out


def _revive(obj: Any, key: str = "") -> Any:
    if isinstance(obj, dict):
        return {k: _revive(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_revive(v, key) for v in obj]
    if isinstance(obj, str):
        if key in DATETIME_KEYS and _DATETIME.fullmatch(obj):
            return dt.datetime.strptime(obj, "%Y-%m-%dT%H:%M:%SZ")
        if key in DATE_KEYS and _DATE.fullmatch(obj):
            return dt.date.fromisoformat(obj)
    return obj


def report_of(doc: dict) -> Report:
    """The Report a document() describes (ValueError when it is not one)."""
    try:
        fields = _revive(dict(doc))
        names = {f.name for f in dataclasses.fields(Report)}
        fields = {k: v for k, v in fields.items() if k in names}
        fields["period"] = Period(**fields["period"])
        age = fields.get("data_age")
        fields["data_age"] = None if age is None else DataAge(age["newest"], bool(age["old"]))
        return Report(**fields)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a report document: {exc}") from None
