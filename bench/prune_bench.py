"""`jobsight prune` at scale, side by side with a plain copy of the same file.

    .venv/bin/python bench/prune_bench.py                   # 1M jobs / 10M samples over 60 days, prune 30
    .venv/bin/python bench/prune_bench.py --quick           # 20k jobs / 200k samples: does it still run?
    .venv/bin/python bench/prune_bench.py --db /work/bench-data/p60.duckdb --reuse   # build once
    .venv/bin/python bench/prune_bench.py --db COPY --reuse --lake LAKE              # a lake exported of it

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

from metrics_bench import START, Bench, _rm_db, med  # noqa: E402

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
    ap.add_argument("--lake", help="a lake `lake export` already wrote of --db: used as it is (else exported, timed)")
    ap.add_argument("--no-empty", action="store_true", help="skip the prune of every sample (the bytes per job and row)")
    ap.add_argument("--reads", type=int, default=3, help="runs of each read on the pruned and the unpruned "
                    "database, alternated, median reported (default 3; 0: none)")
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
        lake = Path(args.lake).resolve() if args.lake else work / "lake"
        if not args.lake:
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
        if args.reads:      # the last round's pruned copy against a copy of the database it was pruned from
            _copy(db, work / "unpruned.duckdb")
            figs["reads"] = reads(b, copy, work / "unpruned.duckdb", info["first"], cutoff, lake, args.reads)
            _rm_db(work / "unpruned.duckdb")
        if not args.no_empty:       # every sample pruned: the per-job results and the schema alone
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


def reads(b: Bench, pruned: Path, full: Path, first: dt.datetime, cutoff: dt.datetime, lake: Path, n: int) -> dict:
    """The stored-metrics reads of the pruned period and a small ingest, each in a fresh process, on
    the pruned database and on the unpruned one alternately: (label, pruned, unpruned) runs."""
    import duckdb
    with duckdb.connect(str(pruned), read_only=True) as con:      # a two-GPU job whose samples were moved
        job = con.execute(      # the middle one by id (of those with two GPUs, if any)
            "SELECT job_id_raw FROM (SELECT p.job_id_raw, j.ngpus = 2 AS two, count(*) OVER (PARTITION BY two) AS n, "
            "row_number() OVER (PARTITION BY two ORDER BY CAST(p.job_id_raw AS BIGINT)) AS r "
            "FROM pruned_job p JOIN job j USING (cluster, job_id_raw)) WHERE r = n // 2 + 1 "
            "ORDER BY two DESC LIMIT 1").fetchone()[0]
        max_id = con.execute("SELECT max(CAST(job_id_raw AS BIGINT)) FROM job").fetchone()[0]
    monday = (first + (cutoff - first) / 2).date()
    monday -= dt.timedelta(days=monday.weekday())
    week, iso = (monday.isoformat(), (monday + dt.timedelta(days=6)).isoformat()), monday.isocalendar()
    toml = b.work / "lake.toml"
    toml.write_text(f'[lake]\npath = "{lake}"\n', encoding="utf-8")
    five = b.work / "ingest-5"
    b.gen(five, 5, 0, max_id + 1, (cutoff + dt.timedelta(days=40)).date().isoformat())
    sacct = five / f"sacct-{max_id + 1}.txt"
    for db in (pruned, full):       # as between ingests: both snapshot files current
        for _ in range(2):
            b.jobsight(["dashboard", "--db", str(db), "--publish"], "publish (untimed)")
    cmds = {f"jobsight job {job} (pruned: its series from the lake)": ["job", "--db", "{db}", "--config", str(toml), job],
            f"usage, the week of {week[0]}": ["usage", "--db", "{db}", "--since", week[0], "--until", week[1]],
            f"flags, {week[0]}": ["flags", "--db", "{db}", "--since", week[0], "--until", week[0]],
            f"report --week {iso[0]}-W{iso[1]:02d} --for user:u7": ["report", "--db", "{db}", "--week", f"{iso[0]}-W{iso[1]:02d}",
                                                                    "--for", "user:u7", "--format", "md", "--out", str(b.work / "r")],
            "ingest of a 5-job sacct file": ["ingest", "--db", "{db}", str(sacct), "--quiet"]}
    out = {}
    for label, cmd in cmds.items():
        runs: dict[Path, list] = {pruned: [], full: []}
        for i in range(n if not label.startswith("ingest") else 1):     # an ingest changes the file: once
            for db in (pruned, full):
                runs[db].append(b.jobsight([a.replace("{db}", str(db)) for a in cmd], f"{label}, {db.name} ({i + 1})"))
        out[label] = (med(runs[pruned]), med(runs[full]))
    shutil.rmtree(five, ignore_errors=True)
    return out


def render(f: dict) -> str:
    m, info, full, empty = f["machine"], f["info"], f["full"], f.get("empty", {"db": 0, "snapshot": 0})
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
             + (f"export {f['export']['seconds']:.1f} s" if "export" in f else "exported earlier"),
             "",
             "| what | before | after | shrink | expected shrink | ratio | target | met? |",
             "|---|---|---|---|---|---|---|---|"]
    for key in ("db", "snapshot"):
        samples_bytes = full[key] - empty[key]
        shrink = full[key] - r["sizes"][key]
        expected = share * samples_bytes if "empty" in f else float("nan")
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
    lines += [] if "empty" not in f else [
              "", "| steady state | bytes |", "|---|---|",
              f"| per job (the file with no samples: results, accounting, schema) | {empty['db'] / info['jobs']:,.0f} |",
              f"| per sample row (the file with all samples less that) | {(full['db'] - empty['db']) / info['samples']:.2f} |",
              f"| file without samples | {_mb(empty['db'])} ({f['empty_left']:,} rows left) |"]
    if f.get("reads"):
        lines += ["", "| read of the pruned period, fresh process | pruned database | unpruned | ratio | peak RSS pruned / unpruned |",
                  "|---|---|---|---|---|"]
        for label, (p, u) in f["reads"].items():
            lines.append(f"| {label} | {p['seconds']:.2f} s | {u['seconds']:.2f} s | {p['seconds'] / u['seconds']:.2f} | "
                         f"{p['maxrss_mb']:.0f} / {u['maxrss_mb']:.0f} MB |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
