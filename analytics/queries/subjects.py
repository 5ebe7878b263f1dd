"""Whether the database has ever seen a user or an account: a report for a name it has no job of
is a typo more often than a quiet week."""
from __future__ import annotations

COLUMN = {"user": '"user"', "account": "account"}


def seen(db, kind: str, name: str) -> bool:
    """A job of user or account ``name`` (``kind``) is in the database, in any period."""
    return bool(db.value(f"SELECT EXISTS (SELECT 1 FROM job_metrics WHERE {COLUMN[kind]} = ?)", [name]))
