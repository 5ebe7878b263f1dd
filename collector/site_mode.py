"""Site mode: one root sidecar per job, started by the scheduler's prolog and stopped by its epilog.

    jobsight sidecar prolog [--spool DIR]    returns at once; a detached sidecar samples the job
    jobsight sidecar epilog [--spool DIR]    SIGTERM: a last sample and fsync; SIGKILL after 1 s

The prolog forks twice (the sampler is in its own session and process group, holds none of the
prolog's descriptors, and is no child the scheduler waits for), and returns once the sampler has
written its marker, `<spool>/.site-<job>@<host>` (root-owned, 0644: pid, start time, job, uid).
The epilog finds the sampler through it, and so does a job's own sidecar, which then writes no
files (the job is recorded once, by the site) and keeps only its idle alert.

The prolog and epilog take the job and its user from the running scheduler's own variables only
(isolate.py keeps those in a clean environment; site_identity.py checks the user with the scheduler).

The sampler reads the job's cgroup, found through /proc/<pid>/cgroup of one of the job's processes
(its own cgroup is the scheduler daemon's); until the job has a process, or on a node without job
cgroups, it sums the job's processes (the job's uid and SLURM_JOB_ID / PBS_JOBID / LSB_JOBID in
their environment). It stops by itself when the job's cgroup, once seen, is gone, or when the job's
processes, once seen, have been gone for ORPHAN_S: a node whose epilog never ran keeps no sampler.
Prolog and epilog always exit 0: a failing prolog or epilog drains the node.
"""
from __future__ import annotations

import json
import os
import select
import signal
import stat
import time

from . import jobenv, site_identity
from .cgroup import find_job_cgroup
from .isolate import JOB_ID_VARS, clean_environ, decide_scheduler
from .problems import stderr_line
from .procs import start_ticks
from .sources import CpuReading

STOP_S = 1.0         # the epilog's grace before SIGKILL
ORPHAN_S = 600.0     # no job process for this long after some were seen: the job is over
READY_S = 1.0        # the prolog waits this long at most for the sampler's marker
MARKER_PREFIX = ".site-"
SPOOL_MODE = 0o711   # users may stat their job's marker, not list the spool
SCHEDULER_VARS = JOB_ID_VARS


def spool_dir(env: dict[str, str]) -> str:
    from .options import DEFAULT_SPOOL
    return env.get("JOBSIGHT_SPOOL", "").strip() or DEFAULT_SPOOL


def marker_path(spool: str, job_id: str, host: str) -> str:
    # a dot-file: `jobsight ingest SPOOL` skips it
    return os.path.join(spool, f"{MARKER_PREFIX}{jobenv.safe_name(job_id)[:64]}@{jobenv.safe_name(host)[:64]}")


def _hidden_proc() -> bool:
    """/proc mounted with hidepid: other users' processes (pid 1 too) cannot be seen."""
    return not os.path.exists("/proc/1/stat")


def read_marker(path: str, verify: bool = True) -> dict | None:
    """The marker's content when it is a regular file of root (or of this user) naming a live sampler.
    verify=False skips the liveness check (the epilog checks itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()):
            return None
        info = json.loads(os.read(fd, 4096).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(info, dict) or not isinstance(info.get("pid"), int) or info["pid"] <= 1 \
            or not isinstance(info.get("start"), int):
        return None
    if verify and start_ticks(info["pid"]) != info["start"] and not _hidden_proc():
        return None   # stale: that sampler is gone (an epilog that never ran)
    return info


def site_sidecar_running(env: dict[str, str], host: str) -> str | None:
    """In a job: the marker of the site sidecar recording it on this node, or None."""
    _scheduler, job_id = jobenv.detect_scheduler(env)
    if not job_id:
        return None
    path = marker_path(spool_dir(env), job_id, host)
    return path if read_marker(path) is not None else None


# ---------------------------------------------------------------------------------- the sampler's CPU

def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class SiteCpu:
    """The job's CPU time and memory seen from outside the job: its cgroup once one of its processes
    shows where that is, else the sum over its processes. The counter stays continuous when the
    cgroup takes over (one window reads 0 % instead of a jump)."""

    def __init__(self, procs, scheduler: str, job_id: str, cgroup_root: str, mem_limit: int | None,
                 clock=time.monotonic, read_text=_read_text) -> None:
        self.procs = procs
        self.method = "psutil" if type(procs).__name__ == "JobProcesses" else "procfs"
        self.cgroup_path: str | None = None
        self.cg = None
        self.on_cgroup = None            # called with the JobCgroup when it is found
        self._scheduler, self._job_id, self._root = scheduler, job_id, cgroup_root
        self._mem_limit = mem_limit
        self._clock, self._read_text = clock, read_text
        self._last_cpu = 0.0
        self._offset: float | None = None
        self._peak = 0
        self._seen_at: float | None = None   # last time a job process was seen
        self.gone = False

    def _locate(self) -> None:
        for pid in self.procs.pids[:4]:
            text = self._read_text(f"/proc/{pid}/cgroup")
            if not text:
                continue
            cg = find_job_cgroup(self._scheduler, self._job_id, self._root, text)
            if cg is not None and cg.cpu_usec() is not None:
                self.cg, self.method, self.cgroup_path = cg, cg.method, cg.path
                if self.on_cgroup is not None:
                    self.on_cgroup(cg)
                return

    def read(self) -> CpuReading:
        if self.cg is None:
            total, rss, n = self.procs.read()
            now = self._clock()
            if n:
                self._seen_at = now
                self._last_cpu = total     # the cgroup's counter continues from here
                self._locate()
            elif self._seen_at is not None and now - self._seen_at >= ORPHAN_S:
                self.gone = True
            if self.cg is None:
                self._last_cpu = total
                self._peak = max(self._peak, rss)
                return CpuReading(total, rss, self._mem_limit, self._peak)
        s = self.cg.read()
        if s.cpu_usec is None:
            self.gone = True   # the job's cgroup was removed: the job is over
            return CpuReading(None, None, None, None)
        cpu = s.cpu_usec / 1e6
        if self._offset is None:
            self._offset = self._last_cpu - cpu
        return CpuReading(cpu + self._offset, s.mem_current, s.mem_max, s.mem_peak)


def site_cores(env: dict[str, str]) -> tuple[int, str]:
    """The job's cores on this node before its cgroup is found: a prolog has SLURM_JOB_CPUS_PER_NODE
    ('4' or '4(x2)'; the first node's count for a mixed list), not SLURM_CPUS_ON_NODE."""
    for var in ("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE", "NCPUS", "LSB_MAX_NUM_PROCESSORS"):
        digits = ""
        for ch in env.get(var, "").strip():
            if not ch.isdigit():
                break
            digits += ch
        if digits and int(digits) > 0:
            return int(digits), var
    return 1, "unknown"


def make_site_cpu(env: dict[str, str], uid: int, cgroup_root: str) -> SiteCpu:
    from . import procs
    scheduler, job_id = jobenv.detect_scheduler(env)
    var = SCHEDULER_VARS[scheduler]
    cls = procs.JobProcesses if procs.psutil_available() else procs.ProcfsJobProcesses
    return SiteCpu(cls(var, job_id, uid=uid), scheduler, job_id, cgroup_root,
                   jobenv.memory_limit_from_env(env, site_cores(env)[0]))


# ----------------------------------------------------------------------------------- prolog / epilog

def job_user(text: str | None, env: dict[str, str]) -> tuple[int | None, str | None]:
    """(uid, name) of a user given as a name or a uid; (None, None) when not known."""
    import pwd
    text = (text or "").strip()
    if not text:
        return None, None
    try:
        entry = pwd.getpwuid(int(text)) if text.isdigit() else pwd.getpwnam(text)
        return entry.pw_uid, entry.pw_name
    except (KeyError, OverflowError):
        return (int(text), env.get("SLURM_JOB_USER") or None) if text.isdigit() else (None, None)


def site_scheduler(given: str | None, job_id: str | None) -> str:
    """Whose job the prolog or epilog is for; --job-id alone names a Slurm job."""
    scheduler = decide_scheduler(os.environ, given)
    return "slurm" if scheduler == "none" and job_id else scheduler


def checked_user(args, scheduler: str, job_id: str, env: dict[str, str]) -> tuple[int | None, str | None]:
    """The job's user: --user, else the scheduler's own variable, checked with the scheduler. On a
    mismatch (or no user at all) one stderr line and (None, None): nothing is to be started."""
    where = "--user" if args.user else site_identity.USER_VARS.get(scheduler, "--user")
    uid, user = job_user(args.user or site_identity.user_from_env(env, scheduler), env)
    owner = site_identity.ask_owner(scheduler, job_id, env, args.scheduler_bin)
    said = f"{site_identity.COMMANDS[scheduler]} says its user is {owner.user or owner.uid!r}"
    if owner.problem is None and uid is None:
        uid, user = job_user(str(owner.uid) if owner.uid is not None else owner.user, env)
        where = site_identity.COMMANDS[scheduler]
    elif owner.problem is None and not site_identity.same_user(uid, user, owner):
        stderr_line(f"jobsight sidecar prolog: job {job_id!r}: {said}, not {user or uid!r} ({where}); nothing started")
        return None, None
    if uid is None:
        why = f"; the scheduler cannot tell: {owner.problem}" if owner.problem else f"; {said}, unknown here"
        stderr_line(f"jobsight sidecar prolog: job {job_id!r}: its user is not known ({where}){why}; nothing started")
        return None, None
    if owner.problem is not None:
        stderr_line(f"jobsight sidecar prolog: job {job_id!r}: its user is not checked ({owner.problem}); "
                    f"sampling for {user or uid!r} ({where})")
    return uid, user


def prepare_spool(spool: str) -> str | None:
    """Create the spool (0711) if missing; why it cannot be used, or None. A spool others may write
    to is refused: files there count as the site's own."""
    try:
        created = not os.path.lexists(spool)
        os.makedirs(spool, mode=SPOOL_MODE, exist_ok=True)
        if created:
            os.chmod(spool, SPOOL_MODE)   # whatever the prolog's umask: users stat their job's marker
        st = os.lstat(spool)
    except OSError as exc:
        return f"cannot create {spool}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{spool} is not a directory"
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return f"{spool} must belong to uid {os.geteuid()} and not be writable by group or others"
    return None


def _write_marker(path: str, info: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)   # readable by the job's own sidecar whatever the umask
        os.write(fd, json.dumps(info).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_marker(path: str, pid: int) -> None:
    """Remove the marker if it still names this sampler."""
    info = read_marker(path, verify=False)
    if info is not None and info["pid"] == pid:
        try:
            os.unlink(path)
        except OSError:
            pass


def prolog(args) -> int:
    try:
        return _prolog(args)
    except Exception as exc:   # never fail the prolog: the node would be drained
        stderr_line(f"jobsight sidecar prolog: {exc!r}; this job is not sampled by the site")
        return 0


def _prolog(args) -> int:
    scheduler = site_scheduler(args.scheduler, args.job_id)
    env = clean_environ(os.environ, scheduler)   # the sampler's and its children's environment
    job_id = args.job_id or site_identity.job_id_from_env(env, scheduler)
    if not job_id:
        stderr_line("jobsight sidecar prolog: no job id (SLURM_JOB_ID, PBS_JOBID, LSB_JOBID or --job-id); nothing started")
        return 0
    uid, user = checked_user(args, scheduler, job_id, env)
    if uid is None:
        return 0
    problem = prepare_spool(args.spool)
    if problem:
        stderr_line(f"jobsight sidecar prolog: {problem}; nothing started")
        return 0
    env[JOB_ID_VARS[scheduler]] = job_id   # --job-id: a PBS prologue gets the id as $1, not in its environment
    args.job_id = job_id
    job = jobenv.detect_job(env, job_id, args.cluster)
    marker = marker_path(args.spool, job.job_id, job.host)
    if read_marker(marker) is not None:
        stderr_line(f"jobsight sidecar prolog: job {job_id} already has a site sidecar ({marker})")
        return 0
    r, w = os.pipe()
    child = os.fork()
    if child == 0:   # never return into the caller's code from here
        try:
            os.close(r)
            os.setsid()
            if os.fork() == 0:
                _sampler(args, env, uid, user, marker, w)
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    try:
        select.select([r], [], [], READY_S)
    finally:
        os.close(r)
    return 0


def _sampler(args, env: dict[str, str], uid: int, user: str | None, marker: str, ready_fd: int) -> None:
    """The detached sampler: own process group, /dev/null on 0-2, no inherited descriptors."""
    os.setpgid(0, 0)    # the epilog's SIGKILL reaches an nvidia-smi child too
    # a blocked mask survives fork and exec: the prolog's caller must not make us deaf to the epilog
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD})
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    os.closerange(3, ready_fd)
    os.closerange(ready_fd + 1, 1 << 16)
    os.chdir("/")
    pid = os.getpid()
    _write_marker(marker, {"pid": pid, "start": start_ticks(pid), "job_id": args.job_id, "uid": uid})
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    os.environ.clear()
    os.environ.update(env)
    from .sidecar import Sidecar
    args.out, args.mode, args.wrapper, args.cmd = args.spool, "site", False, []
    args.idle_alert, args.on_idle_argv, args.idle_cancel, args.config, args.proc_cgroup = 0.0, None, 0.0, None, None
    args.site_uid, args.site_user, args.site_marker = uid, user, marker
    try:
        Sidecar(args).run()
    finally:
        remove_marker(marker, pid)


def epilog(args) -> int:
    try:
        _epilog(args)
    except Exception as exc:   # never fail the epilog: the node would be drained
        stderr_line(f"jobsight sidecar epilog: {exc!r}")
    return 0


def _alive(pid: int, start: int) -> bool:
    return start_ticks(pid) == start


def _wait_gone(pid: int, start: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid, start):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _epilog(args) -> None:
    scheduler = site_scheduler(args.scheduler, args.job_id)
    env = clean_environ(os.environ, scheduler)
    job_id = args.job_id or site_identity.job_id_from_env(env, scheduler)
    if not job_id:
        stderr_line("jobsight sidecar epilog: no job id (SLURM_JOB_ID, PBS_JOBID, LSB_JOBID or --job-id)")
        return
    job = jobenv.detect_job(env, job_id)
    marker = marker_path(args.spool, job.job_id, job.host)
    info = read_marker(marker, verify=False)
    if info is None:
        return
    pid, start = info["pid"], info["start"]
    if _alive(pid, start):
        os.kill(pid, signal.SIGTERM)   # a last sample, fsync, the metadata completed, exit
        if not _wait_gone(pid, start, STOP_S):
            stderr_line(f"jobsight sidecar epilog: job {job_id}: sidecar {pid} still running after {STOP_S:g} s; killed")
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _wait_gone(pid, start, STOP_S)
    try:
        os.unlink(marker)
    except OSError:
        pass
