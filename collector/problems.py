"""Problems: the sidecar's stderr, at most one line per distinct problem."""
from __future__ import annotations

import sys


class Problems:
    """At most one stderr line per distinct problem."""

    def __init__(self, stream=None) -> None:
        self.stream = stream
        self.seen: set[str] = set()

    def warn(self, key: str, message: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        try:
            print(message, file=self.stream or sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
