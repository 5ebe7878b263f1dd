"""The command line as people mistype it: a --db that names no database, an unknown flag code, a
bad option of a subcommand, and `jobsight --version`. Each is exit 2 with one line naming the
mistake (and, for a bad option, the subcommand's own usage); nothing is created on the way."""
from __future__ import annotations

import importlib.metadata

import pytest

from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.commands.flags import flag_codes

READ_COMMANDS = [
    ["job", "1"],
    ["flags"],
    ["usage"],
    ["report", "--week", "2026-W47", "--for", "admin"],
    ["dashboard"],
    ["lake", "export", "--out", "LAKE"],
]


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = jobsight([str(a) for a in args])
    except SystemExit as exc:         # argparse's own errors, --help and --version
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_read_command_refuses_a_missing_database(command, tmp_path, capsys):
    db = tmp_path / "jbos.duckdb"           # mistyped
    args = [a.replace("LAKE", str(tmp_path / "lake")) for a in command]
    rc, out, err = _run([*args[:2 if args[0] == "lake" else 1], "--db", db, *args[2 if args[0] == "lake" else 1:]],
                        capsys)
    assert rc == 2, (out, err)
    assert str(db) in err and "no such database" in err and "Traceback" not in err
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []        # no empty database, no snapshot


def test_a_folder_is_no_database(tmp_path, capsys):
    rc, _out, err = _run(["flags", "--db", tmp_path], capsys)
    assert rc == 2 and f"{tmp_path}: not a file" in err


def test_ingest_still_creates_the_database(tmp_path, capsys):
    db = tmp_path / "new.duckdb"
    rc, _out, err = _run(["ingest", "--db", db, "--quiet", tmp_path / "empty"], capsys)
    assert db.is_file(), err
    rc, out, err = _run(["flags", "--db", db], capsys)
    assert rc == 0 and out.strip() == "no flagged jobs", err


def test_unknown_flag_code_lists_the_valid_ones(tmp_path, capsys):
    rc, out, err = _run(["flags", "--db", tmp_path / "x.duckdb", "--flag", "gpu_idel"], capsys)
    assert rc == 2 and out == ""
    assert "usage: jobsight flags" in err and "gpu_idel" in err
    for code in flag_codes():
        assert code in err
    assert not (tmp_path / "x.duckdb").exists()


def test_flag_codes_come_from_the_sql():
    codes = flag_codes()
    assert {"gpu_idle", "gpu_unused_devices", "cpu_low_eff", "mem_oversized", "time_oversized",
            "failed_burn", "cpu_job_on_gpu_partition"} <= set(codes)
    assert len(codes) == len(set(codes)) and all(c.islower() for c in codes)


@pytest.mark.parametrize("args, usage", [
    (["flags", "--db", "x", "--bogus"], "usage: jobsight flags"),
    (["job", "--db", "x", "1", "2"], "usage: jobsight job"),
    (["usage", "--db", "x", "--by", "user", "--colour"], "usage: jobsight usage"),
    (["lake", "export", "--db", "x", "--out", "y", "--bogus"], "usage: jobsight lake export"),
    (["report", "--db", "x", "--for", "admin", "--wek", "last"], "usage: jobsight report"),
])
def test_a_bad_option_prints_the_subcommands_usage(args, usage, capsys):
    rc, _out, err = _run(args, capsys)
    assert rc == 2
    assert err.startswith(usage), err
    assert "unrecognized arguments" in err and "COMMAND" not in err


def test_an_option_before_the_command_gets_the_top_level_usage(capsys):
    rc, _out, err = _run(["--bogus", "flags", "--db", "x"], capsys)
    assert rc == 2 and err.startswith("usage: jobsight [-h] [--version] COMMAND") and "--bogus" in err


def test_version(capsys):
    rc, out, _err = _run(["--version"], capsys)
    assert rc == 0 and out.strip() == f"jobsight {importlib.metadata.version('jobsight')}"
