"""`jobsight watch --once`: each cycle ingests sacct (a fake `sacct` on PATH printing a saved dump
in the format `--from-sacct` asks for) and a spool of sidecar files, then notifies the owner of each
running job whose GPU has been idle for [watch] idle_hours: exactly one .eml per job, to the
right address, with the job's figures; never twice; none for an opted-out user or a busy job; the
per-user limit holds; a job name is data. Also: sacct down is logged and retried, and SIGTERM
stops `--every` promptly with exit code 0."""
from __future__ import annotations

import email
import email.policy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from jobsight.analytics.cli import main
from jobsight.collector.csv_schema import COLUMNS, HEADER

HDR = "JobID|JobIDRaw|Cluster|User|Account|Partition|State|Start|End|Elapsed|Timelimit|NCPUS|ReqMem|AllocTRES|JobName\n"
START = "2026-11-17T10:00:00"
# (job, user, GPU utilisation of each of its two GPUs, name): four hours of samples, every 5 minutes
JOBS = [
    ("101", "ann", (0, 80), "train\x1b[31m Bcc: evil@example.com"),
    ("102", "ann", (0, 0), "second"),
    ("103", "bob", (0, 70), "bob-idle"),
    ("104", "carl", (90, 75), "busy"),
]
CONFIG = """
[email]
from = "jobsight@example.org"
user_address = "{user}@example.org"
admins = ["hpc@example.org"]

[watch]
idle_hours = 2
max_per_user_per_day = %d
opt_out = ["bob"]
"""


def sacct_dump(state: str = "RUNNING") -> str:
    lines = [HDR]
    for job, user, _utils, name in JOBS:
        lines.append(f"{job}|{job}|c1|{user}|prj|gpu|{state}|{START}|Unknown|04:00:00|1-00:00:00|16|64G|"
                     f"billing=256,cpu=16,gres/gpu=2,mem=64G,node=1|{name}\n")
    return "".join(lines)


def sidecar(folder: Path, job: str, utils: tuple[int, int], minutes: range) -> Path:
    path = folder / f"jobsight-c1-{job}-n1.csv"
    rows = []
    for m in minutes:
        t = f"2026-11-17T{10 + m // 60:02d}:{m % 60:02d}:00.000Z"
        for device, gpu, util in (("cpu", "", 50), ("GPU-a", "0", utils[0]), ("GPU-b", "1", utils[1])):
            cell = dict.fromkeys(COLUMNS, "")
            cell.update(time=t, job_id=job, cluster="c1", host="n1", device=f"{device}-{job}" if gpu else device,
                        util_pct=str(util), mem_used_bytes=str(1 << 30), mem_total_bytes=str(64 << 30), gpu_index=gpu)
            rows.append(",".join(cell[c] for c in COLUMNS))
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fake sacct (and a failing scontrol) on PATH, a spool of sidecar files, a config."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dump = tmp_path / "sacct.txt"
    dump.write_text(sacct_dump())
    (bin_dir / "sacct").write_text(f"#!/bin/sh\n[ \"$1\" = --helpformat ] && exit 0\n"
                                   f"[ -e {tmp_path}/sacct-down ] && {{ echo 'slurmdbd down' >&2; exit 1; }}\n"
                                   f"cat {dump}\n")
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    spool = tmp_path / "spool"
    spool.mkdir()
    for job, _user, utils, _name in JOBS:
        sidecar(spool, job, utils, range(0, 241, 5))
    cfg = tmp_path / "jobsight.toml"
    cfg.write_text(CONFIG % 3)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("JOBSIGHT_CONFIG", raising=False)
    return {"tmp": tmp_path, "db": tmp_path / "jobs.duckdb", "eml": tmp_path / "eml", "spool": spool, "cfg": cfg,
            "dump": dump}


def watch(site, capsys, *extra: str, eml: bool = True) -> tuple[int, str, str]:
    """`jobsight watch --once` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main(["watch", "--db", str(site["db"]), "--config", str(site["cfg"]), "--spool", str(site["spool"]), "--once",
               *(["--eml-dir", str(site["eml"])] if eml else []), *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def emls(site) -> dict[str, email.message.EmailMessage]:
    out = {}
    for p in sorted(site["eml"].glob("*.eml")) if site["eml"].exists() else []:
        msg = email.message_from_bytes(p.read_bytes(), policy=email.policy.default)
        out[msg["X-Jobsight-Watch"]] = msg
    return out


def notices(site) -> list[tuple]:
    con = duckdb.connect(str(site["db"]), read_only=True)
    try:
        return con.execute('SELECT job_id_raw, "user", address, outcome FROM watch_notice ORDER BY job_id_raw').fetchall()
    finally:
        con.close()


def test_one_notice_per_idle_job_never_twice(site, capsys):
    (site["tmp"] / "sacct-down").touch()
    rc, _, err = watch(site, capsys)
    assert rc == 1
    assert "sacct failed, tried again next cycle" in err and "slurmdbd down" in err
    assert emls(site) == {}              # no notices on accounting that could not be brought up to date
    (site["tmp"] / "sacct-down").unlink()

    rc, _, err = watch(site, capsys)
    assert rc == 0, err
    got = emls(site)
    # ann's two idle jobs; not bob's (opted out), not carl's (busy)
    assert set(got) == {"c1/101", "c1/102"}
    msg = got["c1/101"]
    assert msg["To"] == "ann@example.org" and msg["From"] == "jobsight@example.org"
    assert msg["Subject"] == "[jobsight] Job 101: 1 GPU(s) idle for 4 h 00 min"
    assert not msg.is_multipart() and msg.get_content_type() == "text/plain"
    body = msg.get_content()
    assert "Your job 101 has had 1 of its 2 GPU(s) idle" in body
    assert "Idle GPUs:  0, idle for 4 h 00 min" in body
    # billing 256 for 4 h: 256 SBU per hour, half of it for one idle GPU of two
    assert "Burning:    256.0 SBU per hour, of which 128.0 SBU per hour pays for the idle GPU(s)" in body
    assert "scancel 101" in body and "opt_out" in body and "hpc@example.org" in body
    # the job name is data: its escape character shown, and no header came from it
    assert "Name:       train\\x1b[31m Bcc: evil@example.com" in body and "\x1b" not in body
    assert msg["Bcc"] is None and "evil" not in str(msg["To"])
    assert "2 GPU(s) idle" in got["c1/102"]["Subject"]
    assert notices(site) == [("101", "ann", "ann@example.org", "written"), ("102", "ann", "ann@example.org", "written")]
    assert "2 notice(s) sent" in err

    # the next cycle: one file grew (read on from where the last cycle stopped), the others are untouched
    grown = site["spool"] / "jobsight-c1-101-n1.csv"
    before = grown.read_text()
    sidecar(site["tmp"], "101", (0, 80), range(245, 251, 5))
    grown.write_text(before + (site["tmp"] / "jobsight-c1-101-n1.csv").read_text().split("\n", 1)[1])
    rc, _, err = watch(site, capsys)
    assert rc == 0, err
    assert "spool: 1 file(s) with new lines, 6 row(s) stored" in err
    assert len(list(site["eml"].glob("*.eml"))) == 2 and len(notices(site)) == 2
    assert "0 notice(s) sent" in err


def test_a_fifo_in_the_spool_is_named_not_read(site, capsys):
    """A named pipe where a sidecar file should be: never opened (it would block the cycle), and the
    log says which and why, every cycle, while the other files are read."""
    os.mkfifo(site["spool"] / "jobsight-c1-999-n1-20261101T000000Z-1.csv")
    rc, _, err = watch(site, capsys, "--no-sacct", "--dry-run")
    assert rc == 0
    assert f"{site['spool']}/jobsight-c1-999-n1-20261101T000000Z-1.csv: skipped: a FIFO (named pipe)" in err
    assert f"spool: {len(JOBS)} file(s) with new lines" in err


def test_rate_limit_and_dry_run(site, capsys):
    site["cfg"].write_text(CONFIG % 1)
    rc, out, err = watch(site, capsys, "--dry-run")
    assert rc == 0, err
    assert "would send: job 102 of ann" in out       # the most idle GPUs first: both of its two
    assert "held back: job 101 of ann" in out and "limit 1" in out
    assert not site["eml"].exists() and notices(site) == []
    assert watch(site, capsys)[0] == 0
    assert set(emls(site)) == {"c1/102"}
    con = duckdb.connect(str(site["db"]))
    con.execute("UPDATE watch_notice SET sent_at = sent_at - INTERVAL 25 HOUR")   # a day later
    con.close()
    assert watch(site, capsys)[0] == 0
    assert set(emls(site)) == {"c1/101", "c1/102"}


def test_a_notice_interrupted_by_a_crash_is_not_sent_again(site, capsys):
    """A watch killed between committing 'sending' and sending: the next one leaves that job alone."""
    assert watch(site, capsys, "--dry-run")[0] == 0         # creates the database, records nothing
    con = duckdb.connect(str(site["db"]))
    con.execute("INSERT INTO watch_notice (notice_id, cluster, job_id_raw, job_id, \"user\", address, sent_at, outcome) "
                "VALUES (nextval('watch_notice_id_seq'), 'c1', '101', '101', 'ann', 'ann@example.org', "
                "now()::TIMESTAMP, 'sending')")
    con.close()
    rc, _, err = watch(site, capsys)
    assert rc == 0, err
    assert set(emls(site)) == {"c1/102"}
    assert "notice of job 101 to ann@example.org was being sent at" in err and "is not sent again" in err


def test_ended_job_gets_no_notice(site, capsys):
    site["dump"].write_text(sacct_dump().replace("|RUNNING|2026-11-17T10:00:00|Unknown|",
                                                 "|COMPLETED|2026-11-17T10:00:00|2026-11-17T14:00:00|"))
    assert watch(site, capsys)[0] == 0
    assert emls(site) == {}


def test_smtp_refused_fails_the_cycle_not_the_service(site, capsys):
    rc, _, err = watch(site, capsys, "--smtp", "127.0.0.1:9", eml=False)
    assert rc == 1 and "notices failed, tried again next cycle: SMTP 127.0.0.1:9" in err
    assert notices(site) == []       # nothing attempted: the next cycle sends them


def start_every(site, *extra: str) -> tuple[subprocess.Popen, Path]:
    log = site["tmp"] / "watch.log"
    cmd = [sys.executable, "-m", "jobsight.analytics.cli", "watch", "--db", str(site["db"]), "--config", str(site["cfg"]),
           "--eml-dir", str(site["eml"]), "--every", "1h", *extra]
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, stderr=fh, cwd=site["tmp"]), log


def stop_promptly(proc: subprocess.Popen, log: Path) -> None:
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, log.read_text()
    assert time.monotonic() - t < 5, log.read_text()       # on a loaded 2-core machine; sacct would take 60 s
    assert log.read_text().rstrip().endswith("jobsight watch: stopped"), log.read_text()


def wait_for(what, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline and proc.poll() is None, "watch ended or took too long"
        time.sleep(0.1)


def test_sigterm_between_cycles_exits_promptly(site):
    proc, log = start_every(site, "--no-sacct", "--spool", str(site["tmp"] / "bin"))
    try:
        wait_for(lambda: "cycle done" in log.read_text(), proc)
        stop_promptly(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_during_a_cycle_stops_sacct_and_exits_promptly(site):
    """SIGTERM while sacct runs: sacct is killed, nothing more is done, exit 0."""
    sacct = site["tmp"] / "bin" / "sacct"
    started = site["tmp"] / "sacct-pid"
    sacct.write_text(f"#!/bin/sh\n[ \"$1\" = --helpformat ] && exit 0\necho $$ > {started}\nexec sleep 60\n")
    proc, log = start_every(site, "--spool", str(site["spool"]))
    try:
        wait_for(lambda: started.exists() and started.read_text().strip(), proc)
        stop_promptly(proc, log)
        pid = int(started.read_text())
        deadline = time.monotonic() + 5
        while _alive(pid):
            assert time.monotonic() < deadline, f"sacct ({pid}) still runs"
            time.sleep(0.1)
        assert "cycle done" not in log.read_text()      # the cycle was left, not finished
    finally:
        if proc.poll() is None:
            proc.kill()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_user_text_never_reaches_a_header():
    import datetime as dt

    from jobsight.analytics import watch
    from jobsight.analytics.reports.settings import ReportSettings
    s = ReportSettings(sender="jobsight@example.org", user_address="{user}@example.org")
    row = {"cluster": "c1", "job_id": "7", "job_id_raw": "7", "job_name": "a\nBcc: evil@example.com\r\nSubject: hi",
           "user": "ann", "account": "prj", "partition": "gpu", "start_time": dt.datetime(2026, 11, 17, 10),
           "ngpus": 1, "gpus_idle": 1, "idle_min": 150.0, "idle_max_min": 150.0, "idle_gpus": "0",
           "sbu_per_h": 128.0, "idle_sbu_per_h": 128.0, "last_sample": dt.datetime(2026, 11, 17, 12, 30)}
    raw = bytes(watch.message(row, s, "ann@example.org", 1, 2))
    head, _, body = raw.partition(b"\n\n")
    assert b"evil" not in head and b"Subject: [jobsight] Job 7: 1 GPU(s) idle for 2 h 30 min" in head
    assert b"Name:       a\\nBcc: evil@example.com\\r\\nSubject: hi\n" in body
    # a user name that would add a recipient or a header gets no address
    for user in ("ann\nBcc: evil", "ann,evil", "ann evil", "<ann>"):
        assert watch.address_of(user, s) is None
    assert watch.address_of("ann", s) == "ann@example.org"
