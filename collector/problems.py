"""Problems: the sidecar's stderr, at most one line per distinct problem, and never anywhere else.

`jobsight sidecar ... 2>&-` in a jobscript starts the sidecar with stderr closed: Python then has
sys.stderr = None, and print(file=None) would write to stdout, the job's output; and the next file
the sidecar opened would take number 2, so anything written to "stderr" by number would land in
it. guard_std_fds() (first thing in main) puts /dev/null on a closed 0, 1 or 2 before anything is
opened, so warnings are silent instead.
"""
from __future__ import annotations

import os
import sys


def guard_std_fds() -> list[int]:
    """Open /dev/null on each of descriptors 0, 1, 2 that is closed (found by os.fstat), so no file
    the sidecar opens later takes their number, and point a missing sys.stdout / sys.stderr at it.
    The /dev/null descriptors are not inherited: a wrapped command starts with the same closed
    descriptors as the sidecar did. Returns the descriptors that were closed."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)   # lowest free number: fd, when the lower ones are open
            if null != fd:
                os.dup2(null, fd, inheritable=False)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name) is None:   # Python found it closed at start-up
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False, errors="backslashreplace"))
    return closed


def stderr_line(message: str) -> bool:
    """One line on sys.stderr; nothing when there is no stderr (never stdout, as print(file=None) would).
    False when it could not be written."""
    stream = sys.stderr
    if stream is None:
        return False
    try:
        print(message, file=stream, flush=True)
    except (OSError, ValueError):
        return False
    return True


class Problems:
    """At most one stderr line per distinct problem; `lines` keeps them for the metadata JSON (a site
    sidecar's stderr is /dev/null)."""

    MAX_KEPT = 50

    def __init__(self, stream=None) -> None:
        self.stream = stream
        self.seen: set[str] = set()
        self.lines: list[str] = []

    def warn(self, key: str, message: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        if len(self.lines) < self.MAX_KEPT:
            self.lines.append(message)
        if self.stream is None:
            stderr_line(message)
            return
        try:
            print(message, file=self.stream, flush=True)
        except (OSError, ValueError):
            pass
