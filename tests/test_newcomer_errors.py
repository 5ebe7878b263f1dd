"""What a newcomer's first mistakes get: one line naming the problem and exit 2, never a traceback."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest
from conftest import jobsight_cmd
from test_dashboard_queries import build_db


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("newcomer") / "jobs.duckdb")


def jobsight(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "JOBSIGHT_CONFIG"}
    return subprocess.run([*jobsight_cmd(), *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize("debug", [False, True], ids=["waitress", "debug"])
def test_dashboard_on_a_busy_port_says_so_in_one_line(db, debug):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        proc = jobsight("dashboard", "--db", str(db), "--auth", "none", "--port", str(port),
                        *(["--debug"] if debug else []), cwd=db.parent)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"jobsight dashboard: error: port {port} on 127.0.0.1 is already in use (another dashboard?): "
        "stop it, or choose another --port"]
    assert "Traceback" not in proc.stderr and "serving" not in proc.stderr


def test_a_report_for_a_never_seen_user_or_account_is_exit_2(db):
    for target in ("user:nobody", "account:proj-z"):
        proc = jobsight("report", "--db", str(db), "--week", "2026-W47", "--for", target, "--format", "md",
                        "--out", str(db.parent / "out"), cwd=db.parent)
        assert proc.returncode == 2 and target in proc.stderr and "no job" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    # carol is known (job 3, week 47) and gets her report in a week she ran nothing
    proc = jobsight("report", "--db", str(db), "--week", "2026-W45", "--for", "user:carol", "--format", "md",
                    "--out", str(db.parent / "out"), cwd=db.parent)
    assert proc.returncode == 0, proc.stderr
