"""`jobsight ingest`: options and the per-file summary. The work is in analytics.ingest."""
from __future__ import annotations

import argparse
import json
import re
import sys

from jobsight.analytics.errors import UserError
from jobsight.analytics.render import terminal_safe

NOT_PUBLISHED = 3   # exit code: the inputs are stored, but the stored results or the snapshot are not up to date
FORMATS = ("sacct", "sacct-json", "seff", "sidecar", "nvidia-smi", "pbs", "lsf")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to ingest (format detected)")
    parser.add_argument("--db", required=True, help="DuckDB file (created and migrated as needed)")
    parser.add_argument("--config", help="jobsight.toml (default: $JOBSIGHT_CONFIG, then ./jobsight.toml): "
                                          "settings written to the database with the metric views after a run that changed it")
    parser.add_argument("--format", choices=FORMATS, help="skip detection: read every file as this format")
    parser.add_argument("--timezone", metavar="ZONE",
                        help="IANA zone of timestamps printed without an offset (sacct text, nvidia-smi); "
                             "default: this machine's zone")
    parser.add_argument("--cluster", metavar="NAME",
                        help="cluster name for inputs that carry none; with --from-sacct, sacct -M NAME")
    parser.add_argument("--columns", metavar="COL,COL,...",
                        help="sacct text without a header: the --format columns it was made with")
    parser.add_argument("--job-id", metavar="JOBID", help="nvidia-smi logs: the job the samples belong to")
    parser.add_argument("--from-sacct", action="store_true",
                        help="run `TZ=UTC sacct ...` here and ingest its output (incremental); also read the "
                             "partitions' TRESBillingWeights with `scontrol show partition -o` and the budgets "
                             "(GrpTRESMins billing=N) with `sacctmgr show assoc`")
    parser.add_argument("--since", metavar="DATE",
                        help="with --from-sacct: start of the window (default: last ingested end time)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    parser.add_argument("--quiet", action="store_true", help="no progress messages on stderr")


_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?$")


def _options(args):
    from jobsight.analytics.ingest.parsers.sacct_text import resolve_zone
    from jobsight.analytics.ingest.records import ParseOptions
    tz = args.timezone
    if tz:
        try:
            resolve_zone(tz)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    columns = None
    if args.columns:
        columns = [c.strip() for c in args.columns.split(",") if c.strip()]
        if not columns:
            raise UserError("--columns is empty")
    return ParseOptions(timezone=tz, cluster=args.cluster, columns=columns, job_id=args.job_id)


def _line(rep) -> str:
    path = terminal_safe(rep.path)   # a user's file name may hold line breaks and escape sequences
    if rep.status in ("unreadable", "unrecognised", "failed", "skipped"):
        return f"{path}: {rep.status}: {terminal_safe(rep.error or '')}"
    if rep.status == "already ingested":
        return f"{path}: {rep.format}, already ingested (ingest {rep.ingest_id}), nothing changed"
    extra = []
    if rep.unchanged:
        extra.append(f"{rep.unchanged} unchanged")
    if rep.dropped:
        extra.append(f"{rep.dropped} dropped")
    tail = (", " + ", ".join(extra)) if extra else ""
    return (f"{path}: {rep.format}, {rep.rows_in} rows: {rep.stored} stored, {rep.updated} updated, "
            f"{rep.rejected} rejected{tail}")


def run(args) -> int:
    from pathlib import Path

    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.ingest.load import rejects_hint
    from jobsight.analytics.store import freshness
    from jobsight.analytics.store import settings as settings_store
    from jobsight.analytics.store.database import Database
    if args.since and not args.from_sacct:
        raise UserError("--since only applies with --from-sacct")
    if args.since and not _DATE_RE.match(args.since):
        raise UserError(f"--since {args.since!r}: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]")
    if not args.paths and not args.from_sacct:
        raise UserError("nothing to ingest: give files or folders, or --from-sacct")
    opts = _options(args)
    cfg = _config(args)   # a bad config is an error before anything is ingested
    writer = Database.connect(args.db, cfg)
    con = writer.con
    progress = None if args.quiet else (lambda msg: print(f"jobsight ingest: {terminal_safe(msg)}", file=sys.stderr, flush=True))

    def show(rep):
        if not args.json:
            print(_line(rep), flush=True)
            if rep.trust:
                print(f"  trust: {terminal_safe(rep.trust)}", flush=True)
            for note in rep.notes:
                print(f"  note: {terminal_safe(note)}", flush=True)
            if rep.rejected:
                print(f"  see: {rejects_hint(rep.ingest_id)}", flush=True)

    reports = []
    try:
        if args.paths:
            reports += ingest.ingest_paths(con, args.paths, opts, fmt=args.format, progress=progress, on_file=show)
        if args.from_sacct:
            reports.append(_from_sacct(con, args, opts, progress, show))
        settings_changed = cfg.path is not None and bool(settings_store.config_differences(con, cfg))
    finally:
        writer.close()
    failed = [r for r in reports if r.status in ("unreadable", "unrecognised", "failed")]
    skipped = [r for r in reports if r.status == "skipped"]   # in a folder: not read, with the reason; not a failure
    # new budgets alone are worth a refresh and publish too: the dashboard shows them; and a refresh
    # or publish that failed before is tried again until it succeeds (the snapshot is then stale)
    changed = (any(r.stored or r.updated for r in reports) or getattr(args, "budgets_changed", False)
               or settings_changed or freshness.stale(Path(args.db)))
    snap = (_refresh_and_publish(args.db, cfg, progress) if changed
            else {"published": None, "error": None, "metrics_refresh": None})
    if args.json:
        totals = {k: sum(getattr(r, k) for r in reports)
                  for k in ("rows_in", "stored", "updated", "unchanged", "rejected", "dropped")}
        json.dump({"db": str(args.db), "files": [r.as_dict() for r in reports], "totals": totals,
                   "failed": len(failed), "skipped": len(skipped), "snapshot": snap}, sys.stdout, indent=2, default=str)
        print()
    elif len(reports) > 1:
        t = {k: sum(getattr(r, k) for r in reports) for k in ("stored", "updated", "rejected")}
        print(f"total: {len(reports)} files, {t['stored']} stored, {t['updated']} updated, {t['rejected']} rejected"
              + (f", {len(failed)} could not be read" if failed else "")
              + (f", {len(skipped)} skipped" if skipped else ""))
    if failed:      # inputs not read come first: exit 1 whatever happened after
        return 1
    return NOT_PUBLISHED if snap["error"] else 0


def _config(args):
    from jobsight.analytics.config import ConfigError, load_config
    try:
        return load_config(args.config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None


def _refresh_and_publish(db_path, cfg, progress) -> dict:
    """After a run that stored or updated rows: settings and the stored per-job results brought up
    to date (the jobs this run touched; as every read-write open by the metric commands does), then
    the dashboard's read-only snapshot published. The ingested data is committed by then: a failure
    here is reported on stderr (and in --json) and makes the exit code NOT_PUBLISHED; the next
    ingest tries again, whatever it brings, until it succeeds."""
    from jobsight.analytics.store import snapshot
    from jobsight.analytics.store.database import Database
    from jobsight.analytics.store.db import disk_full
    from jobsight.analytics.store.results import last_refresh
    out = {"published": None, "error": None, "metrics_refresh": None}
    try:
        # closing checkpoints the file, which publish() copies
        with Database.open(db_path, cfg, write_settings=cfg.path is not None) as db:
            # e.g. "incremental 5 5 1": jobs, jobs whose flags, days whose summaries were computed
            out["metrics_refresh"] = last_refresh(db.con)
        out["published"] = str(snapshot.publish(db_path))
        if progress:
            progress(f"stored metrics refreshed ({out['metrics_refresh']}); dashboard snapshot published: {out['published']}")
    except Exception as exc:   # noqa: BLE001 - the ingest itself succeeded; say why the rest did not
        out["error"] = disk_full(str(exc)) or str(exc)
        print(f"jobsight ingest: error: data ingested, but metrics/snapshot not refreshed: {terminal_safe(out['error'])}",
              file=sys.stderr, flush=True)
    return out


def _from_sacct(con, args, opts, progress, show):
    from dataclasses import replace

    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.ingest import sacct_runner
    from jobsight.analytics.ingest.parsers import sacct_text
    run_ = sacct_runner.run_sacct(args.since, args.cluster, con=con)
    try:
        if progress:
            progress(f"ran: TZ=UTC {' '.join(run_.argv)}")
        label = "sacct:" + " ".join(run_.argv[1:])
        checksum = ingest.sha256_file(run_.output)
        # sacct ran with TZ=UTC, whatever --timezone says about files
        sopts = replace(opts, timezone="UTC", columns=None)
        result = sacct_text.parse(run_.output, sopts)
        # Always loaded and logged, even when sacct printed the same bytes as last time: the log then
        # shows each run and its window, and the merge rule makes known records "unchanged".
        rep = ingest.load_result(con, result, label, checksum, {"since": run_.since, "cluster": args.cluster})
        rep.path = label
    finally:
        run_.output.unlink(missing_ok=True)
    rep.notes.append(_billing_weights(con, args.cluster))
    note, args.budgets_changed = _budgets(con, args.cluster)
    rep.notes.append(note)
    show(rep)
    return rep


def _billing_weights(con, cluster) -> str:
    """The partitions' TRESBillingWeights, for pricing advised requests (analytics/ingest/billing_weights.py);
    a note of what was read, or why not (it never fails the ingest)."""
    from jobsight.analytics.ingest import billing_weights
    try:
        name, weights = billing_weights.from_scontrol(cluster)
    except billing_weights.WeightsError as exc:
        return f"partitions' billing weights not read: {exc}"
    billing_weights.replace(con, billing_weights.rows(weights, "scontrol", name), "scontrol", name)
    return f"billing weights of {len(weights)} partition(s) of cluster {name} read with scontrol show partition -o"


def _budgets(con, cluster) -> tuple[str, bool]:
    """The associations' billing limits (GrpTRESMins billing=N), the budgets of analytics/ingest/budgets.py:
    a note of what was read, or why not (it never fails the ingest), and whether they changed."""
    from jobsight.analytics.ingest import budgets
    try:
        name = cluster or budgets.local_cluster()
        limits = budgets.from_sacctmgr(name)
    except budgets.AssocError as exc:
        return f"budgets not read: {exc}", False
    new = budgets.rows(limits, "sacctmgr")
    old = budgets.source_rows(con, "sacctmgr", name)
    budgets.replace(con, new, "sacctmgr", name)
    changed = old != budgets.source_rows(con, "sacctmgr", name)
    return f"{len(limits)} budget(s) of cluster {name} read with sacctmgr show assoc (GrpTRESMins billing=N)", changed
