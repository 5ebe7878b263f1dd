"""Report and e-mail files: each written whole under a temporary name in its folder and renamed
into place, so a reader (or a run stopped by SIGTERM) never leaves a half file under a report's
name; one file that cannot be written is listed as a failure and the others are still written."""
from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from jobsight.analytics.errors import UserError
from jobsight.analytics.render import terminal_safe


@dataclass
class Failure:
    what: str          # a file, or "<report stem> to <address>"
    reason: str

    def describe(self) -> str:
        return terminal_safe(f"{self.what}: {self.reason}")


def reason(exc: BaseException) -> str:
    """An error as one short line: the OS's words for OSError, else the exception's type and text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, UserError) else text


def make_folder(path: Path, option: str) -> Path:
    """The output folder, created as needed; a file in its place or no permission is a usage error."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{option} {terminal_safe(str(path))}: cannot use it as a folder: "
                        f"{exc.strerror or exc}") from None
    if not path.is_dir():       # mkdir(exist_ok) accepts a symlink to a file on some systems
        raise UserError(f"{option} {terminal_safe(str(path))}: not a folder")
    return path


def atomic_write(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` through a temporary name beside it (same file system, so the
    rename is atomic). The temporary file is created with the umask's mode, as the file itself
    would be; it is removed if anything (also a signal turned into an exception) stops the write."""
    folder = path.parent
    while True:
        tmp = folder / f".{secrets.token_hex(8)}.tmp"     # short: the final name may be long
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            f.writelines(chunks)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_each(items: Iterable[tuple[Path, Callable[[], Iterable[bytes]]]]) -> tuple[list[Path], list[Failure]]:
    """Write every (path, content) pair; content is a function, so a report that fails to render
    is one failure too. Two items for one path (which file_stem makes impossible for distinct
    names) are refused rather than overwritten."""
    written: list[Path] = []
    failures: list[Failure] = []
    taken: set[Path] = set()
    for path, content in items:
        if path in taken:
            failures.append(Failure(str(path), "another report of this run has this file name"))
            continue
        taken.add(path)
        try:
            atomic_write(path, content())
        except Exception as exc:    # one report never stops the others: listed, and the run exits 1
            failures.append(Failure(str(path), reason(exc)))
            continue
        written.append(path)
    return written, failures
