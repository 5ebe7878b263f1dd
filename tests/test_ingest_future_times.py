"""Times in the future (analytics/ingest/limits.py FUTURE_SKEW): a time later than now plus the skew
is rejected at ingest with file, line and reason in every format, and the incremental --from-sacct
window never starts after now, even over a database that holds such a time already."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from jobsight.analytics import cli
from jobsight.analytics.errors import UserError
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import limits, sacct_runner
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

UTC = ParseOptions(timezone="UTC")
NOW = datetime.now(timezone.utc).replace(tzinfo=None)
SOON = (NOW + timedelta(hours=2)).replace(microsecond=0)   # within the skew: a clock a little ahead
FAR = datetime(2199, 12, 31, 0, 0, 0)


def _ingest(tmp_path, name: str, text: str):
    """Ingest one file; returns (report, job ids stored, sample times stored, {line: reason})."""
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    con = db.connect(tmp_path / "t.duckdb")
    try:
        (rep,) = ingest.ingest_paths(con, [f], UTC)
        assert rep.status == "ingested", rep.error
        jobs = sorted(r[0] for r in con.execute("SELECT job_id_raw FROM job").fetchall())
        times = sorted(r[0] for r in con.execute("SELECT time FROM sample").fetchall())
        rejects = con.execute("SELECT source_file, line_no, reason FROM reject").fetchall()
    finally:
        con.close()
    assert all(r[0] == str(f) for r in rejects)
    assert rep.rows_in == rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped
    return rep, jobs, times, {r[1]: r[2] for r in rejects}


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def test_sacct_text_end_in_2199_is_rejected(tmp_path):
    head = "JobID|JobIDRaw|State|Start|End|Elapsed|NCPUS|JobName"
    lines = [head, "1|1|COMPLETED|2026-11-01T10:00:00|2026-11-01T11:00:00|01:00:00|4|ok",
             f"2|2|COMPLETED|2026-11-01T10:00:00|{_iso(FAR)}|01:00:00|4|far",
             f"3|3|RUNNING|{_iso(NOW - timedelta(hours=1))}|{_iso(SOON)}|01:00:00|4|soon"]
    rep, jobs, _, rejects = _ingest(tmp_path, "s.txt", "\n".join(lines) + "\n")
    assert jobs == ["1", "3"] and list(rejects) == [3]
    assert "end_time: 2199-12-31 00:00:00 is in the future (after now + 1 day" in rejects[3]


def test_sacct_json_submit_in_the_future_is_rejected(tmp_path):
    def job(i, submit):
        return {"job_id": i, "state": {"current": ["COMPLETED"]}, "user": "u", "account": "a",
                "time": {"submission": submit, "start": 1700000000, "end": 1700003600, "elapsed": 3600, "limit": 120}}
    far = int(FAR.replace(tzinfo=timezone.utc).timestamp())
    _, jobs, _, rejects = _ingest(tmp_path, "s.json", json.dumps({"jobs": [job(1, 1699999000), job(2, far)]}))
    assert jobs == ["1"] and list(rejects) == [2]
    assert rejects[2].startswith("job 2: submit_time: 2199-12-31 00:00:00 is in the future (after now + 1 day")


def test_pbs_end_in_the_future_is_rejected(tmp_path):
    rec = ("03/01/2024 11:00:05;E;{id}.srv01;user=alice group=g1 account=proj_a jobname=sim queue=batch "
           "ctime=1709283600 qtime=1709283600 etime=1709283600 start=1709283605 end={end} exec_host=n01/0-3 "
           "Resource_List.ncpus=4 Exit_status=0 resources_used.walltime=01:00:00 run_count=1")
    far = int(FAR.replace(tzinfo=timezone.utc).timestamp())
    text = rec.format(id=101, end=1709287205) + "\n" + rec.format(id=102, end=far) + "\n"
    _, jobs, _, rejects = _ingest(tmp_path, "20240301", text)
    assert jobs == ["101"] and list(rejects) == [2]
    assert "PBS E record 102.srv01: end_time: 2199-12-31 00:00:00 is in the future" in rejects[2]


SIDECAR_HEAD = ("time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes,gpu_index,power_w,energy_j,"
                "sm_clock_mhz,temperature_c,sm_active_pct")


def _sidecar_line(t: datetime) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.000Z,77,c1,n1,cpu,50,1024,4096,,,,,,"


@pytest.mark.parametrize("future", [FAR, NOW + timedelta(days=2)])
def test_sidecar_sample_in_the_future_is_rejected(tmp_path, future):
    """DuckDB's own read (BulkCsvRoute) refuses the file, and the line rules name the line."""
    t0 = datetime(2026, 11, 1, 10, 0, 0)
    lines = [SIDECAR_HEAD, _sidecar_line(t0), _sidecar_line(t0 + timedelta(seconds=10)), _sidecar_line(future),
             _sidecar_line(SOON)]
    rep, _, times, rejects = _ingest(tmp_path, "jobsight-c1-77-n1-x.csv", "\n".join(lines) + "\n")
    assert times == [t0, t0 + timedelta(seconds=10), SOON] and list(rejects) == [4]
    assert f"time: {future.replace(microsecond=0)}" in rejects[4] and "is in the future (after now + 1 day" in rejects[4]


def test_the_skew_is_one_day():
    assert limits.FUTURE_SKEW == timedelta(days=1)
    assert abs(limits.latest_time() - (datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(days=1))) < timedelta(minutes=1)


def _store_job(con, job_id: str, end: datetime, source: str = "slurm-sacct") -> None:
    """A job row as an ingest before the future-time check could have stored it."""
    con.execute("INSERT INTO job (cluster, job_id_raw, job_id, source, start_time, end_time, ingest_id) "
                "VALUES ('c1', ?, ?, ?, ?, ?, 0)", [job_id, job_id, source, end - timedelta(hours=1), end])


def test_the_window_passes_over_a_stored_end_in_the_future(tmp_path):
    con = db.connect(tmp_path / "t.duckdb")
    try:
        _store_job(con, "1", datetime(2026, 11, 1, 11, 0, 0))
        _store_job(con, "2", FAR)
        assert sacct_runner.last_end_time(con, None) == "2026-11-01T11:00:00"
        assert sacct_runner.last_end_time(con, "c1") == "2026-11-01T11:00:00"
    finally:
        con.close()


def _fake_sacct(tmp_path, monkeypatch):
    """A `sacct` on PATH that records its arguments and prints only the header."""
    args_file = tmp_path / "sacct.args"
    script = tmp_path / "bin" / "sacct"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n[ \"$1\" = --helpformat ] && exit 0\n"
                      f"printf '%s\\n' \"$@\" > {args_file}\n"
                      "echo 'JobID|JobIDRaw|Start|End|JobName'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return args_file


def test_from_sacct_never_asks_for_a_window_after_now(tmp_path, monkeypatch, capsys):
    args_file = _fake_sacct(tmp_path, monkeypatch)
    dbp = tmp_path / "t.duckdb"
    con = db.connect(dbp)
    try:
        _store_job(con, "2", FAR)
    finally:
        con.close()
    assert cli.main(["ingest", "--db", str(dbp), "--from-sacct", "--quiet"]) == 0
    argv = args_file.read_text().split("\n")
    since = datetime.fromisoformat(argv[argv.index("-S") + 1])
    assert since <= datetime.now(timezone.utc).replace(tzinfo=None)


def test_a_since_in_the_future_is_refused(tmp_path, monkeypatch):
    args_file = _fake_sacct(tmp_path, monkeypatch)
    with pytest.raises(UserError, match="--since 2199-12-31: in the future"):
        sacct_runner.run_sacct("2199-12-31", None)
    assert not args_file.exists()
