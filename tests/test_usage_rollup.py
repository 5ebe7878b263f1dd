"""`jobsight usage` (usage_summary, sql/views/40_usage.sql) adds up the stored per-day summaries
(dash_day); the figures are those of the per-job-day rows (job_day) added up job by job, each job
counted once per group however many days it ran.

On generated jobs (seeded: two clusters, users, accounts and one without an account, CPU and GPU
partitions, runs from none to 40 days that cross days, ISO weeks and months, jobs with an unknown
number of cores, without an efficiency, without a known saving), stored by a full refresh and then
grown by an incremental one, every grouping, period (all time, a month, a range starting mid-week
and one starting mid-day) and filter (user, account, partition, cluster) gives through the read
API what the job_day rows give aggregated directly (REFERENCE, the definition usage_summary had
over job_day): the same keys and job counts, the same sums to the last rounding of a sum.
"""
from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from test_dashboard_queries import GiB, add_job

from jobsight.analytics.config import parse_config
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.queries.usage import BY, COLUMNS, EARLIEST, LATEST, usage
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

# job_day's rows aggregated job by job: a job counts once per group (count DISTINCT)
REFERENCE = """
SELECT CASE $by WHEN 'user' THEN "user" WHEN 'account' THEN account WHEN 'partition' THEN "partition"
               WHEN 'cluster' THEN cluster WHEN 'day' THEN strftime(day, '%Y-%m-%d')
               WHEN 'week' THEN strftime(date_trunc('week', day), '%G-W%V')
               WHEN 'month' THEN strftime(day, '%Y-%m') END                 AS "key",
       count(DISTINCT (cluster, job_id_raw))                                  AS jobs,
       sum(sbu)                                                               AS sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       sum(wasted_sbu) * 100.0 / NULLIF(sum(sbu) FILTER (WHERE wasted_sbu IS NOT NULL), 0) AS wasted_pct,
       sum(savings_sbu)                                                       AS savings_sbu,
       sum(savings_sbu) * 100.0 / NULLIF(sum(sbu) FILTER (WHERE savings_sbu IS NOT NULL), 0) AS savings_pct,
       count(DISTINCT (cluster, job_id_raw)) FILTER (WHERE savings_sbu IS NULL) AS unpriced_jobs,
       COALESCE(sum(wasted_sbu) FILTER (WHERE savings_sbu IS NULL), 0)        AS unpriced_wasted_sbu,
       sum(core_hours)                                                        AS core_hours,
       sum(gpu_hours)                                                         AS gpu_hours,
       count(DISTINCT (cluster, job_id_raw)) FILTER (WHERE core_hours IS NULL) AS core_hours_unknown_jobs,
       count(DISTINCT (cluster, job_id_raw)) FILTER (WHERE gpu_hours IS NULL)  AS gpu_hours_unknown_jobs
FROM usage_job_day
WHERE day >= $since AND day < $until
  AND ($user IS NULL OR "user" = $user) AND ($account IS NULL OR account = $account)
  AND ($partition IS NULL OR "partition" = $partition) AND ($cluster IS NULL OR cluster = $cluster)
GROUP BY ALL ORDER BY "key" NULLS FIRST"""

# a charging table, so that following the advice saves SBU that are known (and, on a partition it
# does not price, unknown)
CONFIG = {"charging": {"policy": "table", "rates": [{"partition": "cpu", "per_core_h": 1.0},
                                                    {"partition": "gpu", "per_core_h": 2, "per_gpu_h": 32}]}}
USERS = ("alice", "bob", "carol", "dave")
ACCOUNTS = ("proj-a", "proj-b", None)
START = dt.datetime(2026, 9, 20)
PERIODS = {  # (since, until) as the read API takes them, and as usage_summary may be called directly
    "all time": (None, None),
    "September": (dt.date(2026, 9, 1), dt.date(2026, 9, 30)),
    "from a Wednesday": (dt.date(2026, 10, 7), dt.date(2026, 11, 20)),
}


def _jobs(con, rng: random.Random, first: int, n: int) -> None:
    for i in range(first, first + n):
        gpu = rng.random() < 0.3
        elapsed = rng.choice([0, 30, 3600, rng.randrange(3600, 3 * 86400), rng.randrange(86400, 40 * 86400)])
        kw = dict(cluster=rng.choice(["c1", "c2"]), user=rng.choice(USERS), account=rng.choice(ACCOUNTS),
                  partition="gpu" if gpu else rng.choice(["cpu", "cpu", "other"]),
                  start_time=START + dt.timedelta(seconds=rng.randrange(0, 75 * 86400)),
                  elapsed_s=elapsed, timelimit_s=max(elapsed, 60) * rng.choice([1, 2, 4]),
                  ncpus=None if rng.random() < 0.15 else rng.choice([1, 4, 16]),
                  ngpus=(None if rng.random() < 0.2 else rng.choice([1, 2])) if gpu else None,
                  gpu_type="a100" if gpu else None,     # GPUs of an unknown count: unknown GPU-hours
                  billing=rng.choice([1, 4, 100]),
                  cpu_time_s=None if rng.random() < 0.3 else int(elapsed * rng.uniform(0.05, 1.0)),
                  mem_alloc_bytes=8 * GiB, mem_peak_bytes=int(rng.uniform(0.1, 1.0) * 8 * GiB))
        add_job(con, str(1000 + i), **kw)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path: Path = tmp_path_factory.mktemp("rollup") / "jobs.duckdb"
    rng = random.Random(20261129)
    con = Database.open(path, parse_config(CONFIG))
    _jobs(con, rng, 0, 250)
    store.refresh(con)
    _jobs(con, rng, 250, 60)                  # the rollup as an incremental refresh keeps it
    assert store.refresh(con).mode == "incremental"
    con.close()
    con = Database.open(path, read_only=True)
    yield Database.of(con)
    con.close()


def _reference(db, by, since, until, user=None, account=None, partition=None, cluster=None):
    return db.fetch(REFERENCE, {"by": by, "since": since, "until": until, "user": user, "account": account,
                                "partition": partition, "cluster": cluster})[1]


def _same(got: list[tuple], want: list[tuple], what) -> None:
    key = lambda r: (r[0] is not None, r[0] or "")  # noqa: E731
    got, want = sorted(got, key=key), sorted(want, key=key)
    assert [r[0] for r in got] == [r[0] for r in want], what
    for g, w in zip(got, want):
        for col, a, b in zip(["key", *COLUMNS], g, w):
            if isinstance(b, float) or isinstance(a, float):
                assert a == pytest.approx(b, rel=1e-9, abs=1e-9), (what, g[0], col)
            else:
                assert a == b, (what, g[0], col)


def test_the_data_covers_every_case(db):
    """What the comparisons rest on: jobs across days, weeks and months, and every kind of unknown."""
    total = {c: sum(r[i + 1] or 0 for r in _reference(db, "cluster", EARLIEST, LATEST)) for i, c in enumerate(COLUMNS)}
    for col in ("unpriced_jobs", "core_hours_unknown_jobs", "gpu_hours_unknown_jobs", "savings_sbu", "gpu_hours"):
        assert total[col] > 0, col
    spans = db.value("SELECT count(*) FROM (SELECT cluster, job_id_raw FROM job_day GROUP BY ALL "
                     "HAVING count(DISTINCT date_trunc('month', day)) > 1)")
    assert spans > 5
    assert db.value("SELECT count(*) FROM job_day WHERE account IS NULL") > 0
    assert db.value("SELECT count(*) FROM job_day WHERE wasted_sbu IS NULL") > 0


@pytest.mark.parametrize("by", BY)
def test_usage_equals_job_day_aggregated(db, by):
    for label, (since, until) in PERIODS.items():
        f = Filters(since=since, until=until)
        lo, hi = f.since_ts or EARLIEST, f.until_ts or LATEST
        _same(usage(db, Scope.admin("root"), f, by)[1], _reference(db, by, lo, hi), (by, label))
        for name, value in (("user", "bob"), ("account", "proj-b"), ("partition", "gpu"), ("cluster", "c2")):
            f = Filters(since=since, until=until, **{name: value})
            _same(usage(db, Scope.admin("root"), f, by)[1], _reference(db, by, lo, hi, **{name: value}),
                  (by, label, name))
        # a user's scope: their own jobs whatever the filter names
        _same(usage(db, Scope("user", "carol"), Filters(since=since, until=until, user="bob"), by)[1],
              _reference(db, by, lo, hi, user="carol"), (by, label, "scope"))


@pytest.mark.parametrize("by", ["account", "day", "week", "month"])
def test_a_range_starting_mid_day(db, by):
    """usage_summary called directly with a since that is not midnight: the range's first whole day
    is where the jobs already running are counted."""
    since, until = dt.datetime(2026, 10, 7, 12, 30), dt.datetime(2026, 11, 3)
    got = db.fetch("SELECT * FROM usage_summary(?, ?, ?, only_account := ?)", [by, since, until, "proj-a"])[1]
    _same(got, _reference(db, by, since, until, account="proj-a"), by)


# the weekly reports' trend added up job by job over the job_day rows of the same jobs
TREND_REFERENCE = """
WITH d AS (
    SELECT *, CAST($n AS BIGINT) - CAST(floor(epoch(day - ($since - $n * ($until - $since))) / epoch($until - $since)) AS BIGINT) AS wb
    FROM usage_job_day
    WHERE day >= $since - $n * ($until - $since) AND day < $until
      AND (($users IS NULL AND $accounts IS NULL) OR list_contains($users, "user") OR list_contains($accounts, account))
)
SELECT CASE WHEN grouping("user") = 0 THEN 'user' WHEN grouping(account) = 0 THEN 'account' ELSE 'cluster' END,
       "user", account, wb, count(DISTINCT (cluster, job_id_raw)), sum(sbu), sum(wasted_sbu), sum(savings_sbu),
       sum(idle_gpu_hours)
FROM d GROUP BY GROUPING SETS ((wb, "user"), (wb, account), (wb))"""


@pytest.mark.parametrize("users, accounts", [(None, None), (["bob"], []), (["carol"], ["proj-b"])])
def test_the_reports_trend_equals_job_day_aggregated(db, users, accounts):
    """report_trend (sql/views/50_report.sql) adds up dash_day too: per window, user, account and
    the cluster, the jobs that ran (once per window) and their burn, as the job_day rows give them."""
    since, until, n = dt.datetime(2026, 11, 9), dt.datetime(2026, 11, 16), 5
    got = db.fetch("SELECT scope, \"user\", account, windows_back, jobs, sbu, wasted_sbu, savings_sbu, idle_gpu_hours "
                   "FROM report_trend(?, ?, ?, users := ?, accounts := ?)", [since, until, n, users, accounts])[1]
    want = db.fetch(TREND_REFERENCE, {"since": since, "until": until, "n": n, "users": users, "accounts": accounts})[1]
    key = lambda r: tuple((v is not None, str(v)) for v in r[:4])  # noqa: E731
    got, want = sorted(got, key=key), sorted(want, key=key)
    assert [r[:5] for r in got] == [r[:5] for r in want]
    assert len({r[3] for r in got}) == n + 1 and sum(r[4] for r in got if r[0] == "cluster") > 20
    for g, w in zip(got, want):
        assert [v is None for v in g[5:]] == [v is None for v in w[5:]], g[:4]
        assert [v or 0.0 for v in g[5:]] == pytest.approx([v or 0.0 for v in w[5:]], rel=1e-9, abs=1e-9), g[:4]
