"""The sidecar under fault: the wrapped job's exit code is never changed, and every file left behind ingests.

Faults: seeded random SIGTERM / SIGKILL to a background sidecar and to the wrapper (the wrapper is
the sampler: one process, one thread), the output directory removed mid-run, a full disk (a tiny
tmpfs), a GPU lost mid-run then a stop signal, and a job tree of thousands of processes. "Ingests"
is checked line by line against the file itself: every complete row is stored (or counted as an
unchanged duplicate), a partial last line (a write cut by SIGKILL or a full disk) is the only
drop, nothing is rejected.

Already covered elsewhere, not repeated: planted symlinks (test_sidecar_writer), the stop signals'
last sample and the wrapper's exit codes and signal forwarding (test_sidecar_run), NVML loss per
GPU (test_gpus_nvml). Runtime overhead is measured, not asserted here: bench/sidecar_fault_bench.py.

CI: 3 trials per campaign and a 2,000-process tree (~45 s); JOBSIGHT_LONG=1: 20 trials per campaign,
the GPU case with SIGKILL too, and the 10,000-process tree.
"""
from __future__ import annotations

import csv
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import require_service
from relhelp import LONG, ROOT, open_ro, run_ingest
from test_sidecar_run import clean_env, csv_files, tiny_fs  # noqa: F401  (tiny_fs is a fixture)

from jobsight.collector import writer
from jobsight.collector.csv_schema import COLUMNS, HEADER

SIDECAR = [sys.executable, "-m", "jobsight.collector"]
TRIALS = 20 if LONG else 3  # per campaign; SIGTERM and SIGKILL alternate where signals are sent
HANG = 120.0  # hang guards only: generous, never a speed check


# ---------------------------------------------------------------- helpers

def lines_of(csv_path: Path) -> tuple[int, bool]:
    """(complete data rows, partial last line?) read straight from the file, not through the parser."""
    data = csv_path.read_bytes()
    assert data.startswith(HEADER.encode() + b"\n"), data[:200]
    parts = data.split(b"\n")
    complete = parts[1:-1]
    for line in complete:
        assert line.count(b",") == len(COLUMNS) - 1, line  # the writer never leaves a torn middle line
    return len(complete), parts[-1] != b""


def assert_everything_ingests(tmp_path: Path, *dirs: Path) -> dict:
    """Ingest the folders as a user would (into tmp_path/db/, outside them); each CSV in them is
    accounted for row by row. Returns the totals."""
    (tmp_path / "db").mkdir()
    res = run_ingest(tmp_path / "db" / "jobs.duckdb", *dirs, extra=("--json",))
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    by_path = {Path(f["path"]).resolve(): f for f in report["files"]}
    expected = sorted(p.resolve() for d in dirs for p in d.rglob("*.csv"))
    assert sorted(by_path) == expected  # nothing else listed: no skipped leftovers (temp files are dot-files)
    for path in expected:
        f = by_path[path]
        complete, partial = lines_of(path)
        assert (f["status"], f["format"], f["rejected"]) == ("ingested", "sidecar", 0), f
        assert f["rows_in"] == complete + partial, f
        assert f["dropped"] == int(partial), f
        assert f["stored"] + f["unchanged"] == complete, f
    return report["totals"]


def wait_for(cond, what: str, limit: float = HANG, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: process exited {proc.returncode} first: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"hang guard: {what} not within {limit} s")
        time.sleep(0.02)


def row_count(out: Path) -> int:
    files = csv_files(out)
    return files[0].read_bytes().count(b"\n") - 1 if files else 0


@contextmanager
def running_sidecar(*args: str, env: dict | None = None):
    """`python -m jobsight.collector <args>` (stderr captured as text), killed on the way out if still running."""
    p = subprocess.Popen([*SIDECAR, *args], cwd=ROOT, env=env or clean_env(), stderr=subprocess.PIPE, text=True)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the output writer's fixes

def test_removed_csv_stops_the_writer_with_one_line(tmp_path):
    # Regression: with its file (or directory) deleted, the writer went on writing every row into the
    # unlinked inode until the job ended, then complained only that it could not rewrite the metadata.
    warnings = []
    w = writer.CsvWriter(str(tmp_path / "a.csv"), COLUMNS, warn=lambda key, msg: warnings.append(msg))
    assert w.write_row({"device": "cpu"})
    os.unlink(tmp_path / "a.csv")
    assert w.write_row({"device": "cpu"}) is False
    assert w.write_row({"device": "cpu"}) is False
    w.close()
    assert (w.failed, w.rows_written, w.fd) == (True, 1, None)
    assert warnings == [f"jobsight sidecar: {tmp_path / 'a.csv'} was removed (or its directory was); "
                        "sampling stopped, the job is not affected"]


def test_metadata_temp_file_left_by_a_kill_is_a_dot_file(tmp_path, monkeypatch):
    # Regression: a SIGKILL between writing the new metadata and renaming it over the old left
    # `<stem>.meta.json.tmp-<pid>`, which `jobsight ingest DIR` then listed as an unrecognised file.
    meta = tmp_path / "jobsight-x.meta.json"
    writer.write_json_new(str(meta), {"a": 1})

    def killed(*_a):
        raise KeyboardInterrupt  # stands in for the kill: nothing after this point runs
    monkeypatch.setattr(writer.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        writer.replace_json(str(meta), {"a": 2})
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [f".jobsight-x.meta.json.tmp-{os.getpid()}", "jobsight-x.meta.json"]


# ---------------------------------------------------------------- 1. the wrapped job's exit code

def test_wrapped_exit_code_equals_bare_exit_code(tmp_path):
    rng = random.Random(8001)
    for trial in range(TRIALS):
        code, secs = rng.choice((0, 1, 7, 42, 255)), round(rng.uniform(0.1, 0.6), 2)
        cmd = ["sh", "-c", f"i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; sleep {secs}; exit {code}"]
        bare = subprocess.run(cmd, timeout=HANG)
        out = tmp_path / "runs" / f"t{trial}"
        wrapped = subprocess.run([*SIDECAR, "run", "--interval", "0.2", "--gpus", "none", "--out", str(out), "--", *cmd],
                                 cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=HANG)
        assert (bare.returncode, wrapped.returncode, wrapped.stderr) == (code, code, ""), trial
    totals = assert_everything_ingests(tmp_path, tmp_path / "runs")
    assert totals["rejected"] == 0 and totals["dropped"] == 0  # clean exits: no cut lines


# ---------------------------------------------------------------- 2. random SIGTERM / SIGKILL

def test_background_sidecar_killed_at_random_moments(tmp_path):
    """A jobscript runs the sidecar in the background (as the README shows) and exits with its own
    code; the sidecar gets SIGTERM or SIGKILL at a seeded random moment of the job."""
    rng = random.Random(8002)
    seen = {"TERM": 0, "KILL": 0}
    for trial in range(TRIALS):
        sig = (signal.SIGTERM, signal.SIGKILL)[trial % 2]
        code, secs = rng.choice((0, 3, 7, 99)), round(rng.uniform(0.5, 1.2), 2)
        out, pidfile = tmp_path / "runs" / f"t{trial}", tmp_path / f"t{trial}.pid"
        side = " ".join(map(shlex.quote, [*SIDECAR, "--interval", "0.05", "--gpus", "none", "--out", str(out)]))
        script = (f"{side} & S=$!; echo $S > {shlex.quote(str(pidfile))}; sleep {secs}; "
                  f"kill -TERM $S 2>/dev/null; wait $S; exit {code}")
        job = subprocess.Popen(["sh", "-c", script], cwd=ROOT, env=clean_env(), start_new_session=True,
                               stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"), "sidecar pid", proc=job)  # noqa: B023
            pidfd = os.pidfd_open(int(pidfile.read_text()))  # no pid-reuse race when signalling below
            time.sleep(rng.uniform(0.0, secs))
            try:
                signal.pidfd_send_signal(pidfd, sig)
                seen[sig.name[3:]] += 1
            except ProcessLookupError:
                pass  # the sidecar had already stopped
            finally:
                os.close(pidfd)
            _, err = job.communicate(timeout=HANG)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        assert job.returncode == code, (trial, err)
        assert err == "", (trial, err)  # no traceback or warning from the sidecar, whatever the moment
    assert seen["TERM"] >= 1 and seen["KILL"] >= 1, seen
    assert_everything_ingests(tmp_path, tmp_path / "runs")


# Runs the wrapper and, as a child subreaper, inherits the wrapped job if the wrapper is killed, so
# the job's own exit status is seen even then. argv: JSON wrapper argv, started-marker, delay, signal.
SUBREAPER = r"""
import ctypes, json, os, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
argv, marker, delay, sig = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
wrapper = os.posix_spawn(argv[0], argv, os.environ)
deadline = time.monotonic() + 120
while not os.path.exists(marker) and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(delay)
os.kill(wrapper, sig)  # not reaped yet, so the pid is still the wrapper's
codes = {}
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    codes[pid] = os.waitstatus_to_exitcode(status)
print(json.dumps({"wrapper": codes.pop(wrapper), "orphans": sorted(codes.values())}))
"""


def test_wrapper_killed_at_random_moments(tmp_path):
    """SIGTERM to the wrapper is forwarded to the job (here the job ignores it, so it runs on and
    the wrapper returns its code); SIGKILL kills only the wrapper: the job, in its own process group,
    runs to the end and exits with its own code."""
    rng = random.Random(8003)
    for trial in range(TRIALS):
        sig = (signal.SIGTERM, signal.SIGKILL)[trial % 2]
        code, secs = rng.choice((0, 5, 7, 77)), round(rng.uniform(0.5, 1.2), 2)
        out, marker = tmp_path / "runs" / f"t{trial}", tmp_path / f"t{trial}.started"
        job = f"trap '' TERM INT HUP; touch {shlex.quote(str(marker))}; sleep {secs}; exit {code}"
        argv = [*SIDECAR, "run", "--interval", "0.05", "--gpus", "none", "--out", str(out), "--", "sh", "-c", job]
        res = subprocess.run([sys.executable, "-c", SUBREAPER, json.dumps(argv), str(marker),
                              str(rng.uniform(0.0, secs)), str(int(sig))],
                             cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=HANG)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        if sig == signal.SIGTERM:
            assert got == {"wrapper": code, "orphans": []}, (trial, res.stderr)
            assert res.stderr == "", trial
        else:
            assert got == {"wrapper": -signal.SIGKILL, "orphans": [code]}, (trial, res.stderr)
    assert_everything_ingests(tmp_path, tmp_path / "runs")


# ---------------------------------------------------------------- 3. output directory removed

def test_output_directory_removed_mid_run_wrapper(tmp_path):
    """The wrapper notices at its next row, says so once, stops sampling (no spinning, nothing
    recreated) and still returns the job's code when the job ends."""
    out, go = tmp_path / "out", tmp_path / "go"
    job = f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.05; done; exit 5"
    with running_sidecar("run", "--interval", "0.05", "--gpus", "none", "--out", str(out), "--", "sh", "-c", job) as p:
        wait_for(lambda: row_count(out) >= 3, "3 rows", proc=p)
        subprocess.run(["rm", "-rf", str(out)], check=True)
        # A spinning loop would burn CPU from here on; an idle one sleeps until the job exits.
        time.sleep(0.5)  # detection comes with the next sample, 50 ms away
        before = cpu_seconds(p.pid)
        time.sleep(2.0)
        idle_cpu = cpu_seconds(p.pid) - before
        assert p.poll() is None  # still waiting for the job
        go.touch()
        _, err = p.communicate(timeout=HANG)
    assert p.returncode == 5
    csv_name = err.split(" was removed")[0].split()[-1]
    assert err == (f"jobsight sidecar: {csv_name} was removed (or its directory was); sampling stopped, "
                   "the job is not affected\n")
    assert Path(csv_name).parent == out
    assert not out.exists()  # not recreated
    assert idle_cpu < 0.3, idle_cpu  # 2 s of a spinning loop costs far more; an idle wait ~0


def test_output_directory_removed_mid_run_background(tmp_path):
    """Background mode: one line, exit 0 (like a full disk). A directory recreated empty by the same
    cleanup does not receive a new file."""
    out = tmp_path / "out"
    with running_sidecar("--interval", "0.05", "--gpus", "none", "--out", str(out)) as p:
        wait_for(lambda: row_count(out) >= 3, "3 rows", proc=p)
        subprocess.run(["rm", "-rf", str(out)], check=True)
        out.mkdir()
        _, err = p.communicate(timeout=HANG)
    assert p.returncode == 0
    assert err.count("\n") == 1 and " was removed (or its directory was); sampling stopped" in err
    assert list(out.iterdir()) == []


def test_only_the_csv_removed_leaves_metadata_that_ingest_ignores(tmp_path):
    out = tmp_path / "out"
    with running_sidecar("--interval", "0.05", "--gpus", "none", "--out", str(out)) as p:
        wait_for(lambda: row_count(out) >= 2, "2 rows", proc=p)
        csv_files(out)[0].unlink()
        _, err = p.communicate(timeout=HANG)
    assert p.returncode == 0 and err.count("\n") == 1 and "was removed" in err
    assert [f.name.endswith(".meta.json") for f in out.iterdir()] == [True]
    totals = assert_everything_ingests(tmp_path, out)
    assert totals["rows_in"] == 0


# ---------------------------------------------------------------- 4. disk full

def test_disk_full_mid_run_file_left_behind_ingests(tiny_fs, tmp_path):  # noqa: F811 (pytest fixture)
    p = subprocess.run([*SIDECAR, "run", "--interval", "0.001", "--gpus", "none", "--out", str(tiny_fs), "--",
                        "sh", "-c", "sleep 1; exit 9"], cwd=ROOT, env=clean_env(), capture_output=True, text=True,
                       timeout=HANG)
    assert p.returncode == 9
    assert p.stderr.count("\n") == 1 and "No space left on device" in p.stderr
    (csv_path,) = csv_files(tiny_fs)
    complete, _partial = lines_of(csv_path)
    assert complete > 10
    (tiny_fs / "filler").unlink()  # the fixture's, not the sidecar's
    totals = assert_everything_ingests(tmp_path, tiny_fs)
    assert totals["stored"] + totals["unchanged"] == complete


# ---------------------------------------------------------------- 5. a job tree of thousands of processes

# The job: a root that starts `groups` shells, each starting `per` sleeps (1 + groups + groups*per
# processes, all in the job's process group), writes "<pid> <count>" to READY once all exist, holds
# until GO exists, then ends them all and exits 7. As child subreaper it reaps the orphaned sleeps.
TREE_JOB = r"""
import ctypes, os, signal, subprocess, sys, time
groups, per, ready, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
r, w = os.pipe()
spawn = f"i=0; while [ $i -lt {per} ]; do sleep 3600 >/dev/null & i=$((i+1)); done; echo x; exec >/dev/null; wait"
for _ in range(groups):
    subprocess.Popen(["sh", "-c", spawn], stdout=w)
os.close(w)
done = 0
while done < groups:
    done += len(os.read(r, 4096).split())
with open(ready + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {1 + groups + groups * per}\n")
os.rename(ready + ".tmp", ready)
while not os.path.exists(go):
    time.sleep(0.05)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only now: ignored dispositions are inherited
os.killpg(0, signal.SIGTERM)
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
sys.exit(7)
"""


def group_rss(pgid: int) -> tuple[int, int]:
    """(processes, summed VmRSS bytes) of a process group, from /proc/<pid>/status and getpgid():
    another route than the sidecar's (psutil's statm, or /proc/<pid>/stat)."""
    n = rss = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.getpgid(int(name)) != pgid:
                continue
            with open(f"/proc/{name}/status") as f:
                kb = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except (OSError, StopIteration):
            continue
        n += 1
        rss += kb * 1024
    return n, rss


def kill_group(pgid: int | None) -> None:
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_tree(tmp_path: Path, groups: int, per: int, interval: float, samples: int = 3) -> dict:
    """Sidecar-wrapped TREE_JOB: figures measured while the whole tree exists, the job's exit code,
    the CSV ingested. Every process is killed in the end, whatever happens."""
    import psutil
    out, ready, go = tmp_path / "out", tmp_path / "ready", tmp_path / "go"
    p = subprocess.Popen([*SIDECAR, "run", "--interval", str(interval), "--gpus", "none", "--out", str(out), "--",
                          sys.executable, "-c", TREE_JOB, str(groups), str(per), str(ready), str(go)],
                         cwd=ROOT, env=clean_env(), stderr=subprocess.PIPE, text=True, start_new_session=True)
    pgid = None
    try:
        wait_for(lambda: psutil.Process(p.pid).children(), "job started", proc=p)
        pgid = psutil.Process(p.pid).children()[0].pid  # the wrapper made it a group leader
        t_spawn = time.monotonic()
        wait_for(ready.exists, "tree spawned", limit=HANG * 5, proc=p)
        spawn_s = time.monotonic() - t_spawn
        root_pid, count = map(int, ready.read_text().split())
        assert root_pid == pgid
        wait_for(lambda: row_count(out) >= 1, "a row", proc=p)
        rows0, cpu0, t0 = row_count(out), cpu_seconds(p.pid), time.monotonic()
        wait_for(lambda: row_count(out) >= rows0 + samples, f"{samples} rows with the whole tree", proc=p)
        rows1, cpu1, t1 = row_count(out), cpu_seconds(p.pid), time.monotonic()
        n_now, rss_now = group_rss(pgid)
        go.touch()
        _, err = p.communicate(timeout=HANG * 5)
    finally:
        kill_group(pgid)
        if p.poll() is None:
            p.kill()
            p.communicate()
    (csv_path,) = csv_files(out)
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    hold = rows[rows0 + 1:rows1]  # samples begun after the tree was complete (the one at rows0 may straddle)
    return {"returncode": p.returncode, "stderr": err, "count": count, "n_now": n_now, "rss_now": rss_now,
            "hold_rss": [int(r["mem_used_bytes"]) for r in hold], "spawn_s": spawn_s, "rows": rows1 - rows0,
            "cpu_ms_per_sample": (cpu1 - cpu0) / (rows1 - rows0) * 1000, "s_per_row": (t1 - t0) / (rows1 - rows0),
            "out": out}


TREES = [(20, 100, 1.0)] + ([(100, 100, 2.0)] if LONG else [])  # 2,000 sleeps in CI; 10,000 long


@pytest.mark.parametrize("groups,per,interval", TREES, ids=[f"{g * p}-procs" for g, p, _ in TREES])
def test_job_tree_of_thousands_of_processes(tmp_path, groups, per, interval):
    fig = run_tree(tmp_path, groups, per, interval)
    assert fig["returncode"] == 7 and fig["stderr"] == ""
    assert fig["count"] == 1 + groups + groups * per == fig["n_now"]  # the tree really was complete
    # Every row of the hold is the whole tree's RSS: within 10 % of the sum taken independently.
    assert fig["hold_rss"] and all(abs(v - fig["rss_now"]) <= 0.1 * fig["rss_now"] for v in fig["hold_rss"]), \
        (fig["hold_rss"], fig["rss_now"])
    assert fig["rss_now"] >= fig["count"] * 256 * 1024  # no process of the tree is resident in under 256 KiB
    assert_everything_ingests(tmp_path, fig["out"])
    print(f"\n{fig['count']} processes: spawned in {fig['spawn_s']:.1f} s; sidecar {fig['cpu_ms_per_sample']:.0f} ms CPU "
          f"per sample, one row per {fig['s_per_row']:.2f} s at --interval {interval}; "
          f"RSS sum {fig['rss_now'] / 2**30:.2f} GiB")


# ---------------------------------------------------------------- 6. GPU lost, then a stop signal

@pytest.mark.parametrize("sig", [signal.SIGTERM] + ([signal.SIGKILL] if LONG else []))
def test_gpu_lost_mid_run_then_stopped(tmp_path, sig):
    from fake_nvml import fake_nvml_env, gcc_available
    require_service(gcc_available(), "gcc is needed to build the fake libnvidia-ml.so.1")
    flag = tmp_path / "gpu1-fell-off-the-bus"
    config = "gpus=3\ngpu.0.util=11\ngpu.1.util=22\ngpu.2.util=33\n" + f"gpu.1.lost_when_exists={flag}\n"
    out = tmp_path / "out"
    with running_sidecar("--interval", "0.05", "--out", str(out), env=clean_env(**fake_nvml_env(tmp_path, config))) as p:
        wait_for(lambda: row_count(out) >= 4 * 2, "2 samples", proc=p)
        flag.touch()
        lost_from = row_count(out) // 4 + 1  # samples after this one may see the loss
        wait_for(lambda: row_count(out) >= 4 * (lost_from + 3), "3 samples after the loss", proc=p)
        p.send_signal(sig)
        _, err = p.communicate(timeout=HANG)
    assert p.returncode == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
    assert len(err.splitlines()) == 1 and "lost" in err, err
    (csv_path,) = csv_files(out)
    complete, _partial = lines_of(csv_path)
    totals = assert_everything_ingests(tmp_path, out)
    assert totals["stored"] == complete
    con = open_ro(tmp_path / "db" / "jobs.duckdb")
    try:
        per_gpu = con.execute("SELECT gpu_index, count(*), count(util_pct), min(util_pct), max(util_pct) FROM samples "
                              "WHERE device <> 'cpu' GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        con.close()
    n0, n1 = per_gpu[0][1], per_gpu[1][1]
    assert per_gpu[0][2:] == (n0, 11, 11) and per_gpu[2][2:] == (per_gpu[2][1], 33, 33)
    # GPU 1's rows go on after the loss, every measurement blank: only the samples before it carry 22.
    assert n1 >= n0 - 1 and 2 <= per_gpu[1][2] <= lost_from and per_gpu[1][3:] == (22, 22), per_gpu
