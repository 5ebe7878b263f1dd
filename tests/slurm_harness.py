"""Helpers for the tests that run against the real one-node Slurm of scripts/slurm-harness.sh.

Is it up (and why not), submit a batch script as a Unix user, wait until jobs are finished in
accounting (job and step rows in final states), and run sacct with TZ=UTC.
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
    for tool in ("sbatch", "sacct", "scontrol", "sinfo", "squeue", "scancel", "sacctmgr", "runuser"):
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


def wait_finished(job_ids: list[str], timeout: float = 300) -> list[dict[str, str]]:
    """Wait until every job, array task and step of JOB_IDS is in a final state in accounting."""
    deadline = time.monotonic() + timeout
    while True:
        rows = sacct_rows(job_ids, "JobID,JobIDRaw,State")
        seen = {r["JobID"].split(".")[0].split("_")[0] for r in rows}
        pending = [r for r in rows if r["State"].split()[0] not in FINAL_STATES]
        if not pending and seen >= set(job_ids):
            return rows
        if time.monotonic() > deadline:
            raise SlurmError(f"jobs not finished after {timeout}s: missing {set(job_ids) - seen}, "
                             f"not final {[(r['JobID'], r['State']) for r in pending]}")
        time.sleep(1)


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
