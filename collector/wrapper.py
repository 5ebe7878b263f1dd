"""Wrapper mode's command (`jobsight sidecar run -- CMD ARGS...`): started first in its own process
group, sent the signals the sidecar receives, and its exit code returned as the sidecar's."""
from __future__ import annotations

import os
import stat
import sys

from .problems import stderr_line


def found_command(name: str, path: str | None = None) -> bool:
    """Whether a shell would find `name` (a file that exists, executable or not): then a failed
    exec is 126, else 127 "command not found". As bash: a PATH folder this user cannot search
    hides what is in it, so it finds nothing there (the exec's EACCES is not the answer)."""
    if "/" in name:
        candidates = [name]
    elif not name:
        return False
    else:
        folders = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
        candidates = [os.path.join(folder or ".", name) for folder in folders]
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if "/" in name or not stat.S_ISDIR(st.st_mode):   # a search skips folders; a path to one is 126
            return True
    return False


class Command:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.child = None  # subprocess.Popen of the wrapped command

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child else None

    # The wrapped command comes first: nothing the sidecar does may delay or prevent it.
    def start(self, signals) -> int | None:
        """Start the command and let `signals` (loop.Signals) forward to its process group.
        None when it runs, else the exit code for a command that cannot be run (126/127, as a shell)."""
        import subprocess  # only wrapper mode needs it (start-up time)
        try:
            if sys.version_info >= (3, 11):
                self.child = subprocess.Popen(self.argv, process_group=0)
            else:  # older python3 on a node, running this file directly
                self.child = subprocess.Popen(self.argv, preexec_fn=os.setpgrp)
        except OSError as exc:
            found = found_command(self.argv[0])
            why = (exc.strerror or str(exc)) if found or "/" in self.argv[0] else "command not found"
            stderr_line(f"jobsight sidecar: cannot run {self.argv[0]}: {why}")
            return 126 if found else 127
        signals.child_pgid = self.child.pid
        for sig in list(signals.received):  # arrived while the command was being started
            try:
                os.killpg(self.child.pid, sig)
            except OSError:
                pass
        return None

    def exited(self) -> bool:
        """True once the command has exited, WITHOUT reaping it: the last sample can still read
        the zombie's CPU time (psutil path), then exit_code() reaps it."""
        try:
            return os.waitid(os.P_PID, self.child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # already reaped
            return True

    def exit_code(self) -> int:
        """The command's exit status; killed by signal N: 128 + N, as a shell reports it."""
        code = self.child.wait()
        return 128 - code if code < 0 else code
