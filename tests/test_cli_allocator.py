"""The `jobsight` command keeps the memory polars frees for reuse (jemalloc's own decay, not the
0.5 s polars sets), set before polars is loaded; a value given in the environment stands."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

OURS = "dirty_decay_ms:10000,muzzy_decay_ms:10000"


def _run(code: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_the_command_sets_the_decay_before_polars_is_loaded():
    out = _run("import os, sys; from jobsight.analytics import cli; "
               "print(os.environ.get('_RJEM_MALLOC_CONF'), 'polars' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [OURS, "False"]


def test_a_value_in_the_environment_stands():
    out = _run("import os; from jobsight.analytics import cli; print(os.environ['_RJEM_MALLOC_CONF'])",
               _RJEM_MALLOC_CONF="dirty_decay_ms:0")
    assert out.stdout.split() == ["dirty_decay_ms:0"]


def test_polars_allocator_reads_it():
    # jemalloc prints its options at exit with stats_print (general part only: 'g' is not omitted)
    out = _run("import os; from jobsight.analytics import cli; "
               "os.environ['_RJEM_MALLOC_CONF'] += ',stats_print:true,stats_print_opts:mdablxeh'; import polars")
    assert out.returncode == 0, out.stderr
    if "opt.dirty_decay_ms" not in out.stderr:
        pytest.skip("this polars build does not use its prefixed jemalloc (another platform)")
    assert "opt.dirty_decay_ms: 10000" in out.stderr and "opt.muzzy_decay_ms: 10000" in out.stderr
