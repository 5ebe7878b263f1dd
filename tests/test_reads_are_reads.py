"""Reads are reads: `job`, `flags`, `usage` and `report` read the published snapshot read-only,
never write the database or its settings, work for a user who may only read the files, and work
while another process writes; settings change only through a writer (`jobsight settings`).

The database is the crosscheck fixture (tests/test_metric_commands.py describes its four jobs)."""
from __future__ import annotations

import contextlib
import grp
import hashlib
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, jobsight_cmd, require_service

from jobsight.analytics import cli

CROSS = FIXTURES / "crosscheck"
SACCT = CROSS / "commands-sacct.txt"
SIDECAR = CROSS / "jobsight-xc-503-gpu01-20261115T230000Z-4711.csv"
READS = (["job", "503"], ["flags", "--limit", "0"], ["usage", "--by", "user"],
         ["report", "--week", "2026-W47", "--for", "user:alice", "--format", "md"])


def jobsight(*args: str, cwd: Path, rc: int = 0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "JOBSIGHT_CONFIG"}
    proc = subprocess.run([*jobsight_cmd(), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert proc.returncode == rc, f"jobsight {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def site(tmp_path):
    """A folder others may enter (not pytest's 0700 one), a config naming the read group, the
    database ingested with it."""
    work = Path(tempfile.mkdtemp(prefix="jobsight-reads-", dir="/tmp"))
    os.chmod(work, 0o755)
    group = grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name
    conf = work / "jobsight.toml"
    conf.write_text(f'[database]\ngroup = "{group}"\n')
    db = work / "c.duckdb"
    jobsight("ingest", "--db", str(db), "--config", str(conf), "--timezone", "UTC", str(SACCT), str(SIDECAR), cwd=work)
    yield work, db, conf, group
    shutil.rmtree(work, ignore_errors=True)


def in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def as_user(user: str, group: str, argv: list[str]) -> tuple[int, str, str]:
    """cli.main(argv) in a forked child running as ``user`` with only ``group``: no exec, so the
    interpreter and modules (imported first, as root) need not be readable by that user."""
    in_process(argv)   # import everything this command needs while root
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(grp.getgrnam(group).gr_gid)
            os.setuid(pwd.getpwnam(user).pw_uid)
            os.write(w, json.dumps(in_process(argv)).encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return tuple(json.loads(b"".join(chunks)))


def test_files_are_the_owners_and_the_groups_only(site):
    work, db, _, group = site
    gid = grp.getgrnam(group).gr_gid
    for p in (db, Path(f"{db}.snapshot")):
        st = p.stat()
        assert (oct(st.st_mode & 0o777), st.st_gid) == (oct(0o640), gid), p


def test_a_reader_in_the_group_reads(site):
    """nobody, in the database's group only, runs every read command; the output is root's."""
    if os.geteuid() != 0:
        require_service(False, "switches to the user nobody: run as root")
    work, db, _, group = site
    before = digest(db)
    for argv in READS:
        full = [argv[0], "--db", str(db), *argv[1:]]
        mine = in_process(full)
        theirs = as_user("nobody", group, full)
        assert theirs[0] == 0 and mine[0] == 0, (argv, theirs)
        assert theirs[1] == mine[1] and theirs[1].strip(), argv
    # not in the group: refused with the reason, exit 2
    rc, out, err = as_user("nobody", "nogroup" if group != "nogroup" else "daemon", ["job", "--db", str(db), "503"])
    assert rc == 2 and "Permission denied" in err, err
    assert digest(db) == before


def test_reads_while_a_writer_holds_the_database(site):
    """Another process holds the database open for writing: reads read the snapshot, and say
    nothing when it is current; without a snapshot they say why they cannot read, exit 2."""
    work, db, _, _ = site
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\n"
                               f"con = duckdb.connect({str(db)!r}); print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for argv in READS:
            proc = jobsight(argv[0], "--db", str(db), *argv[1:], cwd=work)
            assert proc.stdout.strip() and "snapshot" not in proc.stderr, proc.stderr
        Path(f"{db}.snapshot").unlink()
        proc = jobsight("job", "--db", str(db), "503", cwd=work, rc=2)
        assert "lock" in proc.stderr.lower() and "Traceback" not in proc.stderr, proc.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_snapshot_says_how_old_it_is(site):
    work, db, _, _ = site
    snap = Path(f"{db}.snapshot")
    os.utime(snap, (snap.stat().st_atime, snap.stat().st_mtime - 3600))
    proc = jobsight("job", "--db", str(db), "503", cwd=work)
    assert "reading the snapshot published" in proc.stderr and "has changed since" in proc.stderr, proc.stderr
    assert "503" in proc.stdout


def test_a_config_on_a_read_changes_nothing(site):
    """`flags --config other.toml` says the settings differ and reads with the stored ones; the
    database is byte for byte what it was. `jobsight settings` applies it; the next plain read
    recomputes nothing."""
    work, db, conf, group = site
    other = work / "other.toml"
    other.write_text(conf.read_text() + "[charging]\nfactor = 2\n")
    plain = jobsight("usage", "--db", str(db), "--by", "user", "--format", "json", cwd=work)
    before = digest(db), digest(Path(f"{db}.snapshot"))
    proc = jobsight("usage", "--db", str(db), "--by", "user", "--format", "json", "--config", str(other), cwd=work)
    assert proc.stdout == plain.stdout
    assert f"{other} differs from the settings" in proc.stderr and "charging.factor: 1 -> 2" in proc.stderr, proc.stderr
    assert (digest(db), digest(Path(f"{db}.snapshot"))) == before

    dry = jobsight("settings", "--db", str(db), "--config", str(other), "--dry-run", cwd=work)
    assert "charging.factor: 1 -> 2" in dry.stdout and "would rebuild the stored tables: " in dry.stdout
    assert (digest(db), digest(Path(f"{db}.snapshot"))) == before
    applied = jobsight("settings", "--db", str(db), "--config", str(other), cwd=work)
    assert "rebuilds the stored tables: " in applied.stdout and "published" in applied.stdout
    doubled = jobsight("usage", "--db", str(db), "--by", "user", "--format", "json", cwd=work)
    sbu = {r["user"]: r["sbu"] for r in json.loads(plain.stdout)}
    assert {r["user"]: r["sbu"] for r in json.loads(doubled.stdout)} == pytest.approx({u: 2 * v for u, v in sbu.items()})
    with duckdb.connect(f"{db}.snapshot", read_only=True) as con:
        refreshed = con.execute("SELECT value FROM metric_state WHERE name = 'last_refresh'").fetchone()
    after = digest(db)
    jobsight("flags", "--db", str(db), cwd=work)          # no config: the stored settings, nothing recomputed
    assert digest(db) == after
    with duckdb.connect(f"{db}.snapshot", read_only=True) as con:
        assert con.execute("SELECT value FROM metric_state WHERE name = 'last_refresh'").fetchone() == refreshed
        assert con.execute("SELECT value FROM setting WHERE name = 'charging.factor'").fetchone() == (2.0,)


def test_a_failed_publish_fails_every_ingest_until_it_succeeds(site):
    work, db, conf, _ = site
    snap = Path(f"{db}.snapshot")
    snap.unlink()
    snap.mkdir()          # the publish cannot rename its copy onto a folder
    for _ in range(2):    # the second brings nothing new: it still says the snapshot is not up to date
        proc = jobsight("ingest", "--db", str(db), "--timezone", "UTC", str(SACCT), cwd=work, rc=3)
        assert "metrics/snapshot not refreshed" in proc.stderr
    snap.rmdir()
    jobsight("ingest", "--db", str(db), "--timezone", "UTC", str(SACCT), cwd=work)
    assert snap.is_file()
    jobsight("job", "--db", str(db), "503", cwd=work)


def test_read_scope_own_shows_the_invoking_user_their_jobs(site):
    """`[database] read_scope = "own"`: alice, reading the file, gets her own jobs only, as on the
    dashboard; bob's job is "no job", exit 2; root still reads everything."""
    if os.geteuid() != 0:
        require_service(False, "switches to the user alice: run as root")
    try:
        pwd.getpwnam("alice")
    except KeyError:
        require_service(False, "no Unix user alice: run scripts/slurm-harness.sh start as root (it creates them)")
    work, db, conf, group = site
    own = work / "own.toml"
    own.write_text(conf.read_text() + 'read_scope = "own"\n')
    flags = ["flags", "--db", str(db), "--config", str(own), "--limit", "0", "--format", "json"]
    rc, out, err = as_user("alice", group, flags)
    assert rc == 0, err
    assert {r["user"] for r in json.loads(out)} == {"alice"}
    assert {r["user"] for r in json.loads(in_process(flags)[1])} == {"alice", "bob"}
    rc, out, err = as_user("alice", group, ["job", "--db", str(db), "--config", str(own), "504"])   # bob's
    assert rc == 2 and "no job '504'" in err, err
    rc, out, err = as_user("alice", group, ["job", "--db", str(db), "--config", str(own), "503", "--format", "json"])
    assert rc == 0 and json.loads(out)["user"] == "alice", err
    rc, out, err = as_user("alice", group, ["usage", "--db", str(db), "--config", str(own), "--by", "user", "--format", "json"])
    assert rc == 0 and [r["user"] for r in json.loads(out)] == ["alice"], err
    rc, out, err = as_user("alice", group, ["report", "--db", str(db), "--config", str(own), "--week", "2026-W47",
                                            "--for", "user:bob", "--format", "md"])
    assert rc == 2 and "you may report on user:alice" in err, err


def test_a_writer_holds_its_umask_only_while_open(tmp_path):
    """The database and the files DuckDB creates beside it (the write-ahead log) are the owner's
    only while a writer is open; the process's own umask is back once it closes."""
    from jobsight.analytics.store.database import Database
    before = os.umask(0o022)
    try:
        writer = Database.connect(tmp_path / "u.duckdb")
        assert os.umask(0o077) == 0o077          # held while open (read back by setting it again)
        writer.con.execute("CREATE TABLE t AS SELECT 1 AS x")
        wal = tmp_path / "u.duckdb.wal"
        assert not wal.exists() or wal.stat().st_mode & 0o077 == 0
        writer.close()
        assert os.umask(0o022) == 0o022          # restored
        assert (tmp_path / "u.duckdb").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(before)
