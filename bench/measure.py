"""What the bench scripts share: a process's own peak RSS, and running a bench script as a child
process whose last stdout line is a JSON dict of its figures (so each figure's peak RSS is that
process's own, not the sum of everything run before it)."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

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
