"""`jobsight prune` (analytics/store/prune.py) on the demo generator's data: refused before the lake
holds the samples, then every sample before the cutoff removed, the file shrunk, and every figure a
reader sees unchanged, also after a later refresh and a settings change."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

import jobsight.analytics.demo.jobs as demo_jobs
from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.demo import SUBDIRS, generate

CUTOFF = "2026-11-17"          # the demo's data ends 2026-11-18 14:00 UTC: nearly every sample goes


def _cli(args: list) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = jobsight([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _ok(args: list) -> str:
    rc, out, err = _cli(args)
    assert rc == 0, (args, out[-2000:], err[-2000:])
    return out


def _query(db: Path, sql: str, params=None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _job_figures(db: Path, job: str) -> dict:
    """What `jobsight job --format json` says of a job, but for its time series (samples)."""
    m = json.loads(_ok(["job", "--db", db, job, "--format", "json"]))
    m = m[0] if isinstance(m, list) else m
    return {k: v for k, v in m.items() if k not in ("series", "samples_moved")}


def _job_json(db: Path, job: str, *extra) -> dict:
    m = json.loads(_ok(["job", "--db", db, job, "--format", "json", *extra]))
    return m[0] if isinstance(m, list) else m


def _same(a, b) -> bool:
    """Equal, floats to 1e-12 relative: a job recomputed from its stored per-device rows sums them
    in another order than the first computation did."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("prune")
    data, db, config = root / "data", root / "demo.duckdb", root / "jobsight.toml"
    config.write_text("# defaults\n", encoding="utf-8")
    # long jobs sampled finely (the demo caps them): the samples are the file's largest table, as at
    # a site; a small file is mostly a block or more per table and index, whatever it holds
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(demo_jobs, "MAX_SAMPLES_PER_DEVICE", 20000)
        generate(data, jobs=450, days=30, seed=3)
    _ok(["ingest", "--db", db, "--config", config, "--timezone", "Europe/Amsterdam", "--cluster", "demo", "--quiet"]
        + [data / d for d in SUBDIRS if (data / d).is_dir()])
    return root, db, config


def test_prune_keeps_every_figure(world):
    root, db, config = world
    lake = root / "lake"
    # the jobs that will lose samples: finished, with GPU samples before the cutoff
    gpu_jobs = [r[0] for r in _query(db, "SELECT DISTINCT s.job_id_raw FROM sample s JOIN job j USING (cluster, job_id_raw) "
                                         "WHERE s.time < ? AND s.device <> 'cpu' AND j.end_time IS NOT NULL ORDER BY 1",
                                     [CUTOFF])]
    assert len(gpu_jobs) >= 5
    gpu_jobs = gpu_jobs[:: max(1, len(gpu_jobs) // 4)]      # a spread of them: `jobsight job` takes a second
    before_rows = _query(db, "SELECT count(*) FROM sample WHERE time < ?", [CUTOFF])[0][0]
    assert before_rows > 50_000
    usage = _ok(["usage", "--db", db, "--by", "account", "--format", "json"])
    flags = _ok(["flags", "--db", db, "--format", "json"])
    figures = {j: _job_figures(db, j) for j in gpu_jobs}
    series = {j: _job_json(db, j)["series"] for j in gpu_jobs}
    assert all(figures[j]["gpus"] and figures[j]["sbu"] is not None for j in gpu_jobs)
    size = db.stat().st_size
    mode = os.stat(db).st_mode
    unpruned = root / "unpruned.duckdb"         # the same database, never pruned: what figures should be
    shutil.copy(db, unpruned)
    sequences = "SELECT sequence_name, last_value FROM duckdb_sequences() ORDER BY 1"
    counters = _query(db, sequences)
    assert counters and counters[0][1] is not None

    # before any export: refused, nothing removed, the months named
    rc, out, err = _cli(["prune", "--db", db, "--samples-before", CUTOFF, "--lake", lake])
    assert rc == 2
    assert "demo 2026-10" in err and "demo 2026-11" in err and "nothing was removed" in err
    assert _query(db, "SELECT count(*) FROM sample WHERE time < ?", [CUTOFF])[0][0] == before_rows

    # an export of one month is not enough: the other is named
    _ok(["lake", "export", "--db", db, "--out", lake, "--month", "2026-11"])
    rc, out, err = _cli(["prune", "--db", db, "--samples-before", CUTOFF, "--lake", lake])
    assert rc == 2 and "demo 2026-10" in err and "demo 2026-11:" not in err

    _ok(["lake", "export", "--db", db, "--out", lake])
    out = _ok(["prune", "--db", db, "--samples-before", CUTOFF, "--lake", lake])
    assert f"removed {before_rows:,} sample rows" in out
    assert _query(db, "SELECT count(*) FROM sample WHERE time < ?", [CUTOFF])[0][0] == 0
    assert db.stat().st_size <= 0.8 * size, (size, db.stat().st_size)
    assert os.stat(db).st_mode == mode
    # the compacted copy goes on counting ingests where the file did (the refresh's watermark)
    assert _query(db, sequences) == counters
    assert not db.with_name(db.name + ".wal").exists() and not list(root.glob(f".{db.name}.compact-*"))
    snap = db.with_name(db.name + ".snapshot")
    assert snap.stat().st_size == db.stat().st_size
    assert not db.with_name(db.name + ".snapshot.spare").exists()
    assert _query(db, "SELECT sum(rows_pruned) FROM pruned_month")[0][0] == before_rows

    # a re-export of the pruned months keeps the pruned rows (read back from the lake)
    lake_rows = "SELECT count(*) FROM read_parquet(?, hive_partitioning = true)"
    files = str(lake / "samples" / "**" / "*.parquet")
    total = _query(db, "SELECT count(*) FROM sample")[0][0] + before_rows
    assert duckdb.execute(lake_rows, [files]).fetchone()[0] == total
    _ok(["lake", "export", "--db", db, "--out", lake])
    assert duckdb.execute(lake_rows, [files]).fetchone()[0] == total
    # another lake than the one the months were pruned to is refused: it would not hold those rows
    rc, _out, err = _cli(["prune", "--db", db, "--samples-before", "2026-11-18", "--lake", root / "other"])
    assert rc == 2 and "demo 2026-11" in err

    # readers see the same figures
    assert _ok(["usage", "--db", db, "--by", "account", "--format", "json"]) == usage
    assert _ok(["flags", "--db", db, "--format", "json"]) == flags
    for j in gpu_jobs:
        assert _job_figures(db, j) == figures[j], j

    _series_from_the_lake(root, db, lake, gpu_jobs, series)

    # a refresh that recomputes the pruned jobs (rows without an ingest_id are recomputed at every
    # refresh, as an ingest that changed them would) and a settings change (job_metrics rebuilt from
    # the stored per-device rows) keep their figures
    con = duckdb.connect(str(db))
    con.execute("UPDATE job SET ingest_id = NULL WHERE list_contains(?, job_id_raw)", [gpu_jobs])
    con.close()
    _ok(["settings", "--db", db, "--quiet"])
    assert _query(db, "SELECT value FROM metric_state WHERE name = 'last_refresh'")[0][0].startswith("incremental")
    for j in gpu_jobs:
        assert _same(_job_figures(db, j), figures[j]), j
    config.write_text("[flags]\ngpu_idle_pct = 40\n", encoding="utf-8")
    _ok(["settings", "--db", db, "--config", config, "--quiet"])
    for j in gpu_jobs:
        after = _job_figures(db, j)
        assert after["gpus"] and after["nodes"] == figures[j]["nodes"]
        for key in ("sbu", "gpu_util_pct", "cpu_eff_pct", "mem_eff_pct", "gpus", "gpus_sampled"):
            assert _same(after.get(key), figures[j].get(key)), (j, key)
        # the idle GPUs counted under the new threshold, from the per-GPU figures the samples gave
        assert after["gpus_idle"] == sum(g["util_mean_pct"] < 40 for g in figures[j]["gpus"]), j
    _ok(["settings", "--db", unpruned, "--config", config, "--quiet"])
    for j in gpu_jobs:
        assert _same(_job_figures(db, j), _job_figures(unpruned, j)), j
    _settings_after_prune(root, db, lake, config, unpruned, gpu_jobs)


def _series_from_the_lake(root: Path, db: Path, lake: Path, jobs: list[str], series: dict) -> None:
    """A pruned job's time series is read back from the lake it was pruned to (or [lake] path): the
    same as before the prune, and said so; the dashboard's job page too. Without a readable lake:
    the samples kept, and where the rest went."""
    from jobsight.analytics.queries import summaries
    from jobsight.analytics.queries.scope import Scope
    from jobsight.analytics.store.database import Database
    with_lake = root / "with-lake.toml"
    with_lake.write_text(f'[lake]\npath = "{lake}"\n', encoding="utf-8")
    for j in jobs:
        for extra in ((), ("--config", with_lake)):
            read = _job_json(db, j, *extra)
            assert read["series"] == series[j] and read["samples_moved"]["read"] is True, (j, extra)
            assert read["samples_moved"]["lake"] == str(lake)
    assert "reads them from the lake" in _ok(["job", "--db", db, jobs[0]])
    # the dashboard's job page: the same samples as the database held before the prune
    unpruned = root / "unpruned.duckdb"
    with Database.read(unpruned, say=None) as h:
        want = summaries.job_samples(h, Scope.admin(), "demo", jobs[0])
    with Database.read(db, say=None) as h:
        got = summaries.job_samples(h, Scope.admin(), "demo", jobs[0])
    assert got.attrs["samples_moved"]["read"] is True and len(got) == len(want) > 0
    assert got.sort_values(["host", "device", "time"]).reset_index(drop=True).equals(
        want.sort_values(["host", "device", "time"]).reset_index(drop=True))
    _one_jobs_partitions(root, db, lake)
    away = lake.with_name("lake-away")
    lake.rename(away)
    try:
        kept = _job_json(db, jobs[0])
        assert kept["samples_moved"]["read"] is False and kept["samples_moved"]["lake"] == str(lake)
        assert sum(map(len, kept["series"].values())) < sum(map(len, series[jobs[0]].values()))
        assert "cannot be read now" in _ok(["job", "--db", db, jobs[0]])
        with Database.read(db, say=None) as h:
            assert summaries.job_samples(h, Scope.admin(), "demo", jobs[0]).attrs["samples_moved"]["read"] is False
    finally:
        away.rename(lake)


def _one_jobs_partitions(root: Path, db: Path, lake: Path) -> None:
    """One job's series reads only its cluster's partitions of the months it ran in: a copy of the
    lake whose other month and another cluster hold corrupt files still gives a November job's
    series whole; an October job's, whose partition is corrupt, is said to be unreadable."""
    damaged = root / "lake-damaged"
    shutil.copytree(lake, damaged)
    for f in (damaged / "samples" / "cluster=demo" / "month=2026-10").glob("*.parquet"):
        f.write_bytes(b"not parquet")
    other = damaged / "samples" / "cluster=other" / "month=2026-11"
    other.mkdir(parents=True)
    (other / "data_0.parquet").write_bytes(b"not parquet either")
    config = root / "damaged.toml"
    config.write_text(f'[lake]\npath = "{damaged}"\n', encoding="utf-8")
    late, early = (_query(db, "SELECT min(p.job_id_raw) FROM pruned_job p JOIN job j USING (cluster, job_id_raw) "
                              f"WHERE least(j.submit_time, j.start_time) {op} '2026-11-01'")[0][0]
                   for op in (">=", "<"))
    assert late and early
    whole = _job_json(db, late)
    read = _job_json(db, late, "--config", config)
    assert read["samples_moved"]["read"] is True and read["samples_moved"]["lake"] == str(damaged)
    assert read["series"] == whole["series"] and whole["samples_moved"]["read"] is True and whole["series"]
    # the whole lake read at once fails on those files: the job's read did not open them
    with pytest.raises(duckdb.Error):
        duckdb.execute("SELECT count(*) FROM read_parquet(?, hive_partitioning = true)",
                       [str(damaged / "samples" / "**" / "*.parquet")]).fetchone()
    unread = _job_json(db, early, "--config", config)["samples_moved"]
    assert unread["read"] is False and "month=2026-10" in unread["why"], unread
    shutil.rmtree(damaged)


def _settings_after_prune(root: Path, db: Path, lake: Path, config: Path, unpruned: Path, jobs: list[str]) -> None:
    """A change of what the per-GPU rows are computed from (samples.max_gap_s): the pruned jobs are
    recomputed from the lake's samples, as the never-pruned copy is from its own; when the lake
    cannot be read they keep theirs, are named, and the command exits 1."""
    config.write_text("[flags]\ngpu_idle_pct = 40\n[samples]\nmax_gap_s = 20\n", encoding="utf-8")
    pruned = _query(db, "SELECT count(*) FROM pruned_job")[0][0]
    out = _ok(["settings", "--db", db, "--config", config, "--dry-run"])
    assert "job_gpu_devices" in out and f"would recompute the pruned {pruned:,} job(s)" in out
    earlier = {j: _job_figures(db, j) for j in jobs}
    out = _ok(["settings", "--db", db, "--config", config, "--quiet"])
    assert f"recomputes the pruned {pruned:,} job(s): cluster demo" in out
    _ok(["settings", "--db", unpruned, "--config", config, "--quiet"])
    for j in jobs:
        assert _same(_job_figures(db, j), _job_figures(unpruned, j)), j
    # the setting changes what the samples give: kept rows would not have passed the comparison
    assert any(not _same(_job_figures(db, j)["gpus"], earlier[j]["gpus"]) for j in jobs)
    # the lake lost a month: those jobs keep the figures of 20 s, are named, exit 1
    away = lake.with_name("lake-away")
    lake.rename(away)
    try:
        before = {j: _job_figures(db, j) for j in jobs}
        config.write_text("[flags]\ngpu_idle_pct = 40\n[samples]\nmax_gap_s = 15\n", encoding="utf-8")
        rc, out, err = _cli(["settings", "--db", db, "--config", config, "--quiet"])
        assert rc == 1, (out, err)
        assert f"did not give the pruned samples of {pruned:,} job(s): cluster demo ({pruned:,}): " in err
        assert "earlier settings" in err and "skipped demo 2026-1" in err
        for j in jobs:
            assert _same(_job_figures(db, j)["gpus"], before[j]["gpus"]), j
        # the admin moved the lake and configured its new place: the recompute reads it there
        moved = root / "moved.toml"
        moved.write_text(f'[lake]\npath = "{away}"\n[flags]\ngpu_idle_pct = 40\n[samples]\nmax_gap_s = 15\n',
                         encoding="utf-8")
        _ok(["settings", "--db", db, "--config", moved, "--quiet"])
        assert _query(db, "SELECT DISTINCT lake FROM pruned_month") == [(str(lake),)]   # the record stays
        _ok(["settings", "--db", unpruned, "--config", config, "--quiet"])
        for j in jobs:
            assert _same(_job_figures(db, j), _job_figures(unpruned, j)), j
    finally:
        away.rename(lake)
    # back: the next recompute takes them from the lake again
    config.write_text("[flags]\ngpu_idle_pct = 40\n[samples]\nmax_gap_s = 300\n", encoding="utf-8")
    _ok(["settings", "--db", db, "--config", config, "--quiet"])
    _ok(["settings", "--db", unpruned, "--config", config, "--quiet"])
    for j in jobs:
        assert _same(_job_figures(db, j), _job_figures(unpruned, j)), j


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
HARNESS = [FIXTURES / n for n in ("harness-sacct.txt", "jobsight-jobsight-114-vm-20261122T001601Z-4242.csv")]


def test_watch_prunes_once_a_day(tmp_path):
    """[retention] samples_days with [lake] path: watch's daily prune, refused (and not retried that
    day) while the lake lacks the months, done the next day after an export."""
    import argparse
    import datetime as dt

    from jobsight.analytics.commands import watch
    from jobsight.analytics.config import load_config
    db, lake, toml = tmp_path / "h.duckdb", tmp_path / "lake", tmp_path / "jobsight.toml"
    toml.write_text(f'[lake]\npath = "{lake}"\n[retention]\nsamples_days = 30\n', encoding="utf-8")
    _ok(["ingest", "--db", db, "--config", toml, "--timezone", "UTC", "--cluster", "jobsight", "--quiet", *HARNESS])
    n = _query(db, "SELECT count(*) FROM sample")[0][0]
    assert n > 0 and _query(db, "SELECT max(time) < '2026-12-01' FROM sample")[0][0]
    cfg, args = load_config(toml), argparse.Namespace(db=str(db))
    day = dt.datetime(2026, 12, 31, 0, 5)
    assert watch._retention(args, cfg, day) is False                # no lake yet: refused, logged
    assert _query(db, "SELECT count(*) FROM sample")[0][0] == n
    _ok(["lake", "export", "--db", db, "--out", lake])
    assert watch._retention(args, cfg, day + dt.timedelta(hours=1)) is True    # once a day: not again today
    assert _query(db, "SELECT count(*) FROM sample")[0][0] == n
    assert watch._retention(args, cfg, day + dt.timedelta(days=1)) is True
    assert _query(db, "SELECT count(*) FROM sample")[0][0] == 0
    assert _query(db, "SELECT count(*) FROM pruned_job")[0][0] >= 1


@pytest.mark.parametrize("toml,why", [
    ("[retention]\nsamples_days = 30\n", r"needs \[lake\] path"),
    ('[lake]\npath = "/l"\n[retention]\nsamples_days = 1.5\n', "whole number"),
    ('[lake]\npath = "/l"\n[retention]\nsamples_days = 0\n', "at least 1"),
    ('[lake]\nroot = "/l"\n', "unknown key lake.root"),
])
def test_retention_config_errors(tmp_path, toml, why):
    from jobsight.analytics.config import ConfigError, load_config
    p = tmp_path / "jobsight.toml"
    p.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError, match=why):
        load_config(p)


@pytest.mark.parametrize("when", ["2026-13-01", "yesterday", "2026-11-01; DROP TABLE sample"])
def test_bad_cutoff_is_named(tmp_path, when):
    rc, _out, err = _cli(["prune", "--db", tmp_path / "none.duckdb", "--samples-before", when, "--lake", tmp_path])
    assert rc == 2 and "--samples-before" in err and repr(when) in err


def _walk(node):
    yield node
    children = getattr(node, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        if not isinstance(child, str):
            yield from _walk(child)
    if isinstance(node, list):
        for child in node:
            yield from _walk(child)


def _harness(tmp_path: Path) -> Path:
    db = tmp_path / "h.duckdb"
    _ok(["ingest", "--db", db, "--timezone", "UTC", "--cluster", "jobsight", "--quiet", *HARNESS])
    return db


def test_a_lake_path_is_data(tmp_path):
    """A quote in the lake's path (or the database's) is a character of a path, never SQL."""
    folder = tmp_path / "it's here"
    folder.mkdir()
    db = _harness(folder)
    lake = folder / "la'ke"
    n = _query(db, "SELECT count(*) FROM sample")[0][0]
    _ok(["lake", "export", "--db", db, "--out", lake])
    out = _ok(["prune", "--db", db, "--samples-before", "2027-01-01", "--lake", lake])
    assert f"removed {n:,} sample rows" in out
    assert _query(db, "SELECT count(*) FROM sample")[0][0] == 0
    assert _query(db, "SELECT lake FROM pruned_month")[0][0] == str(lake)
    # the job page says where the samples went, the path as text
    from jobsight.analytics.queries.scope import Scope
    from jobsight.analytics.store.database import Database
    from jobsight.dashboard.pages import job as job_page
    (job,) = _query(db, "SELECT job_id_raw FROM pruned_job")[0]
    with Database.read(db, say=None) as h:
        page = job_page.render(h, Scope.admin(), "jobsight", job)
    notes = [c for c in _walk(page) if getattr(c, "id", None) == "job-samples-moved"]
    assert len(notes) == 1 and f"moved to the Parquet lake {lake}:" in notes[0].children


def test_a_failed_compaction_loses_nothing(tmp_path, monkeypatch):
    """The swap fails: the database is the one it was, less the samples the lake holds, and usable;
    no copy is left behind."""
    from jobsight.analytics.store import prune
    db, lake = _harness(tmp_path), tmp_path / "lake"
    jobs = _query(db, "SELECT count(*) FROM job_metrics")[0][0]
    _ok(["lake", "export", "--db", db, "--out", lake])

    def refuse(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(prune, "COMPACT_FREE", 0.0)       # compacts whatever share is free
    monkeypatch.setattr(prune.os, "replace", refuse)
    rc, _out, err = _cli(["prune", "--db", db, "--samples-before", "2027-01-01", "--lake", lake])
    assert rc == 2 and "cannot swap in its compacted copy" in err and "No space left" in err
    monkeypatch.undo()
    assert not list(tmp_path.glob(".h.duckdb.compact-*"))
    assert _query(db, "SELECT count(*) FROM sample")[0][0] == 0
    assert _query(db, "SELECT count(*) FROM job_metrics")[0][0] == jobs
    _ok(["prune", "--db", db, "--samples-before", "2027-01-01", "--lake", lake])     # usable: nothing left to do


def test_a_prune_that_frees_little_keeps_the_file(tmp_path, monkeypatch):
    """Below COMPACT_FREE the file is not rewritten: the samples are gone, the blocks they held are
    free inside it (for the next ingests), the results are those of before, the spare stays."""
    from jobsight.analytics.store import prune
    db, lake = _harness(tmp_path), tmp_path / "lake"
    _ok(["lake", "export", "--db", db, "--out", lake])
    for _ in range(2):
        _ok(["dashboard", "--db", db, "--publish"])
    metrics = _query(db, "SELECT * FROM job_metrics ORDER BY ALL")
    inode, samples = os.stat(db).st_ino, _query(db, "SELECT count(*) FROM sample")[0][0]
    assert samples > 0
    monkeypatch.setattr(prune, "COMPACT_FREE", 1.01)      # never reached: no compaction
    out = _ok(["prune", "--db", db, "--samples-before", "2027-01-01", "--lake", lake])
    assert f"removed {samples:,} sample rows" in out and "(not compacted: " in out
    assert os.stat(db).st_ino == inode and not list(tmp_path.glob(".h.duckdb.compact-*"))
    assert _query(db, "SELECT count(*) FROM sample")[0][0] == 0
    assert _query(db, "SELECT free_blocks > 0 FROM pragma_database_size()")[0][0]
    assert _query(db, "SELECT * FROM job_metrics ORDER BY ALL") == metrics
    assert db.with_name(db.name + ".snapshot.spare").exists()
    with duckdb.connect(str(db.with_name(db.name + ".snapshot")), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM sample").fetchone()[0] == 0


def test_export_refuses_a_pruned_month_the_lake_lost(tmp_path):
    """A re-export of a pruned month reads the pruned rows back; when the lake lost them it refuses,
    naming the partition, rather than write the month without them."""
    import shutil
    db, lake = _harness(tmp_path), tmp_path / "lake"
    _ok(["lake", "export", "--db", db, "--out", lake])
    _ok(["prune", "--db", db, "--samples-before", "2027-01-01", "--lake", lake])
    (month,) = _query(db, "SELECT month FROM pruned_month")[0]
    shutil.rmtree(lake / "samples" / "cluster=jobsight" / f"month={month}")
    rc, _out, err = _cli(["lake", "export", "--db", db, "--out", lake])
    assert rc == 2 and f"jobsight {month}" in err and "no longer holds them" in err
