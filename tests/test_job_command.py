"""`jobsight job` as people read it: a multi-node job's one CPU and memory line per node, the GPU
table in GiB, and a job that has samples but no accounting yet (counted ones, and ones held under
the trust model in sample_pending), which is shown, not refused. Rows are written by hand; every
expected number is worked out beside it."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.config import parse_config
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

GiB = 2**30
T0 = dt.datetime(2026, 11, 16, 10, 0, 0)


def _sample(con, table: str, job: str, host: str, device: str, k: int, util: float, mem: float, total: float,
            gpu_index=None, owner=None) -> None:
    cols = ["cluster", "job_id_raw", "host", "device", "time", "util_pct", "mem_used_bytes", "mem_total_bytes",
            "gpu_index", "source"]
    vals = ["c1", job, host, device, T0 + dt.timedelta(seconds=10 * k), util, int(mem), int(total), gpu_index,
            "sidecar"]
    if owner:
        cols += ["owner_uid", "owner_user"]
        vals += list(owner)
    con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", vals)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("job") / "jobs.duckdb"
    con = Database.open(path, parse_config({}))
    # job 200: 2 nodes x 4 cores, 1 h; the sidecar's cpu rows per node: n1 at 50 %, n2 at 100 %,
    # memory peaks 2 and 4 GiB of an 8 GiB cgroup limit each
    con.execute("""INSERT INTO job (cluster, job_id, job_id_raw, "user", account, "partition", state, source,
                   start_time, end_time, elapsed_s, timelimit_s, ncpus, nnodes, billing, cpu_time_s,
                   mem_alloc_bytes, ngpus, gpu_type, node_list)
                   VALUES ('c1', '200', '200', 'carol', 'proj', 'cpu', 'COMPLETED', 'test', ?, ?, 3600, 7200, 8,
                           2, 8, 21600, ?, 1, 'a100', 'n[1-2]')""", [T0, T0 + dt.timedelta(hours=1), 16 * GiB])
    for k in range(3):
        _sample(con, "sample", "200", "n1", "cpu", k, 50, 2 * GiB, 8 * GiB)
        _sample(con, "sample", "200", "n2", "cpu", k, 100, 4 * GiB, 8 * GiB)
        _sample(con, "sample", "200", "n1", "GPU-1", k, 60, 20 * GiB, 40 * GiB, gpu_index=0)
    # job 300: RUNNING for 30 min at billing 4 -> 2 SBU so far; sacct's exit code of a running job means nothing yet
    con.execute("""INSERT INTO job (cluster, job_id, job_id_raw, "user", account, "partition", state, exit_code, source,
                   start_time, elapsed_s, timelimit_s, ncpus, nnodes, billing)
                   VALUES ('c1', '300', '300', 'carol', 'proj', 'cpu', 'RUNNING', '0:0', 'test', ?, 1800, 7200, 4, 1, 4)""",
                [T0])
    # a held sample of job 200 from someone else's file: never counted
    _sample(con, "sample_pending", "200", "n1", "cpu", 0, 1, GiB, 8 * GiB, owner=(1002, "mallory"))
    # local-9333: a sidecar run outside any scheduler, no accounting: one host, a CPU at 25 % and a GPU at 90 %
    for k in range(4):
        _sample(con, "sample", "local-9333", "ws1", "cpu", k, 25, 3 * GiB, 0)
        _sample(con, "sample", "local-9333", "ws1", "GPU-9", k, 90, 10 * GiB, 80 * GiB, gpu_index=0)
    # job 777: only held samples, from alice's file (uid 1001), its accounting not ingested yet
    for k in range(2):
        _sample(con, "sample_pending", "777", "g1", "cpu", k, 80, GiB, 4 * GiB, owner=(1001, "alice"))
    store.refresh(con.con, full=True)
    con.close()
    return path


def _run(args, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = jobsight([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_multi_node_job_has_a_line_per_node(db, capsys):
    rc, out, err = _run(["job", "--db", db, "200"], capsys)
    assert rc == 0, err
    assert "Per node (sidecar):" in out
    assert "n1  CPU 50.0%   memory peak 2.00 GiB of 8.00 GiB   (3 samples)" in out
    assert "n2  CPU 100.0%   memory peak 4.00 GiB of 8.00 GiB   (3 samples)" in out
    # GPU memory in GiB: 20 of 40
    header = next(line for line in out.splitlines() if line.startswith("host") and "GiB" in line)
    assert "mem peak GiB" in header and "mem total GiB" in header and "bytes" not in header
    row = next(line for line in out.splitlines() if "GPU-1" in line)
    assert row.split()[-3:] == ["20.0", "40.0", "3"]
    assert "Held samples, not counted: 1 from files of mallory (uid 1002)" in out
    # a sparkline per node: n1's CPU at 50 %, n2's at 100 %
    assert "  n1 CPU       ▅▅▅" in out and "  n2 CPU       ███" in out


def test_multi_node_job_json_keeps_bytes(db, capsys):
    m = json.loads(_run(["job", "--db", db, "200", "--format", "json"], capsys)[1])
    assert [(n["host"], n["cpu_util_pct"], n["mem_peak_bytes"]) for n in m["nodes"]] == [
        ("n1", 50.0, 2 * GiB), ("n2", 100.0, 4 * GiB)]
    assert m["gpus"][0]["mem_peak_bytes"] == 20 * GiB
    assert m["pending"] == [{"owner_uid": 1002, "owner_user": "mallory", "n_samples": 1}]


def test_a_job_with_samples_only_is_shown(db, capsys):
    rc, out, err = _run(["job", "--db", db, "local-9333"], capsys)
    assert rc == 0, err
    assert out.startswith("Job ID: local-9333   Cluster: c1\nAccounting: missing.")
    assert "Samples (counted once the accounting arrives): 8 samples, 2026-11-16 10:00 to 2026-11-16 10:00" in out
    assert "ws1  CPU 25.0%   memory peak 3.00 GiB   (4 samples)" in out      # no cgroup limit: none shown
    row = next(line for line in out.splitlines() if "GPU-9" in line)
    assert row.split()[3:] == ["90.0", "90.0", "10.0", "80.0", "4"]
    assert "NOT counted" not in out
    m = json.loads(_run(["job", "--db", db, "local-9333", "--format", "json"], capsys)[1])
    assert m["accounting"] is None and m["pending_samples"] is None
    assert m["samples"]["n_samples"] == 8 and m["samples"]["gpus"][0]["util_mean_pct"] == 90.0


def test_held_samples_are_marked_not_counted(db, capsys):
    rc, out, err = _run(["job", "--db", db, "777"], capsys)
    assert rc == 0, err
    assert "Accounting: missing." in out
    assert "Samples held, NOT counted (trust model, docs/ingest.md): 2 samples," in out
    assert "from files of alice (uid 1001): 2; they count only if the accounting shows the job is that user's" in out
    assert "g1  CPU 80.0%   memory peak 1.00 GiB of 4.00 GiB   (2 samples)" in out


def test_no_job_and_no_samples_is_an_error(db, capsys):
    rc, _out, err = _run(["job", "--db", db, "404"], capsys)
    assert rc == 2 and "no job '404'" in err and "no accounting and no samples" in err


def test_a_running_job_is_marked_running_with_sbu_so_far_and_no_exit_code(db, capsys):
    rc, out, err = _run(["job", "--db", db, "300"], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert "State: RUNNING (still running: figures so far)" in lines
    assert "exit code" not in out
    assert any(line.startswith("SBU so far: 2.0 [") for line in lines)
    assert not any(line.startswith("SBU: ") for line in lines)
    rc, out, _ = _run(["job", "--db", db, "200"], capsys)      # an ended job: its exit code and SBU as always
    assert "State: COMPLETED (exit code -)" in out.splitlines() and "SBU so far" not in out
