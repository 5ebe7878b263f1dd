"""`jobsight ingest --from-sacct`: run sacct here and ingest what it prints.

sacct runs with TZ=UTC (its timestamps carry no offset), --parsable2 with our own column set
(JobName last, so a name containing '|' is recovered), --duplicates (earlier runs of requeued
jobs) and steps. Without --since the window starts at the latest job end time already stored for
that cluster from sacct (incremental; re-reading a boundary job is harmless, the merge rule makes it
"unchanged"), or at the epoch on the first run. The window never starts after now: an end time
stored in the future (before ingest refused them, analytics/ingest/limits.py) is passed over, and
a --since in the future is refused, so one impossible time cannot make every later run read nothing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from jobsight.analytics.errors import UserError

# The --format of our sacct call; the parser reads them through the header line sacct prints.
SACCT_COLUMNS = ["JobID", "JobIDRaw", "Cluster", "Partition", "QOS", "Account", "Group", "User", "UID",
                 "Submit", "Eligible", "Start", "End", "Elapsed", "ExitCode", "State", "NNodes", "NCPUS",
                 "ReqCPUS", "NTasks", "ReqMem", "ReqTRES", "AllocTRES", "Timelimit", "NodeList", "TotalCPU",
                 "UserCPU", "SystemCPU", "MaxRSS", "AveRSS", "MaxVMSize", "TRESUsageInTot", "TRESUsageInMax",
                 "TRESUsageInAve", "Restarts", "JobName"]
EPOCH = "1970-01-01T00:00:00"
ALL_STATES = "BF,CA,CD,DL,F,NF,OOM,PD,PR,R,RQ,RS,RV,S,TO"


@dataclass
class SacctRun:
    argv: list[str]
    output: Path          # temporary file holding sacct's stdout; the caller deletes it
    since: str


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def last_end_time(con, cluster: Optional[str]) -> Optional[str]:
    """The latest end time stored from sacct that is not in the future (UTC, as sacct is asked)."""
    sql = "SELECT max(end_time) FROM job WHERE source = 'slurm-sacct' AND end_time <= ?"
    args: list = [_now()]
    if cluster:
        sql += " AND cluster = ?"
        args.append(cluster)
    v = con.execute(sql, args).fetchone()[0]
    return v.strftime("%Y-%m-%dT%H:%M:%S") if v else None


def _window_start(since: str) -> datetime:
    """--since (YYYY-MM-DD[THH:MM[:SS]], as `jobsight ingest` checks it) as a UTC time."""
    return datetime.fromisoformat(since.replace(" ", "T"))


def supported_columns(sacct: str) -> list[str]:
    """SACCT_COLUMNS less those this sacct does not know (Slurm 22.05 has no Restarts field and
    refuses the whole query over one unknown field). All of them when --helpformat says nothing."""
    try:
        proc = subprocess.run([sacct, "--helpformat"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return list(SACCT_COLUMNS)
    known = {w.lower() for w in proc.stdout.decode("utf-8", errors="replace").split()}
    if proc.returncode != 0 or not known:
        return list(SACCT_COLUMNS)
    return [c for c in SACCT_COLUMNS if c.lower() in known]


def build_argv(since: str, cluster: Optional[str], sacct: str = "sacct",
               columns: Optional[list[str]] = None) -> list[str]:
    # An explicit state list: without one, `-S/-E` leaves out jobs that were never eligible
    # (cancelled while held), which would be lost silently.
    argv = [sacct, "--allusers", "--duplicates", "--parsable2", "--noconvert",
            "--format", ",".join(columns or SACCT_COLUMNS), "-S", since, "-E", "now", "-s", ALL_STATES]
    if cluster:
        argv += ["-M", cluster]
    return argv


def run_sacct(since: Optional[str], cluster: Optional[str], con=None, timeout: float = 3600) -> SacctRun:
    sacct = shutil.which("sacct")
    if not sacct:
        raise UserError("--from-sacct: the `sacct` command was not found on PATH")
    if since is None:
        since = (last_end_time(con, cluster) if con is not None else None) or EPOCH
    elif _window_start(since) > _now():
        raise UserError(f"--since {since}: in the future (UTC); sacct would report nothing")
    argv = build_argv(since, cluster, sacct, supported_columns(sacct))
    env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="standard")
    fd, name = tempfile.mkstemp(prefix="jobsight-sacct-", suffix=".txt")
    try:
        with os.fdopen(fd, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(name)
        raise UserError(f"--from-sacct: running sacct failed: {exc}") from exc
    except BaseException:
        os.unlink(name)     # interrupted (SIGINT, watch stopping): no temporary file left behind
        raise
    if proc.returncode != 0:
        os.unlink(name)
        err = proc.stderr.decode("utf-8", errors="replace").strip()
        raise UserError(f"--from-sacct: sacct exited with {proc.returncode}: {err or '(no message)'}")
    return SacctRun(argv=argv, output=Path(name), since=since)
