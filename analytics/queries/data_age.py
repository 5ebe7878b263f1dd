"""How old the data is: the newest time the accounting records name (a submit, start or end), and
whether it is more than a day before now (the macro data_freshness, sql/views/85_prometheus.sql,
the same newest time as /metrics' jobsight_newest_accounting_age_seconds). Every face says it: the
`usage` table, each report and each dashboard page."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class DataAge:
    newest: dt.datetime | None     # naive UTC; None: the database holds no job
    old: bool                      # newest is more than a day before the time asked at

    def line(self, capital: bool = False) -> str:
        """'data up to <time> UTC', with the warning when it is old ('Data ...': a line of its own)."""
        if self.newest is None:
            text = "no accounting data yet"
        else:
            text = f"data up to {self.newest:%Y-%m-%d %H:%M} UTC" + (" (more than a day old)" if self.old else "")
        return text[:1].upper() + text[1:] if capital else text


def utc_now() -> dt.datetime:
    """Now, naive UTC as the database stores times."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def data_age(db, now: dt.datetime | None = None) -> DataAge:
    newest, old = db.execute("SELECT newest, more_than_a_day_old FROM data_freshness(?)",
                             [now or utc_now()]).fetchone()
    return DataAge(newest, bool(old))
