"""`jobsight watch`: a long-running service that, every --every, ingests the cluster's accounting
(`ingest --from-sacct`, running jobs included) and the site spool (growing sidecar files read on
from where the last cycle stopped), then e-mails the owner of each running job whose GPUs have been
idle for [watch] idle_hours (analytics/watch.py).

    jobsight watch --db jobs.duckdb --every 15m [--spool DIR] [--smtp HOST:PORT | --eml-dir DIR] [--dry-run]
    jobsight watch --db jobs.duckdb --once          # one cycle, for cron and tests

The database is opened for each cycle and closed between cycles, so other commands can write it
then. A cycle that fails (sacct or the SMTP relay down, the database held by another writer) is
logged and the next one tries again; only a bad option or configuration stops the service at start.
SIGTERM or SIGINT stops it: at once between cycles; during one, after the file, batch of spool files or
notice at hand (sacct is killed), so that what was ingested or sent is recorded. A stop exits 0.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

from jobsight.analytics.commands.options import add_db_options
from jobsight.analytics.errors import UserError

DEFAULT_SPOOL = "/var/spool/jobsight"      # the sidecar's site-mode default (collector/options.py)


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p)
    p.add_argument("--every", metavar="DURATION",
                   help="time between the starts of cycles: 15m, 1h, 90s (default [watch] every, else 15m)")
    p.add_argument("--once", action="store_true", help="run one cycle and exit (for cron and tests): 0 when it "
                                                       "succeeded, 1 when a step failed")
    p.add_argument("--spool", action="append", metavar="DIR",
                   help=f"sidecar files to ingest each cycle: the site spool, or a copy of the nodes' spools "
                        f"(repeatable; default {DEFAULT_SPOOL} when it exists)")
    p.add_argument("--no-sacct", action="store_true",
                   help="do not run sacct (the accounting is ingested by something else); notices then go "
                        "by what the database holds")
    p.add_argument("--cluster", metavar="NAME", help="sacct -M NAME, and the cluster of sidecar files that name none")
    p.add_argument("--smtp", metavar="HOST:PORT", help="SMTP relay for the notices (default [email] smtp, else localhost:25)")
    p.add_argument("--eml-dir", metavar="DIR", help="write the notices as DIR/watch-<cluster>-<job>-<n>.eml instead of sending")
    p.add_argument("--dry-run", action="store_true",
                   help="ingest, then list on stdout who would be notified of what; send, write and record no notice")


class StopRequested(BaseException):
    """SIGTERM or SIGINT: leave the cycle at the next safe point (not an error)."""


class Stopper:
    """The signal handlers. A signal sets `requested`; while sacct runs (`interruptible`), or at a
    second signal, it also raises StopRequested there. `check()` raises it at the cycle's safe points."""

    def __init__(self):
        self.requested = threading.Event()
        self.interruptible = False

    def install(self) -> dict:
        """Install the handlers; returns the ones they replace."""
        return {sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum, _frame) -> None:
        again = self.requested.is_set()
        self.requested.set()
        if self.interruptible or again:
            raise StopRequested(signum)

    def check(self) -> None:
        if self.requested.is_set():
            raise StopRequested()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.requested.is_set() and (left := end - time.monotonic()) > 0:
            self.requested.wait(min(left, 1.0))


def log(message: str) -> None:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{now} jobsight watch: {message}", file=sys.stderr, flush=True)


def _settings(args):
    from jobsight.analytics.config import ConfigError, load_config, parse_every
    from jobsight.analytics.reports.settings import from_config
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    try:
        every = parse_every(args.every or cfg.watch_every)
    except ValueError as exc:
        raise UserError(f"--every: {exc}") from None
    return cfg, from_config(cfg), every


def _spools(args) -> list[Path]:
    if args.spool:
        return [Path(p) for p in args.spool]
    return [Path(DEFAULT_SPOOL)] if Path(DEFAULT_SPOOL).is_dir() else []


def run(args: argparse.Namespace) -> int:
    if args.smtp and args.eml_dir:
        raise UserError("give either --smtp or --eml-dir, not both")
    if args.smtp and ":" not in args.smtp:
        raise UserError(f"--smtp {args.smtp!r}: use host:port, e.g. localhost:25")
    cfg, settings, every = _settings(args)
    if not settings.sender and not args.dry_run:
        raise UserError("the notices need a sender: set `from` in [email] of jobsight.toml")
    spools = _spools(args)
    if not args.spool:
        log(f"spool: {spools[0]}" if spools else f"no spool ingested ({DEFAULT_SPOOL} does not exist; see --spool)")
    stopper = Stopper()
    before = stopper.install()
    if not args.once:
        log(f"watching {args.db} every {every:g} s")
    ok = True
    first = True
    try:
        while True:
            started = time.monotonic()
            ok = cycle(args, cfg, settings, spools, stopper, first)
            first = False
            if args.once:
                break
            stopper.sleep(every - (time.monotonic() - started))
            stopper.check()
    except StopRequested:
        log("stopped")
        return 0
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return 0 if ok else 1


def cycle(args, cfg, settings, spools: list[Path], stopper: Stopper, first: bool = False) -> bool:
    """One cycle: ingest, refresh, notify, publish. False when a step failed (logged)."""
    t0 = time.monotonic()
    at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    try:
        ingested, accounting_ok = _ingest(args, spools, stopper, cfg)
    except StopRequested:
        raise
    except Exception as exc:   # noqa: BLE001 - the service goes on; the next cycle tries again
        _failed("ingest", exc)
        return False
    stopper.check()
    ok = accounting_ok and ingested["ok"]
    notified = "no notices: the accounting could not be brought up to date"
    if accounting_ok:
        try:
            notified = _notify(args, cfg, settings, at, stopper, first)
        except StopRequested:
            raise
        except Exception as exc:   # noqa: BLE001
            _failed("notices", exc)
            notified, ok = "notices failed", False
    from jobsight.analytics.store.freshness import stale
    if ingested and (ingested["changed"] or stale(Path(args.db))):   # a publish that failed is tried again
        stopper.check()
        try:
            from jobsight.analytics.store import snapshot
            snapshot.publish(args.db)
        except Exception as exc:   # noqa: BLE001 - the data is in; the dashboard shows it after the next publish
            _failed("dashboard snapshot", exc)
            ok = False
    if accounting_ok and ingested["ok"]:
        ok = _retention(args, cfg, at) and ok
    log(f"cycle {'done' if ok else 'failed'} in {time.monotonic() - t0:.1f} s: {ingested['summary']}; {notified}")
    return ok


_pruned_on: dict[str, dt.date] = {}     # database -> the UTC day of its last prune by this process


def _retention(args, cfg, at: dt.datetime) -> bool:
    """[retention] samples_days with [lake] path: `jobsight prune` once a UTC day (the first cycle
    of the day), after the cycle's publish. False when it failed (logged; tried again tomorrow)."""
    if cfg is None or cfg.samples_days is None or _pruned_on.get(args.db) == at.date():
        return True
    _pruned_on[args.db] = at.date()
    from jobsight.analytics.store import prune
    try:
        result = prune.prune(args.db, prune.retention_cutoff(cfg.samples_days, at), cfg.lake_path, cfg)
    except Exception as exc:   # noqa: BLE001 - e.g. the lake lacks a month: the next day's cycle tries again
        _failed("prune", exc)
        return False
    log(f"prune: {result.rows:,} sample rows before {result.before:%Y-%m-%d} moved to {cfg.lake_path}"
        + (f"; {result.size_before / 1e6:,.1f} MB -> {result.size_after / 1e6:,.1f} MB" if result.rows else ""))
    return True


def _failed(step: str, exc: Exception) -> None:
    import duckdb
    if isinstance(exc, UserError):
        log(f"{step} failed, tried again next cycle: {exc}")
    elif isinstance(exc, duckdb.IOException):      # e.g. the database held by another writer: no traceback
        log(f"{step} failed, tried again next cycle: {type(exc).__name__}: {exc}")
    else:
        log(f"{step} failed, tried again next cycle: {type(exc).__name__}: {exc}\n" + traceback.format_exc().rstrip())


def _ingest(args, spools: list[Path], stopper: Stopper, cfg=None) -> tuple[dict, bool]:
    """The spool's files, then sacct, as `jobsight ingest SPOOL --from-sacct` does; the spool's
    sidecar files in one transaction (a batch), the other files each in its own, so a stop keeps
    what is in."""
    from jobsight.analytics.commands.ingest import _from_sacct
    from jobsight.analytics.ingest.records import ParseOptions
    from jobsight.analytics.store.database import Database
    opts = ParseOptions(timezone="UTC", cluster=args.cluster)
    reports, accounting_ok, spool_ok = [], True, True

    from jobsight.analytics.ingest.load import rejects_hint

    def on_file(rep) -> None:
        if rep.status in ("unreadable", "unrecognised", "failed", "skipped"):   # skipped: a FIFO, a link out, ...
            log(f"{rep.path}: {rep.status}: {rep.error}")
        elif rep.rejected:
            log(f"{rep.path}: {rep.rejected} row(s) rejected: {rejects_hint(rep.ingest_id)}")
        stopper.check()

    writer = Database.connect(args.db, cfg)
    try:
        for spool in spools:
            if not spool.is_dir():
                log(f"spool {spool}: not a folder, not read this cycle")
                spool_ok = False
                continue
            reports += _ingest_spool(writer.con, spool, opts, on_file)
        if not args.no_sacct:
            stopper.interruptible = True
            try:
                rep = _from_sacct(writer.con, SimpleNamespace(since=None, cluster=args.cluster), opts, None, on_file)
                reports.append(rep)
            except UserError as exc:
                log(f"sacct failed, tried again next cycle: {exc}")
                accounting_ok = False
            finally:
                stopper.interruptible = False
    finally:
        writer.close()
    sacct = [r for r in reports if r.path.startswith("sacct:")]
    files = [r for r in reports if not r.path.startswith("sacct:")]
    read = [r for r in files if r.status == "ingested"]
    summary = (f"spool: {len(read)} file(s) with new lines, {sum(r.stored for r in files)} row(s) stored; "
               + (f"sacct {sacct[0].stored} stored, {sacct[0].updated} updated" if sacct
                  else "sacct not run" if args.no_sacct else "sacct failed"))
    return {"changed": any(r.stored or r.updated for r in reports), "summary": summary, "ok": spool_ok}, accounting_ok


def _ingest_spool(con, spool: Path, opts, on_file) -> list:
    """`ingest SPOOL`, less the files no write touched since an ingest read them to their end, and
    with the sidecar files read together (ingest_batch: the lines appended to each since the last
    cycle, in one transaction). A spool keeps the files of ended jobs until the site removes them;
    looking each of them over again every cycle (opening it, hashing its last block) would cost
    more than the new lines."""
    from jobsight.analytics.ingest import batch as ingest_batch
    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.ingest import offsets
    from jobsight.analytics.ingest.load import FileReport
    folder = str(spool.resolve())
    known = offsets.read_to(con, folder)
    reports, entries = [], []
    for entry in ingest.walk([spool]):
        if entry.skip is not None:
            rep = FileReport(path=str(entry.path), status="skipped", error=entry.skip)
            reports.append(rep)
            on_file(rep)
        elif not _untouched(entry.path, known):
            entries.append(entry)
    return reports + ingest_batch.ingest_files(con, entries, folder, opts, ingest.load_parsers(), on_file)


def _untouched(path: Path, known: dict) -> bool:
    """Read to its end by the ingest that recorded its offset, and not written, moved or changed
    since that ingest started (same device and inode, size = offset, ctime and mtime before)."""
    try:
        row = known.get(str(path.resolve()))
        if row is None:
            return False
        st = os.stat(path)
    except OSError:
        return False
    dev, ino, offset, started_us = row
    return ((st.st_dev, st.st_ino, st.st_size) == (dev, ino, offset)
            and max(st.st_mtime_ns, st.st_ctime_ns) // 1000 < started_us)


def _notify(args, cfg, settings, at: dt.datetime, stopper: Stopper, first: bool) -> str:
    from jobsight.analytics import watch
    from jobsight.analytics.queries import notices
    from jobsight.analytics.store.database import Database
    with Database.open(args.db, cfg, say=log, write_settings=cfg.path is not None) as db:
        if first:
            for n in notices.interrupted(db):
                log(f"notice of job {n['job_id']} to {n['address']} was being sent at {n['sent_at']} when a watch "
                    "stopped: it may not have left, and is not sent again")
        notifier = watch.Notifier(db, settings, smtp=args.smtp, eml_dir=Path(args.eml_dir) if args.eml_dir else None,
                                  dry_run=args.dry_run, log=log, stop=stopper.check)
        try:
            result = notifier.run(at, out=lambda line: print(line, flush=True))
        except watch.SendError as exc:
            raise UserError(str(exc)) from None
    return ("dry run: " if args.dry_run else "") + result.summary()
