#!/usr/bin/env bash
# The one test command (README, .ci/run): set up what the tests need, lint, then run the tests.
#   bash scripts/test.sh [pytest args...]
# - a virtual environment in .venv with jobsight and its test extras;
# - as root: the real Slurm harness (scripts/slurm-harness.sh) and headless Chromium, so the tests
#   that need them run instead of skipping. Elsewhere those tests skip with their reason.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# The tests start hundreds of jobsight processes: their modules compiled once here, as with
# PYTHONDONTWRITEBYTECODE set (or a read-only checkout) each process would compile them again.
.venv/bin/python -m compileall -q -j 0 analytics collector dashboard sql tests >/dev/null || true
if [ "$(id -u)" = 0 ] && [ -z "${JOBSIGHT_NO_SERVICES:-}" ]; then
  for setup in scripts/slurm-harness.sh scripts/browser-setup.sh; do
    [ -x "$setup" ] && { "$setup" start || echo "test.sh: $setup failed; its tests will report why" >&2; }
  done
fi
set +e
# lint first (configured in pyproject.toml); a lint failure fails the run, after the tests
.venv/bin/ruff check .
lint=$?
# Two processes by default (JOBSIGHT_TEST_WORKERS; 0 runs in this process): each test module runs
# whole in one of them, so its module-scoped fixtures are built once; the real-Slurm modules share
# one process, because they share the harness node's queue (tests/conftest.py).
.venv/bin/python -m pytest -n "${JOBSIGHT_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
[ "$rc" = 0 ] && [ "$lint" != 0 ] && { echo "test.sh: ruff check failed" >&2; rc=1; }
# pytest exits 5 when it collected no test: that is a failure here, not a pass.
[ "$rc" = 5 ] && echo "test.sh: no tests were collected" >&2
exit "$rc"
