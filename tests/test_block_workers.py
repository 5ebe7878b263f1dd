"""A big PBS or LSF file is converted in worker processes (line_blocks.block_workers): the rows,
rejects and notes are those the threads of one process give, block for block."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, REALDATA

from jobsight.analytics.ingest.parsers import line_blocks, lsf, pbs
from jobsight.analytics.ingest.records import ParseOptions

FILES = {"pbs": [FIXTURES / "pbs" / "20240301", FIXTURES / "pbs" / "20240302-qdel"],
         "lsf": [FIXTURES / "lsf" / "lsb.acct"]}


def _parse(mod, path, monkeypatch, workers: bool):
    real = line_blocks.iter_blocks
    monkeypatch.setattr(mod, "iter_blocks", lambda p, *a, **k: real(p, 700))   # several blocks
    monkeypatch.setattr(line_blocks, "PROCESS_BYTES", 0 if workers else 1 << 62)
    assert bool(line_blocks.block_workers(path)) == workers
    return mod.parse(path, ParseOptions(timezone="Europe/Copenhagen"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: no workers")
@pytest.mark.parametrize("mod", [pbs, lsf], ids=["pbs", "lsf"])
def test_workers_give_what_threads_give(mod, monkeypatch, tmp_path):
    """The fixtures and every real sample of the format, one after the other in one file."""
    files = FILES[mod.FORMAT] + sorted((REALDATA / mod.FORMAT).glob("*"))
    path = tmp_path / mod.FORMAT
    path.write_bytes(b"".join(f.read_bytes().rstrip(b"\n") + b"\n" for f in files))
    threads = _parse(mod, path, monkeypatch, workers=False)
    procs = _parse(mod, path, monkeypatch, workers=True)
    assert procs.rows_in == threads.rows_in and procs.dropped == threads.dropped
    assert procs.rejects == threads.rejects and procs.notes == threads.notes
    assert procs.jobs.equals(threads.jobs) and procs.jobs.height >= (20 if mod is pbs else 10)


def test_a_worker_error_is_raised_here():
    with pytest.raises(ValueError, match="invalid literal"):
        list(line_blocks.in_file_order_processes([(int, "7"), (int, "x"), (int, "8")], 2))
    assert list(line_blocks.in_file_order_processes([(int, str(i)) for i in range(9)], 2)) == list(range(9))


def test_a_script_without_a_main_guard_can_use_them(tmp_path):
    """The workers are no copies of the caller: a script that parses at import time runs once."""
    script = tmp_path / "s.py"
    script.write_text("from jobsight.analytics.ingest.parsers import line_blocks\n"
                      "print(list(line_blocks.in_file_order_processes([(len, 'ab'), (len, 'abc')], 2)))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (0, "[2, 3]\n"), out.stderr
