"""`jobsight ingest` as users run it: summary lines, --json, exit codes, --from-sacct plumbing."""
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from jobsight.analytics import cli
from jobsight.analytics.ingest import sacct_runner

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"


def test_summary_line_and_exit_code(tmp_path, capsys):
    rc = cli.main(["ingest", "--db", str(tmp_path / "a.duckdb"), "--timezone", "UTC", str(FIX / "mixed-jobs.txt")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "mixed-jobs.txt: sacct, 15 rows: 14 stored, 0 updated, 0 rejected, 1 unchanged" in out


def test_json_summary_and_unreadable_input(tmp_path, capsys):
    rc = cli.main(["ingest", "--db", str(tmp_path / "a.duckdb"), "--json", "--timezone", "UTC",
                   str(FIX / "running-3001.txt"), str(tmp_path / "nope.txt")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert [f["status"] for f in doc["files"]] == ["ingested", "unreadable"]
    assert doc["totals"]["stored"] == 1 and doc["failed"] == 1


def test_columns_option(tmp_path, capsys):
    f = tmp_path / "noheader.txt"
    f.write_text("77|FAILED|00:02:00\n")
    rc = cli.main(["ingest", "--db", str(tmp_path / "a.duckdb"), "--format", "sacct", "--columns",
                   "JobID,State,Elapsed", str(f)])
    assert rc == 0 and "1 stored" in capsys.readouterr().out


@pytest.mark.parametrize("argv,msg", [
    (["--since", "2026-01-01", "x.txt"], "--since only applies"),
    (["--timezone", "Mars/Olympus", "x.txt"], "unknown time zone"),
    ([], "nothing to ingest"),
])
def test_user_errors(tmp_path, capsys, argv, msg):
    rc = cli.main(["ingest", "--db", str(tmp_path / "a.duckdb"), *argv])
    assert rc == 2 and msg in capsys.readouterr().err


def _fake_sacct(tmp_path, body):
    """A stand-in `sacct` that records its argv and TZ, and prints body."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "sacct"
    script.write_text(f"#!/bin/sh\necho \"$TZ $*\" >> {tmp_path}/calls\ncat <<'EOF'\n{body}EOF\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


def test_from_sacct_runs_sacct_in_utc_and_is_incremental(tmp_path, capsys, monkeypatch):
    header = "|".join(sacct_runner.SACCT_COLUMNS)
    row = dict.fromkeys(sacct_runner.SACCT_COLUMNS, "")
    row.update(JobID="55", JobIDRaw="55", Cluster="c1", State="COMPLETED", Start="2026-11-01T10:00:00",
               End="2026-11-01T11:00:00", JobName="x|y")
    body = header + "\n" + "|".join(row[c] for c in sacct_runner.SACCT_COLUMNS) + "\n"
    bindir = _fake_sacct(tmp_path, body)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    dbp = str(tmp_path / "a.duckdb")
    assert cli.main(["ingest", "--db", dbp, "--from-sacct", "--timezone", "Asia/Tokyo"]) == 0
    assert cli.main(["ingest", "--db", dbp, "--from-sacct", "--cluster", "c1"]) == 0
    calls = [c for c in (tmp_path / "calls").read_text().splitlines() if "--helpformat" not in c]
    assert calls[0].startswith("UTC --allusers --duplicates --parsable2")
    assert "-S 1970-01-01T00:00:00" in calls[0]
    assert "-S 2026-11-01T11:00:00" in calls[1] and calls[1].endswith("-M c1")   # from the stored end time
    out = capsys.readouterr().out
    assert "1 stored" in out and "0 stored, 0 updated, 0 rejected, 1 unchanged" in out
    import duckdb
    con = duckdb.connect(dbp)
    # TZ=UTC output is read as UTC whatever --timezone says; the name with '|' is recovered
    assert con.execute("SELECT job_name, end_time::VARCHAR FROM jobs").fetchall() == [("x|y", "2026-11-01 11:00:00")]
    con.close()


def test_from_sacct_without_sacct(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    rc = cli.main(["ingest", "--db", str(tmp_path / "a.duckdb"), "--from-sacct"])
    assert rc == 2 and "sacct` command was not found" in capsys.readouterr().err


def test_changed_database_gets_views_settings_and_snapshot(tmp_path, capsys, monkeypatch):
    import duckdb

    from jobsight.analytics.store import database
    monkeypatch.chdir(tmp_path)   # no ./jobsight.toml from elsewhere
    monkeypatch.delenv("JOBSIGHT_CONFIG", raising=False)
    conf = tmp_path / "site.toml"
    conf.write_text('[charging]\nfactor = 2.5\n')
    dbp = tmp_path / "a.duckdb"
    rc = cli.main(["ingest", "--db", str(dbp), "--config", str(conf), "--json", "--timezone", "UTC",
                   str(FIX / "mixed-jobs.txt")])
    doc = json.loads(capsys.readouterr().out)
    snap = Path(str(dbp) + ".snapshot")
    # a new database: the stored results are built for all its jobs (later ingests: their own jobs only)
    assert rc == 0 and doc["snapshot"] == {"published": str(snap), "error": None, "metrics_refresh": "full 8"}
    con = duckdb.connect(str(dbp), read_only=True)
    assert con.execute("SELECT value FROM setting WHERE name = 'charging.factor'").fetchone() == (2.5,)
    assert con.execute("SELECT text FROM setting WHERE name = 'views.checksum'").fetchone() == (database.views_checksum(),)
    con.close()
    s = duckdb.connect(str(snap), read_only=True)
    assert s.execute("SELECT count(*) FROM jobs").fetchone() == (8,)   # the 8 jobs of mixed-jobs.txt
    assert s.execute("SELECT count(*) FROM job_metrics").fetchone() == (8,)
    s.close()
    # nothing stored or updated, but no snapshot: published again (readers read it), with the settings
    # the database holds (no config given: 2.5 stays, the defaults are not written over it)
    snap.unlink()
    rc = cli.main(["ingest", "--db", str(dbp), "--json", "--timezone", "UTC", str(FIX / "mixed-jobs.txt")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["snapshot"]["published"] == str(snap) and snap.exists()
    with duckdb.connect(str(snap), read_only=True) as s:
        assert s.execute("SELECT value FROM setting WHERE name = 'charging.factor'").fetchone() == (2.5,)
    # nothing stored or updated, and the snapshot current: nothing published
    mtime = snap.stat().st_mtime_ns
    rc = cli.main(["ingest", "--db", str(dbp), "--json", "--timezone", "UTC", str(FIX / "mixed-jobs.txt")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["snapshot"]["published"] is None and snap.stat().st_mtime_ns == mtime


def test_bad_config_is_an_error_before_ingesting(tmp_path, capsys):
    dbp = tmp_path / "a.duckdb"
    rc = cli.main(["ingest", "--db", str(dbp), "--config", str(tmp_path / "nope.toml"), str(FIX / "mixed-jobs.txt")])
    assert rc != 0 and "config file not found" in capsys.readouterr().err
    assert not dbp.exists()


def test_from_sacct_asks_only_for_fields_this_sacct_knows(tmp_path):
    # Slurm 22.05's sacct has no Restarts field and refuses a whole query naming it.
    script = tmp_path / "sacct"
    known = [c for c in sacct_runner.SACCT_COLUMNS if c != "Restarts"]
    script.write_text("#!/bin/sh\n[ \"$1\" = --helpformat ] && echo '" + "   ".join(known) + "'\n")
    script.chmod(0o755)
    assert sacct_runner.supported_columns(str(script)) == known
    argv = sacct_runner.build_argv("2026-11-01", None, str(script), sacct_runner.supported_columns(str(script)))
    assert "Restarts" not in argv[argv.index("--format") + 1] and argv[argv.index("--format") + 1].endswith("JobName")


def test_an_interrupted_sacct_leaves_no_temporary_file(tmp_path, monkeypatch):
    """SIGINT (KeyboardInterrupt) or `jobsight watch` stopping while sacct runs: its output file goes."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sacct_runner.shutil, "which", lambda name: "/usr/bin/sacct")
    monkeypatch.setattr(sacct_runner, "supported_columns", lambda sacct: list(sacct_runner.SACCT_COLUMNS))

    def interrupted(*args, **kwargs):
        assert [p.name.startswith("jobsight-sacct-") for p in tmp_path.iterdir()] == [True]
        raise KeyboardInterrupt
    monkeypatch.setattr(sacct_runner.subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sacct_runner.run_sacct("2026-11-01T00:00:00", None)
    assert list(tmp_path.iterdir()) == []
