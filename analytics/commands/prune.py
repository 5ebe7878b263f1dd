"""`jobsight prune`: remove samples older than a date from the database once the Parquet lake holds
them, compact the file and publish a smaller snapshot; every per-job result stays.

    jobsight prune --db FILE --samples-before DATE --lake DIR [--dry-run]
    jobsight prune --db FILE                    with [retention] samples_days and [lake] path

What it checks and how it compacts: analytics/store/prune.py; the lifecycle: docs/lake.md.
"""
from __future__ import annotations

import argparse

from jobsight.analytics.commands.options import add_db_options
from jobsight.analytics.errors import UserError


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p)
    p.add_argument("--samples-before", metavar="DATE",
                   help="remove samples before this date or date/time, UTC (default: [retention] samples_days ago)")
    p.add_argument("--lake", metavar="DIR", help="the Parquet lake that must hold them (default: [lake] path)")
    p.add_argument("--dry-run", action="store_true", help="check the lake and say what would be removed; change nothing")


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def run(args: argparse.Namespace) -> int:
    from jobsight.analytics.config import ConfigError, load_config
    from jobsight.analytics.store import prune
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    lake = args.lake or cfg.lake_path
    if not lake:
        raise UserError("give --lake DIR (or [lake] path in the config): samples are removed only once a lake holds them")
    if args.samples_before:
        before = prune.parse_cutoff(args.samples_before)
    elif cfg.samples_days is not None:
        before = prune.retention_cutoff(cfg.samples_days)
    else:
        raise UserError("give --samples-before DATE (or [retention] samples_days in the config)")
    result = prune.prune(args.db, before, lake, cfg, dry_run=args.dry_run)
    when = before.isoformat(sep=" ")
    if not result.rows:
        print(f"prune: no samples before {when} to remove")
    else:
        verb = "would remove" if args.dry_run else "removed"
        months = ", ".join(f"{c} {m}: {n:,}" for c, m, n in result.months)
        print(f"prune: {verb} {result.rows:,} sample rows before {when}"
              + (f" of {result.jobs:,} jobs" if result.jobs else "") + f" ({months}); {prune.lake_root(lake)} holds them")
    if result.kept_rows:
        print(f"prune: kept {result.kept_rows:,} sample rows before {when} of {result.kept_jobs:,} jobs that are "
              "still running or have no accounting yet")
    if not args.dry_run and result.rows:
        print(f"prune: {args.db}: {_mb(result.size_before)} -> {_mb(result.size_after)}" + (
            "" if result.compacted else f" (not compacted: it would give back about {_mb(result.free_after)}, "
                                       f"under {prune.COMPACT_FREE:.0%} of the file; the next ingests reuse its free blocks)"))
    if result.snapshot is not None:
        print(f"published {result.snapshot}")
    return 0
