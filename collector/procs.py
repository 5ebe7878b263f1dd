"""psutil fallback: the CPU time and resident memory of a set of processes, when no job cgroup exists.

Two selections: a process tree (the wrapped command, or the shell that started a background
sidecar), or every process of this user carrying the job's id in its environment (a job
without a readable cgroup). psutil is imported lazily: it may be missing on a node.

CPU time is kept as a counter that never goes down: a process that disappears keeps the CPU
time it had at the last sample (its last fraction of an interval is lost; short-lived processes
that start and end between two samples are missed — the cgroup path has neither gap).
"""
from __future__ import annotations

import os


def psutil_available() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


class _Tracked:
    __slots__ = ("proc", "cpu")

    def __init__(self, proc, cpu: float) -> None:
        self.proc = proc
        self.cpu = cpu


class ProcessSet:
    """Base: subclasses say which processes belong; this class sums them."""

    def __init__(self, exclude: set[int] | None = None) -> None:
        import psutil
        self._psutil = psutil
        self._exclude = set(exclude or ()) | {os.getpid()}
        self._tracked: dict[int, _Tracked] = {}
        self._gone_cpu = 0.0  # CPU seconds of processes no longer present

    def _members(self) -> list:
        raise NotImplementedError

    def _reuse(self, proc):
        """The cached Process for this pid if it is the same process (not a reused pid)."""
        old = self._tracked.get(proc.pid)
        if old is not None and old.proc == proc:  # psutil compares pid and create time
            return old.proc
        return proc

    def read(self) -> tuple[float, int, int]:
        """(cumulative CPU seconds, RSS bytes summed, number of processes)."""
        psutil = self._psutil
        seen: dict[int, _Tracked] = {}
        rss = 0
        for proc in self._members():
            if proc.pid in self._exclude:
                continue
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    mem = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            seen[proc.pid] = _Tracked(proc, t.user + t.system)
            rss += mem
        for pid, old in self._tracked.items():
            new = seen.get(pid)
            if new is None or new.proc != old.proc:
                self._gone_cpu += old.cpu
        self._tracked = seen
        total = self._gone_cpu + sum(t.cpu for t in seen.values())
        return total, rss, len(seen)


class ProcessTree(ProcessSet):
    """A root process and all its descendants (the root included unless excluded)."""

    def __init__(self, root_pid: int, exclude: set[int] | None = None) -> None:
        super().__init__(exclude)
        self.root_pid = root_pid
        try:
            self._root = self._psutil.Process(root_pid)
        except self._psutil.Error:
            self._root = None

    def _members(self) -> list:
        if self._root is None:
            return []
        try:
            children = self._root.children(recursive=True)
        except self._psutil.Error:
            return []
        return [self._reuse(self._root)] + [self._reuse(c) for c in children]


class JobProcesses(ProcessSet):
    """This user's processes whose environment holds VAR=job_id (decided once per process)."""

    def __init__(self, var: str, job_id: str, exclude: set[int] | None = None) -> None:
        super().__init__(exclude)
        self.var = var
        self.job_id = job_id
        self._uid = os.getuid()
        self._decided: dict[tuple[int, float], bool] = {}

    def _belongs(self, proc) -> bool:
        try:
            key = (proc.pid, proc.create_time())
        except self._psutil.Error:
            return False
        verdict = self._decided.get(key)
        if verdict is None:
            try:
                verdict = proc.uids().real == self._uid and proc.environ().get(self.var) == self.job_id
            except self._psutil.Error:
                verdict = False
            self._decided[key] = verdict
        return verdict

    def _members(self) -> list:
        procs = list(self._psutil.process_iter())
        members = [self._reuse(p) for p in procs if self._belongs(p)]
        # Forget verdicts for pids that are gone so the cache does not grow without bound.
        current = {p.pid for p in procs}
        self._decided = {k: v for k, v in self._decided.items() if k[0] in current}
        return members
