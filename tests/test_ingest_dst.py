"""Local times in the hour the clocks go back (analytics/ingest/timezones.py): 02:00-03:00 occurs
twice on 2026-10-25 in Europe/Amsterdam (first CEST, UTC+2, then CET, UTC+1). A job across it is
stored with the readings that keep End not before Start and agree with Elapsed, a sample log with
the later reading once its times went back; each says so in a note."""
from __future__ import annotations

from datetime import datetime

import pytest

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import timezones
from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

AMS = ParseOptions(timezone="Europe/Amsterdam")
HEAD = "JobID|JobIDRaw|State|Start|End|Elapsed|NCPUS|JobName"
# local start, local end, elapsed -> the UTC start and end they can only mean
JOBS = [
    ("1", "2026-10-25T02:50:00", "2026-10-25T02:10:00", "00:20:00", (0, 50), (1, 10)),    # across the fall-back
    ("2", "2026-10-25T02:10:00", "2026-10-25T02:20:00", "01:10:00", (0, 10), (1, 20)),    # Elapsed says 70 min
    ("3", "2026-10-25T02:40:00", "2026-10-25T02:20:00", "00:40:00", (0, 40), (1, 20)),    # a step of it below
    ("4", "2026-10-25T01:30:00", "2026-10-25T02:30:00", "02:00:00", (23, 30), (1, 30)),   # only End twice
    ("5", "2026-10-25T02:30:00", "2026-10-25T03:30:00", "02:00:00", (0, 30), (2, 30)),    # only Start twice
    ("6", "2026-10-24T02:10:00", "2026-10-24T02:20:00", "00:10:00", (0, 10), (0, 20)),    # the day before: once
]


def _utc(hm: tuple[int, int], day: int) -> datetime:
    return datetime(2026, 10, day if hm[0] < 23 else day - 1, *hm)


def _sacct_text(tmp_path, with_elapsed: bool = True):
    lines = [HEAD]
    for jid, start, end, elapsed, _, _ in JOBS:
        lines.append(f"{jid}|{jid}|COMPLETED|{start}|{end}|{elapsed if with_elapsed else ''}|4|j{jid}")
    lines.append("3.batch|3.batch|COMPLETED|2026-10-25T02:40:00|2026-10-25T02:20:00|00:40:00|4|batch")
    f = tmp_path / "dst.txt"
    f.write_text("\n".join(lines) + "\n")
    return f


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_job_across_the_fall_back_is_stored_with_the_readings_that_fit(tmp_path, fast_path):
    res = sacct_text.parse(_sacct_text(tmp_path), AMS, fast_path=fast_path)
    assert res.rejects == []
    got = {r["job_id_raw"]: (r["start_time"], r["end_time"]) for r in res.jobs.iter_rows(named=True)}
    want = {jid: (_utc(s, 24 if jid == "6" else 25), _utc(e, 24 if jid == "6" else 25)) for jid, _, _, _, s, e in JOBS}
    assert got == want
    (step,) = res.steps.iter_rows(named=True)
    assert (step["start_time"], step["end_time"]) == want["3"]
    (note,) = [n for n in res.notes if "fall-back" in n]
    assert "Europe/Amsterdam" in note and note.startswith("6 line(s)") and "(line 2, 3, 4, 5, 6, 8)" in note


def test_without_elapsed_end_not_before_start_decides(tmp_path):
    res = sacct_text.parse(_sacct_text(tmp_path, with_elapsed=False), AMS)
    assert res.rejects == []
    got = {r["job_id_raw"]: (r["start_time"], r["end_time"]) for r in res.jobs.iter_rows(named=True)}
    assert got["1"] == (datetime(2026, 10, 25, 0, 50), datetime(2026, 10, 25, 1, 10))   # End after Start
    assert got["2"] == (datetime(2026, 10, 25, 0, 10), datetime(2026, 10, 25, 0, 20))   # both earlier: nothing says else


def test_ingest_stores_the_job_and_says_so(tmp_path):
    con = db.connect(tmp_path / "t.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [_sacct_text(tmp_path)], AMS)
        assert (rep.status, rep.rejected, rep.stored) == ("ingested", 0, len(JOBS) + 1)
        assert any("daylight-saving fall-back hour of Europe/Amsterdam" in n for n in rep.notes)
        row = con.execute("SELECT start_time, end_time, elapsed_s FROM job WHERE job_id_raw = '1'").fetchone()
        assert row == (datetime(2026, 10, 25, 0, 50), datetime(2026, 10, 25, 1, 10), 1200)
    finally:
        con.close()


def test_utc_and_the_spring_gap_are_unchanged(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text(HEAD + "\n1|1|COMPLETED|2026-10-25T02:50:00|2026-10-25T02:10:00|00:20:00|4|x\n"
                 "2|2|COMPLETED|2026-03-29T02:30:00|2026-03-29T03:30:00|00:20:00|4|gap\n")
    utc = sacct_text.parse(f, ParseOptions(timezone="UTC"))
    assert [r.line_no for r in utc.rejects] == [2] and "is before Start" in utc.rejects[0].reason
    ams = sacct_text.parse(f, AMS)
    assert [r.line_no for r in ams.rejects] == [3] and "does not exist in Europe/Amsterdam" in ams.rejects[0].reason


def test_a_sample_log_across_the_fall_back_keeps_every_sample(tmp_path):
    f = tmp_path / "gpu-4242.csv"
    local = ["01:50", "02:30", "02:50", "02:10", "02:30", "02:50", "03:10"]
    f.write_text("timestamp, index, utilization.gpu [%]\n"
                 + "".join(f"2026/10/25 {hm}:00.000, 0, {i} %\n" for i, hm in enumerate(local)))
    con = db.connect(tmp_path / "t.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [f], AMS)
        assert (rep.status, rep.stored, rep.unchanged, rep.rejected) == ("ingested", 7, 0, 0)
        rows = con.execute("SELECT time, util_pct FROM sample ORDER BY time").fetchall()
    finally:
        con.close()
    assert rows == [(datetime(2026, 10, 24, 23, 50), 0.0), (datetime(2026, 10, 25, 0, 30), 1.0),
                    (datetime(2026, 10, 25, 0, 50), 2.0), (datetime(2026, 10, 25, 1, 10), 3.0),
                    (datetime(2026, 10, 25, 1, 30), 4.0), (datetime(2026, 10, 25, 1, 50), 5.0),
                    (datetime(2026, 10, 25, 2, 10), 6.0)]
    assert any("fall-back hour of Europe/Amsterdam" in n and "(line 3, 4, 5, 6, 7)" in n for n in rep.notes)


def test_a_lone_time_in_the_hour_takes_the_earlier_reading():
    got = timezones.resolve_fall_back({"start_time": datetime(2026, 10, 25, 0, 10)}, "Europe/Amsterdam", None)
    assert got == {"start_time": datetime(2026, 10, 25, 0, 10)}
    assert timezones.resolve_fall_back({"start_time": datetime(2026, 10, 24, 0, 10)}, "Europe/Amsterdam", None) is None
