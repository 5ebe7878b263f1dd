"""`jobsight settings`: the settings a database holds (charging, flag thresholds, advice, budgets,
watch), and the one way besides a writer's ingest to change them.

    jobsight settings --db FILE                     the stored settings; brings an older database's
                                                    views and stored results up to date
    jobsight settings --db FILE --config FILE       also the differences and the stored tables the
                                                    change rebuilds, then applies it and publishes
    ... --dry-run                                   says what would change, changes nothing

Read commands never write settings: given another config, they say so and read with these.
"""
from __future__ import annotations

import argparse
import sys

from jobsight.analytics.errors import UserError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="jobsight DuckDB file")
    p.add_argument("--config", help="jobsight.toml to apply (default: $JOBSIGHT_CONFIG, then ./jobsight.toml; none: show only)")
    p.add_argument("--dry-run", action="store_true", help="show the differences and what they rebuild; change nothing")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from jobsight.analytics.config import ConfigError, load_config
    from jobsight.analytics.store import prune, pruned, snapshot
    from jobsight.analytics.store import results as store
    from jobsight.analytics.store import settings as settings_store
    from jobsight.analytics.store.database import Database, apply_views
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if not Path(args.db).is_file():
        raise UserError(f"{args.db}: no such database (create it with `jobsight ingest --db {args.db} ...`)")

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"jobsight settings: {msg}", file=sys.stderr, flush=True)

    with Database.connect(args.db, cfg) as writer:
        con = writer.con
        stored = settings_store.stored_rows(con)
        print(f"settings of {args.db}:")
        for line in settings_store.setting_lines(stored["setting"]) or ["(none yet: the first ingest writes them)"]:
            print(f"  {line}")
        changes = settings_store.differences(stored, settings_store.rows_of(cfg)) if cfg.path is not None else []
        if cfg.path is not None:
            print(f"changes from {cfg.path}:" if changes else f"{cfg.path}: the same settings, nothing to change")
            for line in changes:
                print(f"  {line}")
        write = bool(changes) or not settings_store.has_settings(con)
        con.execute("BEGIN TRANSACTION")
        try:
            if write:
                settings_store.apply_to_db(con, cfg, transaction=False)
            plan = store.rebuild_plan(con)
        finally:
            con.execute("COMMIT" if write and not args.dry_run else "ROLLBACK")
        if plan:
            print(f"{'would rebuild' if args.dry_run else 'rebuilds'} the stored tables: {', '.join(plan)}")
            moved = prune.from_lake(con, plan)
            if moved:
                print(f"{'would recompute' if args.dry_run else 'recomputes'} the pruned "
                      f"{pruned.named(moved)} from the samples the Parquet lake holds")
        if args.dry_run:
            return 0
        done = store.refresh(con, say=progress, progress=progress, lake_path=cfg.lake_path)
        apply_views(con)
    if done.kept:       # the lake could not give them: said, and exit 1 (docs/cli.md)
        print(f"jobsight settings: {pruned.kept_message(done.kept, done.skipped)}", file=sys.stderr)
    if changes or plan or snapshot_stale(args.db):
        published = snapshot.publish(args.db)
        print(f"published {published}")
    return 1 if done.kept else 0


def snapshot_stale(db: str) -> bool:
    from pathlib import Path

    from jobsight.analytics.store.freshness import stale
    return stale(Path(db))
