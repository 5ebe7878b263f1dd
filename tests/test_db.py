"""Schema creation, in-place upgrade, and refusal of a newer file."""
import shutil

import duckdb
import pytest

from jobsight.analytics.errors import UserError
from jobsight.analytics.store import db

VIEWS = {"jobs", "steps", "samples", "rejects", "ingests"}


def _tables(con):
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def test_empty_file_is_version_0_and_gets_everything(tmp_path):
    path = tmp_path / "a.duckdb"
    duckdb.connect(str(path)).close()          # a v0 file: exists, holds nothing
    con = db.connect(path)
    assert db.current_version(con) == db.known_version() >= 1
    assert VIEWS | {"job", "step", "sample", "reject", "ingest_log", "sidecar_run", "schema_version"} <= _tables(con)
    cols = [r[0] for r in con.execute("DESCRIBE jobs").fetchall()]
    for c in ("cluster", "job_id", "job_id_raw", "array_job_id", "array_task_id", "het_job_id", "het_offset",
              "job_name", "user", "account", "partition", "qos", "state", "exit_code", "submit_time", "start_time",
              "end_time", "elapsed_s", "timelimit_s", "ncpus", "nnodes", "ntasks", "ngpus", "gpu_type",
              "mem_req_bytes", "mem_alloc_bytes", "mem_peak_bytes", "cpu_time_s", "billing", "node_list", "source"):
        assert c in cols
    con.close()
    con = db.connect(path)                      # reopening is a no-op
    assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == db.known_version()
    con.close()


def test_older_file_is_upgraded_in_place_keeping_data(tmp_path):
    schema = tmp_path / "schema"
    schema.mkdir()
    shutil.copy(db.SCHEMA_DIR / "0001_init.sql", schema / "0001_init.sql")
    path = tmp_path / "b.duckdb"
    con = duckdb.connect(str(path))
    assert db.migrate(con, schema_dir=schema) == 1
    con.execute("INSERT INTO job (cluster, job_id, job_id_raw, source) VALUES ('c', '1', '1', 'slurm-sacct')")
    (schema / "0002_extra.sql").write_text("ALTER TABLE job ADD COLUMN extra_note VARCHAR;")
    assert db.migrate(con, schema_dir=schema) == 2
    assert con.execute("SELECT job_id, extra_note FROM job").fetchall() == [("1", None)]
    assert con.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall() == [(1, "init"), (2, "extra")]
    con.close()


def test_failed_migration_changes_nothing(tmp_path):
    schema = tmp_path / "schema"
    schema.mkdir()
    shutil.copy(db.SCHEMA_DIR / "0001_init.sql", schema / "0001_init.sql")
    (schema / "0002_bad.sql").write_text("ALTER TABLE job ADD COLUMN ok1 INT; ALTER TABLE nosuch ADD COLUMN x INT;")
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    with pytest.raises(db.SchemaError, match="0002_bad.sql"):
        db.migrate(con, schema_dir=schema)
    assert db.current_version(con) == 1
    assert "ok1" not in [r[0] for r in con.execute("DESCRIBE job").fetchall()]


def test_newer_file_is_refused_untouched(tmp_path):
    path = tmp_path / "d.duckdb"
    con = db.connect(path)
    future = db.known_version() + 1
    con.execute("INSERT INTO schema_version VALUES (?, 'from_the_future', now()::TIMESTAMP)", [future])
    con.close()
    with pytest.raises(UserError, match=f"schema version {future}.*newer jobsight"):
        db.connect(path)
    con = duckdb.connect(str(path))
    assert db.current_version(con) == future
    con.close()


def test_version_2_file_keeps_its_jobs_and_steps_without_key_indexes(tmp_path):
    """0003 rebuilds job and step without PRIMARY KEY: same rows, columns, types and NOT NULLs."""
    from pathlib import Path

    from jobsight.analytics.ingest import files as ingest
    from jobsight.analytics.ingest.records import ParseOptions
    schema = tmp_path / "schema"
    schema.mkdir()
    for name in ("0001_init.sql", "0002_config.sql"):
        shutil.copy(db.SCHEMA_DIR / name, schema / name)
    path = tmp_path / "v2.duckdb"
    con = duckdb.connect(str(path))
    assert db.migrate(con, schema_dir=schema) == 2
    sacct = Path(__file__).resolve().parents[1] / "fixtures" / "sacct" / "mixed-jobs.txt"
    (rep,) = ingest.ingest_paths(con, [sacct], ParseOptions(timezone="Europe/Amsterdam"))
    assert rep.status == "ingested" and rep.stored == 14          # 8 jobs + 6 steps, as the v3 loader stores them
    before = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("job", "step")}
    shape = {t: con.execute(f"SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                            f"WHERE table_name = '{t}' ORDER BY ordinal_position").fetchall() for t in ("job", "step")}
    keys = "SELECT count(*) FROM duckdb_constraints() WHERE table_name IN ('job', 'step') AND constraint_type = 'PRIMARY KEY'"
    assert con.execute(keys).fetchone()[0] == 2
    con.close()
    con = db.connect(path)
    assert db.current_version(con) == db.known_version()
    # later migrations only add columns after these: the version-2 columns keep their rows and shape
    v2_cols = {t: ", ".join(f'"{c}"' for c, _, _ in shape[t]) for t in shape}
    assert {t: con.execute(f"SELECT {v2_cols[t]} FROM {t} ORDER BY ALL").fetchall() for t in ("job", "step")} == before
    assert {t: con.execute(f"SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                           f"WHERE table_name = '{t}' ORDER BY ordinal_position").fetchall()[:len(shape[t])]
            for t in ("job", "step")} == shape
    assert con.execute(keys).fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == len(before["job"])   # the views still read them
    with pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO job (cluster, job_id, job_id_raw, source) VALUES (NULL, '1', '1', 'x')")
    con.close()
