"""/metrics (dashboard/prometheus.py, sql/views/85_prometheus.sql): who gets it, and that its values
are those of `jobsight usage` and the stored tables, parsed with prometheus_client's own parser.

A hand-made database, cluster c1, charging table 1 SBU per core-hour (GPUs 10 per GPU-hour), the
scrape pinned at NOW = Tuesday 2026-11-17 12:00 UTC:

  1  alice  HOSTILE  cpu  4 cores, 1 busy, 2 h yesterday: 8 SBU, cpu_serial_on_many -> savings
  2  bob    proj-b   gpu  1 GPU at 10 %, 1 h three days ago
  3  bob    proj-b   cpu  20 days ago: in the 30-day window only
  4  bob    proj-b   cpu  40 days ago: in neither window
  5  bob    proj-b   gpu  RUNNING 2 h, 2 GPUs: GPU-a idle for the last 60 minutes (idle now), GPU-b busy
  6  alice  HOSTILE  cpu  RUNNING 1 h, no samples
and one finished ingest 5 minutes before NOW.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import io
import json
import threading
import urllib.error
import urllib.request

import pytest
from conftest import require_service

import jobsight.analytics.commands.dashboard as dashboard_cli
from jobsight.analytics.cli import main as jobsight_main
from jobsight.analytics.config import load_config
from jobsight.analytics.errors import UserError
from jobsight.analytics.queries import prometheus
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard import prometheus as prometheus_route
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles, hash_password

parser = pytest.importorskip("prometheus_client.parser")

NOW = dt.datetime(2026, 11, 17, 12, 0)
HOSTILE = 'pr"oj\\a\nb'         # quote, backslash, newline: a name sacctmgr would take from anyone
TOKEN = "0123456789abcdef-metrics-token"
CONFIG = """
[charging]
policy = "table"
[[charging.rates]]
partition = "*"
per_core_h = 1
per_gpu_h = 10
[roles]
admins = ["root"]
[dashboard]
metrics_token_file = "token.txt"
"""
GiB = 2**30


def add_job(con, jid, user, account, partition, start, hours, state="COMPLETED", ncpus=4, ngpus=0, cpu_h=None):
    end = None if state == "RUNNING" else start + dt.timedelta(hours=hours)
    con.execute(
        'INSERT INTO job (cluster, job_id, job_id_raw, "user", account, "partition", state, submit_time, start_time, '
        "end_time, elapsed_s, timelimit_s, ncpus, ngpus, cpu_time_s, mem_req_bytes, mem_alloc_bytes, mem_peak_bytes, "
        "source) VALUES ('c1', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'test')",
        [jid, jid, user, account, partition, state, start - dt.timedelta(minutes=5), start, end, int(hours * 3600),
         int(hours * 3600 * 1.2), ncpus, ngpus, (cpu_h if cpu_h is not None else hours * ncpus) * 3600,
         4 * GiB, 4 * GiB, 3 * GiB])


def add_gpu(con, jid, device, index, utils, last):
    """Samples a minute apart, the last at ``last``."""
    for i, u in enumerate(utils):
        con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, gpu_index, source) "
                    "VALUES ('c1', ?, 'n1', ?, ?, ?, ?, 'sidecar')",
                    [jid, device, last - dt.timedelta(minutes=len(utils) - 1 - i), u, index])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("prom")
    (d / "jobsight.toml").write_text(CONFIG)
    (d / "token.txt").write_text(TOKEN + "\n")
    path = d / "jobs.duckdb"
    cfg = load_config(d / "jobsight.toml")
    with Database.open(path, cfg, say=None) as db:
        con = db.con
        day = dt.timedelta(days=1)
        add_job(con, "1", "alice", HOSTILE, "cpu", NOW - day - dt.timedelta(hours=2), 2, cpu_h=2)
        add_job(con, "2", "bob", "proj-b", "gpu", NOW - 3 * day, 1, ncpus=8, ngpus=1)
        add_gpu(con, "2", "GPU-x", 0, [10.0] * 60, NOW - 3 * day + dt.timedelta(minutes=59))
        add_job(con, "3", "bob", "proj-b", "cpu", NOW - 20 * day, 3)
        add_job(con, "4", "bob", "proj-b", "cpu", NOW - 40 * day, 5)
        add_job(con, "5", "bob", "proj-b", "gpu", NOW - dt.timedelta(hours=2), 2, "RUNNING", ncpus=8, ngpus=2)
        add_gpu(con, "5", "GPU-a", 0, [80.0] * 61 + [0.0] * 60, NOW)
        add_gpu(con, "5", "GPU-b", 1, [90.0] * 121, NOW)
        add_job(con, "6", "alice", HOSTILE, "cpu", NOW - dt.timedelta(hours=1), 1, "RUNNING", ncpus=2)
        con.execute("INSERT INTO ingest_log (ingest_id, source_file, format, started_at, finished_at) "
                    "VALUES (1, 'sacct:test', 'sacct', ?, ?)", [NOW - dt.timedelta(minutes=6), NOW - dt.timedelta(minutes=5)])
        store.refresh(con)
    publish(path)
    return d


@pytest.fixture(scope="module")
def app(site):
    """The app as `jobsight dashboard --auth header --config ...` builds it."""
    p = argparse.ArgumentParser()
    dashboard_cli.configure(p)
    args = p.parse_args(["--db", str(site / "jobs.duckdb"), "--config", str(site / "jobsight.toml"),
                         "--auth", "header"])
    a = dashboard_cli.build(args)
    yield a
    a.server.config["JOBSIGHT_READER"].close()


@pytest.fixture(autouse=True)
def pinned_now(monkeypatch):
    monkeypatch.setattr(prometheus, "utc_now", lambda: NOW)


def scrape(client, **headers):
    return client.get("/metrics", headers=headers)


def samples(text: str) -> dict[tuple, float]:
    """{(metric, sorted labels): value}, every family a gauge with HELP, and no sample twice."""
    out: dict[tuple, float] = {}
    for fam in parser.text_string_to_metric_families(text):
        assert fam.type == "gauge" and fam.documentation and fam.name.startswith("jobsight_")
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, key
            out[key] = s.value
    return out


def value(got, name, **labels):
    return got[(name, tuple(sorted(labels.items())))]


def usage(site, since: dt.date) -> dict[str, dict]:
    """`jobsight usage --by account` for [since, NOW's day], as JSON rows by account."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = jobsight_main(["usage", "--db", str(site / "jobs.duckdb"), "--config", str(site / "jobsight.toml"),
                            "--by", "account", "--since", since.isoformat(), "--until", NOW.date().isoformat(),
                            "--format", "json"])
    assert rc == 0
    return {r["account"]: r for r in json.loads(buf.getvalue())}


def test_admin_scrape_equals_usage_and_the_stored_tables(app, site):
    r = scrape(app.server.test_client(), **{"X-Forwarded-User": "root"})
    assert r.status_code == 200 and r.headers["Content-Type"] == prometheus_route.CONTENT_TYPE
    text = r.get_data(as_text=True)
    assert 'account="pr\\"oj\\\\a\\nb"' in text          # escaped as the format says, one line per sample
    got = samples(text)

    # burn, waste and savings per account: what `jobsight usage` gives for the same days; per account
    # and partition: the usage_summary rows it runs, narrowed to the partition
    metrics = (("jobsight_burn_sbu", "sbu"), ("jobsight_wasted_sbu", "wasted_sbu"), ("jobsight_savings_sbu", "savings_sbu"))
    checked = 0
    windows = (("7d", 7), ("30d", 30))
    by_account = {w: usage(site, NOW.date() - dt.timedelta(days=days - 1)) for w, days in windows}
    with Database.open(site / "jobs.duckdb", read_only=True) as db:
        for window, days in windows:
            since = NOW.date() - dt.timedelta(days=days - 1)
            mine = [(dict(k[1]), k[0], v) for k, v in got.items() if dict(k[1]).get("window") == window]
            want = by_account[window]
            assert {labels["account"] for labels, _m, _v in mine} == set(want)
            for account, row in want.items():
                for metric, col in metrics:
                    total = sum(v for labels, m, v in mine if m == metric and labels["account"] == account)
                    assert total == pytest.approx(row[col], rel=1e-9), (window, account, metric)
                    checked += 1
            for partition in ("cpu", "gpu"):
                rows = db.rows("SELECT * FROM usage_summary('account', ?, ?, only_partition := ?)",
                               [since, NOW.date() + dt.timedelta(days=1), partition])
                assert {r["key"] for r in rows} == {labels["account"] for labels, m, _v in mine
                                                    if m == "jobsight_burn_sbu" and labels["partition"] == partition}
                for r in rows:
                    labels = dict(cluster="c1", account=r["key"], partition=partition, window=window)
                    for metric, col in metrics:
                        assert value(got, metric, **labels) == pytest.approx(r[col], rel=1e-9), (metric, labels)
                        checked += 1
    assert checked == 3 * (2 + 2) + 3 * 5
    # the figures themselves, so that an empty comparison cannot pass: 8 SBU (4 cores x 2 h) + the
    # running job's hour (2 cores), of which following the advice (1 core) saves 6
    hostile7 = dict(cluster="c1", account=HOSTILE, partition="cpu", window="7d")
    assert value(got, "jobsight_burn_sbu", **hostile7) == pytest.approx(10)
    assert value(got, "jobsight_savings_sbu", **hostile7) == pytest.approx(6)
    assert value(got, "jobsight_burn_sbu", cluster="c1", account="proj-b", partition="cpu", window="30d") \
        == pytest.approx(12)                                                   # job 3 only, not job 4
    assert ("jobsight_burn_sbu", tuple(sorted(dict(cluster="c1", account="proj-b", partition="cpu",
                                                   window="7d").items()))) not in got

    # running jobs and idle GPUs: the running_jobs view's rows
    with Database.open(site / "jobs.duckdb", read_only=True) as db:
        running = db.rows('SELECT account, "partition", count(*) AS n, sum(gpus_idle_now) AS idle, '
                          "sum(sbu_per_h) AS sbu_h FROM running_jobs GROUP BY ALL")
    assert len(running) == 2
    for row in running:
        labels = dict(cluster="c1", account=row["account"], partition=row["partition"])
        assert value(got, "jobsight_running_jobs", **labels) == row["n"] == 1
        assert value(got, "jobsight_idle_gpus", **labels) == row["idle"]
        assert value(got, "jobsight_running_sbu_per_hour", **labels) == pytest.approx(row["sbu_h"])
    bob = dict(cluster="c1", account="proj-b", partition="gpu")
    assert (value(got, "jobsight_idle_gpus", **bob), value(got, "jobsight_running_gpus", **bob)) == (1, 2)
    assert value(got, "jobsight_running_sbu_per_hour", **bob) == pytest.approx(8 + 2 * 10)
    assert value(got, "jobsight_idle_gpu_sbu_per_hour", **bob) == pytest.approx(14)    # half of it: 1 of 2 GPUs
    assert value(got, "jobsight_idle_gpus", cluster="c1", account=HOSTILE, partition="cpu") == 0

    # ingest lag: the ingest 5 minutes ago, samples up to NOW, the newest accounting time (job 5's start)
    assert value(got, "jobsight_last_ingest_age_seconds") == 300
    assert value(got, "jobsight_newest_sample_age_seconds") == 0
    assert value(got, "jobsight_newest_accounting_age_seconds") == 3600


def test_who_gets_the_metrics(app):
    c = app.server.test_client()
    assert scrape(c, **{"X-Forwarded-User": "root"}).status_code == 200
    denied = scrape(c, **{"X-Forwarded-User": "alice"})                 # a plain user
    assert denied.status_code == 403 and b"jobsight_" not in denied.data
    assert scrape(c).status_code == 403                                 # header mode, no user
    ok = scrape(c, Authorization=f"Bearer {TOKEN}")                     # Prometheus, not via the proxy
    assert ok.status_code == 200 and b"jobsight_burn_sbu{" in ok.data
    for wrong in (TOKEN[:-1], TOKEN + "x", "", "Bearer"):
        r = scrape(c, Authorization=f"Bearer {wrong}", **{"X-Forwarded-User": "root"})
        assert r.status_code == 401 and b"jobsight_" not in r.data and "Bearer" in r.headers["WWW-Authenticate"]
    # the token opens the metrics, not the dashboard
    assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 403


def test_over_a_real_server_with_basic_auth(site):
    require_service(importlib.util.find_spec("waitress") is not None, "waitress not installed (pip install waitress)")
    import waitress.server as waitress
    users = {"root": hash_password("root-pass"), "alice": hash_password("alice-pass")}
    reader = SnapshotReader(site / "jobs.duckdb")
    app = create_app(reader, Auth("basic", Roles.from_config({"admins": ["root"]}), users=users,
                                  metrics_token=TOKEN), url_prefix="/jobsight/")
    server = waitress.create_server(app.server, host="127.0.0.1", port=0, threads=2)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()

    def get(path, auth=None):
        req = urllib.request.Request(f"http://127.0.0.1:{server.effective_port}{path}")
        if auth:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def basic(user, pw):
        import base64
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
    try:
        status, body = get("/jobsight/metrics", basic("root", "root-pass"))
        assert status == 200
        got = samples(body)
        assert value(got, "jobsight_idle_gpus", cluster="c1", account="proj-b", partition="gpu") == 1
        status, body = get("/jobsight/metrics", f"Bearer {TOKEN}")
        assert status == 200 and samples(body) == got
        for auth, want in ((None, 401), (basic("alice", "alice-pass"), 403), (basic("root", "wrong"), 401),
                           ("Bearer not-the-token-at-all", 401)):
            status, body = get("/jobsight/metrics", auth)
            assert status == want and "jobsight_" not in body, auth
    finally:
        server._map.clear()         # the loop ends at its next turn; closing under its select() races
        t.join(10)
        server.close()
        reader.close()


@pytest.mark.parametrize("content,error", [("short\n", "at least 16"), ("two words here, long enough\n", "without blanks")])
def test_a_bad_token_file_stops_the_start(site, tmp_path, content, error):
    (tmp_path / "token.txt").write_text(content)
    (tmp_path / "jobsight.toml").write_text(CONFIG)
    p = argparse.ArgumentParser()
    dashboard_cli.configure(p)
    args = p.parse_args(["--db", str(site / "jobs.duckdb"), "--config", str(tmp_path / "jobsight.toml")])
    with pytest.raises(UserError, match=error) as exc:
        dashboard_cli.build(args)
    assert str(tmp_path / "token.txt") in str(exc.value)
    (tmp_path / "token.txt").unlink()
    with pytest.raises(UserError, match="cannot read the metrics token"):
        dashboard_cli.build(args)


def test_dashboard_section_of_the_config(tmp_path):
    from jobsight.analytics.config import ConfigError, parse_config
    (tmp_path / "jobsight.toml").write_text('[dashboard]\nmetrics_token_file = "sub/tok"\n')
    assert load_config(tmp_path / "jobsight.toml").metrics_token_file == tmp_path / "sub" / "tok"   # beside the file
    assert parse_config({}).metrics_token_file is None
    (tmp_path / "bad.toml").write_text("[dashboard]\nmetrics_token = 'x'\n")
    with pytest.raises(ConfigError, match=r"bad.toml, line 2: unknown key dashboard.metrics_token \(known: metrics_token_file, munge\)"):
        load_config(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match="dashboard.metrics_token_file must be a string"):
        parse_config({"dashboard": {"metrics_token_file": 3}})
