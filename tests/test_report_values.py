"""`jobsight report` numbers on a hand-made week (ISO 2026-W47, Mon 16 - Sun 22 Nov 2026).
Every expected value is worked out in the comments. The other test_report_* files reuse build_db.

Jobs (charging policy slurm-billing: SBU = billing x hours):
  1 alice proj-a cpu  Mon 16 22:00, 4 h, 4 cores, billing 4, TotalCPU 4 h -> CPU 25 %, 16 SBU, 12 wasted;
                      8 SBU on Mon (6 wasted) and 8 on Tue (6 wasted). 32 GiB asked, 2 GiB peak, 24 h limit.
  2 alice proj-a cpu  Sun 15 22:00, 4 h, 1 core, billing 10, TotalCPU 2 h -> CPU 50 %, 40 SBU, 20 wasted;
                      crosses into W47: 20 SBU (10 wasted) in W46, 20 (10 wasted) on Mon 16. Named <script>.
  3 bob   proj-a gpu  Tue 17 08:00, 1 h, 2 GPUs, billing 67; GPU-a at 50/70 %, GPU-b at 0 -> 30 %,
                      67 SBU, 46.9 wasted, 1 idle GPU for 1 h.
  4 carol proj-b cpu  Wed 18 12:00, 2 h, 2 cores, billing 2, no TotalCPU -> 4 SBU unrated. Named =HYPERLINK(..).
  5 dave  proj-b cpu  Tue 10 Nov (W46), 1 h, 8 cores, billing 8, fully busy: 8 SBU, 0 wasted. No job in W47.
  6 alice proj-a cpu  Mon 2 Nov (W45), 1 h, 6 cores, billing 6, TotalCPU 3 h -> 6 SBU, 3 wasted.
W47: alice 36 SBU (22 wasted), bob 67 (46.9), carol 4 (unrated); cluster 107 SBU, 68.9 wasted.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json

import pytest

from jobsight.analytics.cli import main
from jobsight.analytics.config import parse_config
from jobsight.analytics.queries import data_age as data_age_module
from jobsight.analytics.reports.data import gather
from jobsight.analytics.reports.html import render_html
from jobsight.analytics.reports.markdown import render_markdown
from jobsight.analytics.reports.period import iso_week
from jobsight.analytics.reports.settings import from_config
from jobsight.analytics.reports.text import render_text
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

GiB = 2**30
XSS = "<script>alert(1)</script>"
FORMULA = '=HYPERLINK("http://evil.example/","click")'
W47 = iso_week(2026, 47)
CONFIG = {"budgets": {"proj-a": 1000}, "report": {"budget_period": "month"}}


def _job(con, job_id, user, account, start, hours, ncpus, billing, partition="cpu", **kw):
    row = dict(cluster="c1", job_id=job_id, job_id_raw=job_id, state="COMPLETED", source="test", user=user,
               account=account, partition=partition, start_time=start, elapsed_s=int(hours * 3600),
               end_time=start + dt.timedelta(hours=hours), ncpus=ncpus, billing=billing)
    row.update(kw)
    cols = ", ".join(f'"{c}"' for c in row)
    con.execute(f"INSERT INTO job ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def _gpu_samples(con, job_id, device, utils, start):
    for i, u in enumerate(utils):
        con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                    "mem_total_bytes, source) VALUES ('c1', ?, 'n1', ?, ?, ?, 1e9, 40e9, 'sidecar')",
                    [job_id, device, start + dt.timedelta(seconds=10 * i), u])


def build_db(path, config: dict | None = None):
    """The week described in the module docstring; returns (connection, Config)."""
    con = Database.open(path, parse_config(config if config is not None else CONFIG))
    cfg = con.config
    d = dt.datetime
    _job(con, "1", "alice", "proj-a", d(2026, 11, 16, 22), 4, 4, 4, cpu_time_s=4 * 3600, timelimit_s=86400,
         mem_alloc_bytes=32 * GiB, mem_peak_bytes=2 * GiB, job_name="train")
    _job(con, "2", "alice", "proj-a", d(2026, 11, 15, 22), 4, 1, 10, cpu_time_s=2 * 3600, job_name=XSS)
    _job(con, "3", "bob", "proj-a", d(2026, 11, 17, 8), 1, 2, 67, partition="gpu", ngpus=2, gpu_type="a100",
         cpu_time_s=3600, timelimit_s=7200, mem_alloc_bytes=8 * GiB, mem_peak_bytes=GiB, job_name="gpu-job")
    _gpu_samples(con, "3", "GPU-a", [50, 70], d(2026, 11, 17, 8))
    _gpu_samples(con, "3", "GPU-b", [0, 0], d(2026, 11, 17, 8))
    _job(con, "4", "carol", "proj-b", d(2026, 11, 18, 12), 2, 2, 2, job_name=FORMULA)
    _job(con, "5", "dave", "proj-b", d(2026, 11, 10, 9), 1, 8, 8, cpu_time_s=8 * 3600)
    _job(con, "6", "alice", "proj-a", d(2026, 11, 2, 9), 1, 6, 6, cpu_time_s=3 * 3600)
    store.refresh(con)      # rows written by hand: compute their stored results, as an ingest does
    return con, cfg


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    con, cfg = build_db(tmp_path_factory.mktemp("report") / "r.duckdb")
    data = gather(con, W47, from_config(cfg))
    con.close()
    return data


def test_user_report_numbers(ds):
    alice = ds.build("user", "alice")
    t = alice.totals
    assert t["jobs"] == 2
    assert t["sbu"] == pytest.approx(36.0) and t["wasted_sbu"] == pytest.approx(22.0)
    assert t["wasted_pct"] == pytest.approx(100 * 22 / 36)
    # CPU allocation-weighted over W47 core-hours: job 1 at 25 % on 16, job 2 at 50 % on 2 -> 500 / 18
    assert t["cpu_eff_pct"] == pytest.approx(500 / 18)
    assert t["gpu_util_pct"] is None and not t["unrated_sbu"]
    # previous four weeks: W43 0, W44 0, W45 6 (job 6), W46 20 (first half of job 2)
    assert [(w["label"], w["sbu"], w["wasted_sbu"]) for w in alice.trend] == [
        ("2026-W43", 0.0, 0.0), ("2026-W44", 0.0, 0.0), ("2026-W45", pytest.approx(6.0), pytest.approx(3.0)),
        ("2026-W46", pytest.approx(20.0), pytest.approx(10.0)), ("2026-W47", pytest.approx(36.0), pytest.approx(22.0))]
    # Monday: 20 of job 2 (10 wasted) + 8 of job 1 (6 wasted); Tuesday: 8 of job 1 (6 wasted)
    daily = {d["day"].day: (d["sbu"], d["used_sbu"], d["wasted_sbu"]) for d in alice.daily}
    assert len(daily) == 7
    assert daily[16] == (pytest.approx(28.0), pytest.approx(12.0), pytest.approx(16.0))
    assert daily[17] == (pytest.approx(8.0), pytest.approx(2.0), pytest.approx(6.0))
    assert all(daily[d] == (0.0, 0.0, 0.0) for d in (18, 19, 20, 21, 22))
    # top jobs: job 1 (12 wasted) before job 2 (10 wasted in W47), with the requests that would have fit
    assert [j["job_id"] for j in alice.top_jobs] == ["1", "2"]
    sbatch = alice.top_jobs[0]["sbatch_lines"].splitlines()
    assert "#SBATCH --mem=3G" in sbatch            # 2 GiB peak x 1.2, whole GiB up
    assert "#SBATCH --time=06:00:00" in sbatch     # 4 h x 1.5
    assert "#SBATCH --cpus-per-task=1" in sbatch   # one of four cores busy
    # nothing of other users
    assert {j["user"] for j in alice.top_jobs} == {"alice"}
    assert "bob" not in repr(alice.top_jobs) and "carol" not in repr(alice.flag_counts)


def test_gpu_and_unrated_users(ds):
    bob = ds.build("user", "bob").totals
    assert (bob["sbu"], bob["wasted_sbu"]) == (pytest.approx(67.0), pytest.approx(46.9))
    assert bob["gpu_util_pct"] == pytest.approx(30.0) and bob["idle_gpu_hours"] == pytest.approx(1.0)
    carol = ds.build("user", "carol").totals
    assert carol["sbu"] == pytest.approx(4.0) and carol["wasted_sbu"] is None and carol["unrated_sbu"] == pytest.approx(4.0)
    dave = ds.build("user", "dave")
    assert not dave.has_jobs and dave.totals["sbu"] == 0.0
    assert "no jobs" in dave.summary
    assert ds.subjects("user") == ["alice", "bob", "carol"]   # dave ran nothing in W47


def test_account_report_members_and_budget(ds):
    a = ds.build("account", "proj-a")
    assert a.totals["sbu"] == pytest.approx(36 + 67) and a.totals["wasted_sbu"] == pytest.approx(22 + 46.9)
    assert [(m["user"], m["wasted_sbu"]) for m in a.members] == [("bob", pytest.approx(46.9)), ("alice", pytest.approx(22.0))]
    # November up to the end of W47: job 6 (6) + job 2 (40, all in November) + job 1 (16) + job 3 (67) = 129
    [budget] = a.budgets
    assert budget["burned_sbu"] == pytest.approx(129.0)
    assert budget["remaining_sbu"] == pytest.approx(871.0)
    assert budget["period_start"] == dt.date(2026, 11, 1)
    b = ds.build("account", "proj-b")
    assert b.budgets == [] and [m["user"] for m in b.members] == ["carol"]


def test_admin_report(ds):
    adm = ds.build("admin", "cluster")
    t = adm.totals
    assert t["jobs"] == 4 and t["sbu"] == pytest.approx(107.0) and t["wasted_sbu"] == pytest.approx(68.9)
    assert t["unrated_sbu"] == pytest.approx(4.0) and t["idle_gpu_hours"] == pytest.approx(1.0)
    assert [(p["partition"], p["sbu"]) for p in adm.partitions] == [("gpu", pytest.approx(67.0)), ("cpu", pytest.approx(40.0))]
    assert [(a["account"], a["sbu"]) for a in adm.accounts] == [("proj-a", pytest.approx(103.0)), ("proj-b", pytest.approx(4.0))]
    assert [u["user"] for u in adm.leaderboard] == ["bob", "alice", "carol"]
    flags = {f["code"]: f["jobs"] for f in adm.flag_counts}
    assert flags["gpu_unused_devices"] == 1 and flags["mem_oversized"] == 2   # jobs 1 and 3
    # trend: W46 holds job 5 (8) and the first half of job 2 (20)
    assert [w["sbu"] for w in adm.trend][-2:] == [pytest.approx(28.0), pytest.approx(107.0)]


def test_all_users_sum_to_admin(ds):
    adm = ds.build("admin", "cluster")
    users = [ds.build("user", u) for u in ds.subjects("user")]
    for key in ("jobs", "sbu", "core_hours", "gpu_hours", "idle_gpu_hours"):
        assert sum(u.totals[key] or 0 for u in users) == pytest.approx(adm.totals[key])
    assert sum(u.totals["wasted_sbu"] or 0 for u in users) == pytest.approx(adm.totals["wasted_sbu"])
    for i, day in enumerate(adm.daily):
        assert sum(u.daily[i]["sbu"] for u in users) == pytest.approx(day["sbu"])
    accounts = [ds.build("account", a) for a in ds.subjects("account")]
    assert sum(a.totals["sbu"] for a in accounts) == pytest.approx(adm.totals["sbu"])


def test_report_sums_equal_jobsight_usage(tmp_path):
    db = tmp_path / "u.duckdb"
    build_db(db)[0].close()
    rc, out, _ = run_cli(["usage", "--db", str(db), "--by", "user", "--since", "2026-11-16",
                          "--until", "2026-11-22", "--format", "json"])
    assert rc == 0
    usage = {r["user"]: r for r in json.loads(out)}
    rc, _, err = run_cli(["report", "--db", str(db), "--week", "2026-W47", "--for", "all-users", "--for", "admin",
                          "--format", "csv", "--out", str(tmp_path / "rep")])
    assert rc == 0, err
    folder = tmp_path / "rep" / "2026-W47"
    assert sorted(p.name for p in folder.iterdir()) == ["admin-cluster.csv", "user-alice.csv", "user-bob.csv", "user-carol.csv"]

    def totals(name):
        with open(folder / name, newline="", encoding="utf-8") as f:
            return next(r for r in csv.DictReader(f) if r["section"] == "totals")
    assert set(usage) == {"alice", "bob", "carol"}
    for user, u in usage.items():
        t = totals(f"user-{user}.csv")
        assert float(t["sbu"]) == pytest.approx(u["sbu"])
        assert int(t["jobs"]) == u["jobs"]
        expected = pytest.approx(u["wasted_sbu"]) if u["wasted_sbu"] is not None else None
        assert (float(t["wasted_sbu"]) if t["wasted_sbu"] else None) == expected
    assert float(totals("admin-cluster.csv")["sbu"]) == pytest.approx(sum(u["sbu"] for u in usage.values()))


def test_since_until_window_and_stdout(tmp_path):
    db = tmp_path / "s.duckdb"
    build_db(db)[0].close()
    # Sun 15 - Mon 16: job 2 entirely (40 SBU) and the first 2 h of job 1 (8 SBU)
    rc, out, err = run_cli(["report", "--db", str(db), "--since", "2026-11-15", "--until", "2026-11-16",
                            "--for", "user:alice", "--format", "csv"])
    assert rc == 0, err
    t = next(r for r in csv.DictReader(io.StringIO(out)) if r["section"] == "totals")
    assert float(t["sbu"]) == pytest.approx(48.0) and t["window"] == "2026-11-15_2026-11-16"


def test_bad_options_are_clear_errors(tmp_path):
    db = tmp_path / "b.duckdb"
    build_db(db)[0].close()
    for argv, needle in ((["--week", "2026-W60", "--for", "admin"], "no ISO week 60"),
                         (["--week", "2026-47", "--for", "admin"], "ISO week like"),
                         (["--week", "last", "--for", "boss"], "--for 'boss'"),
                         (["--week", "last", "--for", "admin", "--format", "pdf"], "--format 'pdf'"),
                         (["--week", "last", "--for", "admin", "--dry-run"], "go with --email")):
        rc, _, err = run_cli(["report", "--db", str(db)] + argv)
        assert rc == 2 and needle in err, (argv, err)


def test_files_are_named_predictably(tmp_path):
    db = tmp_path / "f.duckdb"
    build_db(db)[0].close()
    rc, out, err = run_cli(["report", "--db", str(db), "--week", "2026-W47", "--for", "user:alice", "--for",
                            "account:proj-a", "--for", "admin", "--for", "user:dave", "--format", "html,md,csv",
                            "--out", str(tmp_path / "reports")])
    assert rc == 0 and out == "", err
    names = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "reports").rglob("*.*"))
    from jobsight.analytics.reports.html import plotly_js_name
    assert names == sorted([f"reports/2026-W47/{stem}.{ext}" for stem in
                            ("user-alice", "account-proj-a", "admin-cluster", "user-dave") for ext in ("html", "md", "csv")]
                           + [f"reports/2026-W47/{plotly_js_name()}"])     # the HTML reports' one copy of Plotly
    # dave asked for by name: a report saying he ran nothing (but never an e-mail, see test_report_email)
    assert "ran no jobs" in (tmp_path / "reports/2026-W47/user-dave.md").read_text(encoding="utf-8")


def test_named_subjects_gather_only_their_rows_and_match_the_whole_cluster(tmp_path):
    """`--for user:X` / `--for account:A` reads only those subjects' rows: the same reports as when
    the whole cluster is gathered, and nothing else can be built from them."""
    from jobsight.analytics.reports.csvout import render_csv
    from jobsight.analytics.reports.html import render_html
    from jobsight.analytics.reports.markdown import render_markdown
    at = dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)

    def render_html_at(rep):
        return render_html(rep, generated=at)      # the same "generated" line in both
    con, cfg = build_db(tmp_path / "n.duckdb")
    settings = from_config(cfg)
    whole = gather(con, W47, settings)
    asked = [("user", u) for u in ("alice", "bob", "carol", "dave")] + [("account", a) for a in ("proj-a", "proj-b")]
    for kind, name in asked:
        one = gather(con, W47, settings, **{f"{kind}s": [name]})
        for render in (render_markdown, render_csv, render_html_at):
            assert render(one.build(kind, name)) == render(whole.build(kind, name)), (kind, name, render)
    both = gather(con, W47, settings, users=["alice"], accounts=["proj-b"])
    assert render_csv(both.build("user", "alice")) == render_csv(whole.build("user", "alice"))
    assert render_csv(both.build("account", "proj-b")) == render_csv(whole.build("account", "proj-b"))
    alice = gather(con, W47, settings, users=["alice"])
    assert {r["user"] for (scope, _k), rows in alice.totals.items() if scope == "user" for r in rows} == {"alice"}
    assert {j["user"] for rows in alice.top.values() for j in rows} == {"alice"}
    for kind, name in (("user", "bob"), ("account", "proj-a"), ("admin", "cluster")):
        with pytest.raises(ValueError):
            alice.build(kind, name)
    with pytest.raises(ValueError):
        alice.subjects("user")
    con.close()


def test_trend_sentence_says_the_same_when_the_rounded_change_is_zero(ds):
    """A burn equal to the average up to float noise reads "about the same", never "0% less"."""
    import dataclasses

    from jobsight.analytics.reports.summary import summarise
    alice = ds.build("user", "alice")
    avg = sum(w["sbu"] for w in alice.trend[:-1]) / (len(alice.trend) - 1)
    for noise in (1 - 1e-15, 1.0, 1 + 1e-15, 1.004, 0.996):
        rep = dataclasses.replace(alice, totals={**alice.totals, "sbu": avg * noise})
        assert "That is about the same as your average" in summarise(rep), noise
    rep = dataclasses.replace(alice, totals={**alice.totals, "sbu": avg * 1.2})
    assert "That is 20% more than your average" in summarise(rep)


def test_an_unpriced_saving_is_not_shown_as_zero(ds):
    """bob's only job has advice whose price is unknown (savings_sbu NULL in job_savings): his week
    saves an unknown amount, shown as "not priced" in the totals, the trend and the job list,
    as `jobsight usage` shows it unknown; never 0.0."""
    from jobsight.analytics.reports.markdown import render_markdown
    rep = ds.build("user", "bob")
    assert rep.totals["savings_sbu"] is None and rep.trend[-1]["savings_sbu"] is None
    assert rep.trend[-2]["savings_sbu"] == 0.0          # a week without jobs saves nothing, known
    md = render_markdown(rep)
    week = next(line for line in md.splitlines() if line.startswith("| 2026-W47 |"))
    assert week.endswith("| not priced |"), week
    job = next(line for line in md.splitlines() if line.startswith("| 3 |"))
    assert "| not priced |" in job, job


def test_every_report_says_how_old_the_data_is(ds, tmp_path, monkeypatch):
    # the newest accounting time is job 4's end, Wed 18 Nov 14:00; these tests run later than a day after
    said = "Data up to 2026-11-18 14:00 UTC (more than a day old)"
    for kind, name in (("user", "alice"), ("account", "proj-b"), ("admin", "cluster")):
        rep = ds.build(kind, name)
        assert said in render_text(rep).splitlines()[:4]
        assert said in render_markdown(rep).splitlines()[:4]
        assert f'<p class="period data-age old" id="data-age">{said}</p>' in render_html(rep, charts=False)
    # within a day of it: no warning
    monkeypatch.setattr(data_age_module, "utc_now", lambda: dt.datetime(2026, 11, 19, 13, 0))
    con, cfg = build_db(tmp_path / "fresh.duckdb")
    rep = gather(con, W47, from_config(cfg)).build("user", "alice")
    con.close()
    assert '<p class="period data-age" id="data-age">Data up to 2026-11-18 14:00 UTC</p>' in render_html(rep, charts=False)
    assert "Data up to 2026-11-18 14:00 UTC" in render_text(rep).splitlines() and "more than a day" not in render_text(rep)
