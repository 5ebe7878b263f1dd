"""Options shared by the metric commands (--db, --config, period and scope filters) and the SQL
WHERE clauses they become. Values are always bound parameters, never pasted into SQL."""
from __future__ import annotations

import argparse
import datetime as dt

from jobsight.analytics.errors import UserError


def add_db_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="jobsight DuckDB file")
    p.add_argument("--config", help="jobsight.toml (default: $JOBSIGHT_CONFIG, then ./jobsight.toml)")


def add_scope_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", help="from this date/time (UTC), inclusive: 2026-11-01 or 2026-11-01T12:00")
    p.add_argument("--until", help="up to this date (the whole day, inclusive) or date/time (exclusive), UTC")
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--account", help="only this account's (project's) jobs")
    p.add_argument("--partition", help="only this partition's jobs")
    p.add_argument("--cluster", help="only this cluster's jobs")


def parse_when(text: str, end: bool = False) -> dt.datetime:
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            return dt.datetime.combine(day + dt.timedelta(days=1 if end else 0), dt.time())
        return dt.datetime.fromisoformat(text.replace("Z", "")).replace(tzinfo=None)
    except ValueError:
        raise UserError(f"not a date or date/time: {text!r} (use YYYY-MM-DD or YYYY-MM-DDTHH:MM)") from None


SCOPE_COLUMNS = (("user", '"user"'), ("account", "account"), ("partition", '"partition"'), ("cluster", "cluster"))


def scope_values(args: argparse.Namespace) -> dict:
    """The scope options as values: since and until as datetimes (None when not given), then the
    user, account, partition and cluster (None: any)."""
    since, until = getattr(args, "since", None), getattr(args, "until", None)
    return {"since": parse_when(since) if since else None, "until": parse_when(until, end=True) if until else None,
            **{opt: getattr(args, opt, None) or None for opt, _col in SCOPE_COLUMNS}}


def scope_where(args: argparse.Namespace, time_expr: str) -> tuple[str, list]:
    """WHERE clause (starting with ' WHERE' or empty) for the scope options."""
    values = scope_values(args)
    clauses, params = [], []
    for key, expr in (("since", f"{time_expr} >= ?"), ("until", f"{time_expr} < ?"),
                      *((opt, f"{col} = ?") for opt, col in SCOPE_COLUMNS)):
        if values[key] is not None:
            clauses.append(expr)
            params.append(values[key])
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
