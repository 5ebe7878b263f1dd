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
        self.pids: list[int] = []   # the processes of the last read

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
        self.pids = list(seen)
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
    """The processes of user `uid` (default: this user) whose environment holds VAR=job_id (decided
    once per process). A site sidecar runs as root and passes the job's uid."""

    def __init__(self, var: str, job_id: str, exclude: set[int] | None = None, uid: int | None = None) -> None:
        super().__init__(exclude)
        self.var = var
        self.job_id = job_id
        self._uid = os.getuid() if uid is None else uid
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


# ---------------------------------------------------------------- without psutil: /proc directly

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat_fields(pid: int, proc: str = "/proc") -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first), or None if
    the process is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces or ')': split after the last ')'.
    return data[data.rfind(b")") + 2:].split()


def _proc_stat(pid: int, proc: str = "/proc"):
    """(ppid, cpu seconds, rss bytes, start ticks) from /proc/<pid>/stat, or None if gone."""
    fields = _stat_fields(pid, proc)
    try:
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK, int(fields[21]) * _PAGE, int(fields[19])
    except (TypeError, IndexError, ValueError):
        return None


def start_ticks(pid: int, proc: str = "/proc") -> int | None:
    """When a live process started (clock ticks since boot), to tell it from a later one with its pid;
    None when it is gone or a zombie (its parent may be an init that reaps late)."""
    fields = _stat_fields(pid, proc)
    try:
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (TypeError, IndexError, ValueError):
        return None


class ProcfsSet:
    """The same counters as ProcessSet, read from /proc with the standard library only
    (for `python3 collector/sidecar.py` on a node without psutil)."""

    def __init__(self, exclude: set[int] | None = None, proc: str = "/proc") -> None:
        self.proc = proc
        self._exclude = set(exclude or ()) | {os.getpid()}
        self._last: dict[tuple[int, int], float] = {}   # (pid, start ticks) -> cpu seconds
        self._gone_cpu = 0.0
        self.pids: list[int] = []   # the processes of the last read

    def _pids(self) -> list[int]:
        try:
            return [int(n) for n in os.listdir(self.proc) if n.isdigit()]
        except OSError:
            return []

    def _select(self, stats: dict[int, tuple]) -> list[int]:
        raise NotImplementedError

    def read(self) -> tuple[float, int, int]:
        stats = {}
        for pid in self._pids():
            st = _proc_stat(pid, self.proc)
            if st is not None:
                stats[pid] = st
        now: dict[tuple[int, int], float] = {}
        rss = 0
        for pid in self._select(stats):
            if pid in self._exclude:
                continue
            _ppid, cpu, mem, start = stats[pid]
            now[(pid, start)] = cpu
            rss += mem
        for key, cpu in self._last.items():
            if key not in now:
                self._gone_cpu += cpu
        self._last = now
        self.pids = [pid for pid, _ in now]
        return self._gone_cpu + sum(now.values()), rss, len(now)


class ProcfsTree(ProcfsSet):
    def __init__(self, root_pid: int, exclude: set[int] | None = None, proc: str = "/proc") -> None:
        super().__init__(exclude, proc)
        self.root_pid = root_pid
        self._root_start = (_proc_stat(root_pid, proc) or (0, 0, 0, None))[3]

    def _select(self, stats: dict[int, tuple]) -> list[int]:
        root = stats.get(self.root_pid)
        if root is None or root[3] != self._root_start:  # gone, or the pid was reused
            return []
        children: dict[int, list[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st[0], []).append(pid)
        out, todo = [], [self.root_pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, ()))
        return out


class ProcfsJobProcesses(ProcfsSet):
    """The processes of user `uid` (default: this user) whose environment holds VAR=job_id (decided once per process)."""

    def __init__(self, var: str, job_id: str, exclude: set[int] | None = None, proc: str = "/proc",
                 uid: int | None = None) -> None:
        super().__init__(exclude, proc)
        self._needle = f"{var}={job_id}".encode()
        self._uid = os.getuid() if uid is None else uid
        self._decided: dict[tuple[int, int], bool] = {}

    def _belongs(self, pid: int, start: int) -> bool:
        key = (pid, start)
        verdict = self._decided.get(key)
        if verdict is None:
            try:
                verdict = (os.stat(f"{self.proc}/{pid}").st_uid == self._uid and
                           self._needle in open(f"{self.proc}/{pid}/environ", "rb").read().split(b"\0"))
            except OSError:
                verdict = False
            self._decided[key] = verdict
        return verdict

    def _select(self, stats: dict[int, tuple]) -> list[int]:
        members = [pid for pid, st in stats.items() if self._belongs(pid, st[3])]
        self._decided = {k: v for k, v in self._decided.items() if k[0] in stats}
        return members
