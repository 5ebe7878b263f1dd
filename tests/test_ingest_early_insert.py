"""Big sacct files into empty tables are inserted while parsed (ingest_routes.EarlyInsert): the database
and the counts must be exactly those of the ordinary load, also when the file repeats a key (the
early inserts are rolled back and the file merged the ordinary way) or the tables are not empty."""
from pathlib import Path

import pytest
from conftest import record_instances

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
OPTS = ParseOptions(timezone="Europe/Amsterdam")
MIXED = (FIX / "mixed-jobs.txt").read_text(encoding="utf-8")
# mixed-jobs.txt less the earlier run of the requeued job 3000 (its only repeated key)
REQUEUED = next(line for line in MIXED.splitlines() if line.startswith("3000|") and "NODE_FAIL" in line)
UNIQUE = MIXED.replace(REQUEUED + "\n", "")


@pytest.fixture
def spy(monkeypatch):
    """Every EarlyInsert made, so a test can tell the early path ran and how it ended."""
    return record_instances(monkeypatch, ingest, "EarlyInsert")


def _ingest(tmp_path, name, text, early: bool, monkeypatch, *, block=None, before=None):
    monkeypatch.setattr(ingest, "EARLY_INSERT_BYTES", 0 if early else 1 << 60)
    if block:
        monkeypatch.setattr(sacct_text, "_BLOCK_BYTES", block)   # several blocks: several pieces
    src = tmp_path / f"{name}.txt"
    src.write_text(text, encoding="utf-8")
    con = db.connect(tmp_path / f"{name}.duckdb")
    if before:
        prior = tmp_path / f"{name}-before.txt"
        prior.write_text(before, encoding="utf-8")
        ingest.ingest_paths(con, [prior], OPTS)
    threads = con.execute("SELECT current_setting('threads')").fetchall()
    (rep,) = ingest.ingest_paths(con, [src], OPTS)
    assert con.execute("SELECT current_setting('threads')").fetchall() == threads   # set back after the parse
    return con, rep


def _tables(con):
    return {t: con.execute(f"SELECT * EXCLUDE (ingest_id) FROM {t} ORDER BY ALL").fetchall() for t in ("job", "step")}


def _counts(rep):
    return rep.status, rep.rows_in, rep.stored, rep.updated, rep.unchanged, rep.rejected, rep.dropped


def test_unique_keys_inserted_while_parsing(tmp_path, monkeypatch, spy):
    plain, rp = _ingest(tmp_path, "plain", UNIQUE, False, monkeypatch)
    early, re_ = _ingest(tmp_path, "early", UNIQUE, True, monkeypatch, block=400)
    assert len(spy) == 1 and spy[0].error is None               # the early path ran and kept its rows
    assert spy[0].inserted == {"job": 8, "step": 6}             # 14 lines, by hand: 8 job lines, 6 steps
    assert _counts(re_) == _counts(rp) == ("ingested", 14, 14, 0, 0, 0, 0)
    assert _tables(early) == _tables(plain)
    assert early.execute("SELECT DISTINCT ingest_id FROM job").fetchall() == [(re_.ingest_id,)]


def test_repeated_key_rolls_back_and_merges(tmp_path, monkeypatch, spy):
    plain, rp = _ingest(tmp_path, "plain", MIXED, False, monkeypatch)
    early, re_ = _ingest(tmp_path, "early", MIXED, True, monkeypatch, block=400)
    assert len(spy) == 1 and spy[0].error is not None           # job 3000 twice: found after the inserts
    # the ordinary merge: the requeued earlier run of 3000 counts as unchanged
    assert _counts(re_) == _counts(rp) == ("ingested", 15, 14, 0, 1, 0, 0)
    assert _tables(early) == _tables(plain)
    assert re_.ingest_id == 1                                    # the id of the rolled-back attempt, no gap
    assert early.execute("SELECT state FROM job WHERE job_id_raw = '3000'").fetchall() == [("COMPLETED",)]


def test_not_used_when_tables_hold_rows(tmp_path, monkeypatch, spy):
    before = (FIX / "running-3001.txt").read_text(encoding="utf-8")
    plain, rp = _ingest(tmp_path, "plain", UNIQUE, False, monkeypatch, before=before)
    early, re_ = _ingest(tmp_path, "early", UNIQUE, True, monkeypatch, before=before)
    assert len(spy) == 1                  # the file before, into empty tables; not the second one
    assert _counts(re_) == _counts(rp)
    assert _tables(early) == _tables(plain)


def test_parse_failure_rolls_back(tmp_path, monkeypatch, spy):
    real = sacct_text.parse

    def broken(path, opts, on_piece=None):
        real(path, opts, on_piece=on_piece)
        raise RuntimeError("boom")
    monkeypatch.setattr(sacct_text, "parse", broken)
    con, rep = _ingest(tmp_path, "broken", UNIQUE, True, monkeypatch)
    assert len(spy) == 1 and rep.status == "failed" and "boom" in rep.error
    assert con.execute("SELECT (SELECT count(*) FROM job) + (SELECT count(*) FROM step) "
                       "+ (SELECT count(*) FROM ingest_log)").fetchall() == [(0,)]
    con.execute("BEGIN TRANSACTION")   # the early transaction was closed: a new one can begin
    con.execute("ROLLBACK")
