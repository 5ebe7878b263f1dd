"""`jobsight report`: weekly reports per user, per project (account) and for the admins, as HTML,
Markdown and CSV files named <out>/<window>/<kind>-<name>.<ext> (reports/report.py: file_stem),
and by e-mail.

    jobsight report --db jobs.duckdb --week last --for all-users --for all-accounts --for admin \\
        --format html,md,csv --out reports/ [--self-contained] [--email [--smtp host:port | --eml-dir DIR] [--dry-run]]

Every number comes from the report macros in sql/views/50_report.sql (see analytics/reports/).
Reports for named users and accounts only read those subjects' rows; `admin`, `all-users` and
`all-accounts` read the whole cluster's.

Exit codes: 0 when every file and e-mail was written or sent; 1 when some were not (each listed,
the others still done: reports/files.py, reports/mailer.py); 2 for a usage error (a bad option,
an --out or --eml-dir that cannot be a folder, an SMTP server not reached at all).

The reports, mailer and database modules are imported when the command runs, not to build its
parser (analytics/cli.py).
"""
from __future__ import annotations

import argparse
import os
import pwd
import signal
import sys
import threading
from pathlib import Path

from jobsight.analytics.commands.options import add_db_options, scope_of
from jobsight.analytics.errors import UserError

FORMATS = ("html", "md", "csv")
FOR_HELP = "user:NAME | account:NAME | admin | all-users | all-accounts (repeatable)"


def configure(p: argparse.ArgumentParser) -> None:
    add_db_options(p, server=True)
    p.add_argument("--week", help="ISO week (2026-W47) or `last` (the last complete ISO week, UTC)")
    p.add_argument("--since", help="instead of --week: first day (YYYY-MM-DD, UTC)")
    p.add_argument("--until", help="instead of --week: last day, inclusive (default: 7 days from --since)")
    p.add_argument("--for", dest="targets", action="append", required=True, metavar="WHO", help=FOR_HELP)
    p.add_argument("--format", default="html", help="comma-separated: html, md, csv (default html)")
    p.add_argument("--out", help="directory for <window>/<kind>-<name>.<ext> files (default ./reports; "
                                 "one md or csv report without --out goes to stdout); HTML reports there load "
                                 "one local plotly-<version>.min.js written next to them")
    p.add_argument("--self-contained", action="store_true",
                   help="HTML reports as single files, each embedding Plotly (4.8 MB each) instead of sharing one copy")
    p.add_argument("--email", action="store_true", help="e-mail each report with jobs to its recipients ([email] in jobsight.toml)")
    p.add_argument("--smtp", metavar="HOST:PORT", help="SMTP server for --email (default [email] smtp, else localhost:25)")
    p.add_argument("--eml-dir", metavar="DIR", help="write the e-mails as DIR/<window>/<kind>-<name>.eml instead of sending")
    p.add_argument("--dry-run", action="store_true", help="with --email: list who would get what; send and write nothing")


def renderers() -> dict:
    from jobsight.analytics.reports.csvout import render_csv
    from jobsight.analytics.reports.html import render_html_chunks
    from jobsight.analytics.reports.markdown import render_markdown
    return {"html": render_html_chunks, "md": render_markdown, "csv": render_csv}


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(f"--format {text!r}: choose from {', '.join(FORMATS)} (comma-separated)")
    return list(dict.fromkeys(formats))


def parse_target(text: str) -> tuple[str, str | None]:
    if text in ("admin", "all-users", "all-accounts"):
        return text, None
    kind, sep, name = text.partition(":")
    if sep and kind in ("user", "account") and name:
        return kind, name
    raise UserError(f"--for {text!r}: use {FOR_HELP}")


def subjects(ds, targets: list[str]) -> list[tuple[str, str]]:
    from jobsight.analytics.reports.report import ADMIN_NAME
    out: list[tuple[str, str]] = []
    for text in targets:
        kind, name = parse_target(text)
        if kind == "admin":
            out.append(("admin", ADMIN_NAME))
        elif kind == "all-users":
            out += [("user", u) for u in ds.subjects("user")]
        elif kind == "all-accounts":
            out += [("account", a) for a in ds.subjects("account")]
        else:
            out.append((kind, name))
    return list(dict.fromkeys(out))


def _may_report(scope, targets: list[str]) -> None:
    """With `[database] read_scope = "own"`, a user reports on themselves, a lead also on the
    accounts they lead; nothing else (the command line's scope, as the dashboard's)."""
    if scope.role == "admin":
        return
    for text in targets:
        kind, name = parse_target(text)
        if not ((kind == "user" and name == scope.user) or (kind == "account" and name in scope.accounts)):
            mine = [f"user:{scope.user}"] + [f"account:{a}" for a in scope.accounts]
            raise UserError(f"--for {text}: you may report on {', '.join(mine)}")


def _known(db, targets: list[str]) -> None:
    """A user or account named in --for has a job in the database (in any week; a quiet week still
    gets its report), else exit 2 naming it."""
    from jobsight.analytics.queries.subjects import seen
    for text in targets:
        kind, name = parse_target(text)
        if kind in ("user", "account") and not seen(db, kind, name):
            raise UserError(f"--for {text}: the database has no job of {kind} {name!r} in any period "
                            f"(a typo? jobs get in through `jobsight ingest` and the sidecar)")


def named_only(targets: list[str]) -> tuple[list[str], list[str]] | None:
    """(users, accounts) when every target names its subject; None when one needs the whole cluster."""
    parsed = [parse_target(t) for t in targets]
    if any(name is None for _kind, name in parsed):
        return None
    return [n for k, n in parsed if k == "user"], [n for k, n in parsed if k == "account"]


def write_files(reports: list, formats: list[str], out: Path, self_contained: bool = False) -> tuple[list, list]:
    """(written paths, failures). HTML reports share a plotly-<version>.min.js in their folder,
    written once (not counted), unless ``self_contained``."""
    from jobsight.analytics.reports.files import make_folder, write_each
    from jobsight.analytics.reports.html import write_plotly_js
    render_with = renderers()
    shared: dict[Path, str] = {}        # folder -> the name of its copy of Plotly

    def content(rep, fmt: str, folder: Path):
        def chunks():
            if fmt == "html" and not self_contained:
                if folder not in shared:
                    shared[folder] = write_plotly_js(folder)
                out = render_with[fmt](rep, plotly_src=shared[folder])
            else:
                out = render_with[fmt](rep)
            return [out.encode("utf-8")] if isinstance(out, str) else out
        return chunks

    for folder in dict.fromkeys(out / rep.period.label for rep in reports):
        make_folder(folder, "--out")        # before any file: a bad --out is a usage error (exit 2)
    return write_each((out / rep.period.label / f"{rep.stem}.{fmt}", content(rep, fmt, out / rep.period.label))
                      for rep in reports for fmt in formats)


def report_failures(failures: list, what: str) -> None:
    for f in failures:
        print(f"jobsight report: {what}: {f.describe()}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    formats = parse_formats(args.format)
    if (args.smtp or args.eml_dir or args.dry_run) and not args.email:
        raise UserError("--smtp, --eml-dir and --dry-run go with --email")
    if args.smtp and args.eml_dir:
        raise UserError("give either --smtp or --eml-dir, not both")
    targets = [parse_target(t) and t for t in args.targets]
    from jobsight.analytics import client, render
    from jobsight.analytics.reports.csvout import render_csv
    from jobsight.analytics.reports.data import gather
    from jobsight.analytics.reports.files import make_folder
    from jobsight.analytics.reports.period import resolve
    from jobsight.analytics.reports.settings import from_config
    period = resolve(args.week, args.since, args.until)
    server = client.server_of(args)
    if server is not None:
        reports, settings = [remote_report(server, args, targets)], None
        period = reports[0].period
    else:
        from jobsight.analytics.store.database import Database
        only = named_only(targets)
        with Database.read(args.db, args.config) as db:
            _may_report(scope_of(db.config), targets)
            _known(db, targets)
            settings = from_config(db.config)
            ds = gather(db, period, settings) if only is None else gather(db, period, settings, *only)
        reports = [ds.build(kind, name) for kind, name in subjects(ds, targets)]
    if not reports:
        print(f"jobsight report: nobody ran jobs in {period.label}; no reports", file=sys.stderr)

    to_stdout = (not args.out and not args.email and len(reports) == 1 and len(formats) == 1
                 and formats[0] in ("md", "csv"))
    to_files = not to_stdout and (args.out or not args.email)
    out = Path(args.out or "reports")
    eml_dir = Path(args.eml_dir) if args.eml_dir and not args.dry_run else None
    deliveries = None
    if args.email:
        from jobsight.analytics.reports import mailer  # smtplib, email: only to send
        deliveries = [mailer.plan(rep, settings) for rep in reports]
        if not args.dry_run and not settings.sender and any(d.recipients for d in deliveries):
            raise UserError("--email needs a sender: set `from` in [email] of jobsight.toml")
    # Usage errors before anything is written, not a half-done run: the sender above, the folders here.
    if to_files:
        make_folder(out, "--out")
    if eml_dir is not None:
        make_folder(eml_dir, "--eml-dir")
    failed = 0
    previous = _on_sigterm(_stop)     # a run stopped by SIGTERM removes its temporary file
    try:
        if to_stdout:
            rep = reports[0]
            # CSV to a terminal shows control characters escaped, as every CSV writer does
            text = render_csv(rep, terminal=render.is_terminal()) if formats[0] == "csv" else renderers()[formats[0]](rep)
            sys.stdout.write(text)
        elif to_files:
            written, failures = write_files(reports, formats, out, self_contained=args.self_contained)
            print(f"jobsight report: wrote {len(written)} file(s) for {len(reports)} report(s) to {out / period.label}",
                  file=sys.stderr)
            report_failures(failures, "not written")
            failed += len(failures)
        if deliveries is not None:
            failed += email(args, deliveries, settings, eml_dir, period.label)
    finally:
        _on_sigterm(previous)
    if failed:
        print(f"jobsight report: {failed} file(s) or e-mail(s) failed (listed above)", file=sys.stderr)
        return 1
    return 0


def remote_report(server: str, args: argparse.Namespace, targets: list[str]):
    """The asking user's own report, its data from the server's API (/report), to be rendered and
    written as the local command does."""
    from jobsight.analytics import client
    from jobsight.analytics.reports import wire
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        raise UserError(f"uid {os.getuid()} has no passwd entry: no name to report on") from None
    if targets != [f"user:{me}"]:
        raise UserError(f"with --server: --for user:{me} only (the server reports on the user asking)")
    if args.email:
        raise UserError("--email with --server: e-mails are sent where the database is (jobsight report --db)")
    answer = client.get(server, ["report"], [("week", args.week), ("since", args.since), ("until", args.until)])
    try:
        return wire.report_of(answer["report"])
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{client.terminal_safe(server)}: the answer is not a report (is this a jobsight dashboard?)") from None


def _stop(signum, _frame):
    raise SystemExit(128 + signum)


def _on_sigterm(handler):
    """Set SIGTERM's handler (None: the default), returning the one before; only the main thread can."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, signal.SIG_DFL if handler is None else handler)


def email(args: argparse.Namespace, deliveries: list, settings, eml_dir: Path | None, label: str) -> int:
    """Send or write the e-mails (or list them with --dry-run); the number that failed."""
    from jobsight.analytics.reports import mailer
    sendable = [d for d in deliveries if d.recipients]
    if args.dry_run:
        for d in deliveries:
            print(d.describe())
        return 0
    for d in deliveries:
        if not d.recipients:
            print(f"jobsight report: {d.describe()}", file=sys.stderr)
    if eml_dir is not None:
        paths, failures = mailer.write_eml(sendable, settings, eml_dir)
        print(f"jobsight report: wrote {len(paths)} e-mail(s) to {eml_dir / label}", file=sys.stderr)
        report_failures(failures, "not written")
    else:
        server = args.smtp or settings.smtp
        sent, failures = mailer.send_smtp(sendable, settings, server)
        print(f"jobsight report: sent {sent} e-mail(s) via {server}", file=sys.stderr)
        report_failures(failures, "not sent")
    return len(failures)
