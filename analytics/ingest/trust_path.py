"""Who answers for a file: the whole path from / down to it, as sshd's StrictModes judges it.

A file's owner alone says little: a root-owned "file" under /proc/<pid>/ holds what a user wrote
on a command line, and a root-owned file in a folder a user owns is there because that user put it
there (or could swap it). So a file is the site's own (trusted: accounting may come from it) only
when it and every folder from / down to it, both along the path as given and along the path it
really resolves to, are owned by root or by the user running the ingest and writable by no one
else (a sticky folder such as /tmp is writable by others, but no one else can rename or remove
what root owns in it). Otherwise the first user who controls a step answers for the file: it is
read as that user's (their samples count for their own jobs, accounting never). Nothing on a
pseudo file system (proc, sysfs, devtmpfs, cgroup, ...) is ever read, and a FUSE mount counts as
its mounting user's whatever owners it shows.
"""
from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "configfs",
    "fusectl", "bpf", "pstore", "mqueue", "hugetlbfs", "autofs", "binfmt_misc", "efivarfs", "rpc_pipefs", "nsfs",
    "selinuxfs", "devfs", "kernfs"})
PSEUDO_PREFIXES = ("/proc", "/sys", "/dev")   # whatever is mounted there (mountinfo may be unreadable)
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def trusted_uid(uid: int) -> bool:
    """Root and the user running the ingest: their files and folders are the site's own."""
    return uid in (0, os.geteuid())


def user_name(uid: int) -> Optional[str]:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def _who(uid: int) -> str:
    name = user_name(uid)
    return f"{name} (uid {uid})" if name else f"uid {uid} (no passwd entry)"


@dataclass(frozen=True)
class Mount:
    fstype: str
    user_id: Optional[int]   # a FUSE mount's mounting user


@lru_cache(maxsize=1)
def _mounts() -> tuple[dict[int, Mount], tuple[tuple[str, Mount], ...]]:
    """st_dev -> Mount, and (mount point, Mount) longest first, from /proc/self/mountinfo."""
    by_dev: dict[int, Mount] = {}
    points: list[tuple[str, Mount]] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return {}, ()
    for line in lines:
        left, sep, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if not sep or len(f) < 5 or len(r) < 1:
            continue
        user_id = None
        if r[0].startswith("fuse") and len(r) >= 3:
            for opt in r[2].split(","):
                if opt.startswith("user_id=") and opt[8:].isdigit():
                    user_id = int(opt[8:])
        m = Mount(r[0], user_id)
        try:
            major, minor = (int(x) for x in f[2].split(":"))
            by_dev[os.makedev(major, minor)] = m
        except ValueError:
            pass
        points.append((f[4].encode().decode("unicode_escape", errors="replace"), m))
    points.sort(key=lambda p: len(p[0]), reverse=True)
    return by_dev, tuple(points)


def _mount_of(path: str, dev: Optional[int]) -> Optional[Mount]:
    by_dev, points = _mounts()
    if dev is not None and dev in by_dev:
        return by_dev[dev]
    for point, m in points:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return m
    return None


def pseudo_fs(path: str, dev: Optional[int] = None) -> Optional[str]:
    """Why `path` (a real path; dev: its st_dev when known) is never read, or None."""
    for prefix in PSEUDO_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return f"{prefix} is the kernel's (a pseudo file system): never read"
    m = _mount_of(path, dev)
    if m is not None and m.fstype in PSEUDO_FS:
        return f"on a {m.fstype} file system (the kernel's, not files anyone wrote): never read"
    return None


def opened_where(fd: int, path) -> str:
    """The real path of the file open on fd (Linux: /proc/self/fd), else of path (racy, but the
    best there is)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


@dataclass(frozen=True)
class Verdict:
    """What a path is: trusted (controller None, refused None), a user's (controller), or never read."""
    controller: Optional[int] = None   # the uid who answers for it when that is not root or the ingesting user
    refused: Optional[str] = None      # why it is not read at all
    why: str = ""                      # the reason, in words, for the summary

    @property
    def trusted(self) -> bool:
        return self.controller is None and self.refused is None


def _step(path: str, st: os.stat_result, last: bool, next_trusted: bool) -> Optional[Verdict]:
    """The verdict one step of a path forces, or None when it leaves the path trusted so far."""
    if stat.S_ISLNK(st.st_mode):   # a link's own mode means nothing; its owner chose where it leads
        return None if trusted_uid(st.st_uid) else Verdict(st.st_uid, why=f"the link {path} is {_who(st.st_uid)}'s")
    if not trusted_uid(st.st_uid):
        return Verdict(st.st_uid, why=f"{path} is {_who(st.st_uid)}'s")
    if st.st_mode & _OTHERS_WRITE:
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and (last or next_trusted):
            # sticky: others cannot rename or remove what root owns in it (the next step, or, below
            # the last folder of a chain, the entry judged on its own by the caller)
            return None
        whom = "everyone" if st.st_mode & stat.S_IWOTH else f"group {st.st_gid}"
        return Verdict(refused=f"{path} is writable by {whom}: no one user answers for what is there: not read",
                       why=f"{path} is writable by {whom}")
    return None


def _prefixes(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    return ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


def _chain(path: str) -> Verdict:
    """The verdict of the path's steps from / down to it (lstat: a link is judged as a link)."""
    steps = _prefixes(path)
    stats: list[os.stat_result] = []
    for p in steps:
        try:
            stats.append(os.lstat(p))
        except OSError as exc:
            return Verdict(refused=f"cannot check {p} ({exc.strerror or exc}): not read", why=f"{p} cannot be checked")
    for i, (p, st) in enumerate(zip(steps, stats)):
        last = i == len(steps) - 1
        nxt = stats[i + 1] if not last else None
        v = _step(p, st, last, nxt is not None and trusted_uid(nxt.st_uid))
        if v is not None:
            return v
    return Verdict()


class PathJudge:
    """Judges files for one ingest run, remembering each folder's verdict (a spool of 200k files
    is one folder's chain, checked once)."""

    def __init__(self) -> None:
        self._dirs: dict[str, Verdict] = {}

    def folder(self, path: str) -> Verdict:
        v = self._dirs.get(path)
        if v is None:
            v = self._dirs[path] = _chain(path)
        return v

    def given(self, path: str) -> Verdict:
        """The verdict of a path as named on the command line: its steps as written (links and all),
        then where it really leads."""
        absolute = os.path.abspath(path)
        v = self.folder(absolute)
        if not v.trusted:
            return v
        real = os.path.realpath(absolute)
        return self.folder(real) if real != absolute else v

    def file(self, real: str, st: os.stat_result, given: Optional[str] = None) -> Verdict:
        """The verdict of the regular file whose real path is `real` and whose fstat is `st`;
        `given`: the root named on the command line it was found under (or the file itself)."""
        why = pseudo_fs(real, st.st_dev)
        if why:
            return Verdict(refused=why, why=why)
        m = _mount_of(real, st.st_dev)
        if m is not None and m.user_id is not None and not trusted_uid(m.user_id):
            return Verdict(m.user_id, why=f"on a FUSE file system mounted by {_who(m.user_id)}")
        if not trusted_uid(st.st_uid):
            return Verdict(st.st_uid, why=f"owned by {_who(st.st_uid)}")
        if st.st_mode & _OTHERS_WRITE:
            whom = "everyone" if st.st_mode & stat.S_IWOTH else f"group {st.st_gid}"
            return Verdict(refused=f"writable by {whom}: no one user answers for it: not read", why=f"writable by {whom}")
        for v in ((self.given(given),) if given else ()) + (self.folder(os.path.dirname(real)),):
            if not v.trusted:
                return v
        return Verdict(why=f"owned by {_who(st.st_uid)}, in folders only root or it can write")
