"""Running jobs: sacct's RUNNING record stored with its elapsed and charge so far, a later dump
replacing an earlier one in either order, the flags that need a finished job held back until it
ends, and RUNNING -> COMPLETED updating the row and its stored metrics."""
from __future__ import annotations

from pathlib import Path

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store.database import Database
from jobsight.collector.csv_schema import COLUMNS, HEADER

OPTS = ParseOptions(timezone="UTC", cluster="c1")
HDR = "JobID|JobIDRaw|User|Account|Partition|State|Start|End|Elapsed|Timelimit|NCPUS|TotalCPU|ReqMem|AllocTRES\n"
TRES = "billing=4,cpu=4,mem=64G,node=1"


def dump(folder: Path, name: str, state: str, elapsed: str, end: str = "Unknown", cpu: str = "00:00:00") -> Path:
    """One sacct line of job 77 (4 cores, 64 GiB, a 1-day limit, started 10:00) as --from-sacct prints it."""
    path = folder / name
    path.write_text(HDR + f"77|77|ann|prj|cpu|{state}|2026-11-17T10:00:00|{end}|{elapsed}|1-00:00:00|4|{cpu}|64G|{TRES}\n")
    return path


def samples(folder: Path, minutes: range) -> Path:
    """The job's sidecar: the CPU row at 10 % of the cores with 1 GiB in use, one a minute."""
    path = folder / "jobsight-c1-77-n1.csv"
    rows = []
    for m in minutes:
        cell = {c: "" for c in COLUMNS}
        cell.update(time=f"2026-11-17T{10 + m // 60:02d}:{m % 60:02d}:00.000Z", job_id="77", cluster="c1", host="n1",
                    device="cpu", util_pct="10", mem_used_bytes=str(1 << 30), mem_total_bytes=str(64 << 30))
        rows.append(",".join(cell[c] for c in COLUMNS))
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def load(db: Path, *paths: Path) -> None:
    w = Database.connect(db)
    try:
        for r in ingest.ingest_paths(w.con, paths, OPTS):
            assert r.status in ("ingested", "already ingested"), r
    finally:
        w.close()


def metrics(db: Path) -> tuple[dict, set[str]]:
    with Database.open(db, say=None) as h:
        row = h.rows("SELECT state, end_time, elapsed_s, sbu, cpu_eff_pct, cpu_eff_source, time_eff_pct "
                     "FROM job_metrics WHERE job_id_raw = '77'")[0]
        flags = {r["code"] for r in h.rows("SELECT code FROM job_flags WHERE job_id_raw = '77'")}
    return row, flags


def test_later_running_record_wins_in_either_order(tmp_path):
    early = dump(tmp_path, "early.txt", "RUNNING", "01:00:00")
    late = dump(tmp_path, "late.txt", "RUNNING", "02:00:00")
    for order in ((early, late), (late, early)):
        db = tmp_path / f"{order[0].stem}.duckdb"
        load(db, *order)
        row, _ = metrics(db)
        assert (row["state"], row["end_time"], row["elapsed_s"]) == ("RUNNING", None, 7200)


def test_running_job_so_far_then_completed(tmp_path):
    db = tmp_path / "jobs.duckdb"
    load(db, dump(tmp_path, "run.txt", "RUNNING", "02:00:00"), samples(tmp_path, range(0, 120)))
    row, flags = metrics(db)
    # elapsed and charge so far (billing 4 x 2 h); sacct's TotalCPU of 0 is not the job's CPU use so
    # far, the samples are; the flags on peak memory and time wait for the end
    assert (row["state"], row["elapsed_s"], row["sbu"]) == ("RUNNING", 7200, 8.0)
    assert row["cpu_eff_source"] == "sidecar" and abs(row["cpu_eff_pct"] - 10) < 1e-6
    assert "cpu_low_eff" in flags and not flags & {"mem_oversized", "time_oversized"}

    load(db, dump(tmp_path, "done.txt", "COMPLETED", "03:00:00", end="2026-11-17T13:00:00", cpu="01:12:00"),
         samples(tmp_path, range(0, 180)))
    row, flags = metrics(db)
    assert (row["state"], str(row["end_time"]), row["elapsed_s"], row["sbu"]) == ("COMPLETED", "2026-11-17 13:00:00", 10800, 12.0)
    assert row["cpu_eff_source"] == "sacct" and abs(row["cpu_eff_pct"] - 10) < 1e-6    # 1.2 h of 12 core-hours
    assert {"mem_oversized", "time_oversized", "cpu_low_eff"} <= flags


def test_running_job_without_samples_has_no_cpu_figure(tmp_path):
    db = tmp_path / "jobs.duckdb"
    load(db, dump(tmp_path, "run.txt", "RUNNING", "02:00:00"))
    row, flags = metrics(db)
    assert row["cpu_eff_pct"] is None and row["cpu_eff_source"] is None and not flags & {"cpu_low_eff", "cpu_serial_on_many"}
