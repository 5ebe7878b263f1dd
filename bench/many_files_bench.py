"""Many small sidecar files: `jobsight ingest DIR` against DuckDB reading the same files, side by side
(prints figures; not a test).

    .venv/bin/python bench/many_files_bench.py [--files 10000] [--rows 6] [--alone 500]

Writes --files sidecar CSVs of --rows samples each (one job and host per file, as the site-mode
sidecar writes them) in a temporary folder, then runs, each in a fresh process:
  - `jobsight ingest --db NEW DIR`, the whole command (ingest, stored metrics' refresh, snapshot);
  - the baseline: DuckDB's own read_csv of DIR/*.csv into a table of a new database file;
  - the same folder read one file per transaction (ingest_batch off), on the first --alone files,
    scaled to --files: what each file cost before the folder was read in batches.
One line heads the table: date, commit, machine and load. Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale import _load, machine  # noqa: E402

HEAD = ("time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes,gpu_index,power_w,energy_j,"
        "sm_clock_mhz,temperature_c,sm_active_pct\n")
BASELINE = ("import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
            "con.execute(\"CREATE TABLE sample AS SELECT * FROM read_csv(?, header = true)\", [sys.argv[2] + '/*.csv'])")
ALONE = ("import sys; from jobsight.analytics.ingest import files; from jobsight.analytics.ingest.records import ParseOptions; "
         "from jobsight.analytics.store import db; files.BATCH_MIN_FILES = 10 ** 9; con = db.connect(sys.argv[1]); "
         "files.ingest_paths(con, [sys.argv[2]], ParseOptions(timezone='UTC')); con.close()")


def write_files(folder: Path, n: int, rows: int) -> int:
    size = 0
    for i in range(n):
        job = 100000 + i
        text = HEAD + "".join(f"2026-11-01T10:{s // 60:02d}:{s % 60:02d}.000Z,{job},bench,n{i % 64},cpu,{(i + s) % 97},"
                              f"{1024 * (s + 1)},4096,,,,,,\n" for s in range(0, rows * 10, 10))
        (folder / f"jobsight-bench-{job}-n{i % 64}-20261101T100000Z-{i}.csv").write_text(text)
        size += len(text)
    return size


def timed(argv: list[str]) -> float:
    t = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rows", type=int, default=6, help="samples per file")
    ap.add_argument("--alone", type=int, default=500, help="files read one per transaction, for the before figure (0: skip)")
    args = ap.parse_args()
    m = machine()
    work = Path(tempfile.mkdtemp(prefix="jobsight-many-files-"))
    try:
        spool, few = work / "spool", work / "few"
        spool.mkdir()
        few.mkdir()
        size = write_files(spool, args.files, args.rows)
        exe = str(Path(sys.executable).with_name("jobsight"))
        ours = timed([exe, "ingest", "--db", str(work / "j.duckdb"), "--quiet", str(spool)])
        base = timed([sys.executable, "-c", BASELINE, str(work / "b.duckdb"), str(spool)])
        rows = [("ingest DIR, batched", ours, base, "< 30 s")]
        if args.alone:
            k = min(args.alone, args.files)
            for p in sorted(spool.iterdir())[:k]:
                shutil.copy(p, few)
            alone = timed([sys.executable, "-c", ALONE, str(work / "a.duckdb"), str(few)]) * args.files / k
            rows.append((f"one file per transaction (×{args.files / k:.0f} of {k})", alone, base, ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Measured {m['started']}, commit {m['commit']}, {m['cpu']}, {m['cores']} cores, "
          f"load {_load(m['load_before'])} → {_load(os.getloadavg())}; {args.files:,} files of {args.rows} rows "
          f"({size / 1e6:.1f} MB)")
    print("| what | jobsight | DuckDB read_csv | ratio | per file | target |")
    print("|---|---|---|---|---|---|")
    for what, secs, b, target in rows:
        print(f"| {what} | {secs:.1f} s | {b:.1f} s | {secs / b:.1f}× | {secs / args.files * 1000:.1f} ms | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
