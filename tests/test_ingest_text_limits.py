"""Text is bounded at ingest (analytics/ingest/lengths.py): a value longer than its column's limit
rejects its row with the reason, free text (a job name) is cut with a note naming the file, and
a `.meta.json` over its size bound is not read while its CSV is; on every route."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobsight.analytics.commands import watch as watch_cli
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import lengths
from jobsight.analytics.ingest.parsers import sidecar_meta
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector.csv_schema import COLUMNS

UTC = ParseOptions(timezone="UTC")
HEADER = ",".join(COLUMNS)
HOST_MAX = lengths.TEXT["host"]


def _row(second: int, host: str = "gpu01", job: str = "8001", device: str = "cpu") -> str:
    values = {"time": f"2026-11-21T10:00:{second:02d}.000Z", "job_id": job, "cluster": "c", "host": host,
              "device": device, "util_pct": "50"}
    return ",".join(values.get(c, "") for c in COLUMNS) + "\n"


def _load(tmp_path, *files, opts=UTC):
    con = db.connect(tmp_path / "t.duckdb")
    try:
        reps = ingest.ingest_paths(con, list(files), opts)
        for rep in reps:
            assert rep.status == "ingested", rep.error
            assert rep.rows_in == rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped
        out = {}
        for t in ("job", "sample"):
            cur = con.execute(f"SELECT * FROM {t}")
            out[t] = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
        out["reject"] = con.execute("SELECT line_no, reason, raw FROM reject ORDER BY line_no").fetchall()
        out["max_reject"] = con.execute("SELECT max(strlen(reason)), max(strlen(raw)) FROM reject").fetchone()
    finally:
        con.close()
    return reps, out


@pytest.mark.parametrize("size", [HOST_MAX + 1, 5000, 900_000])
def test_a_host_longer_than_its_limit_rejects_its_row_on_the_bulk_route(tmp_path, size):
    p = tmp_path / "jobsight-c-8001-gpu01-20261121T100000Z-1.csv"
    p.write_text(HEADER + "\n" + _row(0) + _row(1, host="h" * size) + _row(2))
    (rep,), out = _load(tmp_path, p)
    assert sorted(s["time"].second for s in out["sample"]) == [0, 2]
    assert {s["host"] for s in out["sample"]} == {"gpu01"}
    assert [(r[0], r[1]) for r in out["reject"]] == [
        (3, f"host: {size} characters, longer than its limit of {HOST_MAX}: sample not stored")]
    assert out["reject"][0][2] is None   # the long value is not kept as the raw line either


def test_a_host_at_its_limit_in_characters_is_stored(tmp_path):
    host = "é" * HOST_MAX   # twice as many bytes: the bulk read's strlen refuses it, the line reader counts characters
    p = tmp_path / "jobsight-c-8001-gpu01-20261121T100000Z-1.csv"
    p.write_text(HEADER + "\n" + _row(0, host=host) + _row(1, host=host))
    _, out = _load(tmp_path, p)
    assert [s["host"] for s in out["sample"]] == [host, host] and out["reject"] == []


def test_long_device_and_job_id_in_a_watch_batch(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "jobsight-c-8001-n1-20261121T100000Z-1.csv").write_text(
        HEADER + "\n" + _row(0) + _row(1, device="d" * 300) + _row(2))
    (spool / "jobsight-c-8002-n1-20261121T100000Z-2.csv").write_text(
        HEADER + "\n" + _row(0, job="8002") + _row(1, job="9" * 2000))
    con = db.connect(tmp_path / "t.duckdb")
    try:
        reps = {Path(r.path).name[:15]: r for r in watch_cli._ingest_spool(con, spool, UTC, lambda rep: None)}
        assert {k: (r.stored, r.rejected) for k, r in reps.items()} == {
            "jobsight-c-8001": (2, 1), "jobsight-c-8002": (1, 1)}
        got = con.execute("SELECT l.source_file LIKE '%8001%', r.line_no, r.reason FROM reject r "
                          "JOIN ingest_log l USING (ingest_id) ORDER BY 1").fetchall()
        assert got == [(False, 3, "job_id_raw: 2000 characters, longer than its limit of 1024: sample not stored"),
                       (True, 3, "device: 300 characters, longer than its limit of 256: sample not stored")]
        assert con.execute("SELECT max(strlen(device)), max(strlen(job_id_raw)) FROM sample").fetchone() == (3, 4)
    finally:
        con.close()


SACCT_HEAD = "JobID|JobIDRaw|State|Start|End|Elapsed|NCPUS|NNodes|Account|User|JobName"
T = "2026-11-01T10:00:00|2026-11-01T11:00:00|01:00:00"


@pytest.mark.parametrize("early", [False, True])
def test_sacct_long_account_rejected_and_long_job_name_cut(tmp_path, monkeypatch, early):
    monkeypatch.setattr(ingest, "EARLY_INSERT_BYTES", 0 if early else 1 << 60)
    name = "n" * 5000
    p = tmp_path / "sacct.txt"
    p.write_text("\n".join([SACCT_HEAD,
                            f"1|1|COMPLETED|{T}|4|1|proj|alice|{name}",
                            f"2|2|COMPLETED|{T}|4|1|{'a' * 300}|alice|ok",
                            f"3|3|COMPLETED|{T}|4|1|proj|{'u' * 70000}|ok"]) + "\n")
    (rep,), out = _load(tmp_path, p)
    jobs = {j["job_id_raw"]: j for j in out["job"]}
    assert sorted(jobs) == ["1"]
    assert jobs["1"]["job_name"] == "n" * lengths.TEXT["job_name"]
    reasons = sorted(r[1] for r in out["reject"])
    assert reasons == ["account: 300 characters, longer than its limit of 256: job not stored",
                       "user: 70000 characters, longer than its limit of 256: job not stored"]
    assert f"{p}: text longer than its limit cut: 1 job_name value(s) to 1024 characters" in rep.notes
    assert (rep.stored, rep.rejected) == (1, 2)


def test_a_rejects_raw_line_and_reason_are_stored_short(tmp_path):
    p = tmp_path / "sacct.txt"
    p.write_text(SACCT_HEAD + "\n" + f"1|1|COMPLETED|{T}|4|1|proj|alice|ok\n" + "x|" * 200_000 + "\n")
    (rep,), out = _load(tmp_path, p)
    assert rep.rejected == 1
    assert max(out["max_reject"]) <= lengths.MAX_REJECT_TEXT


def _meta(tmp_path, text: bytes) -> Path:
    p = tmp_path / "jobsight-c-8001-gpu01-20261121T100000Z-1.csv"
    p.write_text(HEADER + "\n" + _row(0, job="") + _row(1, job=""))
    p.with_name(p.stem + ".meta.json").write_bytes(text)
    return p


def test_metadata_over_its_bound_is_refused_and_its_csv_loads(tmp_path):
    big = b'{"job_id": "8001", "host": "gpu01", "pad": "' + b"p" * lengths.MAX_META_BYTES + b'"}'
    p = _meta(tmp_path, big)
    notes: list[str] = []
    assert sidecar_meta.read_meta(p, notes) is None
    assert notes == [f"{p.stem}.meta.json: metadata ignored (larger than the limit of "
                     f"{lengths.MAX_META_BYTES:,} bytes)"]
    (rep,), out = _load(tmp_path, p)
    # without the metadata the CSV names no job: every row is accounted for, rejected with the reason
    assert (rep.rows_in, rep.rejected) == (2, 2) and any("larger than the limit" in n for n in rep.notes)


def test_metadata_just_within_its_bound_is_read(tmp_path):
    head = b'{"job_id": "8001", "host": "gpu01", "pad": "'
    p = _meta(tmp_path, head + b"p" * (lengths.MAX_META_BYTES - len(head) - 2) + b'"}')
    (rep,), out = _load(tmp_path, p)
    assert rep.stored == 2 and {s["job_id_raw"] for s in out["sample"]} == {"8001"}


def test_metadata_is_read_at_most_bound_plus_one_bytes(tmp_path, monkeypatch):
    """A 1 GB metadata file is not read whole: the reader asks for bound + 1 bytes, once."""
    p = _meta(tmp_path, b"")
    with open(p.with_name(p.stem + ".meta.json"), "r+b") as fh:
        fh.truncate(1 << 30)   # sparse: 1 GiB of NULs
    asked = []
    real_fdopen = sidecar_meta.os.fdopen

    def spy(fd, mode="r", *a, **k):
        fh = real_fdopen(fd, mode, *a, **k)
        read = fh.read
        fh.read = lambda n=-1: (asked.append(n), read(n))[1]
        return fh
    monkeypatch.setattr(sidecar_meta.os, "fdopen", spy)
    notes: list[str] = []
    assert sidecar_meta.read_meta(p, notes) is None
    assert asked == [lengths.MAX_META_BYTES + 1] and "larger than the limit" in notes[0]
