"""The whole sidecar as a real subprocess: signals, wrapper mode, output failures, fake job cgroup, fake GPUs."""
from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, require_service

from jobsight.collector.csv_schema import COLUMNS, HEADER

SCHED_VARS = ("SLURM_", "PBS_", "LSB_", "CUDA_VISIBLE_DEVICES", "JOBSIGHT_", "LD_LIBRARY_PATH", "FAKE_NVML")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment minus any scheduler/GPU variables, so the tests behave the same inside a job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCHED_VARS)}
    env.update(extra)
    return env


def sidecar(args: list[str], env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jobsight.collector", *args], cwd=ROOT, env=env or clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def csv_files(out: Path) -> list[Path]:
    return sorted(out.glob("jobsight-*.csv"))


def rows(out: Path) -> list[dict]:
    (path,) = csv_files(out)
    return list(csv.DictReader(io.StringIO(path.read_text())))


def meta(out: Path) -> dict:
    (path,) = out.glob("jobsight-*.meta.json")
    return json.loads(path.read_text())


def wait_rows(out: Path, n: int, proc: subprocess.Popen, limit: float = 20.0) -> None:
    """Wait (hang guard only, not a speed check) until the CSV has n data rows."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        files = csv_files(out)
        if files and files[0].read_text().count("\n") >= n + 1:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} rows in {limit} s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_background_stop_signal_takes_a_last_sample_and_exits_0(tmp_path, sig):
    out = tmp_path / "out"
    p = sidecar(["--interval", "60", "--gpus", "none", "--out", str(out)])
    wait_rows(out, 1, p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0 and err == ""
    data = rows(out)
    assert len(data) == 2  # the first sample, then the last one taken on the signal
    assert all(r["device"] == "cpu" and r["job_id"] == f"local-{p.pid}" for r in data)
    m = meta(out)
    assert (m["samples"], m["rows"], m["exit_code"], m["job_id"]) == (2, 2, None, f"local-{p.pid}")
    assert m["cpu_method"] == "psutil" and m["scheduler"] == "none" and m["ended_at"].endswith("Z")


def test_sigkill_leaves_a_readable_file(tmp_path):
    out = tmp_path / "out"
    p = sidecar(["--interval", "0.01", "--gpus", "none", "--out", str(out)])
    wait_rows(out, 10, p)
    p.kill()
    p.communicate(timeout=20)
    text = csv_files(out)[0].read_text()
    lines = text.split("\n")
    assert lines[0] == HEADER
    complete = lines[1:-1]  # everything before the last newline
    assert len(complete) >= 10
    for line in complete:
        assert len(line.split(",")) == len(COLUMNS) and line.split(",")[4] == "cpu"
    assert len(lines[-1].split(",")) <= len(COLUMNS)  # at most a partial last line


def slurm_cgroup(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    job = root / "system.slice" / "slurmstepd.scope" / "job_123"
    (job / "step_batch" / "user" / "task_0").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (job / "cpu.stat").write_text("usage_usec 90000000\nuser_usec 80000000\nsystem_usec 10000000\n")
    (job / "memory.current").write_text("1073741824\n")
    (job / "memory.peak").write_text("3221225472\n")
    (job / "memory.max").write_text("8589934592\n")
    (job / "cpuset.cpus.effective").write_text("0-3\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/system.slice/slurmstepd.scope/job_123/step_batch/user/task_0\n")
    return root, proc


SLURM_ENV = {"SLURM_JOB_ID": "123", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "3",
             "SLURM_CLUSTER_NAME": "testclu", "SLURMD_NODENAME": "node7", "SLURM_CPUS_ON_NODE": "16"}


def test_slurm_job_with_cgroup_v2(tmp_path):
    root, proc = slurm_cgroup(tmp_path)
    out = tmp_path / "out"
    p = sidecar(["--interval", "0.05", "--gpus", "none", "--out", str(out), "--cgroup-root", str(root),
                 "--proc-cgroup", str(proc)], env=clean_env(**SLURM_ENV))
    wait_rows(out, 3, p)
    p.terminate()
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0 and err == ""
    (path,) = csv_files(out)
    assert path.name.startswith("jobsight-testclu-123-node7-") and path.name.endswith(f"-{p.pid}.csv")
    data = rows(out)
    assert len(data) >= 4
    for r in data:
        assert (r["job_id"], r["cluster"], r["host"], r["device"]) == ("123", "testclu", "node7", "cpu")
        assert (r["mem_used_bytes"], r["mem_total_bytes"]) == ("1073741824", "8589934592")
        assert r["util_pct"] in ("0", "")  # the fake counter never moves
    m = meta(out)
    assert m["cpu_method"] == "cgroup-v2"
    assert m["cgroup_path"] == "/system.slice/slurmstepd.scope/job_123"
    assert (m["alloc_cores"], m["alloc_cores_source"]) == (4, "cpuset")  # the cpuset wins over SLURM_CPUS_ON_NODE
    assert (m["mem_limit_bytes"], m["mem_peak_bytes"]) == (8589934592, 3221225472)
    assert (m["scheduler"], m["array_job_id"], m["array_task_id"], m["cluster"]) == ("slurm", "120", "3", "testclu")
    assert m["schema_version"] == 1 and m["gpu_method"] == "none" and m["gpus"] == []


def test_wrapper_returns_exit_code_and_128_plus_signal(tmp_path):
    for cmd, code in ((["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -TERM $$"], 128 + 15), (["true"], 0)):
        p = sidecar(["run", "--interval", "5", "--gpus", "none", "--out", str(tmp_path / str(code)), "--", *cmd])
        _, err = p.communicate(timeout=20)
        assert (p.returncode, err) == (code, ""), cmd
        assert meta(tmp_path / str(code))["exit_code"] == code
        assert meta(tmp_path / str(code))["command"] == cmd


def test_wrapper_command_not_found_is_127(tmp_path):
    p = sidecar(["run", "--out", str(tmp_path), "--", "/nonexistent/jobsight-no-such-cmd"])
    _, err = p.communicate(timeout=20)
    assert p.returncode == 127
    assert err.count("\n") == 1 and "jobsight-no-such-cmd" in err


CHILD = r"""
import os, signal, sys, time
log = sys.argv[1]
def note(text):
    with open(log, "a") as f:
        f.write(text + "\n")
signal.signal(signal.SIGUSR1, lambda *a: note("usr1"))
signal.signal(signal.SIGINT, lambda *a: note("int"))
signal.signal(signal.SIGUSR2, lambda *a: note("usr2"))
def on_term(*a):
    note("term")
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
note(f"pgleader={os.getpgrp() == os.getpid()}")
while True:
    time.sleep(0.05)
"""


def wait_for_line(path: Path, line: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and line in path.read_text().splitlines():
            return
        time.sleep(0.02)
    raise AssertionError(f"{line!r} never appeared in {path}: {path.read_text() if path.exists() else ''}")


def test_wrapper_forwards_signals_to_the_command_process_group(tmp_path):
    log = tmp_path / "log"
    p = sidecar(["run", "--interval", "0.1", "--gpus", "none", "--out", str(tmp_path / "out"), "--",
                 sys.executable, "-c", CHILD, str(log)])
    wait_for_line(log, "pgleader=True")
    p.send_signal(signal.SIGUSR1)
    wait_for_line(log, "usr1")
    p.send_signal(signal.SIGUSR2)
    wait_for_line(log, "usr2")
    p.send_signal(signal.SIGINT)
    wait_for_line(log, "int")
    assert p.poll() is None  # SIGINT was forwarded, the command lives on, so does the sidecar
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 7 and err == ""
    assert log.read_text().splitlines() == ["pgleader=True", "usr1", "usr2", "int", "term"]


def test_wrapper_runs_the_command_even_when_output_is_unwritable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    marker = tmp_path / "ran"
    p = sidecar(["run", "--out", str(blocker / "sub"), "--", "sh", "-c", f"echo yes > {marker}; exit 5"])
    _, err = p.communicate(timeout=20)
    assert p.returncode == 5 and marker.read_text() == "yes\n"
    assert err.count("\n") == 1 and "not sampling" in err


def test_background_unwritable_output_exits_quietly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = sidecar(["--out", str(blocker / "sub")])
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0 and err.count("\n") == 1 and str(blocker / "sub") in err


def test_runs_as_a_plain_file_without_jobsight_installed(tmp_path):
    """python3 collector/sidecar.py from a copy of collector/ alone, with a Python that lacks psutil if available."""
    import shutil
    shutil.copytree(ROOT / "collector", tmp_path / "co" / "collector", ignore=shutil.ignore_patterns("__pycache__"))
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    has_psutil = subprocess.run([python, "-c", "import psutil"], capture_output=True).returncode == 0
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run([python, str(tmp_path / "co" / "collector" / "sidecar.py"), "run", "--interval", "0.2",
                          "--gpus", "none", "--out", str(tmp_path / "out"), "--", "sh", "-c", "sleep 0.5; exit 4"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr) == (4, "")
    out = tmp_path / "out"
    assert csv_files(out)[0].read_text().startswith(HEADER + "\n")
    assert meta(out)["cpu_method"] == ("psutil" if has_psutil else "procfs")
    data = rows(out)
    assert len(data) >= 2 and int(data[0]["mem_used_bytes"]) > 0 and data[1]["util_pct"] != ""


def test_eight_fake_gpus_and_cgroup(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_nvml import eight_gpu_config, fake_nvml_env, gcc_available
    require_service(gcc_available(), "gcc is needed to build the fake libnvidia-ml.so.1")
    root, proc = slurm_cgroup(tmp_path)
    env = clean_env(**SLURM_ENV, **fake_nvml_env(tmp_path, eight_gpu_config()))
    out = tmp_path / "out"
    p = sidecar(["--interval", "0.05", "--out", str(out), "--cgroup-root", str(root), "--proc-cgroup", str(proc)], env=env)
    wait_rows(out, 9 * 3, p)
    p.terminate()
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0 and err == ""
    data = rows(out)
    assert len(data) % 9 == 0 and len(data) >= 27
    m = meta(out)
    assert m["gpu_method"] == "nvml" and len(m["gpus"]) == 8
    uuids = [g["uuid"] for g in m["gpus"]]
    first = data[:9]
    assert [r["device"] for r in first] == ["cpu", *uuids]
    assert len({r["time"] for r in first}) == 1  # one sample = one timestamp
    gpu = first[1]
    assert (gpu["job_id"], gpu["cluster"], gpu["host"], gpu["gpu_index"]) == ("123", "testclu", "node7", "0")
    assert gpu["mem_used_bytes"] == str(40 * 2**30) and gpu["power_w"] == "350" and gpu["temperature_c"] == "65"


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 'disk full': a 32 KiB tmpfs (root only)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    ok = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(mnt)],
                                               capture_output=True).returncode == 0
    require_service(ok, "mounting a small tmpfs needs root")
    try:
        (mnt / "filler").write_bytes(b"x" * 24 * 1024)  # leaves about 8 KiB: full within a few hundred rows
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_background_stops_with_one_line(tiny_fs):
    p = sidecar(["--interval", "0.001", "--gpus", "none", "--out", str(tiny_fs)])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0
    assert err.count("\n") == 1 and "No space left on device" in err
    text = csv_files(tiny_fs)[0].read_text()
    assert text.startswith(HEADER + "\n") and text.count("\n") > 10
    for line in text.split("\n")[1:-1]:  # complete rows stay intact; at most the last is cut
        assert len(line.split(",")) == len(COLUMNS)


def test_disk_full_wrapper_leaves_the_command_alone(tiny_fs, tmp_path):
    marker = tmp_path / "done"
    p = sidecar(["run", "--interval", "0.001", "--gpus", "none", "--out", str(tiny_fs), "--",
                 "sh", "-c", f"sleep 1.5; echo ok > {marker}; exit 9"])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 9 and marker.read_text() == "ok\n"
    assert err.count("\n") == 1 and "No space left on device" in err


def test_slurm_job_with_cgroup_v1(tmp_path):
    root = tmp_path / "cgroup"
    job = "slurm/uid_1000/job_123"
    for ctrl, files in (("cpu,cpuacct", {"cpuacct.usage": "5000000000"}),
                        ("memory", {"memory.usage_in_bytes": "524288000", "memory.max_usage_in_bytes": "600000000",
                                    "memory.limit_in_bytes": "2147483648"}),
                        ("cpuset", {"cpuset.cpus": "0-1"})):
        d = root / ctrl / job
        d.mkdir(parents=True)
        for name, value in files.items():
            (d / name).write_text(value + "\n")
    step = "/slurm/uid_1000/job_123/step_batch/task_0"
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"11:cpuset:{step}\n6:memory:{step}\n3:cpu,cpuacct:{step}\n1:name=systemd:/\n")
    out = tmp_path / "out"
    p = sidecar(["--interval", "0.05", "--gpus", "none", "--out", str(out), "--cgroup-root", str(root),
                 "--proc-cgroup", str(proc)], env=clean_env(**SLURM_ENV))
    wait_rows(out, 2, p)
    p.terminate()
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0 and err == ""
    for r in rows(out):
        assert (r["mem_used_bytes"], r["mem_total_bytes"]) == ("524288000", "2147483648")
        assert r["util_pct"] in ("0", "")  # blank only for a last window shorter than 20 ms
    m = meta(out)
    assert (m["cpu_method"], m["cgroup_path"], m["alloc_cores"], m["mem_peak_bytes"]) == \
        ("cgroup-v1", "/slurm/uid_1000/job_123", 2, 600000000)


def test_outside_a_job_a_session_cgroup_is_not_used(tmp_path):
    root = tmp_path / "cgroup"
    session = root / "user.slice" / "user-0.slice" / "session-1.scope"
    session.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (session / "cpu.stat").write_text("usage_usec 999999999\n")
    (session / "memory.current").write_text("123456789\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/user.slice/user-0.slice/session-1.scope\n")
    out = tmp_path / "out"
    p = sidecar(["--interval", "60", "--gpus", "none", "--out", str(out), "--cgroup-root", str(root),
                 "--proc-cgroup", str(proc)])
    wait_rows(out, 1, p)
    p.terminate()
    p.communicate(timeout=20)
    m = meta(out)
    assert (m["cpu_method"], m["cgroup_path"], m["scheduler"]) == ("psutil", None, "none")
    assert all(r["mem_used_bytes"] != "123456789" for r in rows(out))


# ---- `jobsight sidecar ... 2>&-` (and `>&-`) in a jobscript ---------------------------------------

# The wrapped command reports its own descriptors 1 and 2: they must be as the jobscript left them.
FD_CHILD = ("import os, sys, time; print('job-out', *(os.path.exists(f'/proc/self/fd/{n}') for n in (1, 2))); "
         "time.sleep(0.6); sys.exit(3)")
# Forced warnings: an unreadable --proc-cgroup, a cluster that cannot be written as given, and
# (where this machine has no NVIDIA driver) --gpus nvml.
WARNED = ["--gpus", "nvml", "--cluster", "a,b", "--proc-cgroup", "/nonexistent/cgroup"]


def closing(redirections: str, argv: list[str]) -> list[str]:
    """argv run by sh with `redirections` applied, as a jobscript line `jobsight sidecar ... 2>&-`."""
    return ["sh", "-c", f'exec "$@" {redirections}', "sh", *argv]


def csv_intact(out: Path) -> int:
    """The sidecar CSV is whole: the ingester reads every line, rejects none, drops none. Its row count."""
    from jobsight.analytics.ingest.parsers import sidecar_csv
    from jobsight.analytics.ingest.records import ParseOptions
    (path,) = csv_files(out)
    text = path.read_text()
    assert text.startswith(HEADER + "\n") and text.endswith("\n") and "jobsight sidecar" not in text
    res = sidecar_csv.parse(path, ParseOptions())
    assert (res.rejects, res.dropped, res.rows_in) == ([], 0, text.count("\n") - 1)
    assert set(res.samples["cluster"]) == {"a_b"}
    return res.rows_in


def test_warnings_are_forced_in_these_runs(tmp_path):
    """The control for the tests below: with stderr open, these options do print warnings."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "jobsight.collector", "run", "--interval", "0.05", *WARNED,
                        "--out", str(out), "--", sys.executable, "-c", FD_CHILD],
                       cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and p.stdout == "job-out True True\n"
    assert "cannot read /nonexistent/cgroup" in p.stderr and "written cluster 'a,b' as 'a_b'" in p.stderr
    assert csv_intact(out) >= 2


def test_stderr_closed_wrapper_warnings_never_reach_the_jobs_stdout(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(closing("2>&-", [sys.executable, "-m", "jobsight.collector", "run", "--interval", "0.05",
                                        *WARNED, "--out", str(out), "--", sys.executable, "-c", FD_CHILD]),
                       cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, text=True, timeout=60)
    # the command's output only, and its stderr still closed, as the jobscript made it
    assert (p.returncode, p.stdout) == (3, "job-out True False\n")
    assert csv_intact(out) >= 2
    assert meta(out)["exit_code"] == 3


def test_stderr_closed_background_writes_nothing_to_stdout(tmp_path):
    out = tmp_path / "out"
    p = subprocess.Popen(closing("2>&-", [sys.executable, "-m", "jobsight.collector", "--interval", "0.05", *WARNED,
                                          "--out", str(out)]),
                         cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, text=True)
    wait_rows(out, 3, p)
    p.terminate()                      # sh exec'd the sidecar: this is its SIGTERM
    stdout, _ = p.communicate(timeout=20)
    assert (p.returncode, stdout) == (0, "")
    assert csv_intact(out) >= 3


def test_stdout_and_stderr_closed_as_a_plain_file(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(closing(">&- 2>&-", [sys.executable, str(ROOT / "collector" / "sidecar.py"), "run",
                                            "--interval", "0.05", *WARNED, "--out", str(out), "--",
                                            sys.executable, "-c", FD_CHILD]),
                       cwd=tmp_path, env=clean_env(), timeout=60)
    assert p.returncode == 3
    assert csv_intact(out) >= 2
    assert meta(out)["exit_code"] == 3


def test_no_stderr_never_means_stdout(monkeypatch, capsys):
    """print(file=sys.stderr) with sys.stderr None (Python started with 2 closed) writes to stdout."""
    from jobsight.collector import gpu_rows, problems
    monkeypatch.setattr(sys, "stderr", None)
    problems.Problems().warn("k", "jobsight sidecar: a warning")
    gpu_rows.warn("a GPU warning")
    problems.stderr_line("jobsight sidecar: another")
    assert capsys.readouterr().out == ""
