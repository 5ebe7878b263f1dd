"""What Prometheus scrapes at the dashboard's `/metrics`: every number is a row of the views and
macros in sql/views/85_prometheus.sql; this module names the metrics and formats the rows in the
text exposition format (version 0.0.4). Who may scrape is the dashboard's business."""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Iterable

from jobsight.analytics.store.database import Database


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    column: str


@dataclass(frozen=True)
class Source:
    """One query (a view or a table macro of as_of) and the metric families its columns give."""
    sql: str
    labels: tuple[str, ...]
    families: tuple[Family, ...]
    as_of: bool = True


USAGE = ("cluster", "account", "partition")
SOURCES = (
    Source("SELECT * FROM prometheus_usage(?) ORDER BY ALL", USAGE + ("window",), (
        Family("jobsight_burn_sbu", "SBU burned in the window's UTC days up to today (today so far), "
               "per cluster, account and partition", "burn_sbu"),
        Family("jobsight_wasted_sbu", "Wasted SBU, as jobsight usage gives it, in the window's UTC days "
               "up to today", "wasted_sbu"),
        Family("jobsight_savings_sbu", "SBU that following the advice would have saved in the window's UTC days "
               "up to today", "savings_sbu"),
    )),
    Source("SELECT * FROM prometheus_running ORDER BY ALL", USAGE, (
        Family("jobsight_running_jobs", "Jobs whose latest accounting record says RUNNING", "running_jobs"),
        Family("jobsight_running_gpus", "GPUs allocated to the running jobs", "running_gpus"),
        Family("jobsight_idle_gpus", "GPUs of running jobs idle now (under flags.gpu_idle_pct for at least "
               "flags.running_gpu_idle_min minutes up to their latest sample)", "idle_gpus"),
        Family("jobsight_running_sbu_per_hour", "SBU per hour the running jobs burn (SBU so far over elapsed "
               "so far)", "sbu_per_h"),
        Family("jobsight_idle_gpu_sbu_per_hour", "SBU per hour paying for the GPUs idle now (GPU-charged jobs)",
               "idle_sbu_per_h"),
    ), as_of=False),
    Source("SELECT * FROM prometheus_last_ingest_age(?)", (), (
        Family("jobsight_last_ingest_age_seconds", "Seconds since the newest finished ingest in the snapshot",
               "age_s"),)),
    Source("SELECT * FROM prometheus_sample_age(?)", (), (
        Family("jobsight_newest_sample_age_seconds", "Seconds since the newest stored sample", "age_s"),)),
    Source("SELECT * FROM prometheus_accounting_age(?)", (), (
        Family("jobsight_newest_accounting_age_seconds", "Seconds since the newest submit, start or end time "
               "in the accounting records", "age_s"),)),
)


def utc_now() -> dt.datetime:
    """The scrape's time, naive UTC as the database stores times (the tests pin it)."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def lines(h: Database, as_of: dt.datetime) -> Iterable[str]:
    for source in SOURCES:
        names, rows = h.fetch(source.sql, [as_of] if source.as_of else None)
        at = {n: i for i, n in enumerate(names)}
        label_cols = [at[label] for label in source.labels]
        for fam in source.families:
            yield f"# HELP {fam.name} {escape_help(fam.help)}"
            yield f"# TYPE {fam.name} gauge"
            col = at[fam.column]
            for row in rows:
                if row[col] is None:        # unknown (e.g. no job's waste measured): no sample
                    continue
                labels = ",".join(f'{label}="{escape_label(str(row[i]))}"'
                                  for label, i in zip(source.labels, label_cols))
                yield f"{fam.name}{{{labels}}} {number(row[col])}" if labels else f"{fam.name} {number(row[col])}"


def exposition(h: Database, as_of: dt.datetime | None = None) -> str:
    return "\n".join(lines(h, as_of or utc_now())) + "\n"
