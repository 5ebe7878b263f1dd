"""What a folder walk reads: a FIFO, socket or device in an ingested folder is listed as skipped and
never opened (a FIFO would block `jobsight ingest` for ever); symlinks out of the folder given are
not followed, links inside it are followed once, a broken link is a note. Skips do not fail the run.

A FIFO is watched by a thread that keeps trying to open it for writing without blocking: that only
succeeds while something has it open for reading, so `opened` says whether ingest ever opened it,
and the watcher's open also wakes a blocked reader, so a regression fails instead of hanging."""
from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from jobsight.analytics import cli
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import walk as ingest_walk
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
UTC = ParseOptions(timezone="UTC")


class FifoWatch:
    def __init__(self, path: Path):
        self.path, self.opened, self._stop = path, False, threading.Event()
        os.mkfifo(path)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno in (errno.ENXIO, errno.ENOENT), exc   # ENXIO: nobody has it open to read
            else:
                self.opened = True
                os.close(fd)       # a blocked reader now reads end-of-file and goes on
            time.sleep(0.005)

    def __enter__(self) -> FifoWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def ingest_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = cli.main(["ingest", "--db", str(argv[0]), "--json", "--quiet", "--timezone", "UTC", *argv[1:]])
    return rc, json.loads(capsys.readouterr().out)


def by_name(doc: dict) -> dict[str, tuple[str, str | None]]:
    return {Path(f["path"]).name: (f["status"], f["error"]) for f in doc["files"]}


def jobs(dbfile: Path) -> list[str]:
    con = db.connect(dbfile)
    try:
        return [r[0] for r in con.execute("SELECT job_id_raw FROM jobs ORDER BY 1").fetchall()]
    finally:
        con.close()


@pytest.fixture
def folder(tmp_path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(FIX / "running-3001.txt", d / "a.txt")
    return d


def test_fifo_in_a_folder_is_skipped_never_opened_and_the_run_succeeds(tmp_path, folder, capsys):
    with FifoWatch(folder / "b-stuck.txt") as fifo:
        rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(folder))
    assert not fifo.opened
    assert rc == 0
    assert by_name(doc) == {"a.txt": ("ingested", None),
                            "b-stuck.txt": ("skipped", "a FIFO (named pipe), not a regular file: not read")}
    assert (doc["failed"], doc["skipped"], doc["totals"]["stored"]) == (0, 1, 1)


def test_fifo_skip_in_the_text_summary(tmp_path, folder, capsys):
    with FifoWatch(folder / "b-stuck.txt") as fifo:
        rc = cli.main(["ingest", "--db", str(tmp_path / "j.duckdb"), "--quiet", "--timezone", "UTC", str(folder)])
    out = capsys.readouterr().out.splitlines()
    assert not fifo.opened and rc == 0
    assert f"{folder / 'b-stuck.txt'}: skipped: a FIFO (named pipe), not a regular file: not read" in out
    assert out[-1] == "total: 2 files, 1 stored, 0 updated, 0 rejected, 1 skipped"


@pytest.mark.parametrize("fmt", [None, "sacct"])
def test_fifo_named_on_the_command_line_is_refused(tmp_path, capsys, fmt):
    with FifoWatch(tmp_path / "named.txt") as fifo:
        rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", *(["--format", fmt] if fmt else []),
                              str(tmp_path / "named.txt"))
    assert not fifo.opened
    assert rc == 1 and doc["failed"] == 1 and doc["skipped"] == 0
    assert by_name(doc) == {"named.txt": ("unreadable", "a FIFO (named pipe), not a regular file: not read")}


def test_socket_and_device_in_a_folder_are_skipped(tmp_path, folder, capsys):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "c.sock"))
    try:
        try:
            os.mknod(folder / "d-null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
            device = True
        except OSError:    # not root, or a container without CAP_MKNOD
            device = False
        rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(folder))
    finally:
        sock.close()
    got = by_name(doc)
    assert rc == 0 and got["a.txt"] == ("ingested", None)
    assert got["c.sock"] == ("skipped", "a socket, not a regular file: not read")
    if device:
        assert got["d-null"] == ("skipped", "a character device, not a regular file: not read")
    assert doc["skipped"] == 1 + device


def test_symlinks_out_of_the_folder_are_not_followed(tmp_path, folder, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(FIX / "completed-3001.txt", outside / "secret.txt")
    shutil.copy(FIX / "mixed-jobs.txt", outside / "more.txt")
    (folder / "link-file.txt").symlink_to(outside / "secret.txt")
    (folder / "link-dir").symlink_to(outside)
    (folder / "up").symlink_to("..")                     # relative, still outside
    rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(folder))
    real = os.path.realpath(folder)
    assert rc == 0 and doc["failed"] == 0 and doc["skipped"] == 3
    assert by_name(doc) == {
        "a.txt": ("ingested", None),
        "link-dir": ("skipped", f"symlink to {os.path.realpath(outside)}, outside {real}: not followed"),
        "link-file.txt": ("skipped", f"symlink to {os.path.realpath(outside / 'secret.txt')}, outside {real}: not followed"),
        "up": ("skipped", f"symlink to {os.path.realpath(tmp_path)}, outside {real}: not followed"),
    }
    assert jobs(tmp_path / "j.duckdb") == ["3001"]      # the running job of a.txt only


def test_links_inside_the_folder_are_followed_once_and_broken_ones_are_notes(tmp_path, folder, capsys):
    sub = folder / "sub"
    sub.mkdir()
    shutil.copy(FIX / "mixed-jobs.txt", sub / "m.txt")
    (folder / "b-alias.txt").symlink_to("sub/m.txt")     # the same file: read once, by the first name
    (sub / "loop").symlink_to("..")                      # back to the folder given: walked once
    (folder / "gone.txt").symlink_to(folder / "nothing-here.txt")
    (folder / "self").symlink_to(folder / "self")
    rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(folder))
    assert rc == 0 and doc["failed"] == 0
    assert [(Path(f["path"]).relative_to(folder).as_posix(), f["status"]) for f in doc["files"]] == [
        ("a.txt", "ingested"), ("b-alias.txt", "ingested"), ("gone.txt", "skipped"), ("self", "skipped"),
        ("sub/m.txt", "skipped"), ("sub/loop", "skipped")]
    errors = [f["error"] for f in doc["files"]]
    assert errors[2] == "broken symlink (No such file or directory): not followed"
    assert errors[3] == "broken symlink (Too many levels of symbolic links): not followed"
    assert errors[4] == f"same file as {folder / 'b-alias.txt'} (already listed)"
    assert errors[5] == f"same folder as {folder} (already walked)"
    assert doc["skipped"] == 4 and doc["totals"]["stored"] == 15


def test_a_symlinked_folder_inside_the_tree_is_walked(tmp_path, folder, capsys):
    (folder / "real").mkdir()
    shutil.copy(FIX / "mixed-jobs.txt", folder / "real" / "m.txt")
    (folder / "a-view").symlink_to("real")
    rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(folder))
    assert rc == 0
    assert [(Path(f["path"]).relative_to(folder).as_posix(), f["status"]) for f in doc["files"]] == [
        ("a.txt", "ingested"), ("a-view/m.txt", "ingested"), ("real", "skipped")]


def test_a_file_named_through_a_symlink_is_read(tmp_path, capsys):
    """The admin named it: a link given on the command line is followed wherever it leads."""
    (tmp_path / "named.txt").symlink_to(FIX / "running-3001.txt")
    rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(tmp_path / "named.txt"))
    assert rc == 0 and by_name(doc) == {"named.txt": ("ingested", None)}


def test_a_folder_given_through_a_symlink_keeps_links_into_its_real_folder(tmp_path, folder, capsys):
    (folder / "b.txt").symlink_to(os.path.realpath(folder / "a.txt"))   # absolute, into the real folder
    (tmp_path / "view").symlink_to(folder)
    rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(tmp_path / "view"))
    assert rc == 0
    assert by_name(doc) == {"a.txt": ("ingested", None),
                            "b.txt": ("skipped", f"same file as {tmp_path / 'view' / 'a.txt'} (already listed)")}


def test_deep_folders_do_not_overflow_the_stack(tmp_path, capsys):
    """Deeper than Python's recursion limit (os.walk recursed, and stopped with RecursionError)."""
    d = leaf = tmp_path / "deep"
    folders = []
    for _ in range(1100):          # not mkdir(parents=True): that recurses too
        leaf = leaf / "d"
        folders.append(leaf)
    os.mkdir(d)
    for f in folders:
        os.mkdir(f)
    shutil.copy(FIX / "running-3001.txt", leaf / "a.txt")
    try:
        entries = ingest.walk([d])
        assert [(e.path, e.skip) for e in entries] == [(leaf / "a.txt", None)]
    finally:                       # and not rmtree at cleanup
        (leaf / "a.txt").unlink()
        for f in reversed(folders):
            os.rmdir(f)


def test_unlistable_subfolder_is_a_note_and_the_folder_given_an_error(tmp_path, folder, capsys, monkeypatch):
    (folder / "locked").mkdir()
    real_scandir = os.scandir

    def scandir(path):
        if Path(path).name in ("locked", "in2"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)
    monkeypatch.setattr(ingest_walk.os, "scandir", scandir)
    (tmp_path / "in2").mkdir()
    rc, doc = ingest_json(capsys, tmp_path / "j.duckdb", str(folder), str(tmp_path / "in2"))
    assert by_name(doc) == {"a.txt": ("ingested", None), "locked": ("skipped", "cannot list folder: Permission denied"),
                            "in2": ("unreadable", "cannot list folder: Permission denied")}
    assert rc == 1 and doc["failed"] == 1 and doc["skipped"] == 1


# ---- a swap between the walk's stat and the open ------------------------------------------------

def test_a_fifo_swapped_in_after_the_stat_is_refused_without_blocking(tmp_path, monkeypatch):
    regular = tmp_path / "regular.txt"
    regular.write_text("x\n")
    real_stat = os.stat
    with FifoWatch(tmp_path / "swapped.txt"):     # a hang guard: a blocking open would be woken
        with monkeypatch.context() as m:   # the stat still sees the regular file that was there
            m.setattr(ingest_walk.os, "stat", lambda p, *a, **k: real_stat(regular))
            with pytest.raises(ingest_walk.NotRegularFile, match=r"a FIFO .* \(replaced after it was listed\)"):
                ingest_walk.read_head(tmp_path / "swapped.txt")
    # reached at all means the open did not block (it needs no writer: O_NONBLOCK)


@pytest.mark.parametrize("explicit,status", [(False, "skipped"), (True, "unreadable")])
def test_ingest_file_refuses_a_fifo_given_to_it(tmp_path, explicit, status):
    con = db.connect(tmp_path / "j.duckdb")
    try:
        with FifoWatch(tmp_path / "f.txt") as fifo:
            rep = ingest.ingest_file(con, tmp_path / "f.txt", UTC, ingest.load_parsers(), explicit=explicit)
    finally:
        con.close()
    assert not fifo.opened
    assert (rep.status, rep.error) == (status, "a FIFO (named pipe), not a regular file: not read")


def test_a_link_swapped_to_lead_outside_after_the_walk_is_not_read(tmp_path, folder):
    outside = tmp_path / "secret.txt"
    shutil.copy(FIX / "completed-3001.txt", outside)
    (entry,) = [e for e in ingest.walk([folder]) if e.path.name == "a.txt"]
    (folder / "a.txt").unlink()
    (folder / "a.txt").symlink_to(outside)               # the swap
    con = db.connect(tmp_path / "j.duckdb")
    try:
        rep = ingest.ingest_file(con, entry.path, UTC, ingest.load_parsers(), explicit=False, within=entry.within)
        stored = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
    finally:
        con.close()
    assert rep.status == "skipped" and stored == 0
    assert rep.error == f"leads outside {os.path.realpath(folder)} (changed after it was listed): not read"
