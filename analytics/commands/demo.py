"""`jobsight demo`: generate a realistic cluster's data in the real input formats, ingest it through
the same code as `jobsight ingest`, write the weekly reports, then serve the dashboard.

    jobsight demo [--jobs 3000] [--days 28] [--seed 1] [--out demo-data] [--db FILE] [--no-serve]

A second run with the same --jobs/--days/--seed reuses the generated files (their sizes are checked
against out/manifest.json) and the database (every file reports "already ingested").
The generated sacct text dumps and nvidia-smi logs print Europe/Amsterdam local time, so the
ingest runs with --timezone Europe/Amsterdam --cluster demo.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from jobsight.analytics.errors import UserError

DEFAULT_JOBS = 3000
DEFAULT_DAYS = 28
DEFAULT_SEED = 1
DEFAULT_OUT = "demo-data"
HOST, PORT = "127.0.0.1", 8050
MARKER_SUFFIX = ".demo.json"   # beside the database: which generation it holds


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"job records to generate (default {DEFAULT_JOBS})")
    p.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"days of history (default {DEFAULT_DAYS})")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed: same seed, same data (default {DEFAULT_SEED})")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"folder for the generated files (default ./{DEFAULT_OUT})")
    p.add_argument("--db", metavar="FILE", help="DuckDB file to ingest into (default DIR/demo.duckdb)")
    p.add_argument("--no-serve", action="store_true", help="stop after ingest and reports; do not start the dashboard")


def _prog() -> str:
    """How to call jobsight again: `.venv/bin/jobsight` when that is what ran and is not on PATH."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "jobsight" and shutil.which("jobsight") != os.path.abspath(argv0):
        rel = os.path.relpath(argv0)
        return rel if not rel.startswith("..") else argv0
    return "jobsight"


def say(msg: str = "") -> None:
    print(msg, flush=True)


def _sub(module: str, argv: list[str]) -> int:
    """Run another jobsight subcommand in this process, exactly as the CLI would."""
    mod = importlib.import_module(module)
    parser = argparse.ArgumentParser(prog=f"jobsight {module.rsplit('.', 1)[-1].removesuffix('_cli')}")
    mod.configure(parser)
    return mod.run(parser.parse_args(argv))


# ------------------------------------------------------------------------------------------ steps

def generate_step(out: Path, args) -> dict:
    from jobsight.analytics import demo as generator  # imported only when the demo runs
    want = generator.arguments(args.jobs, args.days, args.seed)
    if generator.is_current(out, want):
        m = generator.read_manifest(out)
        say(f"data: reusing {len(m['files'])} generated files in {out}/ (same --jobs/--days/--seed)")
        return m
    say(f"data: generating {args.jobs} jobs over {args.days} days (seed {args.seed}) into {out}/ ...")
    t0 = time.monotonic()
    m = generator.generate(out, jobs=args.jobs, days=args.days, seed=args.seed)
    size = sum(m["files"].values())
    by_dir: dict[str, int] = defaultdict(int)
    for rel in m["files"]:
        by_dir[rel.split("/", 1)[0]] += 1
    say(f"data: {len(m['files'])} files, {size / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s: "
        + ", ".join(f"{n} {d}" for d, n in sorted(by_dir.items())))
    return m


def check_db(db_path: Path, manifest: dict) -> None:
    """The database must hold this generation or nothing: never mix two demo data sets."""
    marker = db_path.with_name(db_path.name + MARKER_SUFFIX)
    args = manifest["arguments"]
    if not db_path.exists():
        marker.unlink(missing_ok=True)
        return
    try:
        held = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"{db_path} exists and was not made by `jobsight demo`; remove it or pass another --db") from None
    if held != args:
        say(f"db: {db_path} holds another demo generation (seed {held.get('seed')}, {held.get('n_records')} jobs, "
            f"{held.get('days')} days): replacing it")
        for p in (db_path, db_path.with_name(db_path.name + ".wal"), marker):
            p.unlink(missing_ok=True)
        from jobsight.analytics.store.snapshot import snapshot_path
        snapshot_path(db_path).unlink(missing_ok=True)


def ingest_step(out: Path, db_path: Path, manifest: dict) -> tuple[bool, bool]:
    """(every file read?, did the database change?)"""
    from jobsight.analytics.demo import PARTITIONS_FILE, SUBDIRS
    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.ingest.load import REJECTS_QUERY
    from jobsight.analytics.ingest.records import ParseOptions
    from jobsight.analytics.store.database import Database
    opts = ParseOptions(timezone=manifest["ingest_options"]["timezone"], cluster=manifest["ingest_options"]["cluster"])
    paths = [out / d for d in SUBDIRS if (out / d).is_dir()]
    say(f"ingest: jobsight ingest --db {db_path} --timezone {opts.timezone} --cluster {opts.cluster} "
        + " ".join(str(p) for p in paths))
    t0 = time.monotonic()
    done = [0]
    n_files = len(manifest["files"]) - sum(1 for f in manifest["files"] if f.endswith(".meta.json"))

    def on_file(rep) -> None:
        done[0] += 1
        if done[0] % 200 == 0 and sys.stdout.isatty():
            print(f"\ringest: {done[0]}/{n_files} files", end="", flush=True)

    with Database.connect(db_path) as writer:
        reports = ingest.ingest_paths(writer.con, paths, opts, on_file=on_file)
        _billing_weights(writer.con, out / PARTITIONS_FILE, opts.cluster)
    if sys.stdout.isatty() and done[0] >= 200:
        print("\r" + " " * 40 + "\r", end="")
    elapsed = time.monotonic() - t0
    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    problems = []
    for r in reports:
        row = table[r.format or "?"]
        row["files"] += 1
        if r.status == "already ingested":
            row["already"] += 1
        elif r.status != "ingested":
            problems.append(r)
        for k in ("rows_in", "stored", "updated", "unchanged", "rejected", "dropped"):
            row[k] += getattr(r, k)
    cols = ("files", "already", "rows_in", "stored", "updated", "unchanged", "rejected", "dropped")
    say(f"ingest: {len(reports)} files in {elapsed:.1f} s")
    say("  " + f"{'format':<11}" + "".join(f"{c:>10}" for c in cols))
    for fmt in sorted(table):
        say("  " + f"{fmt:<11}" + "".join(f"{table[fmt][c]:>10}" for c in cols))
    if all(r.status == "already ingested" for r in reports):
        say("ingest: every file was already ingested: nothing changed")
    if any(r.rejected for r in reports):
        say(f"ingest: rejected rows and why: duckdb {db_path} \"{REJECTS_QUERY}\"")
    for r in problems:
        say(f"ingest: {r.path}: {r.status}: {r.error}")
    db_path.with_name(db_path.name + MARKER_SUFFIX).write_text(
        json.dumps(manifest["arguments"], sort_keys=True) + "\n", encoding="utf-8")
    changed = any(r.status != "already ingested" for r in reports)
    return not problems, changed


def _billing_weights(con, path: Path, cluster: str) -> None:
    """The partitions' TRESBillingWeights, kept as `ingest --from-sacct` keeps what scontrol says:
    they price the request the advice would have fit (a generation without the file has none)."""
    from jobsight.analytics.ingest import billing_weights
    if not path.is_file():
        return
    weights = billing_weights.read_file(path)
    billing_weights.replace(con, billing_weights.rows(weights, "scontrol", cluster), "scontrol", cluster)
    say(f"ingest: TRESBillingWeights of {len(weights)} partitions from {path} (as --from-sacct reads them with scontrol)")


# The demo's allocations: this month's, per project, a multiple of its burn so far this month, so that
# the budgets show every state (plenty left, past the warn level, OVER), written as a saved
# `sacctmgr show assoc` (GrpTRESMins billing-minutes) and kept as `ingest --from-sacct` keeps them.
ASSOC_FILE = "sacctmgr-assoc.txt"
BUDGET_MULTIPLES = (4.0, 2.0, 1.15, 0.9)


def budgets_step(out: Path, db_path: Path, cluster: str, end: int) -> bool:
    """Write and keep the demo's allocations; whether they changed."""
    from jobsight.analytics.ingest import budgets
    from jobsight.analytics.queries.scope import Filters, Scope
    from jobsight.analytics.queries.usage import usage
    from jobsight.analytics.store.database import Database
    until = datetime.fromtimestamp(end, timezone.utc).replace(tzinfo=None)
    with Database.open(db_path, say=say) as db:
        first = until.replace(day=1, hour=0, minute=0, second=0, microsecond=0).date()
        names, rows = usage(db, Scope.admin(), Filters(since=first, until=until.date()), "account")
        burn = [dict(zip(names, r)) for r in rows if (r[names.index("sbu")] or 0) > 0]
        lines = ["Cluster|Account|User|GrpTRESMins"]
        for i, r in enumerate(burn):
            sbu = r["sbu"] * BUDGET_MULTIPLES[i % len(BUDGET_MULTIPLES)]
            # billing-minutes: SBU are billing-hours x charging.factor (1 in the demo)
            lines.append(f"{cluster}|{r['account']}||billing={round(sbu * 60)}")
        path = out / ASSOC_FILE
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        limits = budgets.read_file(path)
        old = budgets.source_rows(db.con, "sacctmgr")
        budgets.replace(db.con, budgets.rows({(cluster, a, u): m for (_c, a, u), m in limits.items()}, "sacctmgr"),
                        "sacctmgr", cluster)
        changed = old != budgets.source_rows(db.con, "sacctmgr")
    say(f"budgets: {len(limits)} project allocations from {path} (as --from-sacct reads them with sacctmgr)")
    return changed


def summary_step(db_path: Path) -> None:
    from jobsight.analytics.queries.usage import database_summary
    from jobsight.analytics.store.database import Database
    with Database.open(db_path) as db:
        jobs, users, sbu, wasted, samples, flags = database_summary(db)
    say(f"db: {db_path}: {jobs} jobs of {users} users, {samples} samples, {sbu or 0:,.0f} SBU burned, "
        f"{wasted or 0:,.0f} SBU wasted")
    if flags:
        say("flags: " + ", ".join(f"{code} {n}" for code, n in flags))


def reports_step(out: Path, db_path: Path, end: int, changed: bool) -> Path | None:
    """Weekly reports for the last complete week of the data (admin and every project)."""
    if importlib.util.find_spec("jobsight.analytics.commands.report") is None:
        say("reports: `jobsight report` is not in this version: skipped")
        return None
    day = datetime.fromtimestamp(end, timezone.utc).date()
    iso = (day - timedelta(days=day.weekday() + 7)).isocalendar()    # the last complete ISO week
    week = f"{iso.year}-W{iso.week:02d}"
    folder = out / "reports"
    existing = sorted(folder.glob(f"{week}*/*.html"))
    if existing and not changed:
        say(f"reports: {len(existing)} HTML reports for {week} in {existing[0].parent}/ (unchanged data: not rewritten)")
        return folder
    try:
        _sub("jobsight.analytics.commands.report", ["--db", str(db_path), "--week", week, "--for", "admin", "--for", "all-accounts",
                                      "--format", "html,md", "--out", str(folder)])
    except UserError as exc:
        say(f"reports: not written: {exc}")
        return None
    found = sorted(folder.glob(f"{week}*/*.html")) or sorted(folder.glob("*/*.html"))
    say(f"reports: {len(found)} HTML reports for {week} in {found[0].parent if found else folder}/")
    return folder


def publish_step(db_path: Path, changed: bool) -> None:
    """A read-only snapshot for the dashboard (what ingest publishes in production)."""
    try:
        from jobsight.analytics.store.snapshot import publish, snapshot_path
    except ImportError:
        return
    if changed or not snapshot_path(db_path).exists():
        publish(db_path)


def serve_step(db_path: Path) -> int:
    if importlib.util.find_spec("jobsight.analytics.commands.dashboard") is None:
        say("dashboard: `jobsight dashboard` is not in this version yet; explore the data with the commands above")
        return 0
    say(f"dashboard: http://{HOST}:{PORT}/  (auth none: everyone is admin, local only; Ctrl-C stops it)")
    argv = ["--db", str(db_path), "--host", HOST, "--port", str(PORT), "--auth", "none"]
    try:
        try:
            rc = _sub("jobsight.analytics.commands.dashboard", argv)     # returns when Ctrl-C stops the server
            say("dashboard: stopped")
            return rc
        except UserError as exc:
            if "waitress" not in str(exc):
                raise
            # no production WSGI server installed: Flask's own server (no debugger) is fine for a
            # local demo on 127.0.0.1
            say("dashboard: waitress is not installed; serving with Flask's built-in server")
            mod = importlib.import_module("jobsight.analytics.commands.dashboard")
            parser = argparse.ArgumentParser()
            mod.configure(parser)
            app = mod.build(parser.parse_args(argv))
            app.run(host=HOST, port=PORT, debug=False)     # returns on Ctrl-C
            say("dashboard: stopped")
            return 0
    except KeyboardInterrupt:
        say("\ndashboard: stopped")
        return 0


def run(args) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:
        say("\ndemo: interrupted")
        return 130
    except RuntimeError as exc:          # DuckDB turns Ctrl-C during a query into this
        if "interrupted" not in str(exc).lower():
            raise
        say("\ndemo: interrupted")
        return 130


def _run(args) -> int:
    if args.jobs < 1 or args.days < 1:
        raise UserError("--jobs and --days must be at least 1")
    out = Path(args.out)
    db_path = Path(args.db) if args.db else out / "demo.duckdb"
    if db_path.exists() and db_path.is_dir():
        raise UserError(f"--db {db_path} is a folder")
    manifest = generate_step(out, args)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    check_db(db_path, manifest)
    ok, changed = ingest_step(out, db_path, manifest)
    summary_step(db_path)
    changed = budgets_step(out, db_path, manifest["ingest_options"]["cluster"], manifest["arguments"]["end"]) or changed
    reports_step(out, db_path, manifest["arguments"]["end"], changed)
    publish_step(db_path, changed)
    prog = _prog()
    say("try:")
    say(f"  {prog} flags --db {db_path}")
    say(f"  {prog} usage --db {db_path} --by account")
    say(f"  {prog} job   --db {db_path} JOBID")
    say(f"  truth table (job id -> generated behaviour): {out / 'manifest.json'}")
    if not ok:
        say("demo: some files could not be ingested (see above)")
        return 1
    if args.no_serve:
        return 0
    return serve_step(db_path)
