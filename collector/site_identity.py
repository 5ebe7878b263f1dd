"""Whose job a site prolog samples: the job id and user from the running scheduler's own variables
only, checked against the scheduler itself where it answers.

    Slurm  SLURM_JOB_ID, SLURM_JOB_UID   scontrol show job -o JOBID   UserId=name(uid)
    PBS    PBS_JOBID or --job-id, --user  qstat -f JOBID               Job_Owner = name@host
    LSF    LSB_JOBID[LSB_JOBINDEX], LSFUSER  bjobs -noheader -o user JOBID

Never another scheduler's names (a job under LSF may export SLURM_JOB_UID), never PBS_O_LOGNAME
(the submitter's environment, copied). The command runs with the clean environment, from the
site's --scheduler-bin DIR or the fixed PATH, for CHECK_TIMEOUT_S at most. Standard library only.
"""
from __future__ import annotations

import os
import re

from .isolate import JOB_ID_VARS, SAFE_PATH

CHECK_TIMEOUT_S = 3.0
MAX_ANSWER = 1 << 20     # bytes of the command's output read (qstat -f lists the job's variables)
USER_VARS = {"slurm": "SLURM_JOB_UID", "lsf": "LSFUSER"}   # PBS sets none: the prologue's $2 (--user)
COMMANDS = {"slurm": "scontrol", "pbs": "qstat", "lsf": "bjobs"}
# exactly one match is an answer: the job's name, comment or work dir (the user's text) can hold
# another "UserId=..." in scontrol's line, or a "Job_Owner = ..." line in qstat's variable list
_SLURM_OWNER = re.compile(r"(?:^|\s)UserId=([^\s(]*)\((\d+)\)(?=\s|$)")
_PBS_OWNER = re.compile(r"^\s*Job_Owner = ([^\s@]+)@\S*\s*$", re.M)


class Owner:
    """The scheduler's answer: `user` (name) and `uid` when it says, else `problem` (why not)."""
    __slots__ = ("user", "uid", "problem")

    def __init__(self, user: str | None = None, uid: int | None = None, problem: str | None = None) -> None:
        self.user, self.uid, self.problem = user, uid, problem


def job_id_from_env(env: dict[str, str], scheduler: str) -> str | None:
    var = JOB_ID_VARS.get(scheduler)
    value = env.get(var, "").strip() if var else ""
    return value or None


def user_from_env(env: dict[str, str], scheduler: str) -> str | None:
    var = USER_VARS.get(scheduler)
    value = env.get(var, "").strip() if var else ""
    return value or None


def find_command(name: str, bin_dir: str | None) -> str | None:
    for folder in ([bin_dir] if bin_dir else []) + SAFE_PATH.split(":"):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _argv(scheduler: str, command: str, job_id: str, env: dict[str, str]) -> list[str]:
    if scheduler == "slurm":
        return [command, "show", "job", "-o", job_id]
    if scheduler == "pbs":
        return [command, "-f", job_id]
    index = env.get("LSB_JOBINDEX", "").strip()
    return [command, "-noheader", "-o", "user", f"{job_id}[{index}]" if index not in ("", "0") else job_id]


def _parse(scheduler: str, out: str) -> Owner:
    if scheduler == "slurm":
        found = _SLURM_OWNER.findall(out)
        if len(found) == 1:
            return Owner(found[0][0] or None, int(found[0][1]))
    elif scheduler == "pbs":
        found = _PBS_OWNER.findall(out)
        if len(found) == 1:
            return Owner(found[0])
    else:
        words = out.split()
        if len(words) == 1:
            return Owner(words[0])
    return Owner(problem=f"no single owner in its answer {out.strip()[:80]!r}")


def ask_owner(scheduler: str, job_id: str, env: dict[str, str], bin_dir: str | None, timeout: float = CHECK_TIMEOUT_S) -> Owner:
    """Ask the scheduler who owns the job. A problem (no command, timeout, error, an unclear answer)
    is returned, never raised."""
    import signal
    import subprocess
    import tempfile
    name = COMMANDS[scheduler]
    command = find_command(name, bin_dir)
    if command is None:
        return Owner(problem=f"no {name} in {', '.join(([bin_dir] if bin_dir else []) + SAFE_PATH.split(':'))}")
    argv = _argv(scheduler, command, job_id, env)
    # files, not pipes: a child the command left behind cannot keep the prolog waiting for EOF;
    # its own session: the whole group is killed at the timeout
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    close_fds=True, cwd="/", start_new_session=True)
        except OSError as exc:
            return Owner(problem=f"cannot run {command}: {exc.strerror or exc}")
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            return Owner(problem=f"{name} gave no answer within {timeout:g} s")
        text = {}
        for key, f in (("out", out), ("err", err)):
            f.seek(0)
            text[key] = f.read(MAX_ANSWER).decode("utf-8", "replace")
    if code != 0:
        lines = (text["err"].strip() or text["out"].strip()).splitlines()
        return Owner(problem=f"{name} exited {code}: {(lines[0] if lines else '')[:120]!r}")
    return _parse(scheduler, text["out"])


def same_user(uid: int | None, user: str | None, owner: Owner) -> bool:
    """The scheduler's owner is the user the variables name (by uid where both are known)."""
    import pwd
    owner_uid = owner.uid
    if owner_uid is None and owner.user:
        try:
            owner_uid = pwd.getpwnam(owner.user).pw_uid
        except KeyError:
            pass
    if uid is not None and owner_uid is not None:
        return uid == owner_uid
    return user is not None and user == owner.user
