"""Options shared by the read commands (--db, --config, the period and the filters), and the read
API's Filters they become (analytics/queries/scope.py)."""
from __future__ import annotations

import argparse
import os
import pwd
from typing import TYPE_CHECKING

if TYPE_CHECKING:       # imported where used: `jobsight job --server` needs neither (start-up time)
    from jobsight.analytics.queries.scope import Filters, Scope


def add_db_options(p: argparse.ArgumentParser, server: bool = False) -> None:
    """--db and --config; with ``server`` the command may ask a dashboard instead (analytics/client.py)."""
    p.add_argument("--db", required=not server, help="jobsight DuckDB file")
    if server:
        p.add_argument("--server", metavar="URL",
                       help="ask this jobsight dashboard (its API, authenticated with MUNGE) instead of reading "
                            "--db; default $JOBSIGHT_SERVER, then [client] server of the config")
    p.add_argument("--config", help="jobsight.toml (default: $JOBSIGHT_CONFIG, then ./jobsight.toml)")


def add_scope_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", help="from this date/time (UTC), inclusive: 2026-11-01 or 2026-11-01T12:00")
    p.add_argument("--until", help="up to this date (the whole day, inclusive) or date/time (exclusive), UTC")
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--account", help="only this account's (project's) jobs")
    p.add_argument("--partition", help="only this partition's jobs")
    p.add_argument("--cluster", help="only this cluster's jobs")


def filters_from(args: argparse.Namespace, **more) -> Filters:
    """The read API's Filters of the period and scope options (and ``more`` by name)."""
    from jobsight.analytics.queries.scope import Filters
    return Filters.from_times(getattr(args, "since", None), getattr(args, "until", None),
                              **{k: getattr(args, k, None) for k in ("user", "account", "partition", "cluster")}, **more)


def scope_of(cfg) -> Scope:
    """Who the command line reads as: everything (`[database] read_scope = "all"`, the default: who
    can read the file can read every job in it), or with "own" the invoking user's scope, as the
    dashboard gives it: root and [roles] admins everything, a lead their accounts, others their own jobs."""
    from jobsight.analytics.queries.scope import Scope
    if cfg.read_scope != "own" or os.getuid() == 0:
        return Scope.admin()
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return Scope("user", "")   # no passwd entry: no name any job could carry
    roles = cfg.roles or {}
    if me in (roles.get("admins") or []):
        return Scope.admin(me)
    led = tuple(sorted(a for a, users in (roles.get("leads") or {}).items() if isinstance(users, list) and me in users))
    return Scope("lead", me, led) if led else Scope("user", me)
