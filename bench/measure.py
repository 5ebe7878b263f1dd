"""What the bench scripts share: a process's own peak RSS, running a bench script as a child
process whose last stdout line is a JSON dict of its figures (so each figure's peak RSS is that
process's own, not the sum of everything run before it), and where a `jobsight ingest` run's time went."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb() -> float:
    """This process's own peak RSS. (ru_maxrss would include the parent's peak from before exec.)"""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_script(args: list[str], prefix: str = "") -> list[str]:
    """Run `python <args...>` from the repository root; echo its output to our stderr as it comes
    (with `prefix`), and return its stdout lines. Raises SystemExit naming the command on failure."""
    cmd = [sys.executable, *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        print(f"{prefix}{line}", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode} (its output is above)")
    return lines


def last_json(lines: list[str]) -> dict:
    """The last line that is a JSON object."""
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise ValueError("no JSON line in the output")


def run_json(args: list[str], prefix: str = "") -> dict:
    return last_json(run_script(args, prefix))


class Phases:
    """Wall (and where it can be told, CPU) seconds of each part of a `jobsight ingest` run, taken by
    wrapping the functions that do them (this process only: a bench's child process)."""

    def __init__(self):
        self.t: dict[str, float] = {}

    def add(self, name: str, secs: float) -> None:
        self.t[name] = self.t.get(name, 0.0) + secs

    def wrap(self, owner, attr: str, name: str, cpu: Optional[str] = None) -> None:
        """owner.attr timed as `name`; cpu="thread": also the calling thread's CPU seconds, "process":
        the whole process's (for a part that runs alone), as name + '_cpu'."""
        fn = getattr(owner, attr, None)
        if fn is None:
            return
        clock = {"thread": time.thread_time, "process": time.process_time}.get(cpu or "", time.thread_time)

        def timed(*a, **k):
            t0, c0 = time.perf_counter(), clock()
            try:
                return fn(*a, **k)
            finally:
                self.add(name, time.perf_counter() - t0)
                if cpu:
                    self.add(name + "_cpu", clock() - c0)
        setattr(owner, attr, timed)

    def install(self, parser, parse_attr: str) -> None:
        """Wrap the ingest's parts; the parse is parser.parse_attr (the format's own entry)."""
        from jobsight.analytics.commands import ingest as ingest_cli
        from jobsight.analytics.ingest import files as ingest
        from jobsight.analytics.ingest import load as ingest_load
        from jobsight.analytics.ingest import routes as ingest_routes
        from jobsight.analytics.ingest import walk as ingest_walk
        from jobsight.analytics.store import results as store
        from jobsight.analytics.store import snapshot
        self.wrap(ingest_walk, "scan_file", "sha256", cpu="thread")
        self.wrap(ingest, "scan_file", "sha256", cpu="thread")
        self.wrap(parser, parse_attr, "parse")
        self.wrap(ingest_routes.EarlyInsert, "_work", "early_insert", cpu="thread")   # its thread, beside the parse
        self.wrap(ingest_routes.EarlyInsert, "finish", "early_finish")
        self.wrap(ingest_load, "load_pieces", "load")
        self.wrap(store, "refresh", "refresh")
        self.wrap(snapshot, "publish", "publish")
        self.wrap(ingest_cli, "_refresh_and_publish", "after", cpu="process")


def phase_line(j: dict) -> str:
    """Where a jobsight run's wall time went, each part's share of the total."""
    p, total = j["phases"], j["seconds"]
    parse, load, after, publish = p.get("parse", 0), p.get("load", 0), p.get("after", 0), p.get("publish", 0)
    parts = [("parse", parse), ("early insert (beside it)", p.get("early_insert", 0)),
             ("insert tail + key check", p.get("early_finish", 0)), ("load/merge", load),
             ("store refresh", after - publish), ("snapshot publish", publish), ("sha256 (beside it)", p.get("sha256", 0)),
             ("other (start-up, open, detect)", total - parse - load - after)]
    return "    " + ", ".join(f"{name} {secs:.1f} s ({100 * secs / total:.0f} %)" for name, secs in parts) + \
        f"; CPU of the insert thread {p.get('early_insert_cpu', 0):.1f} s, of the hash {p.get('sha256_cpu', 0):.1f} s"


def alone_ratio(d: dict, j: dict) -> str:
    """The ingest alone against DuckDB: the command less the stored metrics' refresh and the
    snapshot publish after it ("" when the run has no phases)."""
    p = j.get("phases", {})
    if "after_cpu" not in p:
        return ""
    return (f" | ingest alone {(j['seconds'] - p['after']) / d['seconds']:.2f}x, "
            f"CPU {(j['cpu_seconds'] - p['after_cpu']) / d['cpu_seconds']:.2f}x")
