"""`jobsight dashboard`: options, refusals, --hash-password, roles from jobsight.toml, and the
production server (waitress) answering over HTTP."""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import jobsight_cmd, require_service
from test_dashboard_queries import build_db

import jobsight.analytics.commands.dashboard as dashboard_cli
from jobsight.analytics.errors import UserError
from jobsight.dashboard.auth import verify_password

ROOT = Path(__file__).resolve().parents[1]


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    dashboard_cli.configure(p)
    return p.parse_args(list(argv))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("cli") / "jobs.duckdb")


def test_hash_password_line_from_stdin():
    line = dashboard_cli.hash_password_line("alice", stdin=io.StringIO("a long secret\n"))
    name, _, encoded = line.partition(":")
    assert name == "alice" and verify_password("a long secret", encoded)
    with pytest.raises(UserError, match="too short"):
        dashboard_cli.hash_password_line("alice", stdin=io.StringIO("short\n"))
    with pytest.raises(UserError, match="not a valid user name"):
        dashboard_cli.hash_password_line("a:b", stdin=io.StringIO("a long secret\n"))


def test_refusals(db, tmp_path):
    with pytest.raises(UserError, match="only allowed on 127.0.0.1"):
        dashboard_cli.build(parse("--db", str(db), "--host", "0.0.0.0"))
    with pytest.raises(UserError, match="needs --trusted-proxy"):
        dashboard_cli.build(parse("--db", str(db), "--host", "0.0.0.0", "--auth", "header"))
    with pytest.raises(UserError, match="needs --users-file"):
        dashboard_cli.build(parse("--db", str(db), "--auth", "basic"))
    with pytest.raises(UserError, match="no such database"):
        dashboard_cli.build(parse("--db", str(tmp_path / "nope.duckdb")))
    bad = tmp_path / "bad.toml"
    bad.write_text('[roles]\nadmins = "root"\n')
    with pytest.raises(UserError, match="roles.admins must be a list"):
        dashboard_cli.build(parse("--db", str(db), "--config", str(bad)))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "dashboard.example.org", ""])
def test_debug_is_refused_off_loopback(db, host):
    # Werkzeug's /console would run Python for anyone reaching the port, whatever --auth says
    with pytest.raises(UserError, match="--debug runs code for anyone who can reach the server: only allowed on a "
                                        rf"loopback --host \(127.0.0.1, ::1, localhost\), not on {re.escape(host)}$"):
        dashboard_cli.build(parse("--db", str(db), "--host", host, "--debug", "--auth", "header",
                                  "--trusted-proxy", "10.0.0.1"))


def test_debug_on_a_public_host_exits_2_before_serving(db):
    proc = subprocess.run([*jobsight_cmd(), "dashboard", "--db", str(db), "--host", "0.0.0.0", "--port", str(free_port()),
                           "--debug", "--auth", "header", "--trusted-proxy", "10.0.0.1"],
                          cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "jobsight dashboard: error: --debug runs code for anyone who can reach the server: only allowed on a loopback "
        "--host (127.0.0.1, ::1, localhost), not on 0.0.0.0"]


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_debug_is_allowed_on_loopback(db, host):
    assert dashboard_cli.build(parse("--db", str(db), "--host", host, "--debug")) is not None


def test_roles_come_from_the_config_file(db, tmp_path):
    cfg = tmp_path / "jobsight.toml"
    cfg.write_text('[roles]\nadmins = ["root"]\nleads = { "proj-a" = ["dave"] }\n')
    app = dashboard_cli.build(parse("--db", str(db), "--config", str(cfg), "--auth", "header"))
    client = app.server.test_client()
    layout = client.get("/_dash-layout", headers={"X-Forwarded-User": "dave"}).data.decode()
    assert "dave (lead of proj-a)" in layout
    layout = client.get("/_dash-layout", headers={"X-Forwarded-User": "root"}).data.decode()
    assert "root (admin)" in layout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_production_server_serves_behind_a_url_prefix(db):
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    port = free_port()
    code = ("import sys, argparse; import jobsight.analytics.commands.dashboard as d; p = argparse.ArgumentParser(); "
            "d.configure(p); sys.exit(d.run(p.parse_args(sys.argv[1:])))")
    proc = subprocess.Popen([sys.executable, "-c", code, "--db", str(db), "--port", str(port), "--auth", "header",
                             "--url-prefix", "/jobsight/"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}/jobsight/"
        for _ in range(150):
            try:
                urllib.request.urlopen(base, timeout=2)
            except urllib.error.HTTPError:
                break                       # answering (403 without a user)
            except OSError:
                time.sleep(0.2)
        req = urllib.request.Request(base, headers={"X-Forwarded-User": "alice"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200 and r.headers.get("Server") == "jobsight"   # waitress, ident=jobsight
        body = json.dumps({"output": "job-content.children", "outputs": {"id": "job-content", "property": "children"},
                           "inputs": [{"id": "job-key", "property": "data", "value": {"cluster": "c1", "id": "1"}}],
                           "state": [], "changedPropIds": []}).encode()
        req = urllib.request.Request(base + "_dash-update-component", data=body, method="POST",
                                     headers={"X-Forwarded-User": "alice", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert "prep" in r.read().decode()       # alice's job 1
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base, timeout=10)  # no user header
        assert exc.value.code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM)])
def test_the_server_stops_on_sigint_and_sigterm_without_a_terminal(db, sig, code):
    """Started as a script's background command is (no terminal, SIGINT ignored, its own session),
    the production server stops on SIGINT as on SIGTERM."""
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    port = free_port()
    proc = subprocess.Popen([*jobsight_cmd(), "dashboard", "--db", str(db), "--port", str(port)], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.2)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
