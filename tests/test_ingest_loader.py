"""Loader: merge rule, idempotence, derived job numbers, seff fill-only, samples dedupe, transactions."""
import shutil
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject
from jobsight.analytics.store import db

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
GiB, MiB = 1024 ** 3, 1024 ** 2
OPTS = ParseOptions(timezone="Europe/Amsterdam")


@pytest.fixture
def con(tmp_path):
    c = db.connect(tmp_path / "t.duckdb")
    yield c
    c.close()


def run(con, *paths, opts=OPTS, fmt=None):
    return ingest.ingest_paths(con, paths, opts, fmt=fmt)


def one(con, sql, *args):
    return con.execute(sql, list(args)).fetchone()


def test_mixed_counts_and_duplicates(con):
    (rep,) = run(con, FIX / "mixed-jobs.txt")
    assert rep.format == "sacct" and rep.status == "ingested"
    # 9 job lines (3000 twice: the requeued earlier run loses), 6 step lines
    assert (rep.rows_in, rep.stored, rep.updated, rep.unchanged, rep.rejected) == (15, 14, 0, 1, 0)
    assert one(con, "SELECT state, restarts, node_list FROM jobs WHERE job_id_raw = '3000'") == ("COMPLETED", 1, "node07")
    assert one(con, "SELECT count(*) FROM jobs")[0] == 8 and one(con, "SELECT count(*) FROM steps")[0] == 6
    log = one(con, "SELECT format, rows_in, stored, unchanged, checksum FROM ingests")
    assert log[:4] == ("sacct", 15, 14, 1) and len(log[4]) == 64


def test_a_key_twice_in_one_file_keeps_the_final_record_then_the_later_line(con, tmp_path):
    """Within one file a finished record beats a later running one; of two records that rank
    alike (same state and times) the later line wins."""
    head, done = (FIX / "completed-3001.txt").read_text().splitlines()[:2]
    running = done.replace("|2026-11-02T07:00:10|01:00:00|0:0|COMPLETED|", "|Unknown|00:30:00|0:0|RUNNING|")
    f = tmp_path / "twice.txt"
    f.write_text("\n".join([head, done[:-len("long")] + "first", done[:-len("long")] + "second", running]) + "\n")
    (rep,) = run(con, f)
    assert (rep.rows_in, rep.stored, rep.unchanged) == (3, 1, 2)
    assert one(con, "SELECT state, job_name FROM jobs WHERE job_id_raw = '3001'") == ("COMPLETED", "second")


def test_same_file_twice_changes_nothing(con, tmp_path):
    run(con, FIX / "mixed-jobs.txt")
    before = con.execute("SELECT * FROM jobs ORDER BY job_id_raw").fetchall()
    copy = tmp_path / "renamed.txt"
    shutil.copy(FIX / "mixed-jobs.txt", copy)
    reps = run(con, FIX / "mixed-jobs.txt", copy)
    assert [r.status for r in reps] == ["already ingested", "already ingested"]
    assert con.execute("SELECT * FROM jobs ORDER BY job_id_raw").fetchall() == before
    assert one(con, "SELECT count(*) FROM ingests")[0] == 1


def test_running_then_completed_updates_and_stale_record_does_not(con, tmp_path):
    (a,) = run(con, FIX / "running-3001.txt")
    assert (a.stored, a.updated) == (1, 0)
    assert one(con, "SELECT state, end_time FROM jobs WHERE job_id_raw = '3001'") == ("RUNNING", None)
    (b,) = run(con, FIX / "completed-3001.txt")
    assert (b.stored, b.updated, b.unchanged) == (0, 1, 0)
    row = one(con, "SELECT state, end_time, elapsed_s, cpu_time_s FROM jobs WHERE job_id_raw = '3001'")
    assert row == ("COMPLETED", datetime(2026, 11, 2, 6, 0, 10), 3600, 3 * 3600.0)
    stale = tmp_path / "stale.txt"   # the RUNNING record again, other bytes: lower rank -> unchanged
    stale.write_text((FIX / "running-3001.txt").read_text() + "# re-exported\n")
    (c,) = run(con, stale)
    assert (c.stored, c.updated, c.unchanged, c.dropped) == (0, 0, 1, 1)
    assert one(con, "SELECT state FROM jobs WHERE job_id_raw = '3001'") == ("COMPLETED",)


def test_identical_record_in_new_file_is_unchanged(con, tmp_path):
    run(con, FIX / "completed-3001.txt")
    again = tmp_path / "again.txt"
    again.write_text((FIX / "completed-3001.txt").read_text() + "\n")
    (r,) = run(con, again)
    assert (r.stored, r.updated, r.unchanged) == (0, 0, 1)


def test_job_numbers_derived_from_steps(con):
    run(con, FIX / "mixed-jobs.txt")
    # largest step TRESUsageInTot mem (10G on step 0); TotalCPU from the job row
    assert one(con, "SELECT mem_peak_bytes, cpu_time_s FROM jobs WHERE job_id_raw = '1001'") == (10 * GiB, 21660.0)
    # no TRESUsageInTot: max over steps of MaxRSS x NTasks = max(500M x 1, 1M x 2); no job TotalCPU: 65.5 + 0.5
    assert one(con, "SELECT mem_peak_bytes, cpu_time_s FROM jobs WHERE job_id_raw = '1010'") == (500 * MiB, 66.0)


def _frame(rows, schema):
    return pl.DataFrame(rows, schema=schema, orient="row")


def test_seff_only_fills_gaps(con):
    run(con, FIX / "mixed-jobs.txt")
    seff = ParseResult(format="seff", rows_in=2)
    seff.jobs = pl.DataFrame({"cluster": ["testclu", "testclu"], "job_id": ["1001", "9999"],
                              "job_id_raw": ["1001", "9999"], "state": ["FAILED", "COMPLETED"],
                              "ncpus": [99, 2], "ntasks": [3, None], "source": ["slurm-seff", "slurm-seff"]})
    rep = ingest.load_result(con, seff, "seff.txt", "x" * 64, {})
    assert (rep.stored, rep.updated, rep.unchanged) == (1, 1, 0)
    assert one(con, "SELECT state, ncpus, ntasks, source FROM jobs WHERE job_id_raw = '1001'") == \
        ("COMPLETED", 8, 3, "slurm-sacct")


def test_sacct_replaces_seff_record(con):
    seff = ParseResult(format="seff", rows_in=1)
    seff.jobs = pl.DataFrame({"cluster": ["testclu"], "job_id": ["1001"], "job_id_raw": ["1001"],
                              "state": ["COMPLETED"], "ncpus": [1], "mem_peak_bytes": [5], "source": ["slurm-seff"]})
    ingest.load_result(con, seff, "seff.txt", "y" * 64, {})
    (rep,) = run(con, FIX / "mixed-jobs.txt")
    assert rep.updated == 1
    assert one(con, "SELECT ncpus, source FROM jobs WHERE job_id_raw = '1001'") == (8, "slurm-sacct")


def test_samples_deduplicated(con):
    t0 = datetime(2026, 11, 1, 10, 0, 0)
    t1 = datetime(2026, 11, 1, 10, 0, 5)
    frame = pl.DataFrame({"cluster": ["c"] * 3, "job_id_raw": ["1"] * 3, "host": ["n1"] * 3,
                          "device": ["GPU-a", "GPU-a", "GPU-a"], "time": [t0, t1, t1],
                          "util_pct": [50.0, 60.0, 60.0], "source": ["sidecar"] * 3})
    r1 = ingest.load_result(con, ParseResult(format="sidecar", rows_in=3, samples=frame), "a.csv", "a" * 64, {})
    assert (r1.stored, r1.unchanged) == (2, 1)
    t2 = datetime(2026, 11, 1, 10, 0, 10)
    frame2 = pl.DataFrame({"cluster": ["c"] * 2, "job_id_raw": ["1"] * 2, "host": ["n1"] * 2,
                           "device": ["GPU-a"] * 2, "time": [t1, t2], "util_pct": [60.0, 70.0],
                           "source": ["sidecar"] * 2})
    r2 = ingest.load_result(con, ParseResult(format="sidecar", rows_in=3, samples=frame2, dropped=1),
                            "b.csv", "b" * 64, {})
    assert (r2.stored, r2.unchanged, r2.dropped) == (1, 1, 1)
    assert [r[0] for r in con.execute("SELECT util_pct FROM samples ORDER BY time").fetchall()] == [50.0, 60.0, 70.0]


def test_rejects_stored_with_file_line_reason(con, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("JobID|State|Elapsed\n1|COMPLETED|00:01:00\n2|COMPLETED|nonsense\n")
    (rep,) = run(con, bad)
    assert (rep.stored, rep.rejected) == (1, 1)
    row = one(con, "SELECT source_file, line_no, reason, raw, format FROM rejects")
    assert row[0] == str(bad.resolve()) and row[1] == 3 and "elapsed" in row[2] and row[3] == "2|COMPLETED|nonsense"
    assert row[4] == "sacct"


def test_accounting_mismatch_rolls_back_whole_file(con):
    res = ParseResult(format="sacct", rows_in=5, rejects=[Reject(1, "x")])
    res.jobs = pl.DataFrame({"cluster": ["c"], "job_id": ["1"], "job_id_raw": ["1"], "source": ["slurm-sacct"]})
    with pytest.raises(ingest.AccountingError, match="5 rows read but 2 accounted"):
        ingest.load_result(con, res, "f.txt", "z" * 64, {})
    assert one(con, "SELECT count(*) FROM jobs")[0] == 0
    assert one(con, "SELECT count(*) FROM ingests")[0] == 0
    assert one(con, "SELECT count(*) FROM rejects")[0] == 0


def test_registry_skips_missing_modules(monkeypatch):
    monkeypatch.setattr(ingest, "PARSER_MODULES", ("not_written_yet", "sacct_text"))
    parsers = ingest.load_parsers()
    assert list(parsers) == ["sacct"]


def test_folder_walk_and_unreadable(con, tmp_path):
    d = tmp_path / "dump"
    (d / "sub").mkdir(parents=True)
    shutil.copy(FIX / "running-3001.txt", d / "sub" / "a.txt")
    (d / "notes.bin").write_bytes(b"\x00\x01 nothing we know")
    (d / "x.meta.json").write_text("{}")
    reps = run(con, d, tmp_path / "missing.txt")
    by = {Path(r.path).name: r.status for r in reps}
    assert by == {"notes.bin": "skipped", "a.txt": "ingested", "missing.txt": "unreadable"}


def test_same_bytes_with_other_options_are_read_again(con, tmp_path):
    f = tmp_path / "noheader.txt"
    f.write_text("88|COMPLETED|00:05:00\n")
    (a,) = run(con, f, opts=ParseOptions(timezone="UTC"), fmt="sacct")
    assert (a.stored, a.rejected) == (0, 1)                   # no header, no --columns
    (b,) = run(con, f, opts=ParseOptions(timezone="UTC", columns=["JobID", "State", "Elapsed"]), fmt="sacct")
    assert (b.status, b.stored) == ("ingested", 1)
    (c,) = run(con, f, opts=ParseOptions(timezone="UTC", columns=["JobID", "State", "Elapsed"]), fmt="sacct")
    assert c.status == "already ingested"


def test_a_parser_bug_fails_that_file_only(con, monkeypatch, tmp_path):
    from jobsight.analytics.ingest.parsers import sacct_text
    good = tmp_path / "good.txt"
    good.write_text((FIX / "running-3001.txt").read_text())
    real_parse = sacct_text.parse

    def broken(path, opts):
        res = real_parse(path, opts)
        if path.name == "bad.txt":
            res.rows_in += 1          # claims a row it never accounts for
        return res
    monkeypatch.setattr(sacct_text, "parse", broken)
    bad = tmp_path / "bad.txt"
    bad.write_text((FIX / "completed-3001.txt").read_text())
    reps = run(con, bad, good)
    assert [r.status for r in reps] == ["failed", "ingested"]
    assert "accounted" in reps[0].error
    assert one(con, "SELECT state FROM jobs WHERE job_id_raw = '3001'") == ("RUNNING",)


def test_job_gpu_tres_filled_from_steps(con, tmp_path):
    # 700: no GPU figures on the job line -> max over its steps (80 %, 3 GiB), though the larger
    # util and the larger memory come from different steps; 701: the job line has its own 10 %,
    # which is kept; 702: no step reports GPU figures -> stays NULL
    p = tmp_path / "gpu.txt"
    p.write_text(
        "JobID|JobIDRaw|State|Start|End|AllocTRES|TRESUsageInTot\n"
        "700|700|COMPLETED|2026-11-01T10:00:00|2026-11-01T11:00:00|billing=2,cpu=2,gres/gpu=2,mem=8G,node=1|\n"
        "700.batch|700.batch|COMPLETED|2026-11-01T10:00:00|2026-11-01T11:00:00||cpu=00:01:00,gres/gpumem=3G,gres/gpuutil=35,mem=2G\n"
        "700.0|700.0|COMPLETED|2026-11-01T10:00:05|2026-11-01T10:59:00||cpu=00:50:00,gres/gpumem=1024M,gres/gpuutil=80,mem=1G\n"
        "701|701|COMPLETED|2026-11-01T10:00:00|2026-11-01T11:00:00|billing=1,cpu=1,gres/gpu=1,mem=4G,node=1|gres/gpuutil=10\n"
        "701.0|701.0|COMPLETED|2026-11-01T10:00:05|2026-11-01T10:59:00||gres/gpumem=2G,gres/gpuutil=90,mem=1G\n"
        "702|702|COMPLETED|2026-11-01T10:00:00|2026-11-01T11:00:00|billing=1,cpu=1,mem=4G,node=1|\n"
        "702.0|702.0|COMPLETED|2026-11-01T10:00:05|2026-11-01T10:59:00||cpu=00:10:00,mem=1G\n",
        encoding="utf-8")
    (rep,) = run(con, p, opts=ParseOptions(timezone="UTC"))
    assert (rep.stored, rep.rejected) == (7, 0)
    got = {r[0]: r[1:] for r in con.execute(
        "SELECT job_id_raw, gpu_util_tres, gpu_mem_tres_bytes FROM job ORDER BY job_id_raw").fetchall()}
    assert got == {"700": (80.0, 3 * GiB), "701": (10.0, 2 * GiB), "702": (None, None)}


def _sidecar_lines(job, times, devices=("cpu", "GPU-a"), util=None):
    from jobsight.collector.csv_schema import COLUMNS
    out = []
    for t in times:
        for d in devices:
            row = {c: "" for c in COLUMNS}
            row.update(time=f"2026-11-21T10:{t // 60:02d}:{t % 60:02d}.000Z", job_id=job, cluster="testclu",
                       host="gpu01", device=d, util_pct=str(util if util is not None else t))
            out.append(",".join(row[c] for c in COLUMNS))
    return out


@pytest.mark.parametrize("stream_bytes", [300, 1 << 30])
def test_big_sidecar_loaded_in_pieces_in_one_transaction(con, tmp_path, monkeypatch, stream_bytes):
    from jobsight.analytics.ingest.parsers import sidecar_csv
    from jobsight.collector.csv_schema import HEADER
    pieces = []
    real = sidecar_csv.iter_parse
    monkeypatch.setattr(sidecar_csv, "iter_parse", lambda *a, **k: (pieces.append(p) or p for p in real(*a, **k)))
    monkeypatch.setattr(ingest, "STREAM_BYTES", stream_bytes)
    lines = _sidecar_lines("77", range(0, 50, 5))                 # 10 times x 2 devices = 20 rows
    lines = lines[:9] + ["not,a,sample"] + lines[9:]               # line 11: rejected
    lines.append(_sidecar_lines("77", [0], devices=("cpu",), util=99)[0])   # repeats line 2's key: unchanged
    a = tmp_path / "jobsight-testclu-77-gpu01-20261121T100000Z-1.csv"
    a.write_text(HEADER + "\n" + "\n".join(lines) + "\n" + lines[0][:20], encoding="utf-8")  # cut-short last line
    (rep,) = run(con, a)
    assert (rep.status, rep.rows_in, rep.stored, rep.unchanged, rep.rejected, rep.dropped) == ("ingested", 23, 20, 1, 1, 1)
    assert (len(pieces) > 3) == (stream_bytes == 300)
    assert one(con, "SELECT line_no, reason FROM rejects") == (11, "3 fields, the header has 14")
    # the first of the two rows of (cpu, 10:00:00) is kept
    assert one(con, "SELECT util_pct FROM samples WHERE device = 'cpu' AND time = TIMESTAMP '2026-11-21 10:00:00'") == (0.0,)
    log = one(con, "SELECT rows_in, stored, unchanged, rejected, dropped FROM ingests")
    assert log == (23, 20, 1, 1, 1)
    # a later file overlapping the stored times (10:00:40, :45) adds only the new ones (:50, :55)
    b = tmp_path / "jobsight-testclu-77-gpu01-20261121T100040Z-2.csv"
    b.write_text(HEADER + "\n" + "\n".join(_sidecar_lines("77", range(40, 60, 5))) + "\n", encoding="utf-8")
    (rep2,) = run(con, b)
    assert (rep2.rows_in, rep2.stored, rep2.unchanged) == (8, 4, 4)
    assert one(con, "SELECT count(*), count(DISTINCT (device, time)) FROM samples") == (24, 24)


def test_streamed_file_failing_midway_stores_nothing(con, tmp_path, monkeypatch):
    from jobsight.analytics.ingest.parsers import sidecar_csv
    from jobsight.collector.csv_schema import HEADER
    real = sidecar_csv.iter_parse

    def failing(*a, **k):
        for i, p in enumerate(real(*a, **k)):
            if i == 2:
                raise RuntimeError("boom")
            yield p
    monkeypatch.setattr(sidecar_csv, "iter_parse", failing)
    monkeypatch.delattr(sidecar_csv, "bulk_read")   # a clean file: DuckDB would read it whole
    monkeypatch.setattr(ingest, "STREAM_BYTES", 300)
    a = tmp_path / "jobsight-testclu-78-gpu01-20261121T100000Z-1.csv"
    a.write_text(HEADER + "\n" + "\n".join(_sidecar_lines("78", range(0, 100, 5))) + "\n", encoding="utf-8")
    (rep,) = run(con, a)
    assert rep.status == "failed" and "boom" in rep.error
    assert one(con, "SELECT count(*) FROM samples")[0] == 0 and one(con, "SELECT count(*) FROM ingests")[0] == 0


def test_big_new_file_hashed_while_parsed(con, tmp_path, monkeypatch):
    import hashlib
    monkeypatch.setattr(ingest, "BIG_FILE", 0)       # every file counts as big here
    calls = []
    real = ingest.start_scan
    monkeypatch.setattr(ingest, "start_scan", lambda p, *a: calls.append(p) or real(p, *a))
    (a,) = run(con, FIX / "mixed-jobs.txt")
    assert a.status == "ingested" and len(calls) == 1
    want = hashlib.sha256((FIX / "mixed-jobs.txt").read_bytes()).hexdigest()
    assert one(con, "SELECT checksum FROM ingests")[0] == want
    copy = tmp_path / "copy.txt"                      # a new name: hashed alongside the parse, then known
    shutil.copy(FIX / "mixed-jobs.txt", copy)
    (b,) = run(con, copy)
    assert b.status == "already ingested" and b.ingest_id == a.ingest_id and len(calls) == 2
    (c,) = run(con, FIX / "mixed-jobs.txt")           # a name seen before: hashed first, not parsed
    assert c.status == "already ingested" and len(calls) == 2
    assert one(con, "SELECT count(*) FROM ingests")[0] == 1
