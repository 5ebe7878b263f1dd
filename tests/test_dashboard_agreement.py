"""The dashboard, the weekly reports and `jobsight usage` give the same numbers.

On a generated cluster (the demo generator) and on the jobs the real Slurm harness ran (its saved
sacct dumps, sidecar CSV and nvidia-smi log), each ingested as `jobsight ingest` ingests it and the
snapshot published, for every ISO week the data covers and every user and every project in it, and for
the whole cluster:

  (a) the dashboard's own callbacks, POSTed through the real Dash app as an admin (the user and
      project pages, the overview, the users and projects tables and the flagged-jobs grid), and
      the data layer under them at full precision;
  (b) the weekly report: gather(con, iso_week(y, w), settings).build(kind, name).totals, and its
      flag counts per code;
  (c) `jobsight usage --since <monday> --until <sunday> --by user|account|cluster --format json`

agree on SBU, wasted SBU, idle GPU-hours (the reports and the dashboard; `jobsight usage` has no
such column), jobs and flagged jobs. A job counts in a week when it ran in it (any job_day row),
once; its burn is split across the days it ran, so a job crossing a week boundary counts in both
weeks with its share of each.

One job is added by hand as sacct text: GPU utilisation only from Slurm's job-level
gres/gpuutil (0.5 %, no samples: both GPUs idle), running Sunday 15 Nov 19:00 to Monday 16 Nov
03:00 UTC, across the boundary of weeks 46 and 47: 2 GPUs x 5 h = 10 idle GPU-hours in week 46 and
2 x 3 h = 6 in week 47, in all three. (Attributing it to the day it started, as the dashboard once
did, puts all 16 in week 46 and fails here; so do the demo's own jobs that cross a week.)
"""
from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from conftest import post_callback

from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.demo import SUBDIRS, generate
from jobsight.analytics.queries import summaries as queries
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.period import iso_week
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.store.database import Database
from jobsight.analytics.store.snapshot import SnapshotReader, publish
from jobsight.dashboard.app import create_app
from jobsight.dashboard.auth import Auth, Roles

ADMIN = "root"
GPUUTIL_USER = "gpuutil-only"
GPUUTIL_JOB = "99000001"
# sacct text as `sacct --parsable2` prints it: local time (Europe/Amsterdam, UTC+1 in November)
GPUUTIL_SACCT = (
    "JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|AllocTRES|TRESUsageInTot\n"
    f"{GPUUTIL_JOB}|{GPUUTIL_JOB}|{GPUUTIL_USER}|{{account}}|gpu_a100|COMPLETED|2026-11-15T20:00:00|"
    "2026-11-16T04:00:00|08:00:00|billing=256,cpu=36,gres/gpu=2,mem=240G,node=1|gres/gpuutil=0.5\n"
)
GPUUTIL_IDLE = {(2026, 46): 10.0, (2026, 47): 6.0}

# what the dashboard shows: cards with 1 decimal, tables with 2; the data layer at full precision
CARD = 0.05 + 1e-9
TABLE = 0.005 + 1e-9


def _approx(x, abs_=1e-6):
    return pytest.approx(x or 0.0, rel=1e-9, abs=abs_)


def _cli(args: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = jobsight([str(a) for a in args])
    assert rc == 0, (args, out.getvalue()[-2000:])
    return out.getvalue()


@dataclass
class World:
    db: Path
    config: Path
    weeks: list[tuple[int, int]]
    users: list[str]
    accounts: list[str]
    gpu_account: str
    cluster: str
    min_crossing: int         # jobs that run across a week boundary, at least


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# Real Slurm output of the test harness (fixtures/slurm/README.md): its sacct text and JSON dumps of
# the same jobs (both ingested: the merge takes each job once), the sidecar CSV and nvidia-smi log
# of its job 114.
HARNESS = [FIXTURES / "slurm" / n for n in ("harness-sacct.txt", "harness-sacct.json",
                                             "jobsight-jobsight-114-vm-20261122T001601Z-4242.csv", "nvidia-smi-114.csv")]


@pytest.fixture(scope="module", params=["demo", "harness"])
def world(request, tmp_path_factory) -> World:
    """The demo generator's 21 days of a cluster, or the jobs the real Slurm harness ran; either way
    with the gres/gpuutil-only job added by a second ingest (the incremental refresh)."""
    root = tmp_path_factory.mktemp("agreement")
    db, config = root / f"{request.param}.duckdb", root / "jobsight.toml"
    config.write_text("# defaults\n", encoding="utf-8")
    cluster = "demo" if request.param == "demo" else "jobsight"
    if request.param == "demo":
        out = root / "data"
        generate(out, jobs=300, days=21, seed=3)
        ingest = ["ingest", "--db", db, "--config", config, "--timezone", "Europe/Amsterdam", "--cluster", "demo", "--quiet"]
        _cli(ingest + [out / d for d in SUBDIRS if (out / d).is_dir()])
    else:
        ingest = ["ingest", "--db", db, "--config", config, "--timezone", "UTC", "--cluster", "jobsight", "--quiet"]
        _cli(ingest + HARNESS)
    con = duckdb.connect(str(db), read_only=True)
    (account,) = con.execute("SELECT min(account) FROM job WHERE ngpus > 0").fetchone()
    con.close()
    extra = root / "extra"
    extra.mkdir()
    (extra / "sacct-gpuutil.txt").write_text(GPUUTIL_SACCT.format(account=account), encoding="utf-8")
    # a second ingest (the incremental refresh); its times are local, as sacct prints them
    _cli(["ingest", "--db", db, "--config", config, "--timezone", "Europe/Amsterdam", "--cluster", cluster, "--quiet", extra])
    publish(db)
    con = duckdb.connect(str(db), read_only=True)
    first, last = con.execute("SELECT min(day), max(day) FROM job_day").fetchone()
    users = [r[0] for r in con.execute('SELECT DISTINCT "user" FROM job_day WHERE "user" IS NOT NULL ORDER BY 1').fetchall()]
    accounts = [r[0] for r in con.execute("SELECT DISTINCT account FROM job_day WHERE account IS NOT NULL ORDER BY 1").fetchall()]
    con.close()
    weeks, day = [], first.date()
    while day <= last.date():
        y, w, _ = day.isocalendar()
        if (y, w) not in weeks:
            weeks.append((y, w))
        day += dt.timedelta(days=1)
    assert GPUUTIL_USER in users and len(weeks) >= (3 if request.param == "demo" else 2)
    assert len(users) >= (10 if request.param == "demo" else 3) and len(accounts) >= (3 if request.param == "demo" else 2)
    return World(db, config, weeks, users, accounts, account, cluster,
                 3 if request.param == "demo" else 1)


def _monday(week: tuple[int, int]) -> dt.date:
    return dt.date.fromisocalendar(week[0], week[1], 1)


@pytest.fixture(scope="module")
def report(world):
    """(b): per (week, kind, name) the report's totals, its flagged-job counts per code, and the
    week's flagged jobs by the reports' rule (jobs with a job_day row in the week and a flag)."""
    con = Database.open(world.db, str(world.config))
    cfg = con.config
    settings = from_config(cfg)
    out = {}
    try:
        for week in world.weeks:
            ds = gather(con, iso_week(*week), settings)
            since = dt.datetime.combine(_monday(week), dt.time())
            for kind, names in (("user", world.users), ("account", world.accounts), ("admin", ["cluster"])):
                flagged = dict(con.execute(
                    f"SELECT {'NULL' if kind == 'admin' else chr(34) + kind + chr(34)} AS k, "
                    "count(DISTINCT (cluster, job_id_raw)) FROM job_day "
                    "WHERE day >= ? AND day < ? AND (cluster, job_id_raw) IN (SELECT (cluster, job_id_raw) FROM job_flags) GROUP BY ALL",
                    [since, since + dt.timedelta(days=7)]).fetchall())
                for name in names:
                    rep = ds.build(kind, name)
                    out[(week, kind, name)] = {
                        "totals": rep.totals,
                        "flag_codes": {r["code"]: r["jobs"] for r in rep.flag_counts},
                        "flagged_jobs": flagged.get(None if kind == "admin" else name, 0)}
        job_ids = {}
        for week in world.weeks:
            since = dt.datetime.combine(_monday(week), dt.time())
            for user in world.users:
                job_ids[(week, user)] = {r[0] for r in con.execute(
                    "SELECT DISTINCT job_id_raw FROM job_day WHERE day >= ? AND day < ? AND \"user\" = ? "
                    "AND (cluster, job_id_raw) IN (SELECT (cluster, job_id_raw) FROM job_flags)",
                    [since, since + dt.timedelta(days=7), user]).fetchall()}
    finally:
        con.close()
    return out, job_ids


@pytest.fixture(scope="module")
def usage(world):
    """(c): `jobsight usage` per (week, by, key)."""
    out = {}
    for week in world.weeks:
        mon = _monday(week)
        for by in ("user", "account", "cluster"):
            rows = json.loads(_cli(["usage", "--db", world.db, "--config", world.config, "--since", mon.isoformat(),
                                    "--until", (mon + dt.timedelta(days=6)).isoformat(), "--by", by,
                                    "--format", "json"]))
            for r in rows:
                out[(week, by, r[by])] = r
    return out


@pytest.fixture(scope="module")
def dash(world):
    reader = SnapshotReader(world.db)
    with reader.cursor() as h:
        assert "dash_day" in h.tables           # the published snapshot, not the live views
    app = create_app(reader, Auth("header", Roles.from_config({"admins": [ADMIN]})))
    yield app, app.server.test_client(), reader
    reader.close()


def _post(dash, key: str, values: dict) -> dict:
    app, client, _ = dash
    r = post_callback(client, key, app.callback_map[key], values.get, ADMIN)
    assert r.status_code == 200, (key, values, r.status_code, r.data[:300])
    assert b"Something went wrong" not in r.data, (key, values)
    return json.loads(r.data)["response"]


def _walk(node):
    if isinstance(node, list):
        for n in node:
            yield from _walk(n)
    elif isinstance(node, dict):
        if "props" in node:
            yield node
            yield from _walk(node["props"].get("children"))


def _page(dash, prefix: str, week, name: str | None) -> dict:
    """The overview / user / project page of one week: its cards as numbers, the usage chart's SBU
    and wasted SBU summed, and the flag chart's jobs per code (the same for an empty page)."""
    mon = _monday(week)
    values = {f"{prefix}-period.start_date": mon.isoformat(),
              f"{prefix}-period.end_date": (mon + dt.timedelta(days=6)).isoformat(),
              f"{prefix}-grain.value": "week", f"{prefix}-stack.value": "account", f"{prefix}-name.data": name}
    tree = _post(dash, f"{prefix}-content.children", values)[f"{prefix}-content"]["children"]
    nodes = list(_walk(tree))
    # "not priced": a savings total of which nothing is known is no number (never 0)
    cards = {n["props"]["id"]: None if n["props"]["children"] == "not priced" else
             float(n["props"]["children"].replace(",", "")) for n in nodes
             if str(n["props"].get("id", "")).startswith("total-")}
    notes = {n["props"]["id"]: n["props"]["children"] for n in nodes if str(n["props"].get("id", "")).startswith("note-")}
    figs = {n["props"]["id"]: n["props"]["figure"] for n in nodes if "figure" in n["props"]}
    if not cards:                                        # "No jobs in this view ..."
        assert "No jobs" in json.dumps(tree)
        return {"cards": {}, "notes": {}, "chart_sbu": 0.0, "chart_wasted": 0.0, "flag_codes": {}}
    usage = figs["fig-usage"]["data"]
    assert all(len(t["x"]) == 1 for t in usage)          # one bar per project: the week
    codes: dict[str, int] = {}
    for trace in figs["fig-flags"]["data"]:               # one trace per severity
        for code, n in zip(trace["y"], trace["x"]):
            codes[code] = codes.get(code, 0) + int(n)
    return {"cards": cards, "notes": notes, "chart_sbu": sum(t["y"][0] for t in usage if t["type"] == "bar"),
            "chart_wasted": sum(t["y"][0] for t in usage if t["type"] == "scatter"), "flag_codes": codes}


def _table(dash, prefix: str, week) -> dict[str, dict]:
    mon = _monday(week)
    resp = _post(dash, f"..{prefix}-table.rowData...{prefix}-status.children...{prefix}-table.columnDefs..",
                 {f"{prefix}-period.start_date": mon.isoformat(),
                  f"{prefix}-period.end_date": (mon + dt.timedelta(days=6)).isoformat()})
    return {r["name"]: r for r in resp[f"{prefix}-table"]["rowData"]}


def _grid_jobs(dash, week, user: str) -> set[str]:
    mon = _monday(week)
    resp = _post(dash, "..fl-table.rowData...fl-status.children...fl-table.columnDefs..",
                 {"fl-period.start_date": mon.isoformat(), "fl-period.end_date": (mon + dt.timedelta(days=6)).isoformat(),
                  "fl-user.value": user})
    rows = resp["fl-table"]["rowData"]
    assert len(rows) < 500                               # the whole grid, not its first page of rows
    return {r["job_id_raw"] for r in rows}


def _check_page(page: dict, rep: dict, use: dict | None, what: str) -> None:
    t = rep["totals"]
    c = page["cards"] or {k: 0.0 for k in ("total-sbu", "total-wasted", "total-jobs", "total-flagged", "total-idle-gpu",
                                           "total-savings")}
    assert c["total-sbu"] == _approx(t["sbu"], CARD), what
    assert c["total-wasted"] == _approx(t["wasted_sbu"], CARD), what
    # savings: a figure where any is known, "not priced" otherwise (the report's sum is then NULL)
    assert c["total-savings"] == (None if t["savings_sbu"] is None and page["cards"] else _approx(t["savings_sbu"] or 0.0, CARD)), what
    # what the savings total leaves out, as `jobsight usage` counts it
    unpriced = use["unpriced_jobs"] if use else 0
    note = page["notes"].get("note-total-savings")
    assert (note is None) if not unpriced else note.startswith(f"not priced: {unpriced:,} job"), (what, note, unpriced)
    assert c["total-idle-gpu"] == _approx(t["idle_gpu_hours"], CARD), what
    assert c["total-jobs"] == t["jobs"], what
    assert c["total-flagged"] == rep["flagged_jobs"], what
    assert page["chart_sbu"] == _approx(t["sbu"]), what
    assert page["chart_wasted"] == _approx(t["wasted_sbu"]), what
    assert page["flag_codes"] == rep["flag_codes"], what
    if use is None:
        assert t["jobs"] == 0 and not t["sbu"], what     # no usage row: nothing ran
    else:
        assert (use["jobs"], use["sbu"], use["wasted_sbu"] or 0.0) == (t["jobs"], _approx(t["sbu"]), _approx(t["wasted_sbu"])), what


def _check_data_layer(h, f: Filters, rep: dict, what: str) -> None:
    t, d = rep["totals"], queries.totals(h, Scope("admin", ADMIN), f)
    assert (d["sbu"], d["wasted_sbu"], d["idle_gpu_hours"], d["jobs"], d["flagged_jobs"]) == \
        (_approx(t["sbu"]), _approx(t["wasted_sbu"]), _approx(t["idle_gpu_hours"]), t["jobs"], rep["flagged_jobs"]), what
    assert (d["core_hours"], d["gpu_hours"]) == (_approx(t["core_hours"]), _approx(t["gpu_hours"])), what


def test_every_week_user_and_project_agree(world, report, usage, dash):
    reports, flagged_ids = report
    checked = crossing = 0
    with dash[2].cursor() as h:
        for week in world.weeks:
            mon = _monday(week)
            period = dict(since=mon, until=mon + dt.timedelta(days=6))
            users, projects = _table(dash, "ut", week), _table(dash, "pt", week)
            for kind, prefix, names, rows in (("user", "us", world.users, users),
                                              ("account", "pj", world.accounts, projects)):
                for name in names:
                    what = f"{week} {kind} {name}"
                    rep, use = reports[(week, kind, name)], usage.get((week, kind, name))
                    _check_page(_page(dash, prefix, week, name), rep, use, what)
                    _check_data_layer(h, Filters(**period, **{kind: name}), rep, what)
                    row = rows.get(name)
                    t = rep["totals"]
                    if row is None:
                        assert t["jobs"] == 0, what
                    else:
                        assert (row["jobs"], row["flagged_jobs"]) == (t["jobs"], rep["flagged_jobs"]), what
                        assert row["sbu"] == _approx(t["sbu"], TABLE) and row["wasted_sbu"] == _approx(t["wasted_sbu"], TABLE), what
                        for col in ("cpu_eff_pct", "gpu_util_pct", "mem_eff_pct", "time_eff_pct"):
                            assert row[col] == (None if t[col] is None else _approx(t[col], 0.05 + 1e-9)), (what, col)
                    if kind == "user":
                        assert _grid_jobs(dash, week, name) == flagged_ids[(week, name)], what
                    checked += 1
            rep = reports[(week, "admin", "cluster")]
            _check_page(_page(dash, "ov", week, None), rep, usage.get((week, "cluster", world.cluster)), f"{week} cluster")
            _check_data_layer(h, Filters(**period), rep, f"{week} cluster")
            crossing += h.con.execute(
                "SELECT count(*) FROM (SELECT cluster, job_id_raw FROM job_day GROUP BY ALL "
                "HAVING min(day) < ? AND max(day) >= ?)", [mon, mon]).fetchone()[0]
    assert checked == len(world.weeks) * (len(world.users) + len(world.accounts))
    assert crossing >= world.min_crossing     # jobs across a week boundary: the split is really tested


def test_a_gres_gpuutil_only_job_counts_the_same_idle_gpu_hours(world, report, usage, dash):
    reports, _ = report
    con = duckdb.connect(str(world.db) + ".snapshot", read_only=True)
    try:
        src, util, idle = con.execute("SELECT gpu_util_source, gpu_util_pct, idle_gpus FROM job_metrics "
                                      "WHERE job_id_raw = ?", [GPUUTIL_JOB]).fetchone()
        samples = con.execute("SELECT count(*) FROM sample WHERE job_id_raw = ?", [GPUUTIL_JOB]).fetchone()[0]
    finally:
        con.close()
    assert samples == 0 and util == pytest.approx(0.5) and idle == 2, (src, util, idle)
    with dash[2].cursor() as h:
        for week in world.weeks:
            expected = GPUUTIL_IDLE.get(week, 0.0)
            rep = reports[(week, "user", GPUUTIL_USER)]
            assert (rep["totals"]["idle_gpu_hours"] or 0.0) == pytest.approx(expected), week
            page = _page(dash, "us", week, GPUUTIL_USER)
            assert page["cards"].get("total-idle-gpu", 0.0) == pytest.approx(expected), week
            mon = _monday(week)
            f = Filters(since=mon, until=mon + dt.timedelta(days=6), user=GPUUTIL_USER)
            assert queries.totals(h, Scope("admin", ADMIN), f)["idle_gpu_hours"] == pytest.approx(expected), week
            # `jobsight usage` has no idle-GPU column; the job's burn and its waste (both GPUs idle:
            # all of it) split the same way there
            use = usage.get((week, "user", GPUUTIL_USER))
            if expected:
                share = expected / 16.0
                assert use["jobs"] == 1 and use["sbu"] == pytest.approx(256 * 8 * share)
                assert 0 < use["wasted_sbu"] == pytest.approx(rep["totals"]["wasted_sbu"])
                assert page["cards"]["total-jobs"] == 1 and page["cards"]["total-sbu"] == pytest.approx(use["sbu"], abs=CARD)
            else:
                assert use is None and not page["cards"]
        # the whole job, over both weeks
        assert queries.totals(h, Scope("admin", ADMIN), Filters(user=GPUUTIL_USER))["idle_gpu_hours"] == pytest.approx(16.0)


def _cli_flagged(world, *args: str) -> set[tuple[str, str]]:
    """The distinct flagged jobs `jobsight flags` lists (every flag: --limit 0)."""
    rows = json.loads(_cli(["flags", "--db", world.db, "--limit", "0", "--format", "json", *args]))
    return {(r["cluster"], r["job_id_raw"]) for r in rows}


def test_flags_lists_every_flagged_job_that_ran_in_the_period(world, report, dash):
    """For every day, `jobsight flags --since D --until D` lists exactly the flagged jobs that ran
    on D: as many as the dashboard counts, and the reports' own rule (a job_day row on D and a flag)
    names the same jobs; `jobsight usage --by day` burns what the dashboard's totals say. For every
    week and user, the flags a user's week lists are the jobs of the user's weekly report."""
    reports, flagged_ids = report
    days = sorted({_monday(w) + dt.timedelta(days=i) for w in world.weeks for i in range(7)})
    by_day = {r["day"][:10]: r for r in json.loads(_cli(["usage", "--db", world.db, "--since", days[0].isoformat(),
                                                          "--until", days[-1].isoformat(), "--by", "day",
                                                          "--format", "json"]))}
    con = duckdb.connect(str(world.db) + ".snapshot", read_only=True)
    try:
        with dash[2].cursor() as h:
            for day in days:
                d = day.isoformat()
                cli = _cli_flagged(world, "--since", d, "--until", d)
                start = dt.datetime.combine(day, dt.time())
                rule = set(con.execute(
                    "SELECT DISTINCT cluster, job_id_raw FROM job_day "
                    "WHERE day >= ? AND day < ? AND (cluster, job_id_raw) IN (SELECT (cluster, job_id_raw) FROM job_flags)",
                    [start, start + dt.timedelta(days=1)]).fetchall())
                f = Filters(since=day, until=day)
                assert cli == rule and len(cli) == queries.flagged_count(h, Scope("admin", ADMIN), f), d
                t, use = queries.totals(h, Scope("admin", ADMIN), f), by_day.get(d, {})
                assert (use.get("sbu") or 0) == _approx(t["sbu"]), d
                assert (use.get("wasted_sbu") or 0) == _approx(t["wasted_sbu"]), d
    finally:
        con.close()
    for week in world.weeks:      # one listing a week; each user's jobs in it are that user's report's
        mon = _monday(week)
        rows = json.loads(_cli(["flags", "--db", world.db, "--limit", "0", "--format", "json", "--since", mon.isoformat(),
                                "--until", (mon + dt.timedelta(days=6)).isoformat()]))
        for user in world.users:
            got = {(r["cluster"], r["job_id_raw"]) for r in rows if r["user"] == user}
            assert {j for _c, j in got} == flagged_ids[(week, user)], (week, user)
            assert len(got) == reports[(week, "user", user)]["flagged_jobs"], (week, user)
