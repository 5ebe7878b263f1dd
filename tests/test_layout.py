"""The house rules that keep the code easy to live in: small modules, the library layers never
importing the command-line edge, no import of the pre-namespace top-level package names."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

MAX_LINES = 600
PRODUCT = ("analytics", "collector", "dashboard", "bench", "tests")
# the command-line edge: analytics/cli.py and the modules of analytics/commands/
CLI_EDGE = re.compile(r"jobsight\.analytics\.(cli|commands)\b")


def _is_cli(rel: Path) -> bool:
    return rel.parts[:2] == ("analytics", "commands") or rel.as_posix() == "analytics/cli.py"


def _python_files() -> list[Path]:
    files = subprocess.run(["git", "ls-files", "-z", "--", *PRODUCT], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / n for n in files.decode().split("\0") if n.endswith(".py") and (ROOT / n).is_file()]


def test_no_module_is_over_600_lines():
    files = _python_files()
    assert len(files) > 100
    big = {str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"split these along their seams: {big}"


def test_no_import_of_the_old_top_level_names():
    """Installed, the code is jobsight.analytics, jobsight.collector, ...; a bare `analytics` import would
    load a second copy from the checkout (or Segment's analytics-python)."""
    # also inside strings: code run by child processes (`python -c "from analytics.cli import main"`)
    bare = re.compile(r"(^|[\s\"';])(from|import)\s+([\w.]+\s*(as\s+\w+)?,\s*)*(analytics|collector|dashboard|sql|fixtures)[.\s]", re.M)
    hits = [str(f.relative_to(ROOT)) for f in _python_files()
            if f.name != "test_layout.py" and bare.search(f.read_text(encoding="utf-8"))]
    assert not hits, hits


def _ruff() -> str:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if not exe:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return exe


@pytest.mark.parametrize("line", ["from jobsight.analytics.cli import main",
                                  "from jobsight.analytics.commands import ingest",
                                  "from jobsight.analytics.commands.flags import run",
                                  "import jobsight.analytics.commands.report"])
def test_ruff_keeps_the_library_from_importing_the_cli(line):
    """The banned-api rule in pyproject.toml refuses a CLI import in a library module and lets a CLI
    module have it (the per-file rules go by path: the source is handed over as if at that path)."""
    def check(path: str) -> subprocess.CompletedProcess:
        return subprocess.run([_ruff(), "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"],
                              input=f'"""probe"""\n{line}  # noqa: F401\n', cwd=ROOT, capture_output=True, text=True)
    lib = check("analytics/reports/probe.py")
    assert lib.returncode == 1 and "TID251" in lib.stdout, lib.stdout + lib.stderr
    cli = check("analytics/commands/probe.py")
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_cli_modules_are_the_only_ones_importing_cli_modules():
    """The same rule read straight from the code, so it holds even where ruff is not installed."""
    imp = re.compile(r"^\s*(from\s+[\w.]+\s+import\s+[\w, ]+|import\s+[\w.]+)", re.M)
    bad = []
    for f in _python_files():
        rel = f.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bench") or _is_cli(rel):
            continue
        for m in imp.finditer(f.read_text(encoding="utf-8")):
            stmt = m.group(1)
            names = stmt.split(" import ", 1)
            full = [names[0].removeprefix("from ").strip() + "." + n.strip().split(" as ")[0] for n in names[1].split(",")] \
                if stmt.startswith("from ") else [stmt.removeprefix("import ").strip()]
            if any(CLI_EDGE.match(n) for n in full + [names[0].removeprefix("from ").strip()]):
                bad.append(f"{rel}: {stmt.strip()}")
    assert not bad, bad
