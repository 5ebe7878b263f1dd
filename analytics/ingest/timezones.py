"""The time zone of naive timestamps (sacct text, nvidia-smi logs, PBS records): --timezone, else
this machine's, which is where such logs are usually read; and the local times that occur twice,
in the hour the clocks go back."""
from __future__ import annotations

import itertools
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl


def local_zone_name() -> str:
    """IANA name of this machine's zone: $TZ, /etc/localtime's target, /etc/timezone, else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        try:
            ZoneInfo(tz)
            return tz
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    try:
        return Path("/etc/timezone").read_text().strip() or "UTC"
    except OSError:
        return "UTC"


# ----------------------------------------------------------------------------------------------
# The fall-back hour: when clocks go back (02:00-03:00 on 2026-10-25 in Europe/Amsterdam), every
# local time in it occurs twice. A parser first reads such a time as the earlier instant; a job's
# record or a sample log then says which reading it meant.

_ORDER = ("submit_time", "eligible_time", "start_time", "end_time")   # how a job's times follow each other


def second_reading(utc: datetime, zone: ZoneInfo) -> Optional[datetime]:
    """`utc` is the earlier reading of a local time in `zone`: the later reading (UTC, naive) when
    that local time occurs twice, else None."""
    local = utc.replace(tzinfo=timezone.utc).astimezone(zone).replace(tzinfo=None)
    later = local.replace(tzinfo=zone, fold=1).astimezone(timezone.utc).replace(tzinfo=None)
    return later if later != utc else None


def resolve_fall_back(times: dict[str, datetime], zone_name: str,
                      elapsed_s: Optional[float]) -> Optional[dict[str, datetime]]:
    """A record's local times (column -> UTC of the earlier reading), some maybe in a fall-back hour.
    None when none is; else the readings that fit: End not before Start first, then End - Start
    closest to Elapsed (when given), then submit and eligible not after start, then the earlier
    reading. Changes nothing when no choice fits better than the earlier readings."""
    zone = ZoneInfo(zone_name)
    choices = {}
    for col, t in times.items():
        later = second_reading(t, zone) if t is not None else None
        choices[col] = (t, later) if later is not None else (t,)
    if all(len(c) == 1 for c in choices.values()):
        return None
    cols = list(choices)

    def cost(pick: tuple) -> tuple:
        got = dict(zip(cols, pick))
        start, end = got.get("start_time"), got.get("end_time")
        backwards = start is not None and end is not None and end < start
        off = (abs((end - start).total_seconds() - elapsed_s)
               if elapsed_s is not None and start is not None and end is not None else 0.0)
        known = [got[c] for c in _ORDER if got.get(c) is not None and c != "end_time"]
        disorder = sum(a > b for a, b in zip(known, known[1:]))
        later = sum(p != choices[c][0] for c, p in got.items())
        return backwards, off, disorder, later

    return dict(zip(cols, min(itertools.product(*(choices[c] for c in cols)), key=cost)))


def fall_back_note(zone_name: str, lines: list[int], what: str) -> list[str]:
    """The note for the lines whose local times fell in a fall-back hour (none when there are none)."""
    if not lines:
        return []
    shown = ", ".join(str(n) for n in lines[:10]) + (", …" if len(lines) > 10 else "")
    return [f"{len(lines)} line(s) with a local time in a daylight-saving fall-back hour of {zone_name}, "
            f"which occurs twice: {what} (line {shown})"]


def fall_back_utc(local: pl.Expr, zone_name: str) -> tuple[pl.Expr, pl.Expr]:
    """A log's naive local times (in file order) -> (UTC, in a fall-back hour). A time in the hour
    is its later reading once the log's times have gone back within that hour that day (the log
    went on as the clocks went back), else its earlier one; a time that does not exist (the
    spring-forward gap) is null."""
    first = local.dt.replace_time_zone(zone_name, ambiguous="earliest", non_existent="null")
    later = local.dt.replace_time_zone(zone_name, ambiguous="latest", non_existent="null")
    twice = (first != later).fill_null(False)
    back = (twice & (first < first.cum_max().shift(1))).fill_null(False)
    went_back = back.cast(pl.Int32).cum_sum().over(local.dt.date()) > 0
    chosen = pl.when(twice & went_back).then(later).otherwise(first)
    return chosen.dt.convert_time_zone("UTC").dt.replace_time_zone(None), twice
