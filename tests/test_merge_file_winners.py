"""A file's repeated keys: the best record per key picked in polars (merge.file_winners) stores the
same rows and counts as the merge's SQL picking them, into an empty database and over stored rows."""
from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

import polars as pl
import pytest

from jobsight.analytics.ingest import merge
from jobsight.analytics.store import db

KEYS = ["cluster", "job_id_raw"]
TIMES = ["end_time", "start_time", "submit_time", "eligible_time"]
STATES = ["COMPLETED", "FAILED", "CANCELLED", "RUNNING", "PENDING", None]


def _frame(seed: int, n: int = 3000) -> pl.DataFrame:
    """Records of ~n/3 jobs in shuffled order: states final, not final or none; times missing or
    equal between records (ties: the later line wins); null_reasons on some."""
    rnd = random.Random(seed)
    t0 = datetime(2026, 11, 1)

    def when():
        return rnd.choice([None, t0 + timedelta(minutes=rnd.randrange(5))])
    rows = []
    for i in range(n):
        start = when()
        rows.append({
            "cluster": rnd.choice(["a", "b"]), "job_id_raw": str(rnd.randrange(n // 3)), "job_id": f"j{i}",
            "state": rnd.choice(STATES), "end_time": when(), "start_time": start, "submit_time": when(),
            "eligible_time": when(), "elapsed_s": rnd.choice([None, 0, 60, 120]), "ncpus": i,
            "source": "pbs", "user": rnd.choice([None, "u1", "u2"]),
            "null_reasons": rnd.choice([None, None, None, json.dumps({"mem_peak_bytes": "12.3M"}),
                                        json.dumps({"cancelled_by_uid": "op@h"})]),
        })
    schema = {"cluster": pl.String, "job_id_raw": pl.String, "job_id": pl.String, "state": pl.String,
              **{t: pl.Datetime("us") for t in TIMES}, "elapsed_s": pl.Int64, "ncpus": pl.Int64,
              "source": pl.String, "user": pl.String, "null_reasons": pl.String}
    return pl.DataFrame(rows, schema=schema, orient="row")


@pytest.fixture
def cons(tmp_path):
    made = [db.connect(tmp_path / f"{i}.duckdb") for i in range(2)]
    yield made
    for c in made:
        c.close()


def _table(con) -> list[tuple]:
    return con.execute("SELECT * EXCLUDE (ingest_id) FROM job ORDER BY cluster, job_id_raw").fetchall()


@pytest.mark.parametrize("seed", [1, 2])
def test_polars_pick_stores_what_the_sql_pick_stores(cons, seed):
    frame = _frame(seed)
    assert merge.file_winners(frame, KEYS, TIMES).height < frame.height   # keys repeat
    fast, sql = cons
    got = merge.merge_records(fast, frame, "job", KEYS, TIMES, 1)
    want = merge._merge_file(sql, frame, "job", KEYS, TIMES, 1)
    assert got == want and got[0] == frame.select(KEYS).n_unique()
    assert _table(fast) == _table(sql)
    # a second file over the stored rows: updates, unchanged rows and new keys alike
    again = _frame(seed + 10)
    assert merge.merge_records(fast, again, "job", KEYS, TIMES, 2) == merge._merge_file(sql, again, "job", KEYS, TIMES, 2)
    assert _table(fast) == _table(sql)


def test_other_column_types_are_left_to_the_sql(cons):
    frame = _frame(3, 300).with_columns(pl.col("end_time").dt.to_string())   # times as text: DuckDB casts them
    assert merge.file_winners(frame, KEYS, TIMES) is None
    fast, sql = cons
    assert merge.merge_records(fast, frame, "job", KEYS, TIMES, 1) == merge._merge_file(sql, frame, "job", KEYS, TIMES, 1)
    assert _table(fast) == _table(sql)
