"""Scale benchmarks (issue 7): every figure in one run and one table, with the machine it ran on.

    .venv/bin/python bench/scale.py --quick      # small sizes, a few minutes: does everything still run?
    .venv/bin/python bench/scale.py --full       # the issue's sizes; ~30-60 min on 2 cores, ~15 GB of temp files

Runs the bench scripts, each step in a fresh process so that its peak RSS is its own:
  1. bench/ingest_bench.py     sacct dump (1M jobs) and sidecar CSV (50M rows) vs DuckDB's read_csv
  2. bench/metrics_bench.py    the stored per-job results: a database of 1M jobs / 10M samples built
                               with `jobsight ingest`; `job`, `usage`, `flags`, a user's report, small
                               ingests into it, a full recompute after a settings change, dashboard
                               callbacks on its snapshot (--quick: its quick sizes)
  3. bench/dashboard_bench.py  --phase generate: a database of 1M jobs / 49.5M samples
  4. bench/dashboard_bench.py  --phase publish: the snapshot with the dash_* summary tables
  5. bench/dashboard_bench.py  --phase callbacks: p95 per dashboard callback on that snapshot
  6. bench/report_bench.py     weekly HTML reports for 1,000 users
then prints: what | jobsight | baseline | ratio | peak RSS | target | met?  Generated data goes to a
temporary directory (--workdir to choose where) and is deleted at the end. Asserts nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from measure import ROOT, run_json, run_script  # noqa: E402

SIZES = {
    "quick": {"jobs": 20_000, "samples": 1_000_000, "dash_jobs": 20_000, "per_device": 33, "rounds": 2, "users": 200},
    "full": {"jobs": 1_000_000, "samples": 50_000_000, "dash_jobs": 1_000_000, "per_device": 33, "rounds": 5,
             "users": 1_000},
}
RSS_TARGET_MB = 3 * 1024
STEPS = ("ingest", "metrics", "dashboard", "reports")


# ---------------------------------------------------------------- the machine

def machine() -> dict:
    cpu = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as fh:
        mem_kb = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
    import duckdb
    import polars
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        # figures from a tree with uncommitted changes are not those of the commit: say so
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.splitlines()
        if dirty:
            commit += f" + {len(dirty)} uncommitted file(s)"
    except OSError:
        commit = "?"
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": mem_kb / 1024 ** 2, "python": platform.python_version(),
            "duckdb": duckdb.__version__, "polars": polars.__version__, "commit": commit,
            "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "load_before": os.getloadavg()}


def _load(la) -> str:
    return " / ".join(f"{x:.2f}" for x in la)


# ---------------------------------------------------------------- the steps

# ingest_bench's table row: input rows MB | duckdb s RSS | jobsight s RSS | ratio target
# (then, in newer versions, load average | duckdb/jobsight CPU seconds, CPU ratio)
_INGEST_ROW = re.compile(r"^(sacct(?: \w+)?|sidecar)\s+([\d,]+)\s+(\d+)\s+\|\s+([\d.]+)\s+(\d+)\s+\|\s+([\d.]+)\s+(\d+)\s+\|"
                         r"\s+[\d.]+x\s+([\d.]+)x(?:\s+[\d.]+)?(?:\s+\|\s+(\d+)/(\d+)\s+([\d.]+)x)?")


def parse_ingest(lines: list[str]) -> list[dict]:
    """ingest_bench.py's printed table, one dict per input."""
    rows = []
    for line in lines:
        m = _INGEST_ROW.match(line.strip())
        if m:
            rows.append({"input": m[1], "rows": int(m[2].replace(",", "")), "mb": int(m[3]),
                         "duckdb": {"seconds": float(m[4]), "maxrss_mb": float(m[5])},
                         "jobsight": {"seconds": float(m[6]), "maxrss_mb": float(m[7])}, "target_ratio": float(m[8])})
            if m[11]:
                rows[-1]["cpu_ratio"] = float(m[11])
    if not rows:
        raise SystemExit("bench/ingest_bench.py printed no table rows")
    return rows


def step_ingest(size: dict, work: Path) -> list[dict]:
    script = str(BENCH / "ingest_bench.py")
    args = [script, "--jobs", str(size["jobs"]), "--samples", str(size["samples"]), "--workdir", str(work),
            "--columns", "wide"]
    return parse_ingest(run_script(args, prefix="  [ingest] "))


def dashboard(phase: str, db: Path, size: dict) -> dict:
    return run_json([str(BENCH / "dashboard_bench.py"), "--phase", phase, "--db", str(db), "--jobs",
                     str(size["dash_jobs"]), "--samples-per-device", str(size["per_device"]),
                     "--rounds", str(size["rounds"]), "--json"], prefix=f"  [dashboard {phase}] ")


# ---------------------------------------------------------------- the table

def _s(secs: float) -> str:
    return f"{secs * 1000:.0f} ms" if secs < 1 else f"{secs:.1f} s"


def _gb(mb: float) -> str:
    return f"{mb / 1024:.2f} GB"


def rows_for(figs: dict) -> list[tuple[str, ...]]:
    """(what, jobsight, baseline, ratio, peak RSS, target, met?)"""
    rows: list[tuple[str, ...]] = []
    for r in figs.get("ingest", []):
        d, j = r["duckdb"], r["jobsight"]
        ratio = j["seconds"] / d["seconds"]
        what = (f"sacct ingest, {r['rows'] // 3:,} jobs ({r['rows']:,} lines, {r['mb']:,} MB)" if r["input"].startswith("sacct")
                else f"sidecar CSV ingest, {r['rows']:,} rows ({r['mb']:,} MB)")
        miss = [m for m, bad in (("ratio", ratio > r["target_ratio"]), ("RSS", j["maxrss_mb"] > RSS_TARGET_MB)) if bad]
        cpu = f" (CPU {r['cpu_ratio']:.2f}x)" if r.get("cpu_ratio") else ""
        rows.append((what, _s(j["seconds"]), f"read_csv {_s(d['seconds'])} ({_gb(d['maxrss_mb'])})", f"{ratio:.2f}x{cpu}",
                     _gb(j["maxrss_mb"]), f"<= {r['target_ratio']}x, <= 3 GB",
                     "met" if not miss else "MISSED (" + ", ".join(miss) + ")"))
    gen = figs.get("dash_generate", {}).get("generate")
    if gen:
        rows.append((f"generate the bench database: {gen['jobs']:,} jobs, {gen['samples']:,} samples (SQL)",
                     _s(gen["seconds"]), "", "", _gb(figs["dash_generate"]["maxrss_mb"]), "", ""))
    metrics = figs.get("metrics")
    if metrics:     # metrics_bench.py's own rows, already formatted
        info = metrics["info"]
        rows += [(f"stored metrics ({info['jobs']:,} jobs, {info['samples']:,} samples): {r[0]}", *r[1:])
                 for r in metrics["rows"]]
    pub = figs.get("dash_publish", {}).get("publish")
    if pub:
        rows.append((f"snapshot publish: copy of the file ({pub['snapshot_gb']:.2f} GB)",
                     _s(pub["seconds"]), "", "", _gb(figs["dash_publish"]["maxrss_mb"]), "", ""))
    cb = figs.get("dash_callbacks", {}).get("callbacks")
    if cb:
        for label, c in cb["callbacks"].items():
            rows.append((f"dashboard callback p95: {label} (n={c['n']}, max {c['max_ms']:.0f} ms)",
                         f"{c['p95_ms']:.0f} ms", "", "", _gb(figs["dash_callbacks"]["maxrss_mb"]),
                         f"<= {c['target_ms']} ms", "met" if c["p95_ms"] <= c["target_ms"] else "MISSED"))
    rep = figs.get("reports")
    if rep:
        h = rep["html"]
        rows.append((f"weekly HTML reports, {h['files']:,} users ({rep['generate']['jobs']:,} jobs)", _s(h["seconds"]),
                     "", "", _gb(rep["maxrss_mb"]), f"<= {h['target_s']} s",
                     "met" if h["seconds"] <= h["target_s"] else "MISSED"))
        for key, what in (("md_csv", "reports users + projects + admin, md + csv"), ("eml", "reports as e-mail (.eml)")):
            rows.append((f"{what}, {rep[key]['files']:,} files", _s(rep[key]["seconds"]), "", "", "", "", ""))
    return rows


def render(figs: dict) -> str:
    m = figs["machine"]
    head = [f"jobsight scale benchmarks ({figs['mode']}): {m['started']}, commit {m['commit']}",
            f"machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']:.1f} GiB RAM; Python {m['python']}, "
            f"duckdb {m['duckdb']}, polars {m['polars']}",
            f"load average (1/5/15 min) before: {_load(m['load_before'])}; after: {_load(figs['load_after'])}; "
            f"wall time {figs['wall_s'] / 60:.1f} min"]
    if figs["mode"] != "full":
        head.append("(quick sizes: the targets are the issue's, for --full sizes)")
    for key, err in figs.get("errors", {}).items():
        head.append(f"step {key} FAILED: {err.splitlines()[-1] if err else ''} (its output is in the log)")
    cols = ("what", "jobsight", "baseline", "ratio", "peak RSS", "target", "met?")
    rows = [cols] + rows_for(figs)
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    where = figs.get("metrics", {}).get("where")
    tail = ["", "stored metrics, where the time went (seconds):", *where] if where else []
    return "\n".join(head + [""] + lines + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick", help="small sizes (default)")
    mode.add_argument("--full", action="store_const", dest="mode", const="full", help="the issue's sizes")
    ap.add_argument("--only", choices=STEPS, action="append", help="run only these steps (repeatable)")
    ap.add_argument("--workdir", help="where the temporary directory goes (default: the system temp dir)")
    ap.add_argument("--json-out", help="also write every figure as JSON to this file")
    args = ap.parse_args()
    args.mode = args.mode or "quick"
    size, steps = SIZES[args.mode], args.only or STEPS
    figs: dict = {"mode": args.mode, "machine": machine()}
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="jobsight-scale-", dir=args.workdir))
    print(f"scale benchmarks ({args.mode}) in {work}", file=sys.stderr, flush=True)

    def step(key: str, fn) -> None:
        # a failed step is reported in the table; the others still run (a --full run is long)
        try:
            figs[key] = fn()
        except (Exception, SystemExit) as exc:
            figs.setdefault("errors", {})[key] = str(exc) or type(exc).__name__
            print(f"  [{key}] FAILED: {exc}", file=sys.stderr, flush=True)
        if args.json_out:                               # what is measured so far survives an interrupted run
            Path(args.json_out).write_text(json.dumps(figs, indent=1), encoding="utf-8")

    db = work / "bench.duckdb"
    try:
        if "ingest" in steps:
            step("ingest", lambda: step_ingest(size, work))
        if "metrics" in steps:
            step("metrics", lambda: run_json([str(BENCH / "metrics_bench.py"), "--workdir", str(work), "--json",
                                              *(["--quick"] if args.mode == "quick" else [])],
                                             prefix="  [metrics] "))
        if "dashboard" in steps:
            step("dash_generate", lambda: dashboard("generate", db, size))
            step("dash_publish", lambda: dashboard("publish", db, size))
            step("dash_callbacks", lambda: dashboard("callbacks", db, size))
        if "reports" in steps:
            step("reports", lambda: run_json([str(BENCH / "report_bench.py"), "--users", str(size["users"]),
                                              "--workdir", str(work), "--json"], prefix="  [reports] "))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figs["load_after"] = os.getloadavg()
    figs["wall_s"] = time.perf_counter() - t0
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figs, indent=1), encoding="utf-8")
    print(render(figs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
