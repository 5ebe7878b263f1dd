"""What a recompute after a settings change cannot go below: writing the rows it must store.

    .venv/bin/python bench/store_floor.py --db /work/bench-data/m.duckdb    # a metrics_bench database

For each of metrics_bench's CHANGES it asks the store which tables the change rebuilds
(analytics/store/results.py ``rebuild_plan``), and for a first build (every table: an ingest into a new
database, as in ingest_bench and accounting_bench) takes them all, then times copying those tables' current rows, already
computed, into new tables in one transaction and committing it (CREATE TABLE ... AS SELECT * per
table, then COMMIT): no SQL of the definitions runs, only DuckDB's write of the rows the store
keeps. Beside it, metrics_bench's baseline, measured as there: the GROUP BY in a fresh process.
A recompute does this write plus the computing, plus its process start (about 0.6 s): if the
floor is over the recompute target (5x the GROUP BY), no change to the SQL meets the target; only
storing fewer rows or columns would. Works on a copy of the database (--workdir); asserts nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from metrics_bench import BASELINE_SQL, CHANGES, Bench, med  # noqa: E402


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _timed(con, sqls: list[str]) -> tuple[float, float]:
    t, c = time.perf_counter(), _cpu()
    for sql in sqls:
        con.execute(sql)
    return time.perf_counter() - t, _cpu() - c


def floor(db: Path, toml: Optional[Path]) -> dict:
    """The tables the change in ``toml`` rebuilds (None: every table, as the first build after an
    ingest into a new database), their rows, and the time to write them."""
    from jobsight.analytics.config import load_config
    from jobsight.analytics.store import db as jdb
    from jobsight.analytics.store import results as store
    from jobsight.analytics.store.settings import apply_to_db
    con = jdb.connect(db)
    con.execute("SET enable_progress_bar = false")
    try:
        apply_to_db(con, load_config(toml))
        tables = store.rebuild_plan(con) if toml else tuple(s.table for s in store.STORED)
        rows = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables)
        copies = [f"CREATE TABLE floor_{t} AS SELECT * FROM {t}" for t in tables]
        wall, cpu = _timed(con, ["BEGIN TRANSACTION", *copies, "COMMIT"])
        for t in tables:
            con.execute(f"DROP TABLE floor_{t}")
        apply_to_db(con, load_config(None))
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return {"tables": tables, "rows": rows, "wall": wall, "cpu": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a database built by bench/metrics_bench.py (only a copy is written)")
    ap.add_argument("--workdir", help="where to put the copy (default: a temp dir beside --db)")
    ap.add_argument("--rounds", type=int, default=3, help="copies per change, median reported")
    ap.add_argument("--first-build", action="store_true",
                    help="only every table, the first build after an ingest into a new database (e.g. ingest_bench's)")
    args = ap.parse_args()
    src = Path(args.db)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="floor-", dir=src.parent))
    work.mkdir(parents=True, exist_ok=True)
    copy = work / "floor.duckdb"
    shutil.copyfile(src, copy)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=BENCH.parent).stdout.strip()
    load = os.getloadavg()
    print(f"jobsight store floor: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, "
          f"{os.cpu_count()} cores, load {load[0]:.1f} before; {src} ({src.stat().st_size / 1e9:.2f} GB)")
    print("| change | tables rebuilt | rows | write floor | CPU | GROUP BY, whole process | floor / GROUP BY | target 5x |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        # the baseline once: the same query on the same file for every row (a first build is compared
        # with DuckDB's read of the input by ingest_bench, not with it)
        bench = Bench(work, verbose=False)
        base = None if args.first_build else med([bench.sql(copy, BASELINE_SQL, "baseline")
                                                   for _ in range(args.rounds)])["seconds"]
        for key, text in [("first", "")] + ([] if args.first_build else [(k, t) for k, _, t in CHANGES]):
            toml = work / f"changed-{key}.toml" if text else None
            if toml:
                toml.write_text(text, encoding="utf-8")
            r = sorted((floor(copy, toml) for _ in range(args.rounds)), key=lambda r: r["wall"])[args.rounds // 2]
            what = f"`{' '.join(text.split())}`" if text else "first build"
            vs = ("| | | |" if base is None or not text else
                  f"| {base:.2f} s | {r['wall'] / base:.1f}x | {'below' if r['wall'] < 5 * base else 'over'} |")
            print(f"| {what} | {len(r['tables'])} ({', '.join(r['tables'])}) | {r['rows']:,} "
                  f"| {r['wall']:.2f} s | {r['cpu']:.1f} s {vs}", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        else:
            copy.unlink(missing_ok=True)
    print(f"load {os.getloadavg()[0]:.1f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
