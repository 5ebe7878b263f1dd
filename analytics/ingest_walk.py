"""Finding the files to ingest and what they are: the folder walk, the parser registry and format
detection, the sha256 scan (at once or in a thread while the file is read), and the lookup of an
ingest that already loaded the same bytes."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable, Optional

HEAD_BYTES = 65536


def import_parsers(names: Iterable[str], warn: Callable[[str], None] | None = None) -> dict[str, ModuleType]:
    """FORMAT -> module for the parser modules `names`, in detection order. A parser module not
    written yet is skipped."""
    found: dict[str, ModuleType] = {}
    for name in names:
        modname = f"jobsight.analytics.parsers.{name}"
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name == modname:
                continue
            if warn:
                warn(f"parser {name} skipped: {exc}")
            continue
        except Exception as exc:  # a half-written parser must not stop the others
            if warn:
                warn(f"parser {name} skipped: {exc!r}")
            continue
        if hasattr(mod, "FORMAT") and hasattr(mod, "sniff") and hasattr(mod, "parse"):
            found[mod.FORMAT] = mod
    return found


def read_head(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")


def detect(path: Path, parsers: dict[str, ModuleType]) -> Optional[ModuleType]:
    head = read_head(path)
    for mod in parsers.values():
        try:
            if mod.sniff(head, path):
                return mod
        except Exception:
            continue
    return None


@dataclass
class FileScan:
    digest: str                # sha256 of the bytes
    newlines: int = 0          # counted only when a delimiter is given (a BulkRead's checks)
    delimiters: int = 0


def scan_file(path: Path, delimiter: Optional[bytes] = None) -> FileScan:
    """sha256 of the file; with a delimiter, also its newline and delimiter counts (one more pass
    over bytes already in memory: ~1 s per GB, against ~3 s for the hash)."""
    h = hashlib.sha256()
    newlines = delimiters = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
            if delimiter is not None:
                newlines += chunk.count(b"\n")
                delimiters += chunk.count(delimiter)
    return FileScan(h.hexdigest(), newlines, delimiters)


def sha256_file(path: Path) -> str:
    return scan_file(path).digest


class _ScanThread(threading.Thread):
    def __init__(self, path: Path, delimiter: Optional[bytes]):
        super().__init__(daemon=True, name="jobsight-sha256")
        self.path, self.delimiter, self.scan, self.error = path, delimiter, None, None

    def run(self) -> None:
        try:
            self.scan = scan_file(self.path, self.delimiter)   # hashlib releases the GIL on big buffers
        except OSError as exc:
            self.error = exc


def _start_scan(path: Path, delimiter: Optional[bytes] = None) -> _ScanThread:
    t = _ScanThread(path, delimiter)
    t.start()
    return t


def _seen_name(con, path: Path) -> bool:
    return bool(con.execute("SELECT 1 FROM ingest_log WHERE source_file = ? LIMIT 1",
                            [str(Path(path).resolve())]).fetchall())


def walk(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """(file, given explicitly?) for each path; folders are walked recursively in name order.
    Sidecar metadata (*.meta.json) is read by the sidecar parser beside its CSV, not on its own."""
    out: list[tuple[Path, bool]] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs.sort()
                for f in sorted(files):
                    if f.startswith(".") or f.endswith(".meta.json"):
                        continue
                    out.append((Path(root) / f, False))
        else:
            out.append((p, True))
    return out


def already_ingested(con, checksum: str, options: Optional[dict] = None) -> Optional[int]:
    """The ingest that already loaded these bytes with these options (a file first read with, say,
    the wrong --columns or --timezone can be read again with the right ones)."""
    sql = "SELECT ingest_id FROM ingest_log WHERE checksum = ? AND finished_at IS NOT NULL"
    args: list = [checksum]
    if options is not None:
        sql += " AND options = ?"
        args.append(json.dumps(options, sort_keys=True))
    rows = con.execute(sql + " ORDER BY ingest_id LIMIT 1", args).fetchall()
    return rows[0][0] if rows else None
