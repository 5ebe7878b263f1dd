"""The in-job idle alert: GPU rows in, at most one stderr line per GPU per hour out, and the user's
opt-in actions (--on-idle CMD once, --idle-cancel after further idleness).

A GPU is idle in a sample when its utilisation (a MIG instance's: its GPM SM activity) is under the
threshold; rows without one (a MIG instance without GPM, a GPM first sample, a lost GPU, a failed
read) are not evidence and break a GPU's idle run.
A run's length is the time from its first idle sample to the latest one. Times come from the
caller (the sampler's monotonic clock), so tests drive hours of job time in microseconds.

Nothing here may harm the job: the stderr line, the user's command and the cancel command can all
fail (stderr closed, command missing, scancel refusing); each failure becomes one line in the
sidecar's problems and nothing is raised. The cancel command names only this job, from the
scheduler's own variable (never --job-id): SLURM_JOB_ID, PBS_JOBID, or LSB_JOBID with its array index.
"""
from __future__ import annotations

from .idle_settings import UNIT, IdleSettings
from .problems import Problems, stderr_line

REPEAT_S = 3600.0       # the same GPU's alert again at most once an hour
CANCEL_TIMEOUT_S = 30.0
MAX_LISTED = 8          # GPUs named in the summary line


def cancel_argv(env: dict[str, str]) -> list[str] | None:
    """The command that cancels this job, and only it, from the scheduler's own variables."""
    job = env.get("SLURM_JOB_ID", "").strip()
    if job:
        return ["scancel", job]
    job = env.get("PBS_JOBID", "").strip()
    if job:
        return ["qdel", job]       # an array subjob's PBS_JOBID is the subjob itself (123[4].server)
    job = env.get("LSB_JOBID", "").strip()
    if job:
        index = env.get("LSB_JOBINDEX", "").strip()
        # bkill JOBID alone would kill every element of an array
        return ["bkill", f"{job}[{index}]" if index and index != "0" else job]
    return None


def _minutes(seconds: float) -> str:
    m = seconds / 60
    return f"{m:.0f}" if m >= 10 else f"{m:.1f}"


def _money(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


class _Gpu:
    __slots__ = ("uuid", "index", "idle_since", "last_t", "last_idle", "first_t", "idle_s", "alerted_at")

    def __init__(self, uuid: str, index) -> None:
        self.uuid, self.index = uuid, index
        self.idle_since: float | None = None   # first sample of the current idle run
        self.last_t: float | None = None
        self.last_idle = False
        self.first_t: float | None = None
        self.idle_s = 0.0                      # idle time over the job (between consecutive idle samples)
        self.alerted_at: float | None = None

    def name(self) -> str:
        return f"GPU {self.index if self.index is not None else '?'} ({self.uuid})"


class IdleWatch:
    """Fed every sample's GPU rows through observe(now, rows); finish(now) at the end of the job."""

    def __init__(self, job_id: str, alert_s: float, settings: IdleSettings, problems: Problems, env: dict[str, str],
                 on_idle: list[str] | None = None, cancel_s: float = 0.0, emit=None, spawn=None, run=None) -> None:
        self.job_id = job_id
        self.alert_s = alert_s
        self.cancel_s = cancel_s
        self.settings = settings
        self.problems = problems
        self.env = env
        self.on_idle = on_idle
        self.emit = emit or _stderr
        self.spawn = spawn or _spawn    # starts the --on-idle command, returns the process
        self.run = run or _run          # runs the cancel command to its end: (exit code, its output)
        self.gpus: dict[str, _Gpu] = {}
        self.alerts = 0
        self.on_idle_state: str | None = None    # None, "started", "failed: ..."
        self.on_idle_proc = None
        self.cancel_state: str | None = None     # None, "requested", "failed: ..."

    # ---- per sample
    def observe(self, now: float, rows: list[dict]) -> None:
        due: list[tuple[_Gpu, float]] = []
        for row in rows:
            uuid = row.get("device")
            if not uuid:
                continue
            g = self.gpus.get(uuid)
            if g is None:
                g = self.gpus[uuid] = _Gpu(uuid, row.get("gpu_index"))
            util = row.get("util_pct")
            idle = util is not None and util < self.settings.idle_pct
            if idle:
                if g.idle_since is None:
                    g.idle_since = now
                elif g.last_idle and g.last_t is not None:
                    g.idle_s += now - g.last_t
            else:
                g.idle_since = None
            if g.first_t is None and util is not None:
                g.first_t = now
            g.last_idle, g.last_t = idle, now
            run = now - g.idle_since if idle else 0.0
            if idle and run >= self.alert_s and (g.alerted_at is None or now - g.alerted_at >= REPEAT_S):
                due.append((g, run))
        for g, run in due:
            repeat = g.alerted_at is not None
            g.alerted_at = now
            self._alert(g, run, repeat)
        if self.cancel_s and self.cancel_state is None:
            self._maybe_cancel(now)
        self._reap()

    def _price_text(self) -> str:
        s = self.settings
        if s.price is None:
            return ""
        return f"; an idle GPU costs {_money(s.price)} {UNIT} per hour ({s.where})"

    def _alert(self, g: _Gpu, run: float, repeat: bool) -> None:
        self.alerts += 1
        line = (f"jobsight sidecar: job {self.job_id}: {g.name()} {'still ' if repeat else ''}idle for {_minutes(run)} min "
                f"(under {self.settings.idle_pct:g} % utilisation){self._price_text()}")
        if not self.emit(line):
            self.problems.warn("idle-emit", "jobsight sidecar: the idle alert could not be written to stderr")
        if self.on_idle and self.on_idle_state is None:
            self._run_on_idle(g, run)

    def _run_on_idle(self, g: _Gpu, run: float) -> None:
        env = dict(self.env)
        env.update({"JOBSIGHT_JOB_ID": self.job_id, "JOBSIGHT_GPU_INDEX": "" if g.index is None else str(g.index),
                    "JOBSIGHT_GPU_UUID": g.uuid, "JOBSIGHT_IDLE_MINUTES": _minutes(run)})
        try:
            self.on_idle_proc = self.spawn(self.on_idle, env)
            self.on_idle_state = "started"
        except Exception as exc:   # missing, not executable, no fork: recorded, never raised
            self.on_idle_state = f"failed: {_why(exc)}"
            self.problems.warn("on-idle", f"jobsight sidecar: --on-idle {self.on_idle[0]} could not be run ({_why(exc)}); "
                                          "the job is not affected")

    def _maybe_cancel(self, now: float) -> None:
        """Cancel when every GPU with a reading is idle, each for alert + cancel minutes."""
        known = [g for g in self.gpus.values() if g.last_t == now and g.first_t is not None]
        if not known or any(g.idle_since is None or now - g.idle_since < self.alert_s + self.cancel_s for g in known):
            return
        argv = cancel_argv(self.env)
        if argv is None:
            self.cancel_state = "failed: not in a Slurm, PBS or LSF job"
            self.problems.warn("idle-cancel", "jobsight sidecar: --idle-cancel: not in a Slurm, PBS or LSF job; nothing cancelled")
            return
        run = min(now - g.idle_since for g in known)
        self.emit(f"jobsight sidecar: job {self.job_id}: every GPU idle for {_minutes(run)} min: "
                  f"cancelling the job ({' '.join(argv)}, --idle-cancel)")
        try:
            code, output = self.run(argv, self.env)
        except Exception as exc:
            code, output = None, _why(exc)
        if code == 0:
            self.cancel_state = "requested"
        else:
            self.cancel_state = f"failed: {output or f'exit {code}'}"
            self.problems.warn("idle-cancel", f"jobsight sidecar: {' '.join(argv)} failed ({self.cancel_state[8:]}); "
                                              "the job goes on")

    def _reap(self) -> None:
        p = self.on_idle_proc
        if p is not None and p.poll() is not None:
            self.on_idle_state = f"exited {p.returncode}"
            self.on_idle_proc = None

    # ---- end of the job
    def finish(self, now: float) -> None:
        """The summary line, when an alert was written during the job."""
        self._reap()
        if not self.alerts:
            return
        parts, idle_s = [], 0.0
        for g in self.gpus.values():
            if g.idle_s > 0 or g.alerted_at is not None:
                span = (g.last_t or now) - (g.first_t or now)
                parts.append(f"{g.name()} idle {_minutes(g.idle_s)} of {_minutes(span)} min")
                idle_s += g.idle_s
        if len(parts) > MAX_LISTED:
            parts = parts[:MAX_LISTED] + [f"and {len(parts) - MAX_LISTED} more"]
        cost = ""
        if self.settings.price is not None:
            cost = f", about {_money(idle_s / 3600 * self.settings.price)} {UNIT}"
        self.emit(f"jobsight sidecar: job {self.job_id}: idle summary: {'; '.join(parts)}; "
                  f"{idle_s / 3600:.2f} idle GPU-hours{cost}")

    def meta(self) -> dict:
        """For the metadata JSON."""
        return {"idle_pct": self.settings.idle_pct, "idle_alert_min": self.alert_s / 60, "idle_alerts": self.alerts,
                "idle_gpu_hours": round(sum(g.idle_s for g in self.gpus.values()) / 3600, 4),
                "on_idle": self.on_idle_state, "idle_cancel": self.cancel_state}


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _stderr(line: str) -> bool:
    return stderr_line(line)


def _spawn(argv: list[str], env: dict[str, str]):
    """Start the user's command (no shell), its output on the job's; not waited for."""
    import subprocess
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, close_fds=True)


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the cancel command to its end; (exit code, the first line it printed)."""
    import subprocess
    res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         errors="replace", timeout=CANCEL_TIMEOUT_S)
    text = (res.stderr or res.stdout).strip()
    return res.returncode, text.splitlines()[0][:200] if text else ""
