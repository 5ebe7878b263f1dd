"""`jobsight ingest DIR` reads the small sidecar files a folder walk finds together (ingest_batch, as
`watch` reads its spool). The database and the per-file reports must be exactly those of ingesting
the same files one by one: every table compared row for row (less ingest ids and clock times),
every report field but its ingest id and duration, over valid files, bad and truncated lines, a
copy of a file, another format in the same folder, a subfolder, and a file of another owner."""
from __future__ import annotations

import os
import pwd
import re

import pytest

from jobsight.analytics import cli
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db

HEAD = ("time,job_id,cluster,host,device,util_pct,mem_used_bytes,mem_total_bytes,gpu_index,power_w,energy_j,"
        "sm_clock_mhz,temperature_c,sm_active_pct\n")
SACCT = ("JobID|JobIDRaw|Cluster|User|UID|State|Start|End|Elapsed|NCPUS|JobName\n"
         "1000|1000|c1|root|0|COMPLETED|2026-11-01T09:00:00|2026-11-01T11:00:00|02:00:00|4|a\n")
# per table, the columns that differ by when and in which order files were loaded, not by what
VOLATILE = {"ingest_log": {"ingest_id", "started_at", "finished_at"}}
TABLES = ["job", "step", "sample", "sample_pending", "sidecar_run", "reject", "ingest_log", "file_offset"]


def _csv(job: int, host: str = "n1", rows: int = 6, extra: str = "") -> str:
    return HEAD + "".join(f"2026-11-01T10:{s:02d}:00.000Z,{job},c1,{host},cpu,{(job + s) % 97},{1024 * (s + 1)},4096,,,,,,\n"
                          for s in range(rows)) + extra


def _spool(root):
    spool = root / "spool"
    (spool / "sub").mkdir(parents=True)
    for i in range(40):
        (spool / f"jobsight-c1-{1000 + i % 8}-n{i}-20261101T100000Z-{i}.csv").write_text(_csv(1000 + i % 8, f"n{i}"))
    (spool / "jobsight-c1-1001-bad-x.csv").write_text(_csv(1001, "bad", extra="2026-11-01T11:00:00.000Z,1001,c1,bad,cpu,"
                                                                          "ninety,1,2,,,,,,\n"))
    (spool / "jobsight-c1-1002-cut-x.csv").write_text(_csv(1002, "cut") + "2026-11-01T11:00:00.000Z,1002,c1,cu")
    (spool / "jobsight-c1-1003-copy-x.csv").write_text(_csv(1000, "n0"))   # the bytes of n0's file: all unchanged
    (spool / "sacct.txt").write_text(SACCT)
    (spool / ".hidden.csv").write_text(_csv(1004, "hid"))
    for i in range(5):
        (spool / "sub" / f"jobsight-c1-2000-s{i}-x.csv").write_text(_csv(2000, f"s{i}"))
    try:
        alice = pwd.getpwnam("alice")
    except KeyError:
        alice = None
    if os.geteuid() == 0 and alice is not None:   # her samples of a job not in accounting: held, not counted
        theirs = spool / "jobsight-c1-3000-alice-x.csv"
        theirs.write_text(_csv(3000, "alice"))
        os.chown(theirs, alice.pw_uid, alice.pw_gid)
    return spool


def _ingest(dbp, spool, batch_min: int, monkeypatch):
    monkeypatch.setattr(ingest, "BATCH_MIN_FILES", batch_min)
    con = db.connect(dbp)
    try:
        reports = ingest.ingest_paths(con, [spool], ParseOptions(timezone="UTC"))
        tables = {}
        for t in TABLES:
            cols = [c for c, in con.execute(f"SELECT column_name FROM (DESCRIBE {t})").fetchall()
                    if c != "ingest_id" and c not in VOLATILE.get(t, ())]
            tables[t] = sorted(con.execute(f"SELECT {', '.join(db_quote(c) for c in cols)} FROM {t}").fetchall(), key=repr)
    finally:
        con.close()
    return reports, tables


def db_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _report(rep) -> dict:
    d = rep.as_dict()
    d.pop("ingest_id")
    d.pop("seconds")
    d["notes"] = [re.sub(r"ingest \d+", "ingest N", n) for n in d["notes"]]   # ids follow the load order
    return d


def test_a_folder_read_together_is_the_same_as_one_by_one(tmp_path, monkeypatch):
    spool = _spool(tmp_path)
    together, t_tables = _ingest(tmp_path / "together.duckdb", spool, 2, monkeypatch)
    alone, a_tables = _ingest(tmp_path / "alone.duckdb", spool, 10 ** 9, monkeypatch)
    by_path = lambda reps: sorted((_report(r) for r in reps), key=lambda d: d["path"])   # noqa: E731
    assert by_path(together) == by_path(alone)
    for t in TABLES:
        assert t_tables[t] == a_tables[t], t
    # what they hold, so that two equally wrong runs cannot pass
    assert len(together) == 49 + (os.geteuid() == 0 and _has("alice"))
    assert len(t_tables["sample"]) == 40 * 6 + 6 + 6 + 5 * 6   # the copy's rows are known; the bad and cut lines not
    assert [(r[0].rsplit("/", 1)[-1], r[1]) for r in t_tables["reject"]] == [("jobsight-c1-1001-bad-x.csv", 8)]
    assert len(t_tables["sample_pending"]) == (6 if os.geteuid() == 0 and _has("alice") else 0)
    cut = next(r for r in together if r.path.endswith("1002-cut-x.csv"))
    assert (cut.stored, cut.dropped) == (6, 1)
    copy = next(r for r in together if r.path.endswith("1003-copy-x.csv"))
    assert (copy.status, copy.stored, copy.rows_in) == ("already ingested", 0, 0)


def _has(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def test_the_command_prints_one_line_per_file(tmp_path, capsys):
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(30):
        (spool / f"jobsight-c1-{1000 + i}-n1-x.csv").write_text(_csv(1000 + i))
    assert cli.main(["ingest", "--db", str(tmp_path / "j.duckdb"), "--quiet", str(spool)]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = sorted(line for line in out if line.startswith(str(spool)))
    assert lines == sorted(f"{spool / f'jobsight-c1-{1000 + i}-n1-x.csv'}: sidecar, 6 rows: 6 stored, 0 updated, 0 rejected"
                           for i in range(30))
    assert out[-1] == "total: 30 files, 180 stored, 0 updated, 0 rejected"


@pytest.mark.parametrize("fmt", ["sidecar"])
def test_format_given_reads_one_by_one(tmp_path, monkeypatch, fmt):
    """--format names one format for every file: each is read alone, as that format."""
    calls = []
    monkeypatch.setattr("jobsight.analytics.ingest.batch.ingest_files", lambda *a, **k: calls.append(a) or [])
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(3):
        (spool / f"jobsight-c1-{1000 + i}-n1-x.csv").write_text(_csv(1000 + i))
    con = db.connect(tmp_path / "j.duckdb")
    try:
        reps = ingest.ingest_paths(con, [spool], ParseOptions(timezone="UTC"), fmt=fmt)
    finally:
        con.close()
    assert calls == [] and [r.stored for r in reps] == [6, 6, 6]
