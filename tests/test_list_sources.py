"""The lists of the API and the command line read whichever stored table holds a list's rows
together, and give the same answer as the whole list sorted and cut:

- the flag lists (`jobsight flags`, /api/v1/flags: queries/flags.py flag_rows): a researcher's or a
  project's from job_flags_by_owner (the rows of job_flags_savings stored by account and user), the
  admin's first jobs by waste from the per-day top jobs (dash_flag_top), the rest from job_flags;
  each equals the flags with their savings sorted whole and cut after the first ``limit`` jobs
  (reference), for every scope, sort, period, filter and limit, after a full and an incremental
  refresh; and the per-day top gives way where it cannot be exact;
- the job pages of a period (/api/v1/jobs?since=: queries/job_lists.py job_page): the keys from the
  period's job_day rows, then the jobs' rows; pages followed by key are the jobs that ran in the
  period, newest first (page_reference).
"""
from __future__ import annotations

import datetime as dt
import random

import pytest
from test_dashboard_queries import GiB, add_job
from test_usage_rollup import CONFIG, START, _jobs

from jobsight.analytics.config import parse_config
from jobsight.analytics.queries import flags, job_lists
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

SCOPES = {"admin": Scope.admin("root"), "alice": Scope("user", "alice"), "carol": Scope("user", "carol"),
          "dave leads proj-a": Scope("lead", "dave", ("proj-a",)),
          "bob leads both": Scope("lead", "bob", ("proj-a", "proj-b")), "nobody": Scope("user", "nobody")}
DAILY_TOP = 4       # dash_flag_top's jobs per day in this database: days hold more flagged jobs


def _daily_top(con, n: int) -> None:
    """dash_flag_top recomputed with ``n`` jobs a day (the refresh's definition, a smaller n)."""
    con.execute(f"CREATE OR REPLACE MACRO dash_flag_top_n() AS {n}")
    con.execute("INSERT INTO metric_day_scope SELECT DISTINCT day FROM job_day")
    con.execute("DELETE FROM dash_flag_top")
    con.execute("INSERT INTO dash_flag_top SELECT * FROM calc_dash_flag_top")
    con.execute("DELETE FROM metric_day_scope")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("flag_sources") / "jobs.duckdb"
    rng = random.Random(20261130)
    con = Database.open(path, parse_config(CONFIG))
    _jobs(con, rng, 0, 300)
    for i in range(8):      # an array's tasks, started in the same second: ties the lists' orders break
        add_job(con, f"9000_{i}", job_id_raw=str(9100 - i), cluster=("c1", "c2")[i % 2], user=("alice", "bob")[i % 3 > 0],
                start_time=START + dt.timedelta(days=12), elapsed_s=7200, timelimit_s=8 * 3600, ncpus=16, billing=16,
                cpu_time_s=3600, mem_alloc_bytes=64 * GiB, mem_peak_bytes=GiB)
    store.refresh(con)
    _jobs(con, rng, 300, 80)
    assert store.refresh(con).mode == "incremental"
    _daily_top(con.con, DAILY_TOP)
    con.close()
    con = Database.open(path, read_only=True)
    yield Database.of(con)
    con.close()


def reference(db, scope: Scope, f: Filters, sort: str, limit: int) -> tuple[list[str], list[tuple], int]:
    """Every flag in scope with its savings, sorted whole; the rows of the first ``limit`` jobs."""
    where, params = flags._where(scope, f)
    cols = ", ".join(f'"{c}"' for c in flags.COLUMNS)
    names, rows = db.fetch(f"SELECT {cols} FROM job_flags_savings{where} "
                           f"ORDER BY {flags.SORTS[sort]}, {flags.TIE_BREAK}", params)
    jobs = list(dict.fromkeys((r[0], r[2]) for r in rows))
    if not limit:
        return names, rows, 0
    first = set(jobs[:limit])
    return names, [r for r in rows if (r[0], r[2]) in first], max(len(jobs) - limit, 0)


def _periods(db) -> list[tuple[dt.date | None, dt.date | None]]:
    days = [r[0].date() for r in db.fetch("SELECT DISTINCT day FROM job_day ORDER BY day")[1]]
    return [(None, None), (days[0], days[-1]), (days[3], days[3]), (days[10], days[16]),
            (days[-1] - dt.timedelta(days=30), days[-1]), (days[20], None)]


def test_the_data_covers_every_case(db):
    """Days with more flagged jobs than the per-day top holds, flags of every owner, zero waste."""
    per_day = db.fetch("SELECT max(n) FROM (SELECT day, count(DISTINCT (cluster, job_id_raw)) AS n FROM job_day "
                       "SEMI JOIN job_flags USING (cluster, job_id_raw) GROUP BY day)")[1][0][0]
    assert per_day > 3 * DAILY_TOP
    owners = db.fetch('SELECT count(DISTINCT "user"), count(DISTINCT account), count(*) FILTER (WHERE account IS NULL) '
                      "FROM job_flags")[1][0]
    assert owners[0] >= 4 and owners[1] == 2 and owners[2] > 0
    assert db.value("SELECT count(*) FROM job_flags WHERE COALESCE(wasted_sbu, 0) = 0") > 0
    assert db.value("SELECT max(n) FROM (SELECT count(*) AS n FROM job_metrics GROUP BY cluster, start_time)") >= 4


def test_the_owner_table_holds_the_flags_with_their_savings(db):
    cols = ", ".join(f'"{c}"' for c in db.fetch("SELECT * FROM job_flags_by_owner LIMIT 0")[0])
    assert set(flags.COLUMNS) <= set(db.fetch("SELECT * FROM job_flags_by_owner LIMIT 0")[0])
    assert db.value(f"SELECT count(*) FROM (SELECT {cols} FROM job_flags_savings EXCEPT ALL "
                    f"SELECT {cols} FROM job_flags_by_owner)") == 0
    assert db.value("SELECT count(*) FROM job_flags_by_owner") == db.value("SELECT count(*) FROM job_flags") > 100


@pytest.mark.parametrize("who", SCOPES)
def test_every_list_is_the_start_of_the_whole_sorted_list(db, who):
    """Every sort with and without a limit, each filter and period: 64 of their combinations a scope."""
    scope, rng = SCOPES[who], random.Random(who)
    filters = [{}, {"user": "bob"}, {"account": "proj-b"}, {"partition": "gpu"}, {"cluster": "c2"},
               {"codes": tuple(flags.flag_codes()[:3])}]
    periods = _periods(db)
    cases = [(p, e, sort, limit) for p in periods[:2] for e in filters[:2] for sort in flags.SORTS for limit in (0, 3)]
    cases += [(rng.choice(periods), rng.choice(filters), rng.choice(list(flags.SORTS)), rng.choice((1, 3, DAILY_TOP, 7)))
              for _ in range(64 - len(cases))]
    for (since, until), extra, sort, limit in cases:
        f = Filters(since=since, until=until, **extra)
        assert flags.flag_rows(db, scope, f, sort, limit) == reference(db, scope, f, sort, limit), \
            (who, since, until, extra, sort, limit)


def test_the_per_day_top_answers_the_admin_or_gives_way(db, monkeypatch):
    """The admin's lists by waste come from dash_flag_top when its jobs all wasted something (and
    are still exact when the period's days are cut at DAILY_TOP jobs); a list reaching jobs that
    wasted nothing, or longer than a day's top, is read from job_flags."""
    sql: list[str] = []
    fetch = db.fetch
    monkeypatch.setattr(db, "fetch", lambda q, p=None: (sql.append(q), fetch(q, p))[1])
    used = fell_back = 0
    for since, until in _periods(db):
        for limit in (1, 2, DAILY_TOP, DAILY_TOP + 1, 10**6):
            sql.clear()
            f = Filters(since=since, until=until)
            got = flags.flag_rows(db, SCOPES["admin"], f, "wasted_sbu", limit)
            assert got == reference(db, SCOPES["admin"], f, "wasted_sbu", limit), (since, until, limit)
            from_top = any("FROM dash_flag_top" in q and "DISTINCT \"cluster\"" in q for q in sql)
            used += from_top
            fell_back += not from_top
            if limit > DAILY_TOP:
                assert not from_top, limit
    assert used >= 5 and fell_back >= 5


def page_reference(db, scope: Scope, f: Filters) -> list[tuple]:
    """Every job in scope matching ``f`` with a job_day row in its period, in job_lists.ORDER, with
    its flag codes."""
    sc, params = scope.sql("m")
    clauses = [sc]
    for value, col in ((f.user, '"user"'), (f.account, "account"), (f.partition, '"partition"'),
                       (f.cluster, "cluster"), (f.state, "state")):
        if value:
            clauses.append(f"m.{col} = ?")
            params.append(value)
    cols = ", ".join(f'm."{c}"' for c in job_lists.LIST_COLUMNS)
    _, rows = db.fetch(f"""
        SELECT {cols}, COALESCE((SELECT list(code ORDER BY code) FROM job_flags g
                                 WHERE g.cluster = m.cluster AND g.job_id_raw = m.job_id_raw), [])
        FROM job_metrics m WHERE {' AND '.join(clauses)}
          AND EXISTS (SELECT 1 FROM job_day d WHERE d.cluster = m.cluster AND d.job_id_raw = m.job_id_raw
                      AND d.day >= ? AND d.day < ?)
        ORDER BY m.start_time DESC NULLS LAST, m.cluster, m.job_id_raw""",
                       params + [f.since_ts, f.until_ts or dt.datetime(9999, 1, 1)])
    return [r[:-1] + (list(r[-1]),) for r in rows]


@pytest.mark.parametrize("who", SCOPES)
def test_the_pages_of_a_period_are_its_jobs_newest_first(db, who):
    scope, seen = SCOPES[who], 0
    for since, until in _periods(db)[1:]:
        for extra in ({}, {"user": "alice"}, {"account": "proj-a"}, {"state": "COMPLETED"}, {"cluster": "c1"}):
            f = Filters(since=since, until=until, **extra)
            want = page_reference(db, scope, f)
            for limit in ((1, 1000) if since == until else (40, 1000)):
                got, after = [], None
                while True:
                    names, rows, after = job_lists.job_page(db, scope, f, after, limit)
                    assert names == job_lists.LIST_COLUMNS + ["codes"] and len(rows) <= limit
                    got += rows
                    if after is None:
                        break
                assert got == want, (who, since, until, extra, limit)
                seen += len(want)
    assert seen > 0 or who == "nobody"
