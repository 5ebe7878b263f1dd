"""Ingest speed against DuckDB's own CSV reader, side by side, with peak RSS.

    .venv/bin/python bench/ingest_bench.py                 # small: 20k jobs (60k lines) per column set, 1M samples
    .venv/bin/python bench/ingest_bench.py --jobs 1000000 --samples 50000000   # the issue's full size
    .venv/bin/python bench/ingest_bench.py --full          # same as the line above
    .venv/bin/python bench/ingest_bench.py --jobs 1000000 --skip sidecar --columns narrow --repeat 2

sacct dumps come in three column sets (--columns, default all three): narrow (the 21 fields seff and
reportseff users pull), wide (jobsight's own sacct_runner set, 36) and format60 (a 71-field
`--format` list of Slurm 22.05 names), each 1 job line and 2 step lines per job. With --workdir
the generated dumps are kept there and reused by the next run.

For each input it times, each in a fresh process at nice 5 (so peak RSS is that run's own):
  duckdb   CREATE TABLE t AS SELECT * FROM read_csv('<file>')   (sacct: all_varchar; sidecar: types detected)
  jobsight `jobsight ingest --db <new> <file>`: the ingest, then the stored metrics' refresh and the
           dashboard snapshot's publish, as the command does
and prints where jobsight's time went: parse, the early insert (a thread beside the parse), its tail
and key check, the load/merge, the store refresh, the snapshot publish, the sha256 (a thread beside
the parse), each with its share of the total; "ingest alone" is the ratio without refresh and publish.
Targets from the issue: sacct <= 2.5x DuckDB, sidecar <= 1.5x DuckDB, peak RSS <= 3 GB.
On a shared machine compare the ratio, not the seconds: --repeat N times each pair (DuckDB then
jobsight, back to back on the same generated file), prints the 1-minute load average beside it,
each run's CPU seconds (user + system, all threads) with their ratio, which load skews less, and
with N > 1 the median of each figure. This prints figures; it asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))   # measure, also when imported as bench.ingest_bench

from measure import Phases, alone_ratio, peak_rss_mb, phase_line  # noqa: E402

NARROW_COLUMNS = ["JobID", "JobIDRaw", "JobName", "User", "Account", "Partition", "State", "ExitCode", "Submit",
                  "Start", "End", "Elapsed", "ElapsedRaw", "Timelimit", "NCPUS", "NNodes", "ReqMem", "AllocTRES",
                  "TotalCPU", "MaxRSS", "NodeList"]   # what reportseff / seff users pull
# a long `--format` list of Slurm 22.05 field names (sacct --helpformat), the wide set's among them
FORMAT60_COLUMNS = ["JobID", "JobIDRaw", "JobName", "Cluster", "Partition", "QOS", "QOSRAW", "Account", "Group", "GID",
                    "User", "UID", "AssocID", "WCKey", "Submit", "Eligible", "Start", "End", "Elapsed", "ElapsedRaw",
                    "Suspended", "ExitCode", "DerivedExitCode", "State", "Reason", "Priority", "Reservation", "Flags",
                    "NNodes", "AllocNodes", "ReqNodes", "NCPUS", "AllocCPUS", "ReqCPUS", "NTasks", "ReqMem", "ReqTRES",
                    "AllocTRES", "Timelimit", "TimelimitRaw", "NodeList", "CPUTime", "CPUTimeRAW", "TotalCPU",
                    "UserCPU", "SystemCPU", "AveCPU", "MinCPU", "AveCPUFreq", "ReqCPUFreq", "MaxRSS", "MaxRSSNode",
                    "MaxRSSTask", "AveRSS", "MaxVMSize", "AveVMSize", "MaxPages", "AvePages", "MaxDiskRead",
                    "MaxDiskWrite", "AveDiskRead", "AveDiskWrite", "ConsumedEnergyRaw", "TRESUsageInTot",
                    "TRESUsageInMax", "TRESUsageInAve", "TRESUsageOutTot", "Constraints", "Comment", "WorkDir",
                    "SubmitLine"]
COLUMN_SETS = ("narrow", "wide", "format60")


def column_set(name: str) -> tuple[list[str], tuple[str, str]]:
    """A column set's sacct --format fields and the two steps each job has (after the job line)."""
    from jobsight.analytics.ingest.sacct_runner import SACCT_COLUMNS
    return {"narrow": (NARROW_COLUMNS, ("batch", "extern")), "wide": (list(SACCT_COLUMNS), ("batch", "0")),
            "format60": (FORMAT60_COLUMNS, ("batch", "extern"))}[name]


def gen_sacct(path: Path, njobs: int, columns: str = "wide") -> int:
    """A dump like `sacct --duplicates --parsable2 --format <the set's columns>`: the job line and
    two step lines per job (narrow and format60: .batch and .extern; wide: .batch and .0)."""
    import polars as pl

    fields, steps = column_set(columns)
    i = pl.col("i")
    base = pl.DataFrame({"i": pl.int_range(0, njobs, eager=True)})
    t0 = pl.datetime(2026, 1, 1)
    sub = t0 + pl.duration(seconds=i * 7)
    start = sub + pl.duration(seconds=i % 600)
    el = i % 7200 + 60
    end = start + pl.duration(seconds=el)
    fmt = "%Y-%m-%dT%H:%M:%S"
    def z2(e):
        return e.cast(pl.String).str.zfill(2)
    hms = pl.format("{}:{}:{}", z2(el // 3600), z2(el % 3600 // 60), z2(el % 60))
    ncpu = (i % 16 + 1).cast(pl.String)
    gpus = i % 4
    mem = pl.format("{}G", i % 64 + 1)
    user = pl.format("user{}", i % 500)
    jid = (i + 1000000).cast(pl.String)
    cols = dict(
        JobID=jid, JobIDRaw=jid, Cluster=pl.lit("bench"),
        Partition=pl.when(gpus > 0).then(pl.lit("gpu")).otherwise(pl.lit("cpu")),
        QOS=pl.lit("normal"), QOSRAW=pl.lit("1"), Account=pl.format("acct{}", i % 50), Group=pl.format("grp{}", i % 50),
        GID=(i % 50 + 5000).cast(pl.String), User=user, UID=(i % 500 + 10000).cast(pl.String),
        AssocID=(i % 500 + 10).cast(pl.String), WCKey=pl.lit(""),
        Submit=sub.dt.strftime(fmt), Eligible=sub.dt.strftime(fmt), Start=start.dt.strftime(fmt), End=end.dt.strftime(fmt),
        Elapsed=hms, ElapsedRaw=el.cast(pl.String), Suspended=pl.lit("00:00:00"), ExitCode=pl.lit("0:0"),
        DerivedExitCode=pl.lit("0:0"),
        State=pl.when(i % 10 == 0).then(pl.lit("FAILED")).when(i % 17 == 0)
        .then(pl.lit("CANCELLED by 10001")).otherwise(pl.lit("COMPLETED")),
        Reason=pl.lit("None"), Priority=(i % 9000 + 1000).cast(pl.String), Reservation=pl.lit(""),
        Flags=pl.lit("SchedBackfill"), NNodes=pl.lit("1"), AllocNodes=pl.lit("1"), ReqNodes=pl.lit("1"),
        NCPUS=ncpu, AllocCPUS=ncpu, ReqCPUS=ncpu, NTasks=pl.lit(""), ReqMem=mem,
        ReqTRES=pl.format("billing={},cpu={},mem={}G,node=1", ncpu, ncpu, i % 64 + 1),
        AllocTRES=pl.when(gpus > 0).then(pl.format("billing={},cpu={},gres/gpu:a100={},gres/gpu={},mem={}G,node=1",
                                                   ncpu, ncpu, gpus, gpus, i % 64 + 1))
        .otherwise(pl.format("billing={},cpu={},mem={}G,node=1", ncpu, ncpu, i % 64 + 1)),
        Timelimit=pl.when(i % 13 == 0).then(pl.lit("UNLIMITED")).otherwise(pl.lit("1-00:00:00")),
        TimelimitRaw=pl.when(i % 13 == 0).then(pl.lit("UNLIMITED")).otherwise(pl.lit("1440")),
        NodeList=pl.format("node{}", i % 1000), CPUTime=hms, CPUTimeRAW=(el * (i % 16 + 1)).cast(pl.String),
        TotalCPU=pl.format("{}:{}.{}", z2(i % 60), z2(i % 59), pl.lit("123")),
        UserCPU=pl.lit(""), SystemCPU=pl.lit(""), AveCPU=pl.lit(""), MinCPU=pl.lit(""), AveCPUFreq=pl.lit(""),
        ReqCPUFreq=pl.lit("Unknown"), MaxRSS=pl.lit(""), MaxRSSNode=pl.lit(""), MaxRSSTask=pl.lit(""),
        AveRSS=pl.lit(""), MaxVMSize=pl.lit(""), AveVMSize=pl.lit(""), MaxPages=pl.lit(""), AvePages=pl.lit(""),
        MaxDiskRead=pl.lit(""), MaxDiskWrite=pl.lit(""), AveDiskRead=pl.lit(""), AveDiskWrite=pl.lit(""),
        ConsumedEnergyRaw=pl.lit("0"), TRESUsageInTot=pl.lit(""), TRESUsageInMax=pl.lit(""), TRESUsageInAve=pl.lit(""),
        TRESUsageOutTot=pl.lit(""), Restarts=pl.lit("0"), JobName=pl.format("job_{}", i % 997),
        Constraints=pl.lit(""), Comment=pl.lit(""), WorkDir=pl.format("/home/{}/project{}", user, i % 7),
        SubmitLine=pl.format("sbatch --job-name=job_{} run.sh", i % 997),
    )
    rss = i % 100000 + 1000
    step_cols = dict(
        Partition=pl.lit(""), QOS=pl.lit(""), QOSRAW=pl.lit(""), Account=pl.lit(""), Group=pl.lit(""), GID=pl.lit(""),
        User=pl.lit(""), UID=pl.lit(""), AssocID=pl.lit(""), Submit=start.dt.strftime(fmt),
        Eligible=start.dt.strftime(fmt), ReqMem=pl.lit(""), ReqTRES=pl.lit(""), Timelimit=pl.lit(""),
        TimelimitRaw=pl.lit(""), State=pl.lit("COMPLETED"), Reason=pl.lit(""), Priority=pl.lit(""), Flags=pl.lit(""),
        ReqNodes=pl.lit(""), NTasks=pl.lit("1"), ReqCPUFreq=pl.lit("0"), UserCPU=pl.lit("00:30.000"),
        SystemCPU=pl.lit("00:01.500"), AveCPU=pl.lit("00:00:31"), MinCPU=pl.lit("00:00:31"), AveCPUFreq=pl.lit("2.45G"),
        MaxRSS=pl.format("{}K", rss), MaxRSSNode=pl.format("node{}", i % 1000), MaxRSSTask=pl.lit("0"),
        AveRSS=pl.format("{}K", i % 100000 + 500), MaxVMSize=pl.lit("2G"), AveVMSize=pl.lit("2G"),
        MaxPages=pl.lit("0"), AvePages=pl.lit("0"), MaxDiskRead=pl.lit("1.50M"), MaxDiskWrite=pl.lit("0.20M"),
        AveDiskRead=pl.lit("1.50M"), AveDiskWrite=pl.lit("0.20M"),
        TRESUsageInTot=pl.format("cpu=00:00:31,mem={}K", rss), TRESUsageInMax=pl.format("cpu=00:00:31,mem={}K", rss),
        TRESUsageInAve=pl.lit("cpu=00:00:31"), TRESUsageOutTot=pl.lit("energy=0,fs/disk=204800"),
        WCKey=pl.lit(""), Comment=pl.lit(""), SubmitLine=pl.lit(""),
    )

    def rows(k: int, step: str | None) -> pl.DataFrame:
        over = {} if step is None else {**step_cols, "JobID": jid + "." + step, "JobIDRaw": jid + "." + step,
                                        "JobName": pl.lit(step if step in ("batch", "extern") else "python")}
        return base.select(i, pl.lit(k).alias("k"), **{c: over.get(c, cols[c]) for c in fields})

    allrows = pl.concat([rows(0, None), rows(1, steps[0]), rows(2, steps[1])]).sort("i", "k").select(fields)
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
    t0 = time.perf_counter()
    phases = None
    if kind == "duckdb":
        import duckdb
        con = duckdb.connect(dbpath)
        if src.endswith(".txt"):   # sacct text: every column as text, as the baseline
            con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{src}', delim='|', header=true, quote='', "
                        "all_varchar=true)")
        else:
            con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{src}', delim=',', header=true, quote='')")
        con.close()
    else:
        # the whole command: ingest, the stored metrics' refresh and the snapshot publish
        import contextlib
        import io

        from jobsight.analytics import cli
        from jobsight.analytics.ingest.parsers import sacct_text
        phases = Phases()
        phases.install(sacct_text, "parse_file")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = cli.main(["ingest", "--db", dbpath, "--timezone", "UTC", "--quiet", "--json", src])
        summary = json.loads(out.getvalue())
        assert rc == 0 and summary["totals"]["rejected"] == 0 and summary["snapshot"]["error"] is None, summary
    secs = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)   # all threads: the figure that load does not skew
    print(json.dumps({"seconds": secs, "cpu_seconds": ru.ru_utime + ru.ru_stime, "maxrss_mb": peak_rss_mb(),
                      "phases": phases.t if phases else {}}))


def measure(kind: str, src: Path, workdir: Path) -> dict:
    dbpath = workdir / f"{kind}-{src.stem}.duckdb"
    snap = Path(str(dbpath) + ".snapshot")
    def clean():
        for p in (dbpath, Path(str(dbpath) + ".wal"), snap):
            p.unlink(missing_ok=True)
    clean()
    out = subprocess.run(["nice", "-n", "5", sys.executable, __file__, "--child", kind, str(src), str(dbpath)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{kind} on {src} failed:\n{out.stderr[-3000:]}")
    clean()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--full", action="store_true", help="1M jobs (~3M lines) and 50M sample rows")
    ap.add_argument("--workdir", default=None, help="where to write the generated inputs (default: a temp dir)")
    ap.add_argument("--skip", choices=("sacct", "sidecar"), action="append", default=[])
    ap.add_argument("--columns", choices=COLUMN_SETS, action="append", default=[],
                    help="sacct column set(s) to measure (default: all three)")
    ap.add_argument("--repeat", type=int, default=1, help="measure each input's pair this many times")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "SRC", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    if args.full:
        args.jobs, args.samples = 1_000_000, 50_000_000
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        if "sacct" not in args.skip:
            for cset in args.columns or COLUMN_SETS:
                # kept in --workdir for the next run (generating 1M jobs takes half a minute)
                src = Path(args.workdir or work) / f"sacct-{cset}-{args.jobs}.txt"
                t = time.perf_counter()
                if src.exists():
                    n = sum(1 for _ in open(src, "rb")) - 1
                else:
                    n = gen_sacct(src, args.jobs, cset)
                print(f"{src.name}: {args.jobs} jobs, {len(column_set(cset)[0])} columns, {n} lines, "
                      f"{src.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s", file=sys.stderr)
                for _ in range(args.repeat):
                    rows.append((f"sacct {cset}", n, src.stat().st_size, measure("duckdb", src, work),
                                 measure("jobsight", src, work), 2.5, os.getloadavg()[0]))
                    print("measured: " + _row(*rows[-1]), file=sys.stderr)
                    print(phase_line(rows[-1][4]), file=sys.stderr)
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
    print(f"{'input':15} {'rows':>11} {'MB':>6} | {'duckdb s':>8} {'RSS MB':>6} | {'jobsight s':>10} {'RSS MB':>6} | "
          f"{'ratio':>6} {'target':>6} {'load':>5} | {'cpu s':>11} {'cpu ratio':>9}")
    for name, n, size, d, j, target, load in rows:
        print(_row(name, n, size, d, j, target, load))
    if args.repeat > 1:
        print(f"median of {args.repeat} pairs (each figure its own median):")
        for name in dict.fromkeys(r[0] for r in rows):
            mine = [r for r in rows if r[0] == name]
            d, j = ({k: statistics.median(r[i][k] for r in mine) for k in ("seconds", "cpu_seconds", "maxrss_mb")}
                    for i in (3, 4))
            j["phases"] = {k: statistics.median(r[4]["phases"].get(k, 0) for r in mine) for k in mine[0][4]["phases"]}
            print(_row(name, mine[0][1], mine[0][2], d, j, mine[0][5], statistics.median(r[6] for r in mine)))
            print(phase_line(j))
    return 0


def _row(name, n, size, d, j, target, load) -> str:
    ratio = j["seconds"] / d["seconds"]
    cpu_ratio = j["cpu_seconds"] / d["cpu_seconds"]
    cpu = f"{d['cpu_seconds']:5.0f}/{j['cpu_seconds']:<5.0f} {cpu_ratio:>8.2f}x"
    alone = alone_ratio(d, j)
    return (f"{name:15} {n:>11,} {size / 1e6:>6.0f} | {d['seconds']:>8.2f} {d['maxrss_mb']:>6.0f} | "
            f"{j['seconds']:>10.2f} {j['maxrss_mb']:>6.0f} | {ratio:>5.2f}x {target:>5.1f}x {load:>5.1f} | {cpu}"
            + ("" if max(ratio, cpu_ratio) <= target and j["maxrss_mb"] <= 3072 else "  (over target)") + alone)


if __name__ == "__main__":
    sys.exit(main())
