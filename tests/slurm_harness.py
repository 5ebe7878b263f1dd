"""Helpers for the tests that run against the real one-node Slurm of scripts/slurm-harness.sh.

Is it up (and why not), submit a batch script as a Unix user, wait until jobs are finished and
completely recorded in accounting, and run sacct with TZ=UTC.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

CLUSTER = os.environ.get("JOBSIGHT_SLURM_CLUSTER", "jobsight")
USERS = {"alice": "proj-astro", "bob": "proj-bio"}   # as scripts/slurm-harness.sh creates them
HARNESS = Path(__file__).resolve().parents[1] / "scripts" / "slurm-harness.sh"

# The columns our text dumps carry: wide, JobName early (so a '|' inside it shifts everything after).
SACCT_FORMAT = (
    "JobID,JobIDRaw,Cluster,JobName,User,UID,Group,Account,Partition,QOS,State,ExitCode,DerivedExitCode,"
    "Submit,Eligible,Start,End,Elapsed,ElapsedRaw,Timelimit,TimelimitRaw,NCPUS,NNodes,NTasks,"
    "ReqMem,ReqTRES,AllocTRES,TotalCPU,UserCPU,SystemCPU,MaxRSS,AveRSS,MaxVMSize,"
    "TRESUsageInTot,TRESUsageInMax,TRESUsageInAve,NodeList"
)
FINAL_STATES = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "REVOKED", "TIMEOUT",
}
SEP = "\x1f"  # unit separator: no job name contains it, so ground-truth parsing is unambiguous


class SlurmError(RuntimeError):
    pass


def workdir(prefix: str, keep: int = 3) -> Path:
    """A fresh /tmp/<prefix>* folder that the harness users' jobs can write to (mode 1777), after
    removing all but the newest ``keep`` older ones (left for a look after a failure)."""
    olds = [p for p in Path("/tmp").glob(f"{prefix}*") if p.is_dir() and not p.is_symlink()]
    for old in sorted(olds, key=lambda p: p.stat().st_mtime)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folder.chmod(0o1777)
    return folder


def run(cmd: list[str], *, input: str | None = None, timeout: float = 60, env: dict | None = None) -> str:
    """Run a command, return stdout; raise SlurmError with stderr when it fails."""
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})
    if proc.returncode != 0:
        raise SlurmError(f"{shlex.join(cmd)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def slurm_status() -> tuple[bool, str]:
    """(True, "") when the harness is up and usable by these tests, else (False, why not)."""
    if os.geteuid() != 0:
        return False, "real-Slurm tests need root (they submit as users alice/bob); run scripts/slurm-harness.sh start as root"
    for tool in ("sbatch", "sacct", "scontrol", "sinfo", "squeue", "sdiag", "scancel", "sacctmgr", "runuser"):
        if shutil.which(tool) is None:
            return False, f"{tool} not found: run scripts/slurm-harness.sh start"
    try:
        if "is UP" not in run(["scontrol", "ping"], timeout=15):
            return False, "slurmctld is not up (scontrol ping): run scripts/slurm-harness.sh start"
        states = run(["sinfo", "-h", "-N", "-o", "%T"], timeout=15).split()
        if not any(s.rstrip("*") in ("idle", "mixed", "allocated", "completing") for s in states):
            return False, f"no usable node (sinfo says {states}): scripts/slurm-harness.sh start resumes it"
        clusters = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=15).split()
        if CLUSTER not in clusters:
            return False, f"cluster {CLUSTER} not in slurmdbd (has {clusters}): run scripts/slurm-harness.sh start"
        for user in USERS:
            run(["id", "-u", user])
    except (SlurmError, subprocess.TimeoutExpired, OSError) as exc:
        first = str(exc).splitlines()[0]
        return False, f"Slurm harness not usable ({first}): run scripts/slurm-harness.sh start as root"
    return True, ""


def submit(user: str, script: str, *sbatch_args: str, workdir: Path) -> str:
    """sbatch SCRIPT (given on stdin, so the user need not read the repository) as USER; the job id.

    A login shell gives the job the user's own clean environment, not the test runner's.
    """
    cmd = "cd {} && sbatch --parsable {}".format(shlex.quote(str(workdir)), shlex.join(sbatch_args))
    out = run(["runuser", "-l", user, "-c", cmd], input=script).strip()
    return out.split(";")[0]   # --parsable prints "id" or "id;cluster"


def as_user(user: str, *cmd: str, timeout: float = 30) -> str:
    return run(["runuser", "-u", user, "--", *cmd], timeout=timeout)


def queue_state(job_id: str) -> str | None:
    """squeue's state of a job, or None once slurmctld has forgotten it."""
    proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=15)
    lines = proc.stdout.split()
    return lines[0] if proc.returncode == 0 and lines else None


def wait_running(job_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (state := queue_state(job_id)) != "RUNNING":
        if time.monotonic() > deadline:
            raise SlurmError(f"job {job_id} not RUNNING after {timeout}s (state {state})")
        time.sleep(0.5)


def sacct(*args: str, timeout: float = 60) -> str:
    """sacct with times printed in UTC."""
    return run(["sacct", *args], timeout=timeout, env={"TZ": "UTC"})


def sacct_rows(job_ids: list[str], fields: str = SACCT_FORMAT) -> list[dict[str, str]]:
    """sacct's own view of these jobs (and their steps, array tasks), one dict per row.

    Separated by \\x1f so names with '|' come back intact: the ground truth the ingest is compared to.
    """
    names = fields.split(",")
    out = sacct("--allusers", "--duplicates", "--parsable2", "--noheader", f"--delimiter={SEP}",
                "-j", ",".join(job_ids), "--format", fields)
    rows = []
    for line in out.splitlines():
        values = line.split(SEP)
        if len(values) != len(names):
            raise SlurmError(f"sacct line has {len(values)} fields, expected {len(names)}: {line!r}")
        rows.append(dict(zip(names, values)))
    return rows


def slurmctld_busy(job_ids: list[str]) -> tuple[list[str], int]:
    """(steps slurmctld still tracks whose job id starts with one of JOB_IDS' forms, records its
    slurmdbd agent still holds). A step's own accounting record (state, exit code, usage) is sent
    only once slurmctld has handled its end, and a queued record stays counted until slurmdbd has
    stored it, so (none, 0) checked before a sacct call means that call sees every step record."""
    steps = run(["squeue", "-h", "-s", "-o", "%i"], timeout=15).split()
    mine = [s for s in steps if s.split(".")[0] in job_ids or s.split(".")[0].split("_")[0] in job_ids]
    queued = 0
    for line in run(["sdiag"], timeout=15).splitlines():
        if line.strip().startswith("DBD Agent queue size:"):
            queued = int(line.split(":", 1)[1])
    return mine, queued


ACCOUNTING_FIELDS = "JobID,JobIDRaw,State,ExitCode,ElapsedRaw,NodeList,AllocTRES"


def accounting_gaps(job_ids: list[str], rows: list[dict[str, str]]) -> list[str]:
    """What sacct's ROWS (of ACCOUNTING_FIELDS) still lack for JOB_IDS, one phrase each; [] when
    every job is there and final, with its exit code and, if it ran, its billing.

    A job that ran has a node, an elapsed time or a step; a job cancelled while pending has none
    of them and never gets AllocTRES. A step's own empty ExitCode is not waited for: slurmctld
    records none for steps it ends itself (a job cancelled as its steps start) and sacct prints ''
    for good; a step whose record is merely late reads the job's state and 0:0 meanwhile, which
    slurmctld_busy tells apart."""
    seen = {r["JobID"].split(".")[0].split("_")[0] for r in rows}
    gaps = [f"{j} not in sacct" for j in sorted(set(job_ids) - seen)]
    with_steps = {r["JobIDRaw"].split(".")[0] for r in rows if "." in r["JobID"]}
    for r in rows:
        state = r["State"].split()[0] if r["State"] else "no State"
        if state not in FINAL_STATES:
            gaps.append(f"{r['JobID']} {state}")
        elif "." not in r["JobID"]:
            ran = (r["ElapsedRaw"] not in ("", "0") or r["NodeList"] not in ("", "None assigned")
                   or r["JobIDRaw"] in with_steps)
            if not r["ExitCode"]:
                gaps.append(f"{r['JobID']} no ExitCode")
            if ran and "billing=" not in r["AllocTRES"]:
                gaps.append(f"{r['JobID']} no billing in AllocTRES {r['AllocTRES']!r}")
    return gaps


def wait_finished(job_ids: list[str], timeout: float = 300) -> list[dict[str, str]]:
    """Wait until accounting is complete for every job, array task and step of JOB_IDS: all in a
    final state, with the fields accounting_gaps names, and slurmctld done with their steps (sacct
    shows a step whose own record has not arrived with its job's state and end, and 0:0)."""
    deadline = time.monotonic() + timeout
    while True:
        steps, queued = slurmctld_busy(job_ids)     # before sacct: see slurmctld_busy
        rows = sacct_rows(job_ids, ACCOUNTING_FIELDS)
        gaps = accounting_gaps(job_ids, rows)
        if steps:
            gaps.append(f"slurmctld still has steps {steps}")
        if queued:
            gaps.append(f"slurmdbd agent queue holds {queued} records")
        if not gaps:
            return rows
        if time.monotonic() > deadline:
            raise SlurmError(f"accounting of jobs {','.join(job_ids)} not complete after {timeout}s: "
                             + "; ".join(gaps[:20]) + (f"; and {len(gaps) - 20} more" if len(gaps) > 20 else ""))
        time.sleep(0.5)


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None)


def parse_sacct_time(text: str) -> datetime | None:
    """sacct's %FT%T (printed in UTC here), or None for Unknown/None/empty."""
    if text in ("", "Unknown", "None"):
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")


def tres(text: str) -> dict[str, str]:
    """'billing=33,cpu=1,gres/gpu:a100=1' -> {'billing': '33', 'cpu': '1', 'gres/gpu:a100': '1'}."""
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)
