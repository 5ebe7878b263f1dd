"""Installed, jobsight is one Python package, `jobsight`, and lives beside other projects.

A fresh virtual environment gets Segment's analytics-python first (it owns the top-level name
`analytics`), then jobsight from a copy of the tracked files (a clean clone's content), non-editable.
Both import; jobsight installed nothing but `jobsight/`, its dist-info and its console script; every
module and SQL file of the repository's product folders is in the installed tree; the demo runs.
Needs PyPI (or pip's cache) for the dependencies: skipped locally without it, required under CI.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, require_service

# repository folder -> installed package folder (pyproject.toml's package-dir)
MAPPED = {"analytics": "jobsight/analytics", "collector": "jobsight/collector", "dashboard": "jobsight/dashboard",
          "sql": "jobsight/sql"}
# --no-compile: the dependencies' thousands of modules are not byte-compiled at install (more than
# half of the install's time); Python compiles the modules the tests import when they are imported.
INSTALL = ["-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-compile"]


def _tracked_copy(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    return dest


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("install")
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    first = subprocess.run([str(py), *INSTALL, "analytics-python"], capture_output=True, text=True)
    require_service(first.returncode == 0, f"pip cannot install analytics-python here: {first.stderr.strip()[-300:]}")
    src = _tracked_copy(base / "src")
    second = subprocess.run([str(py), *INSTALL, str(src)], capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    return env_dir


def _site_packages(env_dir: Path) -> Path:
    (sp,) = (env_dir / "lib").glob("python3*/site-packages")
    return sp


def _record(env_dir: Path) -> list[str]:
    (dist,) = _site_packages(env_dir).glob("jobsight-*.dist-info")
    return [line.split(",", 1)[0] for line in (dist / "RECORD").read_text().splitlines() if line]


def test_only_the_jobsight_package_is_installed(venv):
    tops = {path.split("/", 1)[0] for path in _record(venv)}
    dist = {t for t in tops if t.startswith("jobsight-") and t.endswith(".dist-info")}
    assert tops - dist == {"jobsight", ".."}, tops           # '..' is bin/jobsight, the console script
    outside = [(_site_packages(venv) / p).resolve() for p in _record(venv) if p.startswith("..")]
    assert outside == [(venv / "bin" / "jobsight").resolve()]
    assert not (_site_packages(venv) / "fixtures").exists() and not (_site_packages(venv) / "sql").exists()


def test_every_product_file_is_installed(venv):
    installed = set(_record(venv))
    wanted = []
    for folder, package in MAPPED.items():
        for f in (ROOT / folder).rglob("*"):
            if f.suffix in (".py", ".sql", ".css", ".js") and "__pycache__" not in f.parts:
                wanted.append(f"{package}/{f.relative_to(ROOT / folder).as_posix()}")
    assert len(wanted) > 50
    missing = sorted(w for w in wanted if w not in installed)
    assert not missing, f"not installed (list the package in pyproject.toml): {missing}"


def test_both_import_side_by_side(venv):
    code = ("import json, analytics, jobsight.analytics.cli as cli, jobsight.collector.sidecar as s;"
            "print(json.dumps([analytics.__file__, hasattr(analytics, 'track'), cli.__file__, s.__file__]))")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    seg_file, has_track, cli_file, sidecar_file = json.loads(out.stdout)
    sp = str(_site_packages(venv))
    assert seg_file == f"{sp}/analytics/__init__.py" and has_track          # Segment's, untouched
    assert cli_file == f"{sp}/jobsight/analytics/cli.py"
    assert sidecar_file == f"{sp}/jobsight/collector/sidecar.py"


def test_demo_runs_from_the_installed_package(venv, tmp_path):
    out = tmp_path / "demo"
    run = subprocess.run([str(venv / "bin" / "jobsight"), "demo", "--no-serve", "--jobs", "40", "--days", "7",
                          "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    # every job of the generated truth table is in the database the installed demo wrote
    count = ("import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True);"
             "print(c.execute('SELECT count(*) FROM job').fetchone()[0])")
    n = subprocess.run([str(venv / "bin" / "python"), "-c", count, str(out / "demo.duckdb")], capture_output=True, text=True)
    assert n.returncode == 0, n.stderr
    truth = json.loads((out / "manifest.json").read_text())["truth"]
    assert int(n.stdout) == len(truth) > 20
    usage = subprocess.run([str(venv / "bin" / "jobsight"), "usage", "--db", str(out / "demo.duckdb"), "--by", "account",
                            "--format", "json"], capture_output=True, text=True, cwd=tmp_path)
    assert usage.returncode == 0, usage.stderr
    assert sum(r["sbu"] for r in json.loads(usage.stdout)) > 0
