"""The stored per-job results (analytics/store/results.py) at scale: what a user waits for, side by side.

    .venv/bin/python bench/metrics_bench.py --quick                    # 20k jobs / 200k samples, ~1-2 min
    .venv/bin/python bench/metrics_bench.py                            # 1M jobs / 10M samples (the issue's size)
    .venv/bin/python bench/metrics_bench.py --db /work/bench-data/m.duckdb --reuse   # build once, measure often
    .venv/bin/python bench/metrics_bench.py --samples 50000000 --only recompute --only dashboard ...

The database is built the way a site builds one: `jobsight ingest` of a sacct dump made by
ingest_bench.gen_sacct (renamed to dashboard_bench's layout: cluster `bench`, job ids 0..N-1,
users u0..u499 in projects p0..p59, jobs from 2026-08-01, 7 s apart; three in four are GPU jobs
with 1-3 GPUs) and of sidecar CSVs with samples of every job's CPU and GPUs (up to 1M rows a file;
per device the same number of samples, spread over the job's run, so that the total is --samples).
`--reuse` keeps it at --db for the next run (each run's ingest figures add a day of 3,005 jobs; two
untimed publishes first bring both snapshot files up to date, a site's steady state).

Each measured command runs in a fresh process: `python bench/metrics_bench.py --child-run OUT --
ARGS...` calls `jobsight ARGS...` in-process (the same entry point as .venv/bin/jobsight), with
its peak RSS (/proc VmHWM) and timers (PROBES); the time in the table is the whole process's wall
time. Commands run with jobsight.toml's defaults except the recompute: a setting changed, then the
defaults again, for each of CHANGES (what each rebuilds is in its row of the table).

Targets (the issue), for 1M jobs / 10M samples:
  job ID              within 1.5x of the same command on a 17-job database (same generator), RSS <= 400 MB
  usage week / month, flags day / week, one user's weekly md report:   <= 2 s each, RSS <= 1 GB
  ingest of a 5-job sacct file / of a day (3,000 jobs, 150k samples) into the big database:
                      <= 2x the same ingest into an empty database, plus 1 s
  full recompute after a settings change (`jobsight settings --config`): <= 5x a plain DuckDB GROUP BY
                      of all samples per job and device (whole process, both), peak RSS <= 3 GB
  job ID and usage week while another process holds the database for writing: as fast as without
  dashboard callbacks (bench/dashboard_bench.py's scripted session on the published snapshot): p95 <= 300 ms
Prints one table (what | jobsight | baseline | ratio | peak RSS | target | met?) headed by the date,
commit, machine and load, then where the time went. Asserts nothing. --json: the figures as one
JSON line at the end (bench/scale.py reads it).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from measure import ROOT, last_json, peak_rss_mb  # noqa: E402

SIZES = {"quick": {"jobs": 20_000, "samples": 200_000, "rounds": 2, "dash_rounds": 1},
         "full": {"jobs": 1_000_000, "samples": 10_000_000, "rounds": 3, "dash_rounds": 5}}
SMALL_JOBS = 17                     # the "17-job database" the job command is compared with
DAY_JOBS, DAY_SAMPLES = 3_000, 150_000
ROWS_PER_FILE = 1_000_000           # sidecar rows per generated CSV file (at most)
START = "2026-08-01"                # first job's start (dashboard_bench's data starts there too)
STEPS = ("job", "usage", "flags", "report", "held", "ingest", "dashboard", "recompute")
# a plain GROUP BY of the samples per job and device, all rows computed and summed (not moved to Python)
BASELINE_SQL = ("SELECT count(*), sum(n), sum(u), max(m) FROM (SELECT cluster, job_id_raw, host, device, "
                "count(*) AS n, avg(util_pct) AS u, max(mem_used_bytes) AS m FROM sample GROUP BY ALL)")
# (key, what is rebuilt, jobsight.toml): a setting only job_flags reads, one job_metrics reads, one the samples' weights
CHANGES = (("flags", "job_flags and what reads it", "[flags]\ntime_oversized_pct = 5\n"),
           ("metrics", "job_metrics and after, from the stored per-GPU and per-host rows", "[flags]\ngpu_idle_pct = 2\n"),
           ("samples", "every table, the samples weighed again", "[samples]\nmax_gap_s = 300\n"))

# (module, attribute, label): timed in the child; nested calls are labelled outer/inner
PROBES = (
    ("jobsight.analytics.store.db", "connect", "connect+migrate"),
    ("jobsight.analytics.ingest.files", "ingest_paths", "ingest files"),
    ("jobsight.analytics.store.database:Database", "open", "open"),
    ("jobsight.analytics.store.settings", "apply_to_db", "settings"),
    ("jobsight.analytics.store.results", "refresh", "refresh"),
    ("jobsight.analytics.store.database", "apply_views", "views"),
    ("jobsight.analytics.store.snapshot", "publish", "publish"),
    ("shutil", "copyfile", "copy"),
    ("jobsight.analytics.store.snapshot", "fsync_path", "fsync"), ("jobsight.analytics.store.snapshot", "_rewrite_differences", "spare"),
    ("jobsight.analytics.reports.data", "gather", "gather"), ("jobsight.analytics.store.database:Database", "fetch", "query"),
    ("jobsight.analytics.render", "emit_rows", "print"),
    ("jobsight.analytics.store.prune", "check_lake", "lake check"), ("jobsight.analytics.store.prune", "_remove", "remove"),
    ("jobsight.analytics.store.prune", "compact", "compact"))


# ---------------------------------------------------------------- child processes

def child_run(out: str, argv: list[str]) -> int:
    """`jobsight argv...` in this process, with timers around PROBES; figures to the file `out`."""
    import importlib
    import resource
    t0 = time.perf_counter()
    parts: dict[str, list[float]] = {}
    stack: list[str] = []

    def timed(fn, label):
        def wrapper(*args, **kwargs):
            stack.append(label)
            key = "/".join(stack)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
                p = parts.setdefault(key, [0.0, 0, 0.0])
                p[0] += time.perf_counter() - t
                p[1] += 1
                p[2] = peak_rss_mb()        # the process's peak so far: which step raised it
        return wrapper

    for module, attr, label in PROBES:          # "module" or "module:Class"
        name, _, cls = module.partition(":")
        mod = importlib.import_module(name)
        owner = getattr(mod, cls) if cls else mod
        setattr(owner, attr, timed(getattr(owner, attr), label))
    from jobsight.analytics.cli import main  # after the patches: subcommands look Database and gather up when they run
    t = time.perf_counter()
    rc = main(argv)
    sys.stdout.flush()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    Path(out).write_text(json.dumps({
        "rc": rc, "imports_s": t - t0, "main_s": time.perf_counter() - t, "cpu_s": ru.ru_utime + ru.ru_stime,
        "maxrss_mb": peak_rss_mb(), "parts": {k: {"s": v[0], "n": v[1], "rss_mb": v[2]} for k, v in parts.items()}}))
    return rc


def child_sql(out: str, db: str, sql: str) -> None:
    """The baseline: one query on the database, read-only, in plain DuckDB."""
    import resource

    import duckdb
    t = time.perf_counter()
    con = duckdb.connect(db, read_only=True)
    rows = con.execute(sql).fetchall()
    con.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    Path(out).write_text(json.dumps({"rc": 0, "main_s": time.perf_counter() - t, "maxrss_mb": peak_rss_mb(),
                                     "cpu_s": ru.ru_utime + ru.ru_stime, "rows": len(rows), "parts": {}}))


def child_gen(out_dir: str, jobs: int, samples: int, first_id: int, start: str, scale: float = 1.0) -> None:
    """Inputs for `jobsight ingest` in out_dir: sacct-<first>.txt (gen_sacct's dump, renamed and
    moved in time) and sidecar-<first job of the file>.csv files with `samples` rows in all.
    ``scale``: every time's distance from the first job's start multiplied by it (0.74: 1M jobs
    over 60 days instead of 81)."""
    import duckdb
    from ingest_bench import gen_sacct
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    raw = out / ".raw-sacct.tmp"
    gen_sacct(raw, jobs)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    con.execute(f"CREATE TABLE raw AS SELECT * FROM read_csv('{raw}', delim='|', header=true, quote='', "
                "all_varchar=true)")
    raw.unlink()
    fmt = "%Y-%m-%dT%H:%M:%S"
    shift = f"(TIMESTAMP '{start}' - TIMESTAMP '2026-01-01')"    # gen_sacct's jobs start on 2026-01-01

    def ts(col: str) -> str:
        if scale != 1.0:
            since = f"epoch_us(strptime({col}, '{fmt}')) - epoch_us(TIMESTAMP '2026-01-01')"
            return (f"strftime(TIMESTAMP '{start}' + to_microseconds(CAST(({since}) * {scale} AS BIGINT)), "
                    f"'{fmt}') AS {col}")
        return f"strftime(strptime({col}, '{fmt}') + {shift}, '{fmt}') AS {col}"
    # gen_sacct: job i is JobID 1000000+i (steps .batch and .0), user user<i % 500>, account acct<i % 50>
    new_id = f"CAST(CAST(split_part(JobID, '.', 1) AS BIGINT) - 1000000 + {first_id} AS VARCHAR)"
    suffix = "CASE WHEN contains(JobID, '.') THEN '.' || split_part(JobID, '.', 2) ELSE '' END"
    con.execute(f"""
        CREATE TABLE acct AS SELECT * REPLACE (
            {new_id} || {suffix} AS JobID, {new_id} || {suffix} AS JobIDRaw,
            CASE WHEN "User" IS NOT NULL THEN 'u' || substr("User", 5) END AS "User",
            CASE WHEN "User" IS NOT NULL THEN 'p' || (CAST(substr("User", 5) AS INT) % 60) END AS Account,
            {ts('Submit')}, {ts('Eligible')}, {ts('Start')}, {ts('"End"')})
        FROM raw""")
    sacct = out / f"sacct-{first_id}.txt"
    con.execute(f"COPY acct TO '{sacct}' (DELIMITER '|', HEADER, QUOTE '', ESCAPE '')")
    con.execute(f"""
        CREATE TABLE j AS SELECT CAST(JobIDRaw AS BIGINT) AS id, strptime(Start, '{fmt}') AS st,
            CAST(epoch(strptime("End", '{fmt}')) - epoch(strptime(Start, '{fmt}')) AS BIGINT) AS el,
            NodeList AS host, CAST(NCPUS AS BIGINT) AS ncpus,
            CAST(COALESCE(NULLIF(regexp_extract(AllocTRES, 'gres/gpu=(\\d+)', 1), ''), '0') AS INT) AS ngpus
        FROM acct WHERE NOT contains(JobIDRaw, '.') ORDER BY id""")
    con.execute("DROP TABLE raw")
    con.execute("DROP TABLE acct")
    devices = con.execute("SELECT sum(ngpus + 1) FROM j").fetchone()[0]
    k = max(1, round(samples / devices)) if samples else 0     # samples per device
    per_file = max(1, math.ceil(jobs * ROWS_PER_FILE / max(samples, 1)))
    n_rows, files = 0, 0
    for lo in range(first_id, first_id + jobs, per_file) if k else ():
        hi = lo + per_file
        # a GPU in seven jobs' first GPU idle, the rest busy around a per-device level
        con.execute(f"""COPY (
            SELECT strftime(j.st + to_seconds(s.t * j.el // {k}), '%Y-%m-%dT%H:%M:%S.000Z') AS time,
                   CAST(j.id AS VARCHAR) AS job_id, 'bench' AS cluster, j.host,
                   CASE WHEN d.g = 0 THEN 'cpu' ELSE 'GPU-' || j.host || '-' || d.g END AS device,
                   CASE WHEN d.g = 1 AND j.id % 7 = 0 THEN 0.0
                        ELSE GREATEST(0, LEAST(100, CAST(hash(j.id, d.g) % 100 AS BIGINT)
                                                    + CAST(hash(j.id, d.g, s.t) % 21 AS BIGINT) - 10)) END AS util_pct,
                   CASE WHEN d.g = 0 THEN j.ncpus * 1073741824 * CAST(hash(j.id) % 100 AS BIGINT) // 25
                        ELSE 85899345920 * CAST(hash(j.id, d.g) % 100 AS BIGINT) // 100 END AS mem_used_bytes,
                   CASE WHEN d.g = 0 THEN j.ncpus * 4294967296 ELSE 85899345920 END AS mem_total_bytes,
                   CASE WHEN d.g > 0 THEN d.g - 1 END AS gpu_index,
                   CASE WHEN d.g > 0 THEN 60.0 + CAST(hash(j.id, d.g, s.t) % 300 AS BIGINT) END AS power_w,
                   CASE WHEN d.g > 0 THEN 1e9 + 250.0 * s.t * j.el / {k} END AS energy_j,
                   CASE WHEN d.g > 0 THEN 1410.0 END AS sm_clock_mhz,
                   CASE WHEN d.g > 0 THEN 40.0 + CAST(hash(j.id, d.g) % 40 AS BIGINT) END AS temperature_c,
                   CAST(NULL AS DOUBLE) AS sm_active_pct
            FROM j, range(j.ngpus + 1) d(g), range({k}) s(t)
            WHERE j.id >= {lo} AND j.id < {hi}
            ORDER BY j.id, d.g, s.t) TO '{out / f"sidecar-{lo}.csv"}' (HEADER, QUOTE '')""")
        n_rows += con.execute(f"SELECT sum((ngpus + 1) * {k}) FROM j WHERE id >= {lo} AND id < {hi}").fetchone()[0]
        files += 1
    con.close()
    size = sum(p.stat().st_size for p in out.iterdir())
    print(json.dumps({"jobs": jobs, "samples": int(n_rows), "per_device": k, "sidecar_files": files,
                      "mb": size / 1e6, "seconds": time.perf_counter() - t0}))


# ---------------------------------------------------------------- running children

class Bench:
    def __init__(self, work: Path, verbose: bool = True):
        self.work = work
        self.env = {k: v for k, v in os.environ.items() if k != "JOBSIGHT_CONFIG"}
        self.verbose = verbose
        self.n = 0

    def say(self, msg: str) -> None:
        if self.verbose:
            print(msg, file=sys.stderr, flush=True)

    def _child(self, args: list[str], label: str) -> dict:
        """Run `python metrics_bench.py <child args>` from the work directory (no jobsight.toml
        there); wall time seen from here, the rest from the child's own figures."""
        self.n += 1
        res = self.work / f"child-{self.n}.json"
        outf = self.work / f"child-{self.n}.out"
        with open(outf, "w") as fh:
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], cwd=self.work,
                                  env=self.env, stdout=fh, stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - t
        if proc.returncode != 0 or not res.exists():
            raise RuntimeError(f"{label}: exit code {proc.returncode}\n{proc.stderr[-3000:]}")
        figs = json.loads(res.read_text())
        figs.update(seconds=wall, stderr=proc.stderr.strip()[-2000:],
                    out_lines=sum(1 for _ in open(outf, errors="replace")))
        res.unlink()
        outf.unlink()
        self.say(f"  {label}: {wall:.2f} s, {figs['maxrss_mb']:.0f} MB"
                 + (f"  [{_parts_text(figs)}]" if figs.get("parts") else ""))
        return figs

    def jobsight(self, args: list[str], label: str) -> dict:
        return self._child(["--child-run", str(self.work / f"child-{self.n + 1}.json"), "--", *args], label)

    def sql(self, db: Path, sql: str, label: str) -> dict:
        return self._child(["--child-sql", str(self.work / f"child-{self.n + 1}.json"), str(db), sql], label)

    def gen(self, out: Path, jobs: int, samples: int, first_id: int, start: str, scale: float = 1.0) -> dict:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-gen", str(out), str(jobs), str(samples),
               str(first_id), start, str(scale)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"generating {out} failed:\n{proc.stderr[-3000:]}")
        return last_json(proc.stdout.splitlines())


def _parts_text(figs: dict, min_s: float = 0.05) -> str:
    parts = figs.get("parts") or {}
    shown = [f"{k} {v['s']:.2f}" + (f" (x{v['n']})" if v["n"] > 1 else "")
             + (f" (RSS {v['rss_mb'] / 1024:.1f} GB)" if v.get("rss_mb", 0) >= 400 else "")
             for k, v in parts.items() if v["s"] >= min_s]
    top = sum(v["s"] for k, v in parts.items() if "/" not in k)
    if "main_s" in figs and "imports_s" in figs:
        rest = figs["main_s"] - top
        start = figs["seconds"] - figs["main_s"] - figs["imports_s"]
        shown = [f"start+imports {start + figs['imports_s']:.2f}"] + shown + [f"rest {rest:.2f}"]
    if "cpu_s" in figs:
        shown.append(f"CPU {figs['cpu_s']:.1f}")
    return ", ".join(shown)


def _rm_db(path: Path) -> None:
    for p in (path, Path(f"{path}.wal"), Path(f"{path}.snapshot"), Path(f"{path}.tmp")):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


# ---------------------------------------------------------------- what the database holds

def db_info(db: Path) -> dict:
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    try:
        jobs, max_id, last_end, mid = con.execute(
            "SELECT count(*), max(CAST(job_id_raw AS BIGINT)), max(end_time), quantile_disc(start_time, 0.5) "
            "FROM job WHERE cluster = 'bench'").fetchone()
        samples = con.execute("SELECT count(*) FROM sample").fetchone()[0]
        # a two-GPU job half-way through the ids: same shape in the 17-job database
        job_id = con.execute("SELECT job_id_raw FROM job WHERE ngpus = 2 ORDER BY CAST(job_id_raw AS BIGINT) "
                             "LIMIT 1 OFFSET (SELECT count(*) // 2 FROM job WHERE ngpus = 2)").fetchone()[0]
    finally:
        con.close()
    day = mid.date()
    monday = day - dt.timedelta(days=day.weekday())
    month_end = (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)
    iso = monday.isocalendar()
    return {"jobs": jobs, "samples": samples, "max_id": int(max_id), "job_id": job_id,
            "next_day": (last_end.date() + dt.timedelta(days=1)).isoformat(), "day": day.isoformat(),
            "week": (monday.isoformat(), (monday + dt.timedelta(days=6)).isoformat()),
            "iso_week": f"{iso[0]}-W{iso[1]:02d}", "month": (day.replace(day=1).isoformat(), month_end.isoformat()),
            "db_gb": db.stat().st_size / 1e9}


def build(b: Bench, db: Path, jobs: int, samples: int, label: str) -> dict:
    """Generate the inputs and `jobsight ingest` them into a new database; the inputs are deleted."""
    src = b.work / f"inputs-{db.stem}"
    b.say(f"generating {jobs:,} jobs / {samples:,} samples for {db} ...")
    gen = b.gen(src, jobs, samples, 0, START)
    b.say(f"  generated {gen['samples']:,} samples ({gen['per_device']} per device) in {gen['sidecar_files']} "
          f"CSV file(s) + the sacct dump, {gen['mb']:.0f} MB, in {gen['seconds']:.1f} s")
    try:
        ing = b.jobsight(["ingest", "--db", str(db), str(src), "--quiet"], f"build {label}: jobsight ingest")
    finally:
        shutil.rmtree(src, ignore_errors=True)
    return {"generate": gen, "ingest": ing}


# ---------------------------------------------------------------- the measurements

def med(runs: list[dict]) -> dict:
    """The run with the median wall time, with the peak RSS of all runs."""
    runs = sorted(runs, key=lambda r: r["seconds"])
    m = dict(runs[(len(runs) - 1) // 2])
    m["maxrss_mb"] = max(r["maxrss_mb"] for r in runs)
    m["all_s"] = [r["seconds"] for r in runs]
    return m


def measure(args, b: Bench, db: Path, info: dict, small: Path, small_info: dict, steps, figs: dict) -> None:
    rounds = args.rounds
    q = figs["queries"] = {}

    def repeat(cmd: list[str], label: str) -> dict:
        return med([b.jobsight(cmd, f"{label} ({i + 1}/{rounds})") for i in range(rounds)])

    if "job" in steps:
        big, little = [], []
        for i in range(rounds):     # alternate, so that load hits both alike
            little.append(b.jobsight(["job", "--db", str(small), small_info["job_id"]], f"job, 17 jobs ({i + 1}/{rounds})"))
            big.append(b.jobsight(["job", "--db", str(db), info["job_id"]], f"job, big ({i + 1}/{rounds})"))
        q["job"] = {"big": med(big), "small": med(little)}
    if "usage" in steps:
        w, m = info["week"], info["month"]
        q["usage_week"] = repeat(["usage", "--db", str(db), "--since", w[0], "--until", w[1]], f"usage {w[0]}..{w[1]}")
        q["usage_month"] = repeat(["usage", "--db", str(db), "--since", m[0], "--until", m[1]], f"usage {m[0]}..{m[1]}")
    if "flags" in steps:
        d, w = info["day"], info["week"]
        q["flags_day"] = repeat(["flags", "--db", str(db), "--since", d, "--until", d], f"flags {d}")
        q["flags_week"] = repeat(["flags", "--db", str(db), "--since", w[0], "--until", w[1]], f"flags {w[0]}..{w[1]}")
    if "report" in steps:
        out = b.work / "reports"
        q["report_user"] = repeat(["report", "--db", str(db), "--week", info["iso_week"], "--for", "user:u7",
                                   "--format", "md", "--out", str(out)], f"report {info['iso_week']} user:u7")
        shutil.rmtree(out, ignore_errors=True)
    if "held" in steps:
        # a writer holds the database (as an ingest or watch does): the reads read the snapshot
        holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\n"
                                   "con = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(3600)", str(db)],
                                  stdout=subprocess.PIPE, text=True, env=b.env)
        try:
            assert holder.stdout.readline().strip() == "held"
            w = info["week"]
            q["held_job"] = repeat(["job", "--db", str(db), info["job_id"]], "job, a writer holding the database")
            q["held_usage_week"] = repeat(["usage", "--db", str(db), "--since", w[0], "--until", w[1]],
                                          "usage week, a writer holding the database")
        finally:
            holder.kill()
            holder.wait()
    if "ingest" in steps:
        first = info["max_id"] + 1
        five = b.work / "ingest-5"
        day = b.work / "ingest-day"
        b.gen(five, 5, 0, first, info["next_day"])
        gday = b.gen(day, DAY_JOBS, DAY_SAMPLES, first + 5, info["next_day"])
        subprocess.run([sys.executable, "-c", "import sys; from jobsight.analytics.store.snapshot import publish; [publish("
                        "sys.argv[1]) for _ in range(2)]", str(db)], env=b.env, check=True)   # as between runs
        for key, path, label in (("ingest_5", five / f"sacct-{first}.txt", "5-job sacct file"),
                                 ("ingest_day", day, f"a day: {DAY_JOBS:,} jobs, {gday['samples']:,} samples")):
            empty = b.work / f"empty-{key}.duckdb"
            _rm_db(empty)
            e = b.jobsight(["ingest", "--db", str(empty), str(path), "--quiet"], f"ingest {label}, empty db")
            _rm_db(empty)
            g = b.jobsight(["ingest", "--db", str(db), str(path), "--quiet"], f"ingest {label}, big db")
            q[key] = {"big": g, "empty": e, "label": label}
        shutil.rmtree(five, ignore_errors=True)
        shutil.rmtree(day, ignore_errors=True)
    if "dashboard" in steps:
        b.say(f"  dashboard callbacks ({args.dash_rounds} rounds) ...")
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, str(BENCH / "dashboard_bench.py"), "--phase", "callbacks", "--db", str(db),
                               "--rounds", str(args.dash_rounds), "--json"], cwd=b.work, env=b.env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"dashboard_bench failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        q["dashboard"] = last_json(proc.stdout.splitlines())
        b.say(f"  dashboard callbacks: {time.perf_counter() - t:.1f} s")
    if "recompute" in steps:
        d = info["day"]
        base = b.sql(db, BASELINE_SQL, "baseline: GROUP BY of all samples per job and device")
        q["recompute"] = {}
        defaults = b.work / "defaults.toml"
        defaults.write_text("# the defaults\n", encoding="utf-8")
        for key, what, text in CHANGES:
            toml = b.work / f"changed-{key}.toml"
            toml.write_text(text, encoding="utf-8")
            # settings belong to the database: only `jobsight settings` (or a writer) recomputes
            q["recompute"][f"{key}_changed"] = b.jobsight(["settings", "--db", str(db), "--config", str(toml), "--quiet"],
                                                          f"recompute ({what}): settings --config {text!r}")
            q["recompute"][f"{key}_back"] = b.jobsight(["settings", "--db", str(db), "--config", str(defaults), "--quiet"],
                                                       f"recompute ({what}): settings, defaults again")
        b.jobsight(["flags", "--db", str(db), "--since", d, "--until", d], "flags after the recompute (untimed)")
        base2 = b.sql(db, BASELINE_SQL, "baseline again")
        q["recompute"]["baseline"] = med([base, base2])


# ---------------------------------------------------------------- main

def main() -> int:
    from metrics_table import render, rows_for, where_time_went  # they read CHANGES: imported once this module is whole
    if len(sys.argv) > 3 and sys.argv[1] == "--child-run" and sys.argv[3] == "--":
        return child_run(sys.argv[2], sys.argv[4:])
    if len(sys.argv) == 5 and sys.argv[1] == "--child-sql":
        child_sql(*sys.argv[2:])
        return 0
    if len(sys.argv) in (7, 8) and sys.argv[1] == "--child-gen":
        child_gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], *map(float, sys.argv[7:]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k jobs / 200k samples, 2 runs per command: a minute or two")
    ap.add_argument("--jobs", type=int, help="jobs in the generated database (default 1,000,000; --quick 20,000)")
    ap.add_argument("--samples", type=int, help="sidecar samples (default 10,000,000; --quick 200,000)")
    ap.add_argument("--db", help="the big database: kept after the run (default: in the temporary directory)")
    ap.add_argument("--reuse", action="store_true", help="use --db as it is when it exists (else build it there)")
    ap.add_argument("--rounds", type=int, help="runs per command, median reported (default 3; --quick 2)")
    ap.add_argument("--dash-rounds", type=int, help="rounds of dashboard_bench's session (default 5; --quick 1)")
    ap.add_argument("--only", choices=STEPS, action="append", help="measure only these (repeatable)")
    ap.add_argument("--workdir", help="where the temporary directory goes (default: the system temp dir)")
    ap.add_argument("--json", action="store_true", help="also print every figure as one JSON line at the end")
    ap.add_argument("--json-out", help="also write every figure as JSON to this file")
    args = ap.parse_args()
    size = SIZES["quick" if args.quick else "full"]
    args.jobs = args.jobs or size["jobs"]
    args.samples = args.samples if args.samples is not None else size["samples"]
    args.rounds = args.rounds or size["rounds"]
    args.dash_rounds = args.dash_rounds or size["dash_rounds"]
    steps = args.only or STEPS
    db_given = Path(args.db).resolve() if args.db else None
    if db_given and db_given.exists() and not args.reuse:
        ap.error(f"{db_given} exists: pass --reuse to measure it as it is, or delete it")

    from scale import machine
    figs: dict = {"machine": machine(), "rounds": args.rounds}
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="jobsight-metrics-", dir=args.workdir))
    b = Bench(work)
    b.say(f"metrics bench in {work}")
    db = db_given or work / "bench.duckdb"
    small = work / "small-17.duckdb"
    try:
        if db.exists():
            figs["reused"] = True
            b.say(f"reusing {db}")
        else:
            db.parent.mkdir(parents=True, exist_ok=True)
            figs["build"] = build(b, db, args.jobs, args.samples, "big db")
        build(b, small, SMALL_JOBS, max(1, round(args.samples * SMALL_JOBS / args.jobs)), "17-job db")
        # any refresh still due (a reused database, changed definitions) happens here, untimed
        figs["warmup"] = b.jobsight(["usage", "--db", str(db), "--since", START, "--until", START], "warm-up open")
        b.jobsight(["usage", "--db", str(small), "--since", START, "--until", START], "warm-up open, 17-job db")
        info = figs["info"] = db_info(db)
        small_info = db_info(small)
        b.say(f"{info['jobs']:,} jobs, {info['samples']:,} samples, {info['db_gb']:.2f} GB; week {info['week']}, "
              f"day {info['day']}, job {info['job_id']}")
        try:
            measure(args, b, db, info, small, small_info, steps, figs)
        except Exception as exc:      # what was measured so far is still printed
            figs.setdefault("errors", {})["measure"] = str(exc)
            print(f"FAILED: {exc}", file=sys.stderr, flush=True)
        figs["info"]["db_gb"] = db.stat().st_size / 1e9
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not db_given:
            _rm_db(db)
    figs["load_after"] = os.getloadavg()
    figs["wall_s"] = time.perf_counter() - t0
    figs["rows"] = rows_for(figs)
    figs["where"] = where_time_went(figs)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figs, indent=1, default=str), encoding="utf-8")
    print(render(figs), flush=True)
    if args.json:
        print(json.dumps(figs, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
