"""A job deleted with qdel just before midnight: its D record is in one daily accounting file and
its E record in the next. Read in either order, in one run or in two, the job is stored as when
both records are in one file: CANCELLED, with who cancelled it."""
from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

DAYS = FIXTURES / "pbs" / "qdel-days"
D28, D29 = DAYS / "20261128", DAYS / "20261129"
UTC = ParseOptions(timezone="UTC")
EXPECTED = {
    "300": ("CANCELLED", "143:0", {"cancelled_by_uid": "alice@login01"}),   # the owner's qdel, then 128 + SIGTERM
    "301": ("CANCELLED", "0:15", {"cancelled_by_uid": "root@pbsserver"}),   # an operator's, then signal 15
    "302": ("COMPLETED", "0:0", None),                                        # deleted but still ended well
    "303": ("FAILED", "143:0", None),                                         # the same exit status, no qdel
}


def _jobs(path, runs: list[list]) -> dict:
    con = db.connect(path)
    try:
        for run in runs:
            for rep in ingest.ingest_paths(con, run, UTC):
                assert rep.status == "ingested", (rep.path, rep.status, rep.error)
        cols = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'job' "
                                          "AND table_schema = 'main' ORDER BY ordinal_position").fetchall()
                if r[0] != "ingest_id"]
        rows = con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM job").fetchall()
        return {r[cols.index("job_id")]: dict(zip(cols, r)) for r in rows}
    finally:
        con.close()


@pytest.fixture(scope="module")
def one_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("one")
    both = d / "20261128-29"
    both.write_text(D28.read_text() + D29.read_text())
    return _jobs(d / "one.duckdb", [[both]])


@pytest.mark.parametrize("runs", [
    pytest.param([[D28, D29]], id="one-run-in-order"),
    pytest.param([[D29, D28]], id="one-run-reversed"),
    pytest.param([[D28], [D29]], id="two-runs-in-order"),
    pytest.param([[D29], [D28]], id="two-runs-reversed"),
])
def test_d_and_e_records_in_two_daily_files(one_file, runs, tmp_path):
    got = _jobs(tmp_path / "j.duckdb", runs)
    states = {j: (r["state"], r["exit_code"], json.loads(r["null_reasons"]) if r["null_reasons"] else None)
              for j, r in got.items()}
    assert states == EXPECTED
    # every column as when both records are in one file
    assert got == one_file


def test_one_file_holds_both_records(one_file):
    states = {j: (r["state"], r["exit_code"], json.loads(r["null_reasons"]) if r["null_reasons"] else None)
              for j, r in one_file.items()}
    assert states == EXPECTED
