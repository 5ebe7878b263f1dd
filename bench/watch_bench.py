"""`jobsight watch --once` at scale: one cycle that ingests 15 minutes of new data into a database
of 1M stored jobs, then looks for idle GPUs and sends the notices.

    .venv/bin/python bench/watch_bench.py --db /work/bench-data/m.duckdb      # builds it when missing (metrics_bench)
    .venv/bin/python bench/watch_bench.py --db PATH --minutes 15 --rounds 3    # WATCH_BENCH_PROFILE=FILE: cProfile

The database is metrics_bench's (1,000,000 jobs, 10,000,000 samples, `jobsight ingest` of
ingest_bench.gen_sacct's dump); each round works on a copy of it. A cluster's next minutes follow
it: ingest_bench.gen_sacct's jobs (7 s apart, three in four with 1-3 GPUs, the first GPU of one job
in seven idle), each 1 to 121 minutes long (a hash of its id: about 500 running at a time), starting two hours before
T0, the latest end time stored. Two states of them, as `sacct --parsable2` prints them at T0 and at
T1 = T0 + --minutes (running jobs RUNNING with their elapsed time so far), and a spool of sidecar
files, one per job, a sample of each device every --interval seconds up to T0, then appended up to
T1. A fake `sacct` on PATH prints the dump of the time (and a fake `scontrol` fails: no billing
weights). Untimed: a cycle at T0 (ingests the first two hours, sends the notices due then) and a
snapshot publish (a service that has run a while has a spare snapshot to rewrite). Timed: the
cycle at T1, in a fresh process (metrics_bench's --child-run: wall time, CPU, peak RSS, and where
the time went). Target (the issue): <= 10 s. Prints one table headed by the date, commit, machine
and load; asserts nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import metrics_bench  # noqa: E402
from measure import ROOT  # noqa: E402

TARGET_S = 10.0
HISTORY_H = 2                   # the jobs generated start this long before T0
CONFIG = """
[email]
from = "jobsight@example.org"
user_address = "{user}@example.org"

[watch]
idle_hours = 1
max_per_user_per_day = 3
"""
# where a watch cycle's time goes, besides metrics_bench's probes
WATCH_PROBES = (
    ("jobsight.analytics.commands.watch", "_ingest", "ingest"),
    ("jobsight.analytics.commands.watch", "_ingest_spool", "spool"),
    ("jobsight.analytics.ingest.files", "ingest_file", "file"),
    ("jobsight.analytics.commands.ingest", "_from_sacct", "sacct"),
    ("jobsight.analytics.commands.watch", "_notify", "notify"),
    ("jobsight.analytics.watch", "due", "due"),
    ("jobsight.analytics.watch:Notifier", "_send", "send"),
)


# ---------------------------------------------------------------- the next minutes of a cluster

def child_gen(out_dir: str, first_id: int, t0_text: str, minutes: int, interval: int) -> None:
    """In out_dir: sacct-t0.txt, sacct-t1.txt, spool-t0/ (sidecar files up to T0) and spool-add/
    (what each file gains up to T1, same names)."""
    import duckdb
    from ingest_bench import gen_sacct
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = dt.datetime.fromisoformat(t0_text)
    t1 = t0 + dt.timedelta(minutes=minutes)
    first = t0 - dt.timedelta(hours=HISTORY_H)
    njobs = int((t1 - first).total_seconds() // 7) + 1
    raw = out / ".raw.txt"
    gen_sacct(raw, njobs)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE raw AS SELECT * FROM read_csv('{raw}', delim='|', header=true, quote='', all_varchar=true)")
    raw.unlink()
    fmt = "%Y-%m-%dT%H:%M:%S"
    shift = f"(TIMESTAMP '{first:%Y-%m-%d %H:%M:%S}' - TIMESTAMP '2026-01-01')"
    new_id = f"CAST(CAST(split_part(JobID, '.', 1) AS BIGINT) - 1000000 + {first_id} AS VARCHAR)"
    suffix = "CASE WHEN contains(JobID, '.') THEN '.' || split_part(JobID, '.', 2) ELSE '' END"
    # metrics_bench's renaming: cluster bench, users u<n>, accounts p<n>; times moved to start at `first`
    con.execute(f"""
        CREATE TABLE acct AS SELECT * REPLACE (
            {new_id} || {suffix} AS JobID, {new_id} || {suffix} AS JobIDRaw,
            CASE WHEN "User" IS NOT NULL THEN 'u' || substr("User", 5) END AS "User",
            CASE WHEN "User" IS NOT NULL THEN 'p' || (CAST(substr("User", 5) AS INT) % 60) END AS Account),
            strptime(Start, '{fmt}') + {shift} AS st,
            strptime(Start, '{fmt}') + {shift} + to_seconds(CAST(hash(split_part(JobID, '.', 1)) % 7200 AS BIGINT) + 60) AS en,
            strptime(Submit, '{fmt}') + {shift} AS sb
        FROM raw""")
    for name, at in (("t0", t0), ("t1", t1)):
        ts = f"TIMESTAMP '{at:%Y-%m-%d %H:%M:%S}'"
        # as sacct prints at `at`: started jobs only; a running one RUNNING, End Unknown, its elapsed so far
        con.execute(f"""COPY (
            SELECT * EXCLUDE (st, en, sb) REPLACE (
                strftime(sb, '{fmt}') AS Submit, strftime(sb, '{fmt}') AS Eligible, strftime(st, '{fmt}') AS Start,
                CASE WHEN en > {ts} THEN 'Unknown' ELSE strftime(en, '{fmt}') END AS "End",
                CASE WHEN en > {ts} THEN 'RUNNING' ELSE State END AS State,
                strftime(TIMESTAMP '2000-01-01' + to_seconds(date_diff('second', st, LEAST(en, {ts}))), '%H:%M:%S')
                    AS Elapsed)
            FROM acct WHERE st <= {ts} ORDER BY CAST(split_part(JobID, '.', 1) AS BIGINT), JobID
        ) TO '{out / f"sacct-{name}.txt"}' (DELIMITER '|', HEADER, QUOTE '', ESCAPE '')""")
    con.execute(f"""
        CREATE TABLE j AS SELECT CAST(JobIDRaw AS BIGINT) AS id, st, en, NodeList AS host, CAST(NCPUS AS BIGINT) AS ncpus,
            CAST(COALESCE(NULLIF(regexp_extract(AllocTRES, 'gres/gpu=(\\d+)', 1), ''), '0') AS INT) AS ngpus
        FROM acct WHERE NOT contains(JobIDRaw, '.') AND st <= TIMESTAMP '{t1:%Y-%m-%d %H:%M:%S}'""")
    # one row per sample: each device of each job every `interval` s from its start to its end or T1
    con.execute(f"""
        CREATE TABLE s AS
        SELECT j.id, j.host, d.g, j.ncpus, j.st + to_seconds(k.k * {interval}) AS t
        FROM j, range(j.ngpus + 1) d(g),
             range(CAST(date_diff('second', j.st, LEAST(j.en, TIMESTAMP '{t1:%Y-%m-%d %H:%M:%S}')) // {interval} + 1 AS BIGINT)) k(k)""")
    row = """strftime(t, '%Y-%m-%dT%H:%M:%S.000Z') AS time, CAST(id AS VARCHAR) AS job_id, 'bench' AS cluster, host,
             CASE WHEN g = 0 THEN 'cpu' ELSE 'GPU-' || id || '-' || g END AS device,
             CASE WHEN g = 1 AND id % 7 = 0 THEN 0.0
                  ELSE GREATEST(1, LEAST(100, CAST(hash(id, g) % 100 AS BIGINT) + CAST(hash(id, g, t) % 21 AS BIGINT) - 10)) END
                 AS util_pct,
             CASE WHEN g = 0 THEN ncpus * 1073741824 ELSE 42949672960 END AS mem_used_bytes,
             CASE WHEN g = 0 THEN ncpus * 4294967296 ELSE 85899345920 END AS mem_total_bytes,
             CASE WHEN g > 0 THEN g - 1 END AS gpu_index, CASE WHEN g > 0 THEN 250.0 END AS power_w,
             CAST(NULL AS DOUBLE) AS energy_j, CASE WHEN g > 0 THEN 1410.0 END AS sm_clock_mhz,
             CASE WHEN g > 0 THEN 55.0 END AS temperature_c, CAST(NULL AS DOUBLE) AS sm_active_pct"""
    cols = ("time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes,gpu_index,power_w,energy_j,"
            "sm_clock_mhz,temperature_c,sm_active_pct")
    counts = {}
    for part, cond in (("spool-t0", f"t <= TIMESTAMP '{t0:%Y-%m-%d %H:%M:%S}'"),
                       ("spool-add", f"t > TIMESTAMP '{t0:%Y-%m-%d %H:%M:%S}'")):
        folder = out / part
        folder.mkdir()
        # one file per job, as the site-mode sidecar writes: DuckDB writes them partitioned, then renamed
        con.execute(f"COPY (SELECT id AS part_id, {row} FROM s WHERE {cond} ORDER BY id, t, g) TO '{folder / 'p'}' "
                    "(FORMAT CSV, HEADER false, QUOTE '', PARTITION_BY (part_id))")
        n = 0
        for sub in (folder / "p").iterdir():
            job = sub.name.split("=", 1)[1]
            body = b"".join(f.read_bytes() for f in sorted(sub.iterdir()))
            dest = folder / f"jobsight-bench-{job}-site.csv"
            new_file = part == "spool-t0" or not (out / "spool-t0" / dest.name).exists()
            dest.write_bytes(((cols + "\n").encode() if new_file else b"") + body)
            n += body.count(b"\n")
        shutil.rmtree(folder / "p")
        counts[part] = n
    at0, at1 = f"TIMESTAMP '{t0:%Y-%m-%d %H:%M:%S}'", f"TIMESTAMP '{t1:%Y-%m-%d %H:%M:%S}'"
    jobs = {name: con.execute(f"SELECT count(*) FROM j WHERE {cond}").fetchone()[0] for name, cond in (
        ("running_t0", f"st <= {at0} AND en > {at0}"), ("running_t1", f"en > {at1}"),
        ("ended_in_window", f"en > {at0} AND en <= {at1}"), ("started_in_window", f"st > {at0}"))}
    con.close()
    lines = {name: sum(1 for _ in open(out / f"sacct-{name}.txt")) - 1 for name in ("t0", "t1")}
    print(json.dumps({"t0": t0_text, "t1": t1.isoformat(), "samples_t0": counts["spool-t0"],
                      "samples_added": counts["spool-add"], "sacct_lines": lines, **jobs,
                      "spool_files": len(list((out / "spool-t0").iterdir()))}))


def child_run(out: str, argv: list[str]) -> int:
    metrics_bench.PROBES = metrics_bench.PROBES + WATCH_PROBES
    prof = os.environ.get("WATCH_BENCH_PROFILE")
    if not prof:
        return metrics_bench.child_run(out, argv)
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    rc = profiler.runcall(metrics_bench.child_run, out, argv)
    with open(prof, "w") as fh:
        pstats.Stats(profiler, stream=fh).sort_stats("cumulative").print_stats(60)
    return rc


class WatchBench(metrics_bench.Bench):
    """metrics_bench's runner, its children started from this script (so that they get WATCH_PROBES)."""

    def _child(self, args: list[str], label: str) -> dict:
        self.n += 1
        res = self.work / f"child-{self.n}.json"
        outf = self.work / f"child-{self.n}.out"
        import subprocess
        with open(outf, "w") as fh:
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], cwd=self.work,
                                  env=self.env, stdout=fh, stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - t
        if proc.returncode not in (0, 1) or not res.exists():
            raise RuntimeError(f"{label}: exit code {proc.returncode}\n{proc.stderr[-3000:]}")
        figs = json.loads(res.read_text())
        figs.update(seconds=wall, stderr=proc.stderr.strip()[-4000:])
        res.unlink()
        outf.unlink()
        self.say(f"  {label}: {wall:.2f} s, {figs['maxrss_mb']:.0f} MB  [{metrics_bench._parts_text(figs)}]")
        return figs


# ---------------------------------------------------------------- one round

def fake_bin(folder: Path, dump: Path) -> dict:
    """PATH with a `sacct` that prints `dump` (a link the bench moves from T0 to T1) and a failing `scontrol`."""
    folder.mkdir(exist_ok=True)
    (folder / "sacct").write_text(f"#!/bin/sh\n[ \"$1\" = --helpformat ] && exit 0\nexec cat {dump}\n")
    (folder / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    for f in folder.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def one_round(b: metrics_bench.Bench, base: Path, gen_dir: Path, work: Path, n: int) -> dict:
    db = work / f"round-{n}.duckdb"
    t = time.perf_counter()
    shutil.copyfile(base, db)
    b.say(f"  copied the database in {time.perf_counter() - t:.1f} s")
    spool, eml, cfg = work / f"spool-{n}", work / f"eml-{n}", work / "jobsight.toml"
    shutil.copytree(gen_dir / "spool-t0", spool)
    cfg.write_text(CONFIG)
    dump = work / "sacct-now.txt"
    shutil.copyfile(gen_dir / "sacct-t0.txt", dump)
    profile = os.environ.pop("WATCH_BENCH_PROFILE", None)      # profiles the timed cycle only
    b.env = fake_bin(work / "bin", dump)
    b.env.pop("JOBSIGHT_CONFIG", None)
    argv = ["watch", "--db", str(db), "--config", str(cfg), "--spool", str(spool), "--eml-dir", str(eml), "--once"]
    warm = b._child(["--child-run", str(b.work / f"child-{b.n + 1}.json"), "--", *argv], f"round {n}: cycle at T0 (untimed)")
    b.jobsight(["dashboard", "--db", str(db), "--publish"], f"round {n}: second publish (untimed)")
    sent_t0 = len(list(eml.glob("*.eml"))) if eml.exists() else 0
    for f in (gen_dir / "spool-add").iterdir():      # the next minutes: each file grows, new jobs' files appear
        with open(spool / f.name, "ab") as dest:
            dest.write(f.read_bytes())
    shutil.copyfile(gen_dir / "sacct-t1.txt", dump)
    if profile:
        b.env["WATCH_BENCH_PROFILE"] = os.environ["WATCH_BENCH_PROFILE"] = profile
    timed = b._child(["--child-run", str(b.work / f"child-{b.n + 1}.json"), "--", *argv], f"round {n}: cycle at T1")
    timed["notices"] = (len(list(eml.glob("*.eml"))) if eml.exists() else 0) - sent_t0
    timed["warm_s"] = warm["seconds"]
    timed["log"] = [line for line in timed.get("stderr", "").splitlines() if "cycle" in line][-1:]
    for p in (db, Path(f"{db}.snapshot"), Path(f"{db}.snapshot.spare"), Path(f"{db}.wal")):
        p.unlink(missing_ok=True)
    shutil.rmtree(spool, ignore_errors=True)
    shutil.rmtree(eml, ignore_errors=True)
    return timed


# ---------------------------------------------------------------- main

def render(figs: dict) -> str:
    m, g, r = figs["machine"], figs["gen"], figs["median"]
    parts = metrics_bench._parts_text(r)
    met = "met" if r["seconds"] <= TARGET_S else f"missed by {r['seconds'] - TARGET_S:.1f} s"
    lines = [
        f"jobsight watch: {m['started']}, commit {m['commit']}, {m['cpu']}, {m['cores']} cores, {m['ram_gib']:.1f} GiB RAM, "
        f"load {' / '.join(f'{x:.2f}' for x in m['load_before'])} before, {' / '.join(f'{x:.2f}' for x in figs['load_after'])} "
        f"after; Python {m['python']}, duckdb {m['duckdb']}",
        f"database: {figs['info']['jobs']:,} jobs, {figs['info']['samples']:,} samples, {figs['info']['db_gb']:.2f} GB; "
        f"{g['minutes']} new minutes: sacct {g['sacct_lines']['t1']:,} lines ({g['running_t1']} running, {g['ended_in_window']} "
        f"ended, {g['started_in_window']} started), {g['samples_added']:,} new samples in {g['spool_files']} + "
        f"{g['started_in_window']} spool files (every {g['interval']} s)",
        "",
        "| what | measured (median of rounds; of two, the faster) | all rounds | peak RSS | notices | target | met? |",
        "|---|---|---|---|---|---|---|",
        f"| one `watch --once` cycle, {g['minutes']} min of new data, 1M stored jobs | {r['seconds']:.2f} s (CPU {r['cpu_s']:.1f} s) | "
        f"{' / '.join(f'{s:.2f}' for s in r['all_s'])} s | {r['maxrss_mb']:.0f} MB | {r['notices']} | <= {TARGET_S:.0f} s | {met} |",
        "",
        f"where the time went: {parts}",
        f"the cycle's log line: {' '.join(r['log'])}",
    ]
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-run":
        return child_run(sys.argv[2], sys.argv[4:])
    if len(sys.argv) > 1 and sys.argv[1] == "--child-gen":
        child_gen(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the 1M-job database (built there by metrics_bench when missing; kept, and "
                    "brought up to date in place: a refresh still due runs on it, untimed; rounds use copies)")
    ap.add_argument("--jobs", type=int, default=1_000_000, help="jobs when building it (default 1,000,000)")
    ap.add_argument("--samples", type=int, default=10_000_000, help="samples when building it (default 10,000,000)")
    ap.add_argument("--minutes", type=int, default=15, help="new minutes of sacct and spool data (default 15)")
    ap.add_argument("--interval", type=int, default=10, help="seconds between a device's samples (default 10)")
    ap.add_argument("--rounds", type=int, default=3, help="timed cycles, each on a fresh copy (default 3)")
    ap.add_argument("--workdir", help="where the temporary directory goes (default: the system temp dir)")
    ap.add_argument("--json-out", help="also write every figure as JSON to this file")
    args = ap.parse_args()
    from scale import machine
    figs: dict = {"machine": machine()}
    # run from an exported tree (git archive), the commit is not known there: say it in the environment
    figs["machine"]["commit"] = figs["machine"]["commit"] or os.environ.get("JOBSIGHT_BENCH_COMMIT", "?")
    work = Path(tempfile.mkdtemp(prefix="jobsight-watch-", dir=args.workdir))
    b = WatchBench(work)
    base = Path(args.db).resolve()
    try:
        if not base.exists():
            base.parent.mkdir(parents=True, exist_ok=True)
            metrics_bench.build(b, base, args.jobs, args.samples, "1M-job db")
        # any refresh still due (changed definitions) happens here, on the kept database, untimed
        b.jobsight(["usage", "--db", str(base), "--since", metrics_bench.START, "--until", metrics_bench.START],
                   "warm-up open of the kept database")
        info = figs["info"] = metrics_bench.db_info(base)
        import duckdb
        con = duckdb.connect(str(base), read_only=True)
        last_end = con.execute("SELECT max(end_time) FROM job WHERE source = 'slurm-sacct'").fetchone()[0]
        con.close()
        t0 = (last_end + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
        gen_dir = work / "gen"
        cmd = ["--child-gen", str(gen_dir), str(info["max_id"] + 1), t0.isoformat(), str(args.minutes), str(args.interval)]
        t = time.perf_counter()
        import subprocess
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *cmd], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"generating the next minutes failed:\n{proc.stderr[-3000:]}")
        g = figs["gen"] = {**json.loads(proc.stdout.strip().splitlines()[-1]), "minutes": args.minutes, "interval": args.interval}
        b.say(f"generated in {time.perf_counter() - t:.1f} s: {g}")
        runs = [one_round(b, base, gen_dir, work, n) for n in range(1, args.rounds + 1)]
        figs["rounds"] = runs
        med = metrics_bench.med(runs)
        figs["median"] = med
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figs["load_after"] = os.getloadavg()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figs, indent=1, default=str), encoding="utf-8")
    print(render(figs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
