"""Wrapper mode's command (`jobsight sidecar run -- CMD ARGS...`): started first in its own process
group, sent the signals the sidecar receives, and its exit code returned as the sidecar's."""
from __future__ import annotations

import os
import sys

from .problems import stderr_line


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
            stderr_line(f"jobsight sidecar: cannot run {self.argv[0]}: {exc.strerror or exc}")
            return 126 if isinstance(exc, PermissionError) else 127
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
