"""`jobsight prune` at scale, side by side with a plain copy of the same file.

    .venv/bin/python bench/prune_bench.py                   # 1M jobs / 10M samples over 60 days, prune 30
    .venv/bin/python bench/prune_bench.py --quick           # 20k jobs / 200k samples: does it still run?
    .venv/bin/python bench/prune_bench.py --db /work/bench-data/p60.duckdb --reuse   # build once

The database is built as bench/metrics_bench.py builds its own (`jobsight ingest` of a generated
sacct dump and sidecar CSVs), with every time squeezed so that the 1M jobs, 7 s apart there, run
over --days days; two untimed publishes then give it a snapshot and a spare, a site's steady state.
`jobsight lake export` writes the whole database to a lake (timed, for the record). Then, --rounds
times, on a fresh copy of the database and its snapshot files:

  baseline   `cp` of the database file (a plain copy, the floor of any compaction)
  prune      `jobsight prune --samples-before <first sample's day + --prune-days> --lake LAKE`:
             the whole process (open, lake check, delete, compacted copy and swap, snapshot publish)

and once, on another copy, a prune of every sample: what is left is the per-job results and the rest
of the schema, so the samples' own bytes are the difference. The file and the snapshot should shrink
by the share of samples removed times the samples' bytes (within 10 %); the steady state is given in
bytes per job (the file without samples) and per sample row. Prints one table headed by the date,
commit, machine and load; asserts nothing. Figures: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from metrics_bench import START, Bench, _rm_db  # noqa: E402

SIZES = {"quick": {"jobs": 20_000, "samples": 200_000}, "full": {"jobs": 1_000_000, "samples": 10_000_000}}
JOB_SPACING_S = 7          # gen_sacct: one job every 7 s


def _files(db: Path) -> dict[str, Path]:
    return {"db": db, "snapshot": Path(f"{db}.snapshot"), "spare": Path(f"{db}.snapshot.spare")}


def _sizes(db: Path) -> dict[str, int]:
    return {k: p.stat().st_size if p.exists() else 0 for k, p in _files(db).items()}


def _copy(src: Path, dst: Path) -> None:
    _rm_db(dst)
    for key, p in _files(src).items():
        if p.exists():
            shutil.copyfile(p, _files(dst)[key])


def _samples(db: Path) -> dict:
    import duckdb
    with duckdb.connect(str(db), read_only=True) as con:
        n, t0, t1 = con.execute("SELECT count(*), min(time), max(time) FROM sample").fetchone()
        jobs = con.execute("SELECT count(*) FROM job").fetchone()[0]
    return {"samples": n, "first": t0, "last": t1, "jobs": jobs}


def _cp(src: Path, dst: Path) -> float:
    dst.unlink(missing_ok=True)
    t = time.perf_counter()
    subprocess.run(["cp", str(src), str(dst)], check=True)
    wall = time.perf_counter() - t
    dst.unlink()
    return wall


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k jobs / 200k samples")
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--days", type=float, default=60, help="the days the jobs run over (default 60)")
    ap.add_argument("--prune-days", type=int, default=30, help="prune the first N days of samples (default 30)")
    ap.add_argument("--rounds", type=int, default=2, help="prune / cp pairs, median reported (default 2)")
    ap.add_argument("--db", help="the generated database: kept (default: in the temporary directory)")
    ap.add_argument("--reuse", action="store_true", help="use --db as it is when it exists")
    ap.add_argument("--workdir", help="where the temporary directory goes")
    args = ap.parse_args()
    size = SIZES["quick" if args.quick else "full"]
    jobs, samples = args.jobs or size["jobs"], args.samples or size["samples"]
    from scale import machine
    figs: dict = {"machine": machine()}
    work = Path(tempfile.mkdtemp(prefix="jobsight-prune-", dir=args.workdir))
    b = Bench(work)
    db = Path(args.db).resolve() if args.db else work / "bench.duckdb"
    try:
        if not (args.reuse and db.exists()):
            _rm_db(db)
            scale = args.days * 86400 / (jobs * JOB_SPACING_S)
            src = work / "inputs"
            b.say(f"generating {jobs:,} jobs / {samples:,} samples over {args.days:g} days ...")
            gen = b.gen(src, jobs, samples, 0, START, scale)
            b.say(f"  {gen['samples']:,} samples in {gen['seconds']:.0f} s")
            try:
                figs["ingest"] = b.jobsight(["ingest", "--db", str(db), str(src), "--quiet"], "jobsight ingest")
            finally:
                shutil.rmtree(src, ignore_errors=True)
            for _ in range(2):      # a snapshot and its spare, as a site's steady state has
                b.jobsight(["dashboard", "--db", str(db), "--publish"], "publish")
        else:       # a database of an earlier run: its views and stored results brought up to date
            b.jobsight(["settings", "--db", str(db), "--quiet"], "settings (reused database)")
        info = _samples(db)
        cutoff = dt.datetime.combine(info["first"].date(), dt.time()) + dt.timedelta(days=args.prune_days)
        figs.update(info=info, cutoff=cutoff.isoformat())
        lake = work / "lake"
        figs["export"] = b.jobsight(["lake", "export", "--db", str(db), "--out", str(lake)], "lake export (all)")
        figs["lake_bytes"] = sum(p.stat().st_size for p in lake.rglob("*.parquet"))
        figs["full"] = _sizes(db)
        copy = work / "round.duckdb"
        _cp(db, work / "warm.duckdb")       # the file in the page cache for both, as for the prune's copy
        rounds = []
        for i in range(args.rounds):
            figs.setdefault("load", []).append(os.getloadavg())
            cp_s = _cp(db, work / "cp.duckdb")
            _copy(db, copy)
            run = b.jobsight(["prune", "--db", str(copy), "--samples-before", cutoff.isoformat(), "--lake", str(lake)],
                             f"prune round {i + 1}")
            after = _samples(copy)
            rounds.append({"cp_s": cp_s, "prune_s": run["seconds"], "rss_mb": run["maxrss_mb"],
                           "parts": run.get("parts", {}), "cpu_s": run.get("cpu_s", 0.0),
                           "sizes": _sizes(copy), "left": after["samples"]})
            b.say(f"  round {i + 1}: cp {cp_s:.2f} s, prune {run['seconds']:.2f} s")
        figs["rounds"] = rounds
        # every sample pruned: the per-job results and the schema alone
        _copy(db, copy)
        b.jobsight(["prune", "--db", str(copy), "--samples-before", (info["last"] + dt.timedelta(days=1)).isoformat(),
                    "--lake", str(lake)], "prune of every sample")
        figs["empty"] = _sizes(copy)
        figs["empty_left"] = _samples(copy)["samples"]
        figs["load"].append(os.getloadavg())
        _rm_db(copy)
    finally:
        if not args.db:
            _rm_db(db)
        shutil.rmtree(work, ignore_errors=True)
    print(render(figs))
    print(json.dumps(figs, default=str))
    return 0


def render(f: dict) -> str:
    m, info, full, empty = f["machine"], f["info"], f["full"], f["empty"]
    rounds = sorted(f["rounds"], key=lambda r: r["prune_s"])
    r = rounds[len(rounds) // 2]
    removed = info["samples"] - r["left"]
    share = removed / info["samples"]
    lines = [f"{m['started']}, commit {m['commit']}, {m['cpu']} ({m['cores']} cores, {m['ram_gib']:.0f} GiB), "
             f"DuckDB {m['duckdb']}; load (1/5/15 min) at each round: "
             + "; ".join(" / ".join(f"{x:.1f}" for x in la) for la in f["load"]),
             "",
             f"{info['jobs']:,} jobs, {info['samples']:,} samples from {info['first']:%Y-%m-%d} to {info['last']:%Y-%m-%d}; "
             f"prune before {f['cutoff'][:10]}: {removed:,} rows ({share:.1%}); lake {_mb(f['lake_bytes'])}, "
             f"export {f['export']['seconds']:.1f} s",
             "",
             "| what | before | after | shrink | expected shrink | ratio | target | met? |",
             "|---|---|---|---|---|---|---|---|"]
    for key in ("db", "snapshot"):
        samples_bytes = full[key] - empty[key]
        shrink = full[key] - r["sizes"][key]
        expected = share * samples_bytes
        ratio = shrink / expected if expected else float("nan")
        lines.append(f"| {'file' if key == 'db' else 'snapshot'} | {_mb(full[key])} | {_mb(r['sizes'][key])} | "
                     f"{_mb(shrink)} | {_mb(expected)} | {ratio:.2f} | 0.90-1.10 | {'yes' if 0.9 <= ratio <= 1.1 else 'no'} |")
    disk = sum(full.values()), sum(r["sizes"].values())
    lines.append(f"| file + snapshot + spare | {_mb(disk[0])} | {_mb(disk[1])} | {_mb(disk[0] - disk[1])} | | | | |")
    lines += ["", "| what | jobsight prune | `cp` of the file | ratio | peak RSS | target | met? |",
              "|---|---|---|---|---|---|---|"]
    for i, x in enumerate(f["rounds"], 1):     # each prune beside the cp run just before it
        ratio = x["prune_s"] / x["cp_s"]
        parts = ", ".join(f"{k} {v['s']:.1f} s" for k, v in x["parts"].items() if "/" not in k and v["s"] >= 0.5)
        lines.append(f"| prune {share:.0%} of the samples, round {i} ({parts}; CPU {x['cpu_s']:.1f} s) | "
                     f"{x['prune_s']:.2f} s | {x['cp_s']:.2f} s | {ratio:.1f} | {x['rss_mb']:.0f} MB | <= 3x | "
                     f"{'yes' if ratio <= 3 else 'no'} |")
    lines += [
              "", "| steady state | bytes |", "|---|---|",
              f"| per job (the file with no samples: results, accounting, schema) | {empty['db'] / info['jobs']:,.0f} |",
              f"| per sample row (the file with all samples less that) | {(full['db'] - empty['db']) / info['samples']:.2f} |",
              f"| file without samples | {_mb(empty['db'])} ({f['empty_left']:,} rows left) |"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
