"""Trust judged by the whole path (docs/ingest.md#trust-model), as sshd's StrictModes does: a
root-owned file is the site's own only when every folder from / down to it, as named and as
resolved, is owned by root (or the ingesting user) and writable by no one else; nothing on a
pseudo file system is read. Each case stored accounting on the previous rule (owner of the file alone).

Real Unix users alice and bob (the Slurm harness creates them), looked up by name; root only."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import test_trust
from conftest import jobsight_cmd
from test_trust import content, home, ingest, query, sacct_lines, sidecar_csv, write

from jobsight.analytics.ingest.trust_path import PathJudge, pseudo_fs

uids = test_trust.uids   # the fixture: alice's and bob's uids (root and the harness users, or skip)


@pytest.fixture()
def db(tmp_path, uids):
    """A database holding bob's job 113 from a trusted spool."""
    spool = tmp_path / "spool"
    write(spool / "sacct.txt", sacct_lines({"113": "113"}, uids))
    path = tmp_path / "jobs.duckdb"
    ingest(path, spool)
    assert query(path, "SELECT job_id_raw, \"user\", billing FROM job") == [("113", "bob", 1.0)]
    return path


def forged(uids) -> str:
    """bob's job 113 rewritten to alice with billing 0, and a new job 9999 worth a fortune."""
    return sacct_lines({"113": "113:alice", "106": "9999:alice"}, uids, billing="99999999")


def test_proc_file_with_a_users_command_line_is_never_read(db, tmp_path, uids):
    """A root process whose argv[0] is a sacct dump: /proc/<pid>/cmdline is a root-owned "file"
    with the user's text. Named directly, as a folder, or through a link in alice's home: never read."""
    before = content(db)
    proc = subprocess.Popen([forged(uids), "60"], executable="/bin/sleep")
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        for _ in range(200):   # until the exec has happened (the child's cmdline is empty before)
            if cmdline.read_bytes():
                break
            time.sleep(0.01)
        assert cmdline.read_bytes().startswith(b"JobID|")   # the "file" holds the dump
        link = home(tmp_path, "alice", uids) / "proc"
        os.symlink(f"/proc/{proc.pid}", link)
        os.lchown(link, uids["alice"], uids["alice"])
        named = ingest(db, cmdline, rc=1, args=("--format", "sacct"))
        assert named["files"][0]["status"] == "unreadable"
        assert "pseudo file system" in named["files"][0]["error"] and "never read" in named["files"][0]["error"]
        for root in (Path(f"/proc/{proc.pid}"), link):
            out = ingest(db, root, rc=1)
            assert [f["status"] for f in out["files"]] == ["unreadable"], out   # not even listed
    finally:
        proc.kill()
        proc.wait()
    assert content(db) == before


def test_root_file_in_a_users_folder_is_the_users(db, tmp_path, uids):
    """A root-owned dump in alice's folder is there because alice put it there: read as hers
    (accounting never), and the summary says why."""
    before = content(db)
    mine = home(tmp_path, "alice", uids)
    write(mine / "sacct.txt", forged(uids))   # root-owned: alice had root's tool write it
    out = ingest(db, tmp_path / "home")
    (f,) = out["files"]
    assert f["status"] == "skipped"
    assert f"{mine.parent} is alice (uid {uids['alice']})'s" in f["error"] and "not read" in f["error"]
    assert content(db) == before


def test_link_from_a_users_home_to_a_root_folder(db, tmp_path, uids):
    """~alice/jobsight pointing at a root-owned folder: walked as alice's files, whatever is there."""
    before = content(db)
    elsewhere = tmp_path / "var" / "dumps"
    write(elsewhere / "sacct.txt", forged(uids))
    mine = home(tmp_path, "alice", uids)
    mine.rmdir()
    os.symlink(elsewhere, mine)
    os.lchown(mine, uids["alice"], uids["alice"])
    out = ingest(db, mine)
    (f,) = out["files"]
    assert f["status"] == "skipped" and "alice" in f["error"], f
    assert content(db) == before


@pytest.mark.parametrize("mode, whom", [(0o777, "everyone"), (0o775, "group")])
def test_root_folder_writable_by_others(db, tmp_path, uids, mode, whom):
    """A root-owned folder others may write to (not sticky): no one user answers for its files."""
    before = content(db)
    shared = tmp_path / "shared"
    write(shared / "sacct.txt", forged(uids))
    shared.chmod(mode)
    (f,) = ingest(db, shared)["files"]
    assert f["status"] == "skipped" and f"writable by {whom}" in f["error"], f
    assert content(db) == before


def test_trusted_paths_are_read_and_say_why(tmp_path, uids):
    """Root's file in root's folders, also below a sticky world-writable folder like /tmp: trusted."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    write(sticky / "loose.txt", sacct_lines({"114": "114"}, uids))   # root's file right in the sticky folder
    (f,) = ingest(tmp_path / "loose.duckdb", sticky / "loose.txt")["files"]
    assert f["status"] == "ingested" and f["trust"].startswith("trusted: "), f
    spool = sticky / "spool"
    write(spool / "sacct.txt", sacct_lines({"113": "113"}, uids))
    db = tmp_path / "jobs.duckdb"
    (f,) = ingest(db, spool)["files"]
    assert f["status"] == "ingested" and query(db, "SELECT job_id_raw, \"user\" FROM job") == [("113", "bob")]
    assert f["trust"].startswith("trusted: owned by root (uid 0), in folders only root or it can write"), f
    text = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(tmp_path / "b.duckdb"), str(spool)],
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "\n  trust: trusted: owned by root" in text.stdout, text.stdout + text.stderr


def test_root_sample_file_in_a_users_folder_counts_for_the_user_only(db, tmp_path, uids):
    """Samples in a root-owned file under alice's folder count only for alice's jobs."""
    mine = home(tmp_path, "alice", uids)
    csv = write(mine / "jobsight-jobsight-113-vm.csv", sidecar_csv("113", 100.0))   # bob's job, root's file
    (f,) = ingest(db, mine)["files"]
    assert (f["status"], f["stored"], f["rejected"]) == ("ingested", 0, 12), f
    assert f["trust"].startswith(f"read as alice (uid {uids['alice']})'s: {mine.parent} is alice"), f
    assert query(db, "SELECT count(*) FROM sample") == [(0,)]
    assert query(db, "SELECT count(*) FROM rejects WHERE source_file = ?", [str(csv)]) == [(12,)]


def test_judge_without_users(tmp_path):
    """The rule alone (no harness users needed): pseudo file systems, group-writable files."""
    assert pseudo_fs("/proc/1/environ") and pseudo_fs("/sys/kernel") and pseudo_fs("/dev/shm/x")
    assert pseudo_fs(str(tmp_path)) is None
    f = tmp_path / "a.txt"
    f.write_text("x")
    f.chmod(0o664)
    st = os.stat(f)
    v = PathJudge().file(str(f), st, str(f))
    if st.st_uid == 0 or st.st_uid == os.geteuid():
        assert v.refused and "writable by group" in v.refused
    f.chmod(0o644)
    assert PathJudge().file(str(f), os.stat(f), str(f)).refused is None


def test_file_names_are_printed_escaped(tmp_path):
    """A user's file name with a line break and an escape sequence cannot forge a summary line or
    drive the admin's terminal: the name is printed with visible escapes."""
    folder = tmp_path / "in"
    folder.mkdir()
    evil = folder / "x\nok.csv: sacct, 1 rows: 1 stored\x1b[31m.csv"
    evil.write_text("not a known format\n")
    proc = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(tmp_path / "e.duckdb"), str(folder)],
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "\x1b" not in out and "\\x1b[31m" in out, out
    assert not any(line.startswith("ok.csv") for line in out.splitlines()), out
    assert "x\\nok.csv" in out, out
