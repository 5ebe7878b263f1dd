"""End to end: generated cluster data through `jobsight ingest` into the metric views, and
`jobsight demo` itself. Every generated file must ingest with no rejects (the one truncated sidecar
line is a counted drop), and the behaviour patterns must come out as the flags users would see."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.config import parse_config
from jobsight.analytics.demo import PARTITIONS_FILE, SUBDIRS, generate
from jobsight.analytics.store.database import Database

FORMAT_OF_DIR = {"sacct": "sacct", "sacct-json": "sacct-json", "sidecar": "sidecar", "nvidia-smi": "nvidia-smi",
                 "seff": "seff"}


def _ingest(db: Path, out: Path, capsys) -> dict:
    rc = jobsight(["ingest", "--db", str(db), "--timezone", "Europe/Amsterdam", "--cluster", "demo", "--json",
                   "--quiet", *[str(out / d) for d in SUBDIRS if (out / d).is_dir()]])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0, [f for f in report["files"] if f["status"] != "ingested"]
    return report


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e") / "data"
    manifest = generate(out, jobs=200, days=7, seed=11)
    return out, manifest, out.parent / "demo.duckdb"


@pytest.fixture(scope="module")
def report(loaded):
    """`jobsight ingest --json` run once for the module, its JSON summary parsed."""
    import contextlib
    import io
    out, _, db = loaded
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = jobsight(["ingest", "--db", str(db), "--timezone", "Europe/Amsterdam", "--cluster", "demo", "--json",
                       "--quiet", *[str(out / d) for d in SUBDIRS if (out / d).is_dir()]])
    rep = json.loads(buf.getvalue())
    rep["_rc"] = rc
    return rep


@pytest.fixture(scope="module")
def con(loaded, report):
    _, _, db = loaded
    c = Database.open(db, parse_config({}))
    yield c
    c.close()


def _tagged(manifest: dict, tag: str) -> str:
    return next(jid for jid, t in manifest["truth"].items() if tag in t["tags"])


def _flags(con, jid: str) -> set[str]:
    return {r[0] for r in con.execute("SELECT code FROM job_flags WHERE job_id_raw = ?", [jid]).fetchall()}


def _metric(con, jid: str, col: str):
    return con.execute(f"SELECT {col} FROM job_metrics WHERE job_id_raw = ?", [jid]).fetchone()[0]


def test_every_file_ingests_with_no_rejects(loaded, report):
    out, manifest, _ = loaded
    assert report["_rc"] == 0 and report["failed"] == 0
    # the partitions' scontrol output is read as billing weights (jobsight demo), not ingested
    data_files = {str((out / rel).resolve()): rel for rel in manifest["files"]
                  if not rel.endswith(".meta.json") and rel != PARTITIONS_FILE}
    seen = {}
    for f in report["files"]:
        rel = data_files.get(str(Path(f["path"]).resolve()))
        assert rel is not None, f"ingested a file the generator did not write: {f['path']}"
        assert f["status"] == "ingested", f
        assert f["format"] == FORMAT_OF_DIR[rel.split("/", 1)[0]], f
        assert f["rows_in"] == f["stored"] + f["updated"] + f["unchanged"] + f["rejected"] + f["dropped"], f
        seen[rel] = f
    assert set(seen) == set(data_files.values())
    assert report["totals"]["rejected"] == 0
    # exactly one counted drop: the line the killed sidecar left half-written
    dropped = {rel: f["dropped"] for rel, f in seen.items() if f["dropped"]}
    jid = _tagged(manifest, "cancelled_sidecar_truncated")
    assert list(dropped.values()) == [1] and f"-{jid}-" in next(iter(dropped))


def test_reingest_changes_nothing(loaded, report, capsys):
    out, _, db = loaded
    again = _ingest(db, out, capsys)
    assert {f["status"] for f in again["files"]} == {"already ingested"}
    assert again["totals"]["stored"] == 0 and again["totals"]["updated"] == 0


def test_every_generated_job_is_in_the_database(loaded, con):
    _, manifest, _ = loaded
    ids = {r[0] for r in con.execute("SELECT job_id_raw FROM jobs").fetchall()}
    assert ids == set(manifest["truth"])
    assert con.execute("SELECT count(*) FROM rejects").fetchone()[0] == 0


def test_pattern_jobs_get_the_expected_flags(loaded, con):
    _, m, _ = loaded
    assert "gpu_idle" in _flags(con, _tagged(m, "notebook_idle"))
    assert "gpu_unused_devices" in _flags(con, _tagged(m, "multi_gpu_one_used"))
    assert "cpu_serial_on_many" in _flags(con, _tagged(m, "serial_on_many"))
    assert "mem_oversized" in _flags(con, _tagged(m, "mem_10x"))
    assert "time_oversized" in _flags(con, _tagged(m, "time_20x"))
    assert "gpu_fits_smaller" in _flags(con, _tagged(m, "mig_sized"))
    eff = _tagged(m, "efficient_training")
    assert not _flags(con, eff) & {"gpu_idle", "gpu_low_util", "gpu_unused_devices", "gpu_fits_smaller"}
    well = _tagged(m, "well_sized")
    assert not _flags(con, well) & {"cpu_low_eff", "cpu_serial_on_many", "mem_oversized", "time_oversized"}


def test_pattern_jobs_have_the_generated_utilisation(loaded, con):
    _, m, _ = loaded
    assert _metric(con, _tagged(m, "efficient_training"), "gpu_util_pct") > 85
    assert 30 <= _metric(con, _tagged(m, "dataloader_bound"), "gpu_util_pct") <= 50
    assert 30 <= _metric(con, _tagged(m, "two_phase_finetune"), "gpu_util_pct") <= 50
    assert _metric(con, _tagged(m, "notebook_idle"), "gpu_util_pct") < 1
    smi = _tagged(m, "nvidia_smi_log")
    assert _metric(con, smi, "gpu_util_source") == "nvidia-smi" and _metric(con, smi, "gpu_util_pct") > 85
    mem10 = _tagged(m, "mem_10x")
    assert 8 <= _metric(con, mem10, "mem_eff_pct") <= 13          # peak ~1/10 of the request (+4 % page cache)
    assert _metric(con, _tagged(m, "time_20x"), "time_eff_pct") <= 5.0


def test_scheduler_life_cycle_survives_ingest(loaded, con):
    _, m, _ = loaded
    rq = _tagged(m, "requeued")
    assert con.execute("SELECT state, restarts FROM jobs WHERE job_id_raw = ?", [rq]).fetchone() == ("COMPLETED", 1)
    pend = con.execute("SELECT job_id, state FROM jobs WHERE job_id LIKE '%\\_[%' ESCAPE '\\'").fetchall()
    assert pend and all(state == "PENDING" for _, state in pend)
    names = {t: con.execute("SELECT job_name FROM jobs WHERE job_id_raw = ?", [_tagged(m, t)]).fetchone()[0]
             for t in ("pipe_in_name", "utf8_name")}
    assert names == {"pipe_in_name": "prep|filter", "utf8_name": "modèle_océan"}
    oom = _tagged(m, "oom")
    assert con.execute("SELECT state, exit_code FROM jobs WHERE job_id_raw = ?", [oom]).fetchone() == ("OUT_OF_MEMORY", "0:125")
    mn = _tagged(m, "multi_node_sidecars")
    hosts = con.execute("SELECT count(DISTINCT host) FROM samples WHERE job_id_raw = ?", [mn]).fetchone()[0]
    assert hosts == con.execute("SELECT nnodes FROM jobs WHERE job_id_raw = ?", [mn]).fetchone()[0] >= 2


def test_demo_command_generates_ingests_and_reuses(tmp_path, capsys):
    out = tmp_path / "demo"
    args = ["demo", "--jobs", "60", "--days", "3", "--seed", "5", "--out", str(out), "--no-serve"]
    assert jobsight(args) == 0
    first = capsys.readouterr().out
    assert "generating 60 jobs" in first and (out / "demo.duckdb").is_file()
    assert "project allocations from" in first and (out / "sacctmgr-assoc.txt").is_file()     # budgets to show
    assert jobsight(args) == 0
    second = capsys.readouterr().out
    assert "reusing" in second and "every file was already ingested" in second
    # another seed: new data, and the demo database is rebuilt rather than mixed
    assert jobsight(args[:6] + ["6"] + args[7:]) == 0
    third = capsys.readouterr().out
    assert "generating 60 jobs" in third and "holds another demo generation" in third


def test_demo_refuses_a_database_it_did_not_make(tmp_path, capsys):
    other = tmp_path / "mine.duckdb"
    other.write_bytes(b"not a demo database")
    rc = jobsight(["demo", "--jobs", "30", "--days", "2", "--out", str(tmp_path / "d"), "--db", str(other), "--no-serve"])
    assert rc == 2 and "was not made by `jobsight demo`" in capsys.readouterr().err
    assert other.read_bytes() == b"not a demo database"
