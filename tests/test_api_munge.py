"""The API with the real munged (`jobsight dashboard --munge --auth none`: MUNGE the only way in):
credentials made as the harness users alice and bob (`runuser -u alice -- munge`), decoded by the
server's unmunge. alice's own job is the admin's local `jobsight job --format json`, byte for byte;
bob's is the same 404 as a job that does not exist; forged, rebound and replayed credentials are
401. The client (`jobsight job --server`, `flags --server`) prints what the local command prints."""
from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import jobsight_cmd, require_service
from test_dashboard_queries import GiB, add_job

from jobsight.analytics import client
from jobsight.analytics.cli import main as jobsight


def _users() -> tuple[str, str]:
    try:
        return pwd.getpwnam("alice").pw_name, pwd.getpwnam("bob").pw_name
    except KeyError:
        require_service(False, "the Slurm harness users alice and bob do not exist (scripts/slurm-harness.sh start)")
        raise


def _munged_runs() -> bool:
    if os.geteuid() != 0 or not shutil.which("munge") or not shutil.which("runuser"):
        return False
    try:
        return subprocess.run(["munge", "-n"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def munge_as(user: str, payload: str) -> str:
    done = subprocess.run(["runuser", "-u", user, "--", "munge", "-s", payload], capture_output=True, text=True,
                          timeout=10, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_service(_munged_runs(), "munged is not running, or not root (scripts/slurm-harness.sh start runs it)")
    alice, bob = _users()
    from jobsight.analytics.config import parse_config
    from jobsight.analytics.store.database import Database
    from jobsight.analytics.store.snapshot import publish
    d = tmp_path_factory.mktemp("apimunge")
    db = d / "jobs.duckdb"
    # allocations of both projects: alice's usage --budget lists hers alone
    con = Database.open(db, parse_config({"budgets": {"proj-al": 500, f"proj-al/{alice}": 100, "proj-bo": 700}}))
    common = dict(elapsed_s=3600, timelimit_s=7200, ncpus=4, billing=4, cpu_time_s=1800, mem_alloc_bytes=8 * GiB,
                  mem_peak_bytes=GiB)
    add_job(con, "2", user=alice, account="proj-al", job_name="alice-job", **common)
    add_job(con, "3", user=bob, account="proj-bo", job_name="bob-secret-job", **common)
    con.close()
    publish(db)
    config = d / "jobsight.toml"
    config.write_text('[roles]\nadmins = ["root"]\n', encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (d / "server.log").open("w")
    proc = subprocess.Popen([*jobsight_cmd(), "dashboard", "--db", str(db), "--config", str(config), "--port", str(port),
                             "--munge", "--threads", "2"], cwd=d, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/api/v1/openapi.json", timeout=5)
            except urllib.error.HTTPError:
                break           # 401: up, and asking for a credential
            except OSError:
                assert proc.poll() is None, (d / "server.log").read_text()
                assert time.monotonic() < deadline, "dashboard did not start"
                time.sleep(0.2)
        yield dict(url=url, db=db, config=config, alice=alice, bob=bob)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def call(url: str, path: str, authorization: str | None) -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def local_output(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = jobsight(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_alices_job_is_the_admins_local_output(server, capsys):
    path = "/api/v1/jobs/c1/2"
    status, body = call(server["url"], path, "MUNGE " + munge_as(server["alice"], f"GET {path}"))
    assert status == 200, body
    rc, local, _ = local_output(capsys, "job", "--db", str(server["db"]), "--format", "json", "2")
    assert rc == 0 and body == local
    assert json.loads(body)["user"] == server["alice"]


def test_bobs_job_is_the_same_404_as_no_job(server):
    answers = []
    for job in ("3", "99999"):
        path = f"/api/v1/jobs/c1/{job}"
        status, body = call(server["url"], path, "MUNGE " + munge_as(server["alice"], f"GET {path}"))
        answers.append((status, body.replace(job, "ID")))
        assert "bob-secret-job" not in body and server["bob"] not in body
    assert answers[0] == answers[1] and answers[0][0] == 404
    assert json.loads(answers[0][1]) == {"error": "no job 'ID' in the database on cluster 'c1'"}


def test_refused_credentials_are_401_and_never_another_identity(server):
    path = "/api/v1/jobs/c1/2"
    good = munge_as(server["alice"], f"GET {path}")
    middle = len(good) // 2
    forged = good[:middle] + ("A" if good[middle] != "A" else "B") + good[middle + 1:]
    rebound = munge_as(server["alice"], "GET /api/v1/jobs/c1/3")       # bound to another request
    other_query = munge_as(server["alice"], f"GET {path}?x=1")
    cases = {"forged": forged, "another request": rebound, "another query": other_query, "empty": "",
             "not a credential": "MUNGE:abc:", "no payload": munge_as(server["alice"], "")}
    for what, cred in cases.items():
        status, body = call(server["url"], path, f"MUNGE {cred}")
        assert status == 401, (what, status, body)
        assert "alice-job" not in body and "error" in json.loads(body), what
    status, _ = call(server["url"], path, None)          # --auth none --munge: no credential, no entry
    assert status == 401
    replayed = munge_as(server["alice"], f"GET {path}")
    assert call(server["url"], path, f"MUNGE {replayed}")[0] == 200
    status, body = call(server["url"], path, f"MUNGE {replayed}")
    assert status == 401 and "replayed" in body


def test_flags_list_only_her_jobs(server):
    path = "/api/v1/flags?limit=0"
    status, body = call(server["url"], path, "MUNGE " + munge_as(server["alice"], f"GET {path}"))
    rows = json.loads(body)["flags"]
    assert status == 200 and rows and {r["user"] for r in rows} == {server["alice"]}
    path = "/api/v1/jobs"
    status, body = call(server["url"], path, "MUNGE " + munge_as(server["bob"], f"GET {path}"))
    assert status == 200 and [j["job_id"] for j in json.loads(body)["jobs"]] == ["3"]


@pytest.fixture()
def as_alice(server, monkeypatch):
    monkeypatch.setattr(client, "MUNGE", ("runuser", "-u", server["alice"], "--", "munge"))
    monkeypatch.delenv(client.ENV, raising=False)


def test_client_prints_what_the_local_command_prints(server, as_alice, capsys):
    for fmt in ("text", "json"):
        remote = local_output(capsys, "job", "--server", server["url"], "--format", fmt, "2")
        local = local_output(capsys, "job", "--db", str(server["db"]), "--format", fmt, "2")
        assert remote == local and remote[0] == 0 and "alice-job" in remote[1]
    for fmt in ("table", "csv", "json"):
        remote = local_output(capsys, "flags", "--server", server["url"], "--format", fmt)
        local = local_output(capsys, "flags", "--db", str(server["db"]), "--user", server["alice"], "--format", fmt)
        assert remote == local and remote[0] == 0 and server["alice"] in remote[1]
        assert server["bob"] not in remote[1]


def test_client_failures_are_one_line(server, as_alice, capsys, monkeypatch):
    rc, out, err = local_output(capsys, "job", "--server", server["url"], "3")
    assert (rc, out, err) == (2, "", "jobsight job: error: no job '3' in the database\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    rc, out, err = local_output(capsys, "job", "--server", f"http://127.0.0.1:{closed}", "2")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "unreachable" in err
    monkeypatch.setattr(client, "MUNGE", ("sh", "-c", 'echo "MUNGE:$(printf x%.0s $(seq 40)):"', "munge"))
    rc, out, err = local_output(capsys, "job", "--server", server["url"], "2")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "not authenticated" in err
    rc, out, err = local_output(capsys, "job", "--server", server["url"], "--db", str(server["db"]), "2")
    assert rc == 2 and "--db and --server together" in err
    monkeypatch.setenv(client.ENV, server["url"])          # $JOBSIGHT_SERVER when no --db
    monkeypatch.setattr(client, "MUNGE", ("runuser", "-u", server["alice"], "--", "munge"))
    with contextlib.chdir(server["db"].parent.parent):
        rc, out, _ = local_output(capsys, "job", "2")
    assert rc == 0 and "alice-job" in out


def test_unknown_uid_and_bad_text_are_refused_without_munged_state():
    from jobsight.dashboard.munge_auth import MungeDenied, parse_unmunge
    ok = b"STATUS:          0\nUID:             0\nLENGTH:          5\n\nGET /"
    assert parse_unmunge(ok) == (0, b"GET /")
    for bad in (ok.replace(b"LENGTH:          5", b"LENGTH:          4"), b"STATUS: 17\nUID: 0\nLENGTH: 0\n\n",
                b"garbage", b"STATUS: 0\nLENGTH: 0\n\n"):
        with pytest.raises(MungeDenied):
            parse_unmunge(bad)


# --- the client run by alice herself (fork + setuid, as tests/test_reads_are_reads.py), the database
# unreadable to her: the server is her only way in ------------------------------------------------

def run_as_alice(server, argv: list[str]) -> tuple[int, str, str]:
    """cli.main(argv) in a child running as alice with only her group, its munge her own."""
    from test_reads_are_reads import as_user

    from jobsight.analytics.commands import report
    report.renderers()                  # what the child renders with, imported while root
    import jobsight.analytics.reports.files  # noqa: F401
    import jobsight.analytics.reports.html  # noqa: F401
    import jobsight.analytics.reports.wire  # noqa: F401
    group = grp.getgrgid(pwd.getpwnam(server["alice"]).pw_gid).gr_name
    return tuple(as_user(server["alice"], group, argv))


@pytest.fixture()
def own_munge(monkeypatch):
    monkeypatch.setattr(client, "MUNGE", ("munge",))
    monkeypatch.delenv(client.ENV, raising=False)


def test_alice_unprivileged_gets_her_job_and_not_bobs(server, own_munge, capsys):
    readable = run_as_alice(server, ["job", "--db", str(server["db"]), "2"])
    assert readable[0] == 2 and readable[1] == "", readable       # the file is not hers to read
    rc, out, err = run_as_alice(server, ["job", "--server", server["url"], "2", "--format", "json"])
    admin = local_output(capsys, "job", "--db", str(server["db"]), "2", "--format", "json")
    assert (rc, out, err) == admin and rc == 0 and json.loads(out)["user"] == server["alice"]
    text = run_as_alice(server, ["job", "--server", server["url"], "2"])
    assert text == local_output(capsys, "job", "--db", str(server["db"]), "2")
    assert run_as_alice(server, ["job", "--server", server["url"], "3"]) == (
        2, "", "jobsight job: error: no job '3' in the database\n")


def test_alice_unprivileged_lists_only_her_jobs(server, own_munge, capsys):
    db = ["--db", str(server["db"])]
    for fmt in ("table", "json"):
        mine = run_as_alice(server, ["flags", "--server", server["url"], "--format", fmt])
        assert mine == local_output(capsys, "flags", *db, "--user", server["alice"], "--format", fmt)
        assert mine[0] == 0 and server["alice"] in mine[1] and server["bob"] not in mine[1]
    for by in ("user", "account", "day"):
        mine = run_as_alice(server, ["usage", "--server", server["url"], "--by", by, "--format", "json"])
        assert mine == local_output(capsys, "usage", *db, "--user", server["alice"], "--by", by, "--format", "json")
        rows = json.loads(mine[1])
        assert mine[0] == 0 and len(rows) == 1 and rows[0]["jobs"] == 1
        assert server["bob"] not in mine[1] and "proj-bo" not in mine[1]
    table = run_as_alice(server, ["usage", "--server", server["url"], "--by", "user"])
    assert table == local_output(capsys, "usage", *db, "--user", server["alice"], "--by", "user")
    assert table[1].splitlines()[-1].startswith("data up to ")
    for fmt in ("table", "json"):
        mine = run_as_alice(server, ["usage", "--server", server["url"], "--budget", "--format", fmt])
        assert mine == local_output(capsys, "usage", *db, "--budget", "--user", server["alice"], "--format", fmt)
        assert mine[0] == 0 and "proj-al" in mine[1] and "proj-bo" not in mine[1]
    assert mine[1] and {(r["account"], r["allocation_sbu"]) for r in json.loads(mine[1])} == {("proj-al", 500),
                                                                                             ("proj-al", 100)}


def test_alice_unprivileged_gets_her_own_report(server, own_munge, capsys, tmp_path):
    week = ["--week", "2026-W47", "--for", f"user:{server['alice']}"]
    db = ["--db", str(server["db"])]
    for fmt in ("md", "csv"):
        mine = run_as_alice(server, ["report", "--server", server["url"], *week, "--format", fmt])
        assert mine == local_output(capsys, "report", *db, *week, "--format", fmt)
        assert mine[0] == 0 and "alice-job" in mine[1] and "bob-secret-job" not in mine[1]
    out = Path(tempfile.mkdtemp(prefix="jobsight-api-report-", dir="/tmp"))
    try:
        os.chown(out, pwd.getpwnam(server["alice"]).pw_uid, -1)
        rc, _, err = run_as_alice(server, ["report", "--server", server["url"], *week, "--format", "html,md",
                                       "--out", str(out / "remote")])
        assert rc == 0, err
        assert local_output(capsys, "report", *db, *week, "--format", "html,md", "--out", str(tmp_path))[0] == 0
        remote = sorted(p.relative_to(out / "remote") for p in (out / "remote").rglob("*") if p.is_file())
        assert remote == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()) and remote
        for rel in remote:
            assert (out / "remote" / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel
    finally:
        shutil.rmtree(out, ignore_errors=True)
    other = run_as_alice(server, ["report", "--server", server["url"], "--week", "2026-W47", "--for",
                              f"user:{server['bob']}"])
    assert other[0] == 2 and other[1] == "" and other[2].count("\n") == 1
    nobody = run_as_alice(server, ["report", "--server", server["url"], *week, "--email"])
    assert nobody[0] == 2 and "--email" in nobody[2]
