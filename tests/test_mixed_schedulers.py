"""Slurm + PBS + LSF in one database: `jobsight usage` per scheduler equals each source alone,
and the sidecar's job identity under PBS and LSF environments."""
from __future__ import annotations

import json
import subprocess
from collections import defaultdict

import duckdb
import pytest
from conftest import FIXTURES, jobsight_cmd

from jobsight.collector import jobenv

SLURM = FIXTURES / "sacct" / "mixed-jobs.txt"
PBS = FIXTURES / "pbs" / "20240301"
LSF = FIXTURES / "lsf" / "lsb.acct"
CONFIG = ('[charging]\npolicy = "table"\n\n'
          '[[charging.rates]]\npartition = "batch"\nper_core_h = 1.5\n\n'
          '[[charging.rates]]\npartition = "normal"\nper_core_h = 2.0\n\n'
          '[[charging.rates]]\npartition = "gpu"\nper_core_h = 1.0\nper_gpu_h = 4.0\n\n'
          '[[charging.rates]]\npartition = "*"\nper_core_h = 1.0\n')


def _run(*args):
    run = subprocess.run([*jobsight_cmd(), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _ingest(db, cfg, *paths):
    # each file with its own options: the PBS server clock is Copenhagen, lsb.acct names no cluster
    for path, extra in (((SLURM, ["--timezone", "UTC"]), (PBS, ["--timezone", "Europe/Copenhagen"]),
                         (LSF, ["--cluster", "lsfc"]))):
        if path in paths:
            _run("ingest", "--db", db, "--config", cfg, "--quiet", *extra, path)


def _usage(db, cfg, by):
    out = json.loads(_run("usage", "--db", db, "--config", cfg, "--by", by, "--format", "json"))
    rows = out if isinstance(out, list) else out.get("rows", out)
    return {r[by]: r for r in rows}


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixed")
    cfg = d / "jobsight.toml"
    cfg.write_text(CONFIG)
    out = {}
    for name, paths in (("slurm", [SLURM]), ("pbs", [PBS]), ("lsf", [LSF]), ("mixed", [SLURM, PBS, LSF])):
        out[name] = d / f"{name}.duckdb"
        _ingest(out[name], cfg, *paths)
    return out, cfg


def test_sources_side_by_side(dbs):
    paths, _cfg = dbs
    con = duckdb.connect(str(paths["mixed"]), read_only=True)
    got = dict(con.execute("SELECT source, count(*) FROM jobs GROUP BY 1").fetchall())
    assert got["pbs"] == 4 and got["lsf"] == 4 and got["slurm-sacct"] > 0
    assert dict(con.execute("SELECT source, any_value(cluster) FROM jobs WHERE source IN ('pbs', 'lsf') GROUP BY 1").fetchall()) == \
        {"pbs": "srv01", "lsf": "lsfc"}


def test_usage_by_account_adds_up_per_scheduler(dbs):
    paths, cfg = dbs
    alone = {k: _usage(paths[k], cfg, "account") for k in ("slurm", "pbs", "lsf")}
    mixed = _usage(paths["mixed"], cfg, "account")
    expect = defaultdict(lambda: defaultdict(float))
    for src in alone.values():
        for acct, r in src.items():
            for col in ("jobs", "sbu", "core_hours", "gpu_hours"):
                expect[acct][col] += r[col] or 0
    assert set(mixed) == set(expect)
    for acct, r in mixed.items():
        for col in ("jobs", "sbu", "core_hours", "gpu_hours"):
            assert (r[col] or 0) == pytest.approx(expect[acct][col]), (acct, col)
    # hand-computed, table rates: PBS proj_a = job 100 (1 h x 4 x 1.5) + 103 (0.5 h x 4 x 1.5) = 9;
    # LSF proj_a = 5001 (2 h x 4 x 2.0) + 5004 (0.5 h x (2 x 1 + 2 GPUs x 4)) = 21; 5003 never ran
    assert alone["pbs"]["proj_a"]["sbu"] == pytest.approx(9.0)
    assert alone["lsf"]["proj_a"]["sbu"] == pytest.approx(21.0)
    assert alone["pbs"]["proj b"]["sbu"] == pytest.approx(8.0)       # 0.5 h x (8 x 1 + 2 x 4)
    assert alone["lsf"]["proj_b"]["sbu"] == pytest.approx(8.0)       # 0.5 h x (8 x 1 + 2 x 4)


def test_usage_by_cluster_is_the_scheduler_total(dbs):
    paths, cfg = dbs
    mixed = _usage(paths["mixed"], cfg, "cluster")
    for name, cluster in (("pbs", "srv01"), ("lsf", "lsfc"), ("slurm", "testclu")):
        alone = _usage(paths[name], cfg, "cluster")
        assert list(alone) == [cluster]
        for col in ("jobs", "sbu", "core_hours", "gpu_hours"):
            assert mixed[cluster][col] == pytest.approx(alone[cluster][col]), (name, col)


def test_sidecar_identity_under_pbs_and_lsf():
    pbs = jobenv.detect_job({"PBS_JOBID": "101[3].srv01", "PBS_ARRAY_ID": "101[].srv01", "PBS_ARRAY_INDEX": "3"}, pid=7)
    assert (pbs.scheduler, pbs.job_id, pbs.array_task_id) == ("pbs", "101[3].srv01", "3")
    lsf = jobenv.detect_job({"LSB_JOBID": "5002", "LSB_JOBINDEX": "7", "JOBSIGHT_CLUSTER": "lsfc"}, pid=7)
    assert (lsf.scheduler, lsf.job_id, lsf.array_job_id, lsf.array_task_id, lsf.cluster) == ("lsf", "5002", "5002", "7", "lsfc")
