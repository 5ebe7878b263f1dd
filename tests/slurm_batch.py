"""The real-Slurm test modules' jobs, submitted together as the test session starts.

A module whose jobs can run before its tests defines ``submit_slurm_jobs(start) -> (state, job ids)``:
it submits its jobs and returns what its tests need to find them. When the session has collected
its tests, tests/conftest.py hands the selected modules here and their jobs are submitted at once,
in the order of ORDER, so they share the harness node's 2 CPUs while the rest of the session runs
(the TIMEOUT job of tests/test_slurm_integration.py alone takes 60-90 s). A module's fixture then
calls ``jobs_of(submit_slurm_jobs)``: it waits until every job of the batch is final and completely
recorded in accounting (slurm_harness.wait_finished), so an ingest `--from-sacct --since start` of
any module sees no job still running or half-recorded, and returns the module's state, or raises
what its submission raised.

``start`` is a little before the first submission (naive UTC): the `--since` of every module's ingest.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from slurm_harness import USERS, as_user, slurm_status, utc_now, wait_finished

# Submission order: the 60-90 s TIMEOUT job first, so it gets a CPU at once; the 2-CPU job of
# test_slurm_savings last, so it blocks no 1-CPU job queued behind it.
ORDER = ("test_slurm_integration", "test_slurm_site", "test_slurm_pipes", "test_slurm_flags", "test_slurm_savings")
WAIT_S = 600   # the whole batch takes 2-3 minutes on an idle node

_start: datetime | None = None
_outcome: dict[str, object] = {}     # module name -> state, or the exception its submission raised
collected: list = []    # under pytest-xdist: the session's submitters, submitted as a worker starts (tests/conftest.py)
_job_ids: list[str] = []
_finished = False


def submit(submitters) -> None:
    """Submit the jobs of these modules' ``submit_slurm_jobs``, once each. Without a usable harness
    nothing is submitted: each module's fixture reports why (skip, or failure under CI)."""
    global _start, _finished
    todo = sorted({f.__module__: f for f in submitters if f.__module__ not in _outcome}.items(),
                  key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))
    if not todo or not slurm_status()[0]:
        return
    if _start is None:
        # The harness users' queue belongs to these tests: jobs left by an interrupted run would
        # hold the node's two CPUs for minutes.
        try:
            for user in USERS:
                as_user(user, "scancel", "--user", user)
        except Exception as exc:   # reported by each module's fixture, not as an error of the whole session
            _outcome.update((name, exc) for name, _ in todo)
            return
        _start = utc_now() - timedelta(seconds=5)
    for name, submit_jobs in todo:
        try:
            state, ids = submit_jobs(_start)
        except BaseException as exc:   # assert, pytest.fail/skip included: re-raised in the module's fixture
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            _outcome[name] = exc
            continue
        _outcome[name] = state
        _job_ids.extend(ids)
        _finished = False


def jobs_of(submit_jobs):
    """The state ``submit_jobs`` returned, once every job of the batch is final and recorded in accounting;
    its jobs are submitted now if they were not when the session started."""
    submit([submit_jobs])
    if submit_jobs.__module__ not in _outcome:
        raise RuntimeError(f"{submit_jobs.__module__}: the Slurm harness went away before its jobs were submitted")
    wait_all()
    outcome = _outcome[submit_jobs.__module__]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def wait_all() -> None:
    """Wait until the batch's jobs are final, for modules that run jobs of their own afterwards and
    need the node's CPUs (or a quiet account) for them."""
    global _finished
    if _job_ids and not _finished:
        try:
            wait_finished(list(_job_ids), timeout=WAIT_S)
        finally:
            _finished = True     # a batch that did not finish in WAIT_S fails one module, not each after a wait

