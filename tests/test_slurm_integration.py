"""Real Slurm: submit jobs of every kind to the harness (scripts/slurm-harness.sh), ingest what
sacct says about them (text dump, --from-sacct, --json dump) and compare the database, job by job,
with sacct's own answer.

All jobs are submitted at once, with the other Slurm modules' jobs, as the session starts
(tests/slurm_batch.py), and finish in parallel on the node's 2 CPUs while other tests run; the
TIMEOUT job dominates: a 1-minute limit that slurmctld enforces on its 30-second check, so about
60-90 s. Locally without root or without the harness the tests skip with the reason; under CI
(JOBSIGHT_REQUIRE_SERVICES=1) they fail.

JOBSIGHT_SAVE_SLURM_FIXTURES=1 copies the run's sacct text and JSON dumps into fixtures/slurm/.
"""
from __future__ import annotations

import csv
import json
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest
import slurm_batch
from conftest import FIXTURES, ROOT, require_service
from slurm_harness import (
    CLUSTER,
    SACCT_FORMAT,
    SlurmError,
    as_user,
    parse_sacct_time,
    queue_state,
    sacct,
    sacct_rows,
    slurm_status,
    submit,
    tres,
    wait_running,
)
from slurm_harness import (
    workdir as harness_workdir,
)

pytestmark = pytest.mark.slurm

JOBS_DIR = FIXTURES / "slurm" / "jobs"
PIPE_NAME = "pipe|name"


@dataclass
class Run:
    workdir: Path
    start: object                                    # naive UTC datetime, a little before the first submit
    ids: dict[str, str] = field(default_factory=dict)  # key -> job id as sbatch printed it
    sidecar_user: str = ""
    sidecar_out: Path | None = None
    text_dump: Path | None = None
    json_dump: Path | None = None
    truth: list[dict[str, str]] = field(default_factory=list)   # sacct rows (jobs, tasks, steps)


def jobsight(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = ROOT / ".venv" / "bin" / "jobsight"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def sidecar_command(user: str) -> str | None:
    """How USER can start the sidecar: the repo's jobsight when that user may run it (the venv's
    interpreter may live under /root), else the plain-file form with the system python3."""
    venv = ROOT / ".venv" / "bin" / "jobsight"
    try:
        as_user(user, str(venv), "sidecar", "--help")
        return str(venv)
    except (SlurmError, OSError):
        pass
    try:
        as_user(user, "/usr/bin/python3", str(ROOT / "collector" / "sidecar.py"), "--help")
        return f"/usr/bin/python3 {ROOT / 'collector' / 'sidecar.py'}"
    except (SlurmError, OSError):
        return None


def submit_slurm_jobs(start) -> tuple[Run, list[str]]:
    """Submit this module's jobs (tests/slurm_batch.py does, as the session starts)."""
    workdir = harness_workdir("jobsight-slurm-")   # job output of alice, bob and the sidecar
    r = Run(workdir=workdir, start=start)
    script = lambda name: (JOBS_DIR / name).read_text()  # noqa: E731
    out = ["-o", f"{workdir}/%j.out"]

    # The timeout job first, so it gets a CPU at once; its 60-90 s are the whole wait.
    r.ids["timeout"] = submit("bob", script("sleep-long.sh"), "-J", "timeout", "--time=1", *out, workdir=workdir)
    r.ids["cancel_running"] = submit("bob", script("sleep-long.sh"), "-J", "cancel-running", *out, workdir=workdir)
    wait_running(r.ids["cancel_running"])
    as_user("bob", "scancel", r.ids["cancel_running"])
    r.ids["cancel_pending"] = submit("alice", script("short.sh"), "-J", "cancel-pending", "--hold", *out, workdir=workdir)
    assert queue_state(r.ids["cancel_pending"]) == "PENDING"
    as_user("alice", "scancel", r.ids["cancel_pending"])

    r.ids["completed"] = submit("alice", script("completed.sh"), "-J", "completed", *out, workdir=workdir)
    r.ids["failed"] = submit("alice", script("failed.sh"), "-J", "failed", *out, workdir=workdir)
    r.ids["oom"] = submit("bob", script("oom.sh"), "-J", "oom", "--mem=64M", *out, workdir=workdir)
    r.ids["array"] = submit("alice", script("array.sh"), "-J", "array", "--array=1-4%2", "-o", f"{workdir}/%A_%a.out", workdir=workdir)
    r.ids["multistep"] = submit("bob", script("multistep.sh"), "-J", "multistep", *out, workdir=workdir)
    r.ids["gpu"] = submit("alice", script("gpu.sh"), "-J", "gpu", "-p", "gpu", "--gres=gpu:1", *out, workdir=workdir)
    r.ids["pipe"] = submit("alice", script("short.sh"), "-J", PIPE_NAME, *out, workdir=workdir)

    for user in ("alice", "root"):
        if (cmd := sidecar_command(user)) is not None:
            r.sidecar_user = user
            break
    else:
        pytest.fail("neither alice nor root can run the sidecar (.venv/bin/jobsight or collector/sidecar.py)")
    r.sidecar_out = workdir / "sidecar-out"
    r.sidecar_out.mkdir()
    shutil.chown(r.sidecar_out, user=r.sidecar_user)
    text = script("sidecar.sh").replace("@SIDECAR@", cmd).replace("@OUT@", str(r.sidecar_out))
    r.ids["sidecar"] = submit(r.sidecar_user, text, "-J", "sidecar", *out, workdir=workdir)
    return r, list(r.ids.values())


@pytest.fixture(scope="module")
def run() -> Run:
    up, reason = slurm_status()
    require_service(up, reason)
    r = slurm_batch.jobs_of(submit_slurm_jobs)     # every job of the batch final in accounting
    r.truth = sacct_rows(list(r.ids.values()))

    # The dumps users would make: TZ=UTC, wide columns, job and step rows, all users, since the start.
    since = r.start.strftime("%Y-%m-%dT%H:%M:%S")
    r.text_dump = r.workdir / "sacct-dump.txt"
    r.text_dump.write_text(sacct("--allusers", "--duplicates", "--parsable2", "--format", SACCT_FORMAT,
                                 "-S", since, "-j", ",".join(r.ids.values())))
    r.json_dump = r.workdir / "sacct-dump.json"
    r.json_dump.write_text(sacct("--allusers", "--duplicates", "--json", "-S", since, "-j", ",".join(r.ids.values())))
    if os.environ.get("JOBSIGHT_SAVE_SLURM_FIXTURES"):
        shutil.copy(r.text_dump, FIXTURES / "slurm" / "harness-sacct.txt")
        shutil.copy(r.json_dump, FIXTURES / "slurm" / "harness-sacct.json")
    return r


# ------------------------------------------------------------------------------------ ingested DBs

def ingest(db: Path, *args: str) -> subprocess.CompletedProcess:
    proc = jobsight("ingest", "--db", str(db), *args)
    assert proc.returncode == 0, f"jobsight ingest {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def db_text(run: Run) -> Path:
    db = run.workdir / "text.duckdb"
    ingest(db, "--format", "sacct", "--timezone", "UTC", str(run.text_dump))
    return db


@pytest.fixture(scope="module")
def db_from_sacct(run: Run) -> Path:
    # Trap seen on 22.05: plain `sacct -S T -E now` leaves out a job cancelled while held (never
    # eligible); it only shows with a --state filter. --from-sacct must still store it.
    db = run.workdir / "from-sacct.duckdb"
    ingest(db, "--from-sacct", "--since", run.start.strftime("%Y-%m-%dT%H:%M:%S"))
    return db


@pytest.fixture(scope="module")
def db_json(run: Run) -> Path:
    db = run.workdir / "json.duckdb"
    ingest(db, str(run.json_dump))   # detected as sacct-json
    return db


SOURCES = {"sacct-text": "db_text", "from-sacct": "db_from_sacct", "sacct-json": "db_json"}


@pytest.fixture(scope="module", params=list(SOURCES))
def db(request) -> Path:
    return request.getfixturevalue(SOURCES[request.param])


def query(db: Path, sql: str, *params) -> list[dict]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
    finally:
        con.close()


def jobs_by_raw(db: Path) -> dict[str, dict]:
    return {r["job_id_raw"]: r for r in query(db, "SELECT * FROM jobs WHERE cluster = ?", CLUSTER)}


def job_row(db: Path, t: dict[str, str]) -> dict:
    """The jobs row for sacct row T, or a failure that says which job is missing."""
    job = jobs_by_raw(db).get(t["JobIDRaw"])
    assert job is not None, f"job {t['JobID']} ({t['JobName']}, {t['State']}, Eligible {t['Eligible']}) is not in {db.name}"
    return job


def steps_by_key(db: Path) -> dict[tuple[str, str], dict]:
    return {(r["job_id_raw"], r["step_id"]): r for r in query(db, "SELECT * FROM steps WHERE cluster = ?", CLUSTER)}


# ------------------------------------------------------------------------- sacct's own answer, by hand

def truth_jobs(run: Run) -> dict[str, dict[str, str]]:
    """sacct job rows (array tasks included) by JobIDRaw."""
    return {t["JobIDRaw"]: t for t in run.truth if "." not in t["JobID"]}


def truth_job(run: Run, key: str) -> dict[str, str]:
    rows = [t for t in run.truth if t["JobID"] == run.ids[key]]
    assert len(rows) == 1, f"sacct has {len(rows)} job rows for {key} ({run.ids[key]})"
    return rows[0]


def split_state(text: str) -> tuple[str, int | None]:
    """'CANCELLED by 1001' -> ('CANCELLED', 1001)."""
    state, _, by = text.partition(" by ")
    return state.strip(), int(by) if by else None


def seconds(text: str) -> float | None:
    """sacct durations: [D-]HH:MM:SS, MM:SS.mmm (TotalCPU); None for empty."""
    if not text:
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [float(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def mem_bytes(text: str) -> int | None:
    """'316732K' -> 316732 * 1024 (sacct's suffixes are powers of 1024)."""
    if not text:
        return None
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    if text[-1] in mult:
        return round(float(text[:-1]) * mult[text[-1]])
    return int(text)


def assert_exit_code(db: Path, row: dict, t: dict[str, str]) -> None:
    """The exit code sacct prints. Slurm 22.05's --json reports {status: SUCCESS, return_code: 0}
    for jobs and steps that exited non-zero without a signal (FAILED 3:0 in the text): from that
    source a wrong '0:0' must not be stored as a fact; NULL with the reason kept is right.
    sacct prints none for a step slurmctld ended itself (a job cancelled as its steps started): NULL."""
    printed = t["ExitCode"] or None
    if db.name == "json.duckdb" and row["exit_code"] != printed:
        assert row["exit_code"] is None, f"{t['JobID']}: stored {row['exit_code']!r}, sacct says {t['ExitCode']}"
        assert "exit_code" in json.loads(row["null_reasons"] or "{}"), t["JobID"]
    else:
        assert row["exit_code"] == printed, t["JobID"]


def uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


# ----------------------------------------------------------------------------------------- the jobs

def test_sacct_reports_what_the_jobs_did(run: Run):
    """The harness itself: each job ended the way its script intends (else the comparisons are moot)."""
    state = {k: split_state(truth_job(run, k)["State"]) for k in run.ids if k != "array"}
    exit_code = {k: truth_job(run, k)["ExitCode"] for k in run.ids if k != "array"}
    assert state["completed"] == ("COMPLETED", None) and exit_code["completed"] == "0:0"
    assert state["failed"] == ("FAILED", None) and exit_code["failed"] == "3:0"
    assert state["timeout"][0] == "TIMEOUT"
    assert state["cancel_running"] == ("CANCELLED", uid("bob"))
    assert state["cancel_pending"] == ("CANCELLED", uid("alice"))
    # Never started: 22.05 prints Start = End = the cancel time, Elapsed 0, Eligible Unknown (held).
    assert truth_job(run, "cancel_pending")["ElapsedRaw"] == "0"
    assert truth_job(run, "cancel_pending")["Eligible"] == "Unknown"
    # OverMemoryKill on 22.05: FAILED 0:9; newer Slurm may say OUT_OF_MEMORY.
    assert (state["oom"][0], exit_code["oom"]) in (("FAILED", "0:9"), ("OUT_OF_MEMORY", "0:125")), state["oom"]
    assert state["multistep"] == ("COMPLETED", None)
    assert state["gpu"] == ("COMPLETED", None)
    assert tres(truth_job(run, "gpu")["AllocTRES"]).get("gres/gpu:a100") == "1"
    assert truth_job(run, "pipe")["JobName"] == PIPE_NAME
    assert state["sidecar"] == ("COMPLETED", None)
    tasks = [t for t in run.truth if t["JobID"].startswith(run.ids["array"] + "_") and "." not in t["JobID"]]
    assert sorted(t["JobID"] for t in tasks) == [f"{run.ids['array']}_{i}" for i in range(1, 5)]
    assert all(split_state(t["State"])[0] == "COMPLETED" for t in tasks)


def test_every_job_and_step_is_in_the_database(run: Run, db: Path):
    jobs = jobs_by_raw(db)
    steps = steps_by_key(db)
    missing_jobs = sorted(set(truth_jobs(run)) - set(jobs))
    if missing_jobs and db.name == "text.duckdb":
        # The only row a careful reader could not split is the one with '|' in its name; if it
        # is not stored it must be in rejects with its reason (see test_pipe_in_job_name).
        missing_jobs = [j for j in missing_jobs if truth_jobs(run)[j]["JobName"] != PIPE_NAME]
    truth = truth_jobs(run)
    assert [f"{j} ({truth[j]['JobName']}, {truth[j]['State']})" for j in missing_jobs] == []
    truth_steps = {tuple(t["JobIDRaw"].split(".", 1)) for t in run.truth if "." in t["JobID"]}
    pipe_raw = truth_job(run, "pipe")["JobIDRaw"]
    missing_steps = sorted(s for s in truth_steps - set(steps) if s[0] != pipe_raw)
    assert missing_steps == []


@pytest.mark.parametrize("key", ["completed", "failed", "timeout", "cancel_running", "cancel_pending",
                                 "oom", "multistep", "gpu", "sidecar"])
def test_job_matches_sacct(run: Run, db: Path, key: str):
    t = truth_job(run, key)
    job = job_row(db, t)
    state, by = split_state(t["State"])
    assert job["cluster"] == CLUSTER
    assert job["job_id"] == t["JobID"]
    assert job["job_name"] == t["JobName"]
    assert (job["user"], job["account"], job["partition"]) == (t["User"], t["Account"], t["Partition"])
    assert job["state"] == state
    if db.name == "json.duckdb":
        # sacct --json names the canceller (kill_request_user), it does not give the uid.
        assert job["cancelled_by_uid"] in (by, None)
    else:
        assert job["cancelled_by_uid"] == by
    assert_exit_code(db, job, t)
    assert job["submit_time"] == parse_sacct_time(t["Submit"])
    assert job["start_time"] == parse_sacct_time(t["Start"])
    assert job["end_time"] == parse_sacct_time(t["End"])
    assert job["elapsed_s"] == int(t["ElapsedRaw"])
    assert job["ncpus"] == int(t["NCPUS"])
    limit = t["TimelimitRaw"]
    assert job["timelimit_s"] == (int(limit) * 60 if limit.isdigit() else None)
    alloc = tres(t["AllocTRES"])
    if "billing" in alloc:
        assert job["billing"] == float(alloc["billing"])
    if "gres/gpu" in alloc:
        assert job["ngpus"] == int(alloc["gres/gpu"])
    else:
        assert job["ngpus"] in (0, None)


def test_states_and_exit_codes_by_hand(run: Run, db: Path):
    """The same facts as the scripts intend them, independent of sacct's formatting."""
    j = {k: job_row(db, truth_job(run, k)) for k in run.ids if k not in ("array", "pipe")}
    assert (j["completed"]["state"], j["completed"]["exit_code"]) == ("COMPLETED", "0:0")
    assert j["failed"]["state"] == "FAILED"
    assert j["failed"]["exit_code"] == ("3:0" if db.name != "json.duckdb" else None)  # see assert_exit_code
    assert j["timeout"]["state"] == "TIMEOUT"
    assert j["timeout"]["timelimit_s"] == 60
    assert j["timeout"]["elapsed_s"] >= 60
    assert j["cancel_running"]["state"] == "CANCELLED"
    if db.name != "json.duckdb":   # --json names the canceller, it has no uid
        assert j["cancel_running"]["cancelled_by_uid"] == uid("bob")
        assert j["cancel_pending"]["cancelled_by_uid"] == uid("alice")
    assert j["cancel_running"]["start_time"] is not None
    assert j["cancel_pending"]["state"] == "CANCELLED"
    assert j["cancel_pending"]["elapsed_s"] == 0
    assert j["cancel_pending"]["eligible_time"] is None   # held: sacct says Unknown
    assert j["oom"]["state"] in ("FAILED", "OUT_OF_MEMORY")
    assert j["oom"]["mem_req_bytes"] == 64 * 1024**2
    assert (j["multistep"]["state"], j["multistep"]["exit_code"]) == ("COMPLETED", "0:0")


def test_gpu_job(run: Run, db: Path):
    job = jobs_by_raw(db)[truth_job(run, "gpu")["JobIDRaw"]]
    assert job["partition"] == "gpu"
    assert (job["ngpus"], job["gpu_type"]) == (1, "a100")
    # TRESBillingWeights of partition gpu: CPU=1.0,Mem=0.25G,GRES/gpu=32 -> 1 + 200M x 0.25/G + 32 = 33.05
    assert job["billing"] == 33
    # partition cpu: CPU=1.0,Mem=0.25G -> 1 + 0.05 = 1.05
    assert jobs_by_raw(db)[truth_job(run, "completed")["JobIDRaw"]]["billing"] == 1


def test_array_with_throttle(run: Run, db: Path):
    jobs = jobs_by_raw(db)
    tasks = {t["JobIDRaw"]: t for t in truth_jobs(run).values() if t["JobID"].startswith(run.ids["array"] + "_")}
    assert len(tasks) == 4
    got = {raw: jobs[raw] for raw in tasks}
    assert sorted(g["array_task_id"] for g in got.values()) == ["1", "2", "3", "4"]
    for raw, g in got.items():
        assert g["array_job_id"] == run.ids["array"]
        assert g["job_id"] == tasks[raw]["JobID"]
        assert g["state"] == "COMPLETED"
        assert g["elapsed_s"] == int(tasks[raw]["ElapsedRaw"])
    # JobIDRaw differs from the printed id for all tasks but one (the one that keeps the array's id).
    assert len({g["job_id_raw"] for g in got.values()}) == 4


def test_steps_match_sacct(run: Run, db: Path):
    steps = steps_by_key(db)
    pipe_raw = truth_job(run, "pipe")["JobIDRaw"]
    checked = 0
    for t in run.truth:
        if "." not in t["JobID"]:
            continue
        raw, step_id = t["JobIDRaw"].split(".", 1)
        if raw == pipe_raw and (raw, step_id) not in steps:
            continue
        s = steps[(raw, step_id)]
        state, by = split_state(t["State"])
        assert s["state"] == state, t["JobID"]
        assert_exit_code(db, s, t)
        if db.name != "json.duckdb":
            assert s["cancelled_by_uid"] == by, t["JobID"]
        assert s["elapsed_s"] == int(t["ElapsedRaw"]), t["JobID"]
        assert s["start_time"] == parse_sacct_time(t["Start"]), t["JobID"]
        assert s["end_time"] == parse_sacct_time(t["End"]), t["JobID"]
        if t["MaxRSS"]:
            assert s["max_rss_bytes"] == mem_bytes(t["MaxRSS"]), t["JobID"]
        if t["TotalCPU"]:
            assert s["cpu_time_s"] == pytest.approx(seconds(t["TotalCPU"]), abs=0.01), t["JobID"]
        checked += 1
    assert checked >= 20


def test_multistep_and_oom_steps(run: Run, db: Path):
    steps = steps_by_key(db)
    ms = truth_job(run, "multistep")["JobIDRaw"]
    assert (steps[(ms, "0")]["state"], steps[(ms, "0")]["exit_code"]) == ("COMPLETED", "0:0")
    assert steps[(ms, "1")]["state"] == "FAILED"
    assert steps[(ms, "1")]["exit_code"] == ("2:0" if db.name != "json.duckdb" else None)  # see assert_exit_code
    assert {"batch", "extern", "0", "1"} <= {sid for (raw, sid) in steps if raw == ms}
    oom = truth_job(run, "oom")["JobIDRaw"]
    batch = steps[(oom, "batch")]
    # The kill happened because the batch step's ~300 MiB exceeded 64 MiB; sacct saw the peak.
    assert batch["max_rss_bytes"] > 64 * 1024**2
    timeout = truth_job(run, "timeout")["JobIDRaw"]
    # SIGTERM at the limit: the batch step reads CANCELLED 0:15 or FAILED 15:0, depending on timing.
    assert steps[(timeout, "batch")]["state"] in ("CANCELLED", "FAILED")


def test_null_words_keep_their_reason(run: Run, db_text: Path):
    """Timelimit UNLIMITED (partition MaxTime=INFINITE) and Partition_Limit (the held job) -> NULL + reason."""
    jobs = jobs_by_raw(db_text)
    assert truth_job(run, "cancel_pending")["Timelimit"] == "Partition_Limit"
    # Which jobs read UNLIMITED varies: one started by the backfill scheduler may record 365-00:00:00.
    words = [t for t in truth_jobs(run).values() if t["Timelimit"] in ("UNLIMITED", "Partition_Limit")]
    assert len(words) >= 5
    for t in words:
        job = jobs[t["JobIDRaw"]]
        assert job["timelimit_s"] is None, t["JobID"]
        assert json.loads(job["null_reasons"]).get("timelimit_s") == t["Timelimit"], t["JobID"]


def test_pipe_in_job_name(run: Run, db_text: Path):
    """A name with the delimiter: recovered (the other columns allow it), or the line rejected with a reason."""
    t = truth_job(run, "pipe")
    job = jobs_by_raw(db_text).get(t["JobIDRaw"])
    if job is not None:
        assert job["job_name"] == PIPE_NAME
        assert job["state"] == "COMPLETED"
        assert job["elapsed_s"] == int(t["ElapsedRaw"])
    else:
        rejects = query(db_text, "SELECT * FROM rejects WHERE raw LIKE ?", f"%{PIPE_NAME}%")
        assert rejects, "the job with '|' in its name is neither stored nor rejected"
        assert all(r["reason"] and r["line_no"] for r in rejects)


def test_text_ingest_accounts_for_every_line(run: Run, db_text: Path):
    lines = run.text_dump.read_text().splitlines()
    data_lines = len(lines) - 1   # the header
    (log,) = query(db_text, "SELECT * FROM ingests")
    assert log["format"] == "sacct"
    assert log["rows_in"] == data_lines
    assert log["stored"] + log["updated"] + log["unchanged"] + log["rejected"] + log["dropped"] == data_lines
    # Nothing a careful reader would parse is rejected: at most the '|' job's lines.
    for r in query(db_text, "SELECT * FROM rejects"):
        assert PIPE_NAME in (r["raw"] or ""), r


def test_reingest_changes_nothing(run: Run, db_text: Path):
    before = query(db_text, "SELECT count(*) AS n FROM jobs")[0]["n"]
    ingest(db_text, "--format", "sacct", "--timezone", "UTC", str(run.text_dump))
    assert query(db_text, "SELECT count(*) AS n FROM jobs")[0]["n"] == before
    logs = query(db_text, "SELECT * FROM ingests ORDER BY ingest_id")
    assert sum(rec["stored"] + rec["updated"] for rec in logs[1:]) == 0


def test_from_sacct_again_stores_nothing_new(run: Run, db_from_sacct: Path):
    before = query(db_from_sacct, "SELECT count(*) AS n FROM jobs")[0]["n"]
    ingest(db_from_sacct, "--from-sacct", "--since", run.start.strftime("%Y-%m-%dT%H:%M:%S"))
    assert query(db_from_sacct, "SELECT count(*) AS n FROM jobs")[0]["n"] == before
    last = query(db_from_sacct, "SELECT * FROM ingests ORDER BY ingest_id DESC LIMIT 1")[0]
    assert last["stored"] == 0 and last["updated"] == 0


# ---------------------------------------------------------------------------------------- sidecar

def sidecar_csvs(run: Run) -> list[Path]:
    return sorted(p for p in run.sidecar_out.glob("*.csv"))


def test_sidecar_in_a_slurm_job_names_the_job_and_cluster(run: Run):
    files = sidecar_csvs(run)
    assert len(files) == 1, f"expected one sidecar CSV in {run.sidecar_out}: {list(run.sidecar_out.iterdir())}"
    job_id = run.ids["sidecar"]
    assert files[0].name.startswith(f"jobsight-{CLUSTER}-{job_id}-")
    with files[0].open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    cpu = [r for r in rows if r["device"] == "cpu"]
    assert len(cpu) >= 3, f"{len(cpu)} cpu rows for a 5 s command at --interval 1"
    assert {r["job_id"] for r in rows} == {job_id}
    assert {r["cluster"] for r in rows} == {CLUSTER}
    meta = json.loads(files[0].with_name(files[0].name[: -len(".csv")] + ".meta.json").read_text())
    assert (str(meta["job_id"]), meta["cluster"], meta["scheduler"]) == (job_id, CLUSTER, "slurm")


def test_sidecar_samples_join_the_accounting(run: Run, db_text: Path, tmp_path: Path):
    db = tmp_path / "joined.duckdb"
    shutil.copy(db_text, db)
    ingest(db, str(run.sidecar_out))
    (row,) = query(db, """
        SELECT j.job_id, j.state, count(s.time) AS n
        FROM jobs j JOIN samples s USING (cluster, job_id_raw)
        WHERE s.device = 'cpu' GROUP BY ALL""")
    assert (row["job_id"], row["state"]) == (run.ids["sidecar"], "COMPLETED")
    assert row["n"] >= 3


def test_text_and_json_in_either_order_give_one_database(run: Run):
    """This run's own text and JSON dumps of the same jobs: the same tables in both orders, with the
    exit codes and cancellers sacct text printed (Slurm 22.05's JSON loses them)."""
    from test_ingest_order import UTC, _build, _differences
    text_json = _build([(run.text_dump, UTC), (run.json_dump, UTC)])
    json_text = _build([(run.json_dump, UTC), (run.text_dump, UTC)])
    assert not _differences(text_json, json_text)
    jobs = {k[1]: v for k, v in text_json["job"].items() if k[0] == CLUSTER}
    assert jobs[run.ids["failed"]]["exit_code"] == "3:0"
    assert jobs[run.ids["cancel_running"]]["cancelled_by_uid"] == pwd.getpwnam("bob").pw_uid
