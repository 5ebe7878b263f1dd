"""Ingest speed against DuckDB's own CSV reader, side by side, with peak RSS.

    .venv/bin/python bench/ingest_bench.py                 # small: 20k jobs (60k lines), 1M samples
    .venv/bin/python bench/ingest_bench.py --jobs 1000000 --samples 50000000   # the issue's full size
    .venv/bin/python bench/ingest_bench.py --full          # same as the line above
    .venv/bin/python bench/ingest_bench.py --jobs 1000000 --skip sidecar --repeat 3   # sacct only, 3 pairs

For each input it times, each in a fresh process (so peak RSS is that run's own):
  duckdb   CREATE TABLE t AS SELECT * FROM read_csv('<file>')   (types auto-detected)
  jobsight ingest of the same file into a new database (parse or DuckDB read + checks + bookkeeping)
Targets from the issue: sacct <= 2.5x DuckDB, sidecar <= 1.5x DuckDB, peak RSS <= 3 GB.
On a shared machine compare the ratio, not the seconds: --repeat N times each pair (DuckDB then
jobsight, back to back on the same generated file) and prints the 1-minute load average beside it,
and each run's CPU seconds (user + system, all threads) with their ratio, which load skews less.
This prints figures; it asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gen_sacct(path: Path, njobs: int) -> int:
    """A dump like `sacct --duplicates --parsable2 --format <our columns>`: job, .batch and .0 per job."""
    import polars as pl

    from jobsight.analytics.sacct_runner import SACCT_COLUMNS
    i = pl.int_range(0, njobs, eager=True).alias("i")
    base = pl.DataFrame({"i": i})
    t0 = pl.datetime(2026, 1, 1)
    sub = t0 + pl.duration(seconds=pl.col("i") * 7)
    start = sub + pl.duration(seconds=pl.col("i") % 600)
    end = start + pl.duration(seconds=60 + pl.col("i") % 7200)
    fmt = "%Y-%m-%dT%H:%M:%S"
    el = (pl.col("i") % 7200 + 60)
    hms = pl.format("{}:{}:{}", (el // 3600).cast(pl.String).str.zfill(2), (el % 3600 // 60).cast(pl.String).str.zfill(2),
                    (el % 60).cast(pl.String).str.zfill(2))
    ncpu = (pl.col("i") % 16 + 1).cast(pl.String)
    gpus = pl.col("i") % 4
    jobs = base.select(
        pl.col("i"), pl.lit(0).alias("k"),
        JobID=(pl.col("i") + 1000000).cast(pl.String), JobIDRaw=(pl.col("i") + 1000000).cast(pl.String),
        Cluster=pl.lit("bench"), Partition=pl.when(gpus > 0).then(pl.lit("gpu")).otherwise(pl.lit("cpu")),
        QOS=pl.lit("normal"), Account=pl.format("acct{}", pl.col("i") % 50), Group=pl.format("grp{}", pl.col("i") % 50),
        User=pl.format("user{}", pl.col("i") % 500), UID=(pl.col("i") % 500 + 10000).cast(pl.String),
        Submit=sub.dt.strftime(fmt), Eligible=sub.dt.strftime(fmt), Start=start.dt.strftime(fmt), End=end.dt.strftime(fmt),
        Elapsed=hms, ExitCode=pl.lit("0:0"),
        State=pl.when(pl.col("i") % 10 == 0).then(pl.lit("FAILED")).when(pl.col("i") % 17 == 0)
        .then(pl.lit("CANCELLED by 10001")).otherwise(pl.lit("COMPLETED")),
        NNodes=pl.lit("1"), NCPUS=ncpu, ReqCPUS=ncpu, NTasks=pl.lit(""), ReqMem=pl.format("{}G", pl.col("i") % 64 + 1),
        ReqTRES=pl.format("billing={},cpu={},mem={}G,node=1", ncpu, ncpu, pl.col("i") % 64 + 1),
        AllocTRES=pl.when(gpus > 0).then(pl.format("billing={},cpu={},gres/gpu:a100={},gres/gpu={},mem={}G,node=1",
                                                   ncpu, ncpu, gpus, gpus, pl.col("i") % 64 + 1))
        .otherwise(pl.format("billing={},cpu={},mem={}G,node=1", ncpu, ncpu, pl.col("i") % 64 + 1)),
        Timelimit=pl.when(pl.col("i") % 13 == 0).then(pl.lit("UNLIMITED")).otherwise(pl.lit("1-00:00:00")),
        NodeList=pl.format("node{}", pl.col("i") % 1000), TotalCPU=pl.format("{}:{}.{}", (pl.col("i") % 60).cast(pl.String).str.zfill(2),
                                                                            (pl.col("i") % 59).cast(pl.String).str.zfill(2), pl.lit("123")),
        UserCPU=pl.lit(""), SystemCPU=pl.lit(""), MaxRSS=pl.lit(""), AveRSS=pl.lit(""), MaxVMSize=pl.lit(""),
        TRESUsageInTot=pl.lit(""), TRESUsageInMax=pl.lit(""), TRESUsageInAve=pl.lit(""), Restarts=pl.lit("0"),
        JobName=pl.format("job_{}", pl.col("i") % 997),
    )
    def step(name: str, k: int):
        return jobs.with_columns(
            k=pl.lit(k), JobID=pl.col("JobID") + "." + name, JobIDRaw=pl.col("JobIDRaw") + "." + name,
            Partition=pl.lit(""), QOS=pl.lit(""), Account=pl.lit(""), Group=pl.lit(""), User=pl.lit(""), UID=pl.lit(""),
            Submit=pl.col("Start"), Eligible=pl.col("Start"), ReqMem=pl.lit(""), ReqTRES=pl.lit(""), Timelimit=pl.lit(""),
            State=pl.lit("COMPLETED"), NTasks=pl.lit("1"), UserCPU=pl.lit("00:30.000"), SystemCPU=pl.lit("00:01.500"),
            MaxRSS=pl.format("{}K", pl.col("i") % 100000 + 1000), AveRSS=pl.format("{}K", pl.col("i") % 100000 + 500),
            MaxVMSize=pl.lit("2G"), TRESUsageInTot=pl.format("cpu=00:00:31,mem={}K", pl.col("i") % 100000 + 1000),
            TRESUsageInMax=pl.format("cpu=00:00:31,mem={}K", pl.col("i") % 100000 + 1000), TRESUsageInAve=pl.lit("cpu=00:00:31"),
            JobName=pl.lit(name if name == "batch" else "python"))
    allrows = pl.concat([jobs, step("batch", 1), step("0", 2)]).sort("i", "k").select(SACCT_COLUMNS)
    allrows.write_csv(path, separator="|", quote_style="never")
    return allrows.height


def gen_sidecar(path: Path, nrows: int) -> int:
    import polars as pl

    from jobsight.collector.csv_schema import COLUMNS
    n_dev = 5   # cpu + 4 GPUs
    i = pl.int_range(0, nrows, eager=True).alias("i")
    base = pl.DataFrame({"i": i})
    t = pl.datetime(2026, 11, 1) + pl.duration(seconds=(pl.col("i") // n_dev) * 5)
    dev = pl.col("i") % n_dev
    df = base.select(
        time=t.dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ"), job_id=pl.lit("4242"), cluster=pl.lit("bench"), host=pl.lit("gpu01"),
        device=pl.when(dev == 0).then(pl.lit("cpu")).otherwise(pl.format("GPU-0000000{}-aaaa-bbbb-cccc-dddddddddddd", dev)),
        util_pct=(pl.col("i") % 101).cast(pl.Float64), mem_used_bytes=(pl.col("i") % 1000) * 1048576,
        mem_total_bytes=pl.lit(85899345920), gpu_index=pl.when(dev == 0).then(None).otherwise(dev - 1),
        power_w=(pl.col("i") % 400).cast(pl.Float64) + 0.5, energy_j=pl.col("i").cast(pl.Float64) * 3.0,
        sm_clock_mhz=pl.lit(1410.0), temperature_c=(pl.col("i") % 40 + 30).cast(pl.Float64), sm_active_pct=pl.lit(None, pl.Float64),
    ).select(list(COLUMNS))
    df.write_csv(path)
    return df.height


def child(kind: str, src: str, dbpath: str) -> None:
    from measure import peak_rss_mb  # the child runs as a script, bench/ first on sys.path
    t0 = time.perf_counter()
    if kind == "duckdb":
        import duckdb
        con = duckdb.connect(dbpath)
        delim = "|" if src.endswith(".txt") else ","
        con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{src}', delim='{delim}', header=true, quote='')")
        con.close()
    else:
        from jobsight.analytics import db, ingest
        from jobsight.analytics.records import ParseOptions
        con = db.connect(dbpath)
        (rep,) = ingest.ingest_paths(con, [src], ParseOptions(timezone="UTC"))
        con.close()
        assert rep.status == "ingested" and rep.rejected == 0, rep
    secs = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)   # all threads: the figure that load does not skew
    print(json.dumps({"seconds": secs, "cpu_seconds": ru.ru_utime + ru.ru_stime, "maxrss_mb": peak_rss_mb()}))


def measure(kind: str, src: Path, workdir: Path) -> dict:
    dbpath = workdir / f"{kind}-{src.stem}.duckdb"
    for p in (dbpath, Path(str(dbpath) + ".wal")):
        p.unlink(missing_ok=True)
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(src), str(dbpath)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{kind} on {src} failed:\n{out.stderr[-3000:]}")
    dbpath.unlink(missing_ok=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--full", action="store_true", help="1M jobs (~3M lines) and 50M sample rows")
    ap.add_argument("--workdir", default=None, help="where to write the generated inputs (default: a temp dir)")
    ap.add_argument("--skip", choices=("sacct", "sidecar"), action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1, help="measure each input's pair this many times")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "SRC", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    if args.full:
        args.jobs, args.samples = 1_000_000, 50_000_000
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        rows = []
        if "sacct" not in args.skip:
            src = work / "sacct-dump.txt"
            t = time.perf_counter()
            n = gen_sacct(src, args.jobs)
            print(f"generated {src.name}: {args.jobs} jobs, {n} lines, {src.stat().st_size / 1e6:.0f} MB "
                  f"in {time.perf_counter() - t:.1f} s", file=sys.stderr)
            for _ in range(args.repeat):
                rows.append(("sacct", n, src.stat().st_size, measure("duckdb", src, work), measure("jobsight", src, work),
                             2.5, os.getloadavg()[0]))
            src.unlink()
        if "sidecar" not in args.skip:
            src = work / "jobsight-bench-4242-gpu01-20261101T000000Z-1.csv"
            t = time.perf_counter()
            n = gen_sidecar(src, args.samples)
            print(f"generated {src.name}: {n} rows, {src.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s",
                  file=sys.stderr)
            for _ in range(args.repeat):
                rows.append(("sidecar", n, src.stat().st_size, measure("duckdb", src, work), measure("jobsight", src, work),
                             1.5, os.getloadavg()[0]))
            src.unlink()
    print(f"{'input':8} {'rows':>11} {'MB':>7} | {'duckdb s':>9} {'RSS MB':>7} | {'jobsight s':>10} {'RSS MB':>7} | "
          f"{'ratio':>6} {'target':>6} {'load':>5} | {'cpu s':>11} {'cpu ratio':>9}")
    for name, n, size, d, j, target, load in rows:
        ratio = j["seconds"] / d["seconds"]
        cpu = f"{d['cpu_seconds']:5.0f}/{j['cpu_seconds']:<5.0f} {j['cpu_seconds'] / d['cpu_seconds']:>8.2f}x"
        print(f"{name:8} {n:>11,} {size / 1e6:>7.0f} | {d['seconds']:>9.2f} {d['maxrss_mb']:>7.0f} | "
              f"{j['seconds']:>10.2f} {j['maxrss_mb']:>7.0f} | {ratio:>5.2f}x {target:>5.1f}x {load:>5.1f} | {cpu}"
              + ("" if ratio <= target and j["maxrss_mb"] <= 3072 else "  (over target)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
