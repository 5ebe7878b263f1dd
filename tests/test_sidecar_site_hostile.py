"""Site mode against a hostile job: the prolog and epilog run as root, and under LSF with the job's own
environment. The job's PYTHONPATH, current directory and PATH run nothing of its code as root, its
SLURM_* names do not decide whose job is sampled, and the scheduler is asked whose job it is.
(The wrapper's exit code for a command hidden behind an unsearchable PATH folder is at the end.)"""
from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_sidecar_run import csv_files
from test_sidecar_site import fake_scheduler, jobsight_sidecar

from jobsight.collector import isolate, site_identity, wrapper
from jobsight.collector.site_identity import Owner

DOC = ROOT / "docs" / "sidecar.md"
CONSOLE = ROOT / ".venv" / "bin" / "jobsight"
LSF_JOB = "4242"
# Imported by the sidecar after start-up (lazily or by its modules): the defence of a console-script
# start covers these. sitecustomize / usercustomize run at start-up, before any code of ours: only
# the isolated line (-I) keeps them out.
LATE = ("psutil", "pynvml", "json", "argparse", "select", "shutil", "subprocess", "tempfile", "typing")
START = ("sitecustomize", "usercustomize")
HOST = os.uname().nodename.split(".")[0]


def root_name() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def other_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")


def hostile_folder(tmp_path: Path, modules: tuple[str, ...]) -> Path:
    """The job's folder: Python modules and an nvidia-smi / bjobs on its PATH that leave a ran-NAME
    file behind when run."""
    evil = tmp_path / "evil"
    evil.mkdir()
    for name in modules:
        (evil / f"{name}.py").write_text(f"open({str(tmp_path / ('ran-' + name))!r}, 'w').write('ran')\n")
    for name in ("nvidia-smi", "bjobs"):
        (evil / name).write_text(f"#!/bin/sh\necho ran > {shlex.quote(str(tmp_path / ('ran-' + name)))}\necho root\n")
        (evil / name).chmod(0o755)
    return evil


def lsf_job_env(evil: Path, **extra: str) -> dict[str, str]:
    """What LSF's pre-exec gets: the job's environment, which exported another scheduler's names,
    plus LSF's own variables."""
    return {"PATH": f"{evil}:/usr/bin:/bin", "PYTHONPATH": str(evil), "HOME": str(evil), "BASH_ENV": str(evil / "env"),
            "LD_LIBRARY_PATH": str(evil), "PYTHONSTARTUP": str(evil / "json.py"), "JOBSIGHT_CLUSTER": "forged",
            "SLURM_JOB_ID": "999", "SLURM_JOB_UID": str(other_user().pw_uid), "SLURMD_NODENAME": "forged",
            "SLURM_CLUSTER_NAME": "forged", "PBS_O_LOGNAME": other_user().pw_name,
            "LSB_JOBID": LSF_JOB, "LSFUSER": root_name(), "LSB_MAX_NUM_PROCESSORS": "2", **extra}


def documented_lines() -> list[tuple[str, str]]:
    """(where, command) of each command in docs/sidecar.md's code blocks that runs the prolog or
    epilog; `where` is LSF's PRE_EXEC / POST_EXEC, else ""."""
    out, fenced = [], False
    for line in DOC.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        text = line.strip()
        if fenced and re.search(r"\b(prolog|epilog)\b", text) and not text.startswith(("#", "Prolog=", "Epilog=")):
            where, _, command = text.partition("=") if text.startswith(("PRE_EXEC", "POST_EXEC")) else ("", "", text)
            out.append((where.strip(), command.strip()))
    return out


def documented(where: str) -> list[str]:
    (line,) = [command for key, command in documented_lines() if key == where]
    return shlex.split(line)


def as_here(argv: list[str], spool: Path, sched_bin: str) -> list[str]:
    """A documented command with this checkout's interpreter, a temporary spool and the fake commands."""
    here = {"/opt/jobsight/bin/python3": sys.executable, "/opt/jobsight/bin/jobsight": str(CONSOLE)}
    argv = [here.get(argv[0], argv[0]), *argv[1:]]
    argv = [str(spool) if a == "/var/spool/jobsight" else a for a in argv]
    if "--scheduler-bin" in argv:
        argv[argv.index("--scheduler-bin") + 1] = sched_bin
    return argv


def wait_first_row(spool: Path, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not (csv_files(spool) and csv_files(spool)[0].read_text().count("\n") >= 2):
        assert time.monotonic() < deadline, "the sampler wrote no row"
        time.sleep(0.05)


def proc_environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if item)


def test_the_documented_lines_start_python_isolated():
    lines = [command for _where, command in documented_lines()]
    assert sum(" prolog " in ln for ln in lines) >= 3 and sum(" epilog " in ln for ln in lines) >= 2, lines
    for line in lines:
        argv = shlex.split(line)
        assert re.fullmatch(r"\S*/python3", argv[0]) and argv[1] == "-I", line
        assert argv[2:4] == ["-m", "jobsight.collector"] or argv[2].endswith("/collector/sidecar.py"), line


def test_the_hostile_folder_would_run(tmp_path):
    """The check below can fail: without isolation each module of the folder runs."""
    evil = hostile_folder(tmp_path, LATE + START)
    subprocess.run([sys.executable, "-c", "import json, argparse"], env={"PYTHONPATH": str(evil)}, check=True)
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-argparse", "ran-json", "ran-sitecustomize"]


@pytest.mark.parametrize("how", ["documented", "console script"])
def test_an_lsf_job_runs_nothing_as_root_and_its_slurm_names_are_ignored(tmp_path, how):
    evil = hostile_folder(tmp_path, LATE + START if how == "documented" else LATE)
    spool = tmp_path / "spool"
    sched_bin = fake_scheduler(tmp_path / "lsf-bin", "bjobs", f"echo {root_name()}")
    if how == "documented":
        prolog, epilog = (as_here(documented(where), spool, sched_bin) for where in ("PRE_EXEC", "POST_EXEC"))
    else:
        prolog = [str(CONSOLE), "sidecar", "prolog", "--scheduler-bin", sched_bin, "--spool", str(spool)]
        epilog = [str(CONSOLE), "sidecar", "epilog", "--spool", str(spool)]
    env = lsf_job_env(evil)
    res = subprocess.run([*prolog, "--interval", "0.2"], env=env, cwd=evil, capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr) == (0, "")
    marker = spool / f".site-{LSF_JOB}@{HOST}"
    info = json.loads(marker.read_text())
    wait_first_row(spool)   # the sampler has imported all it needs (psutil, pynvml, ...)
    clean = {"LSB_JOBID": LSF_JOB, "LSFUSER": root_name(), "LSB_MAX_NUM_PROCESSORS": "2",
             "PATH": isolate.SAFE_PATH, "LC_ALL": "C"}
    assert proc_environ(info["pid"]) == clean          # what its children (nvidia-smi) get too
    assert Path(f"/proc/{info['pid']}/cmdline").read_bytes().split(b"\0")[:2] == [sys.executable.encode(), b"-I"]
    res = subprocess.run(epilog, env=env, cwd=evil, capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr) == (0, "") and not marker.exists()
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []     # no module, nvidia-smi or bjobs of the job ran
    # whose job: LSF's, asked of bjobs with the clean environment; SLURM_* and JOBSIGHT_CLUSTER ignored
    asked = tmp_path / "lsf-bin" / "bjobs"
    assert Path(f"{asked}.args").read_text() == f"-noheader\n-o\nuser\n{LSF_JOB}\n"
    seen = dict(line.split("=", 1) for line in Path(f"{asked}.env").read_text().splitlines())
    seen.pop("PWD", None)   # the shell's own
    assert seen == clean
    (meta,) = spool.glob("*.meta.json")
    m = json.loads(meta.read_text())
    assert (m["job_id"], m["scheduler"], m["host"], m["cluster"], m["uid"], m["user"], m["mode"]) == \
        (LSF_JOB, "lsf", HOST, None, os.getuid(), root_name(), "site")
    assert [p.name.startswith(f"jobsight-nocluster-{LSF_JOB}-{HOST}-") for p in csv_files(spool)] == [True]
    assert all(row.split(",")[1:4] == [LSF_JOB, "", HOST] for row in csv_files(spool)[0].read_text().splitlines()[1:])


def test_the_plain_file_isolated_runs_nothing_of_the_job(tmp_path):
    """python3 -I collector/sidecar.py prolog: with -I its own folder is not on sys.path, the file
    puts the folder above it there to import its siblings."""
    evil = hostile_folder(tmp_path, LATE + START)
    spool = tmp_path / "spool"
    sched_bin = fake_scheduler(tmp_path / "lsf-bin", "bjobs", f"echo {root_name()}")
    plain = [sys.executable, "-I", str(ROOT / "collector" / "sidecar.py")]
    env = lsf_job_env(evil)
    res = subprocess.run([*plain, "prolog", "--scheduler-bin", sched_bin, "--spool", str(spool), "--interval", "0.2"],
                         env=env, cwd=evil, capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr) == (0, "")
    wait_first_row(spool)
    res = subprocess.run([*plain, "epilog", "--spool", str(spool)], env=env, cwd=evil, capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr) == (0, "")
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []
    assert [p.name.startswith(f"jobsight-nocluster-{LSF_JOB}-{HOST}-") for p in csv_files(spool)] == [True]


def test_bjobs_naming_another_user_starts_nothing(tmp_path):
    spool = tmp_path / "spool"
    sched_bin = fake_scheduler(tmp_path / "lsf-bin", "bjobs", f"echo {other_user().pw_name}")
    env = {"LSB_JOBID": LSF_JOB, "LSFUSER": root_name(), "SLURM_JOB_UID": str(other_user().pw_uid)}
    res = jobsight_sidecar("prolog", "--scheduler-bin", sched_bin, "--spool", str(spool), env=env)
    assert res.returncode == 0 and res.stderr.count("\n") == 1
    assert f"bjobs says its user is {other_user().pw_name!r}, not {root_name()!r}" in res.stderr
    assert res.stderr.rstrip().endswith("nothing started")
    assert not spool.exists() or os.listdir(spool) == []


@pytest.mark.parametrize("body, why", [
    (None, "no bjobs in"),
    ("exec sleep 30", "bjobs gave no answer within 3 s"),
    ("echo 'Job <4242> is not found' >&2; exit 255", "bjobs exited 255: 'Job <4242> is not found'"),
    ("sleep 8 & echo root", None),     # answered; the child it left behind does not hold the prolog
])
def test_a_check_that_cannot_run_samples_for_lsfuser_and_says_so(tmp_path, body, why):
    if body is None and site_identity.find_command("bjobs", None):
        pytest.skip("a real bjobs is on the fixed PATH")
    spool = tmp_path / "spool"
    sched_bin = str(tmp_path / "empty") if body is None else fake_scheduler(tmp_path / "lsf-bin", "bjobs", body)
    if body is None:
        os.mkdir(sched_bin)
    env = {"LSB_JOBID": LSF_JOB, "LSFUSER": root_name()}
    t0 = time.monotonic()
    res = jobsight_sidecar("prolog", "--scheduler-bin", sched_bin, "--spool", str(spool), "--gpus", "none", env=env)
    took = time.monotonic() - t0
    try:
        if why is None:
            assert (res.returncode, res.stderr) == (0, "") and took < site_identity.CHECK_TIMEOUT_S
        else:
            assert res.returncode == 0 and res.stderr.count("\n") == 1, res.stderr
            assert f"its user is not checked ({why}" in res.stderr
            assert f"sampling for {root_name()!r} (LSFUSER)" in res.stderr
            assert took < site_identity.CHECK_TIMEOUT_S + 5
        assert json.loads((spool / f".site-{LSF_JOB}@{HOST}").read_text())["uid"] == os.getuid()
    finally:
        jobsight_sidecar("epilog", "--spool", str(spool), env=env)


def test_pbs_takes_the_user_from_qstat_never_from_pbs_o_logname(tmp_path):
    spool = tmp_path / "spool"
    answer = (f"Job Id: 77.srv\n    Job_Name = job\n    Job_Owner = {root_name()}@login1\n"
              f"    Variable_List = PBS_O_LOGNAME={other_user().pw_name},PBS_O_HOME=/home/x\n")
    sched_bin = fake_scheduler(tmp_path / "pbs-bin", "qstat", f"printf %s {shlex.quote(answer)}")
    env = {"PBS_O_LOGNAME": other_user().pw_name, "SLURM_JOB_ID": "999", "SLURM_JOB_UID": str(other_user().pw_uid)}
    args = ("--scheduler", "pbs", "--job-id", "77.srv", "--spool", str(spool), "--gpus", "none")
    res = jobsight_sidecar("prolog", *args, "--scheduler-bin", sched_bin, env=env)
    try:
        assert (res.returncode, res.stderr) == (0, "")
        assert (tmp_path / "pbs-bin" / "qstat.args").read_text() == "-f\n77.srv\n"
        info = json.loads((spool / f".site-77.srv@{HOST}").read_text())
        assert (info["job_id"], info["uid"]) == ("77.srv", os.getuid())
    finally:
        jobsight_sidecar("epilog", "--scheduler", "pbs", "--job-id", "77.srv", "--spool", str(spool), env=env)
    # --user (the prologue's $2) that qstat contradicts: nothing started
    res = jobsight_sidecar("prolog", *args, "--user", other_user().pw_name, "--scheduler-bin", sched_bin, env=env)
    assert res.returncode == 0 and res.stderr.count("\n") == 1 and "nothing started" in res.stderr
    assert not (spool / f".site-77.srv@{HOST}").exists() and len(csv_files(spool)) == 1


def test_the_scheduler_is_decided_first_and_the_environment_kept_is_its_own():
    job = {"LSB_JOBID": "1", "PBS_JOBID": "2", "SLURM_JOB_ID": "3", "SLURM_JOB_UID": "0", "LD_PRELOAD": "/x.so",
           "PYTHONPATH": "/x", "HOME": "/x", "CUDA_VISIBLE_DEVICES": "0", "PATH": "/x"}
    assert isolate.decide_scheduler(job) == "lsf"
    assert isolate.decide_scheduler({k: v for k, v in job.items() if k != "LSB_JOBID"}) == "pbs"
    assert isolate.decide_scheduler({"SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}) == "slurm"
    assert isolate.decide_scheduler(job, "slurm") == "slurm" and isolate.decide_scheduler({}) == "none"
    assert isolate.clean_environ(job, "lsf") == {"LSB_JOBID": "1", "CUDA_VISIBLE_DEVICES": "0",
                                                 "PATH": isolate.SAFE_PATH, "LC_ALL": "C"}
    assert isolate.clean_environ(job, "slurm") == {"SLURM_JOB_ID": "3", "SLURM_JOB_UID": "0", "CUDA_VISIBLE_DEVICES": "0",
                                                   "PATH": isolate.SAFE_PATH, "LC_ALL": "C"}
    assert isolate.scheduler_option(["prolog", "--scheduler", "pbs"]) == "pbs"
    assert isolate.scheduler_option(["prolog", "--scheduler=lsf"]) == "lsf"


@pytest.mark.parametrize("scheduler, out, want", [
    ("slurm", "JobId=5 JobName=a UserId=alice(1001) GroupId=g(1)\n", ("alice", 1001)),
    # the job's name is the user's text: two owners are no answer
    ("slurm", "JobId=5 JobName=x UserId=root(0) UserId=alice(1001) GroupId=g(1)\n", None),
    ("slurm", "JobId=5 UserId=alice(1001) Comment= UserId=root(0)\n", None),
    ("pbs", "Job Id: 5.s\n    Job_Owner = alice@login\n", ("alice", None)),
    ("pbs", "Job Id: 5.s\n    Job_Owner = alice@login\n    Variable_List = A=1,\n    Job_Owner = root@x\n", None),
    ("lsf", "alice\n", ("alice", None)),
    ("lsf", "alice bob\n", None),
    ("lsf", "", None),
])
def test_only_a_single_owner_is_an_answer(scheduler, out, want):
    owner = site_identity._parse(scheduler, out)
    assert ((owner.user, owner.uid) if owner.problem is None else None) == want


def test_same_user_compares_uids_where_known():
    assert site_identity.same_user(0, "root", Owner("root"))
    assert not site_identity.same_user(0, "root", Owner(other_user().pw_name))
    assert not site_identity.same_user(0, None, Owner("x", other_user().pw_uid))
    assert site_identity.same_user(None, "ghost-user-x", Owner("ghost-user-x"))


# ---- the wrapper's exit code for a command it cannot run: as a shell's

def test_a_command_behind_an_unsearchable_path_folder_is_127_not_126(tmp_path):
    """As a user who cannot search a PATH folder: the command is not found (127), as bash says; a
    file that is found but cannot be run stays 126."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or not python:
        pytest.skip("needs root (to run as another user) and /usr/bin/python3")
    user = other_user()
    top = Path(tempfile.mkdtemp(prefix="jobsight-path-"))
    try:
        top.chmod(0o755)
        shutil.copytree(ROOT / "collector", top / "collector", ignore=shutil.ignore_patterns("__pycache__"))
        locked = top / "locked"
        locked.mkdir(mode=0o700)
        (locked / "jobsight-hidden-cmd").write_text("#!/bin/sh\nexit 0\n")
        (locked / "jobsight-hidden-cmd").chmod(0o755)
        plain = top / "plain"
        plain.mkdir(mode=0o755)
        (plain / "jobsight-not-executable").write_text("#!/bin/sh\nexit 0\n")
        (plain / "jobsight-not-executable").chmod(0o644)
        env = {"PATH": f"{locked}:{plain}:/usr/bin:/bin", "HOME": str(top)}

        def run(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run(argv, env=env, cwd=top, user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                  capture_output=True, text=True, timeout=30)

        shell = run("bash", "-c", "jobsight-hidden-cmd")
        assert shell.returncode == 127 and "command not found" in shell.stderr   # what the sidecar matches
        for cmd, code, why in (("jobsight-hidden-cmd", 127, "command not found"),
                               ("jobsight-no-such-cmd", 127, "command not found"),
                               ("jobsight-not-executable", 126, "Permission denied")):
            res = run(python, str(top / "collector" / "sidecar.py"), "run", "--gpus", "none", "--out", str(top / "out"), "--", cmd)
            assert (res.returncode, res.stderr) == (code, f"jobsight sidecar: cannot run {cmd}: {why}\n"), cmd
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_found_command_is_what_a_shell_finds(tmp_path):
    (tmp_path / "a").write_text("")
    assert wrapper.found_command("a", path=str(tmp_path)) and not wrapper.found_command("b", path=str(tmp_path))
    assert wrapper.found_command(str(tmp_path / "a")) and not wrapper.found_command(str(tmp_path / "b"))
    assert not wrapper.found_command("a", path="")   # "" is the current directory, as for a shell
    (tmp_path / "sub").mkdir()
    assert not wrapper.found_command("sub", path=str(tmp_path)) and wrapper.found_command(str(tmp_path / "sub"))
    assert not wrapper.found_command("", path=str(tmp_path))
