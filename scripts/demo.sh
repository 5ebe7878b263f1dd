#!/usr/bin/env bash
# The one demo command (README): from a fresh clone to the dashboard on a realistic cluster's data.
#   bash scripts/demo.sh [jobsight demo options, e.g. --jobs 500 --seed 7 --no-serve]
# - a virtual environment in .venv with jobsight installed (editable);
# - `jobsight demo`: 3000 jobs over 28 days generated as real sacct/sacct --json/sidecar/nvidia-smi/
#   seff files into ./demo-data/, ingested into ./demo-data/demo.duckdb (--timezone Europe/Amsterdam),
#   weekly reports in ./demo-data/reports/, then the dashboard on http://127.0.0.1:8050 (--auth none).
# Ctrl-C stops the dashboard. Running it again reuses the data and the database.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "demo.sh: jobsight needs Python 3.11 or newer ($PY is $("$PY" -V 2>&1 || echo missing)); set PYTHON=..." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv || { echo "demo.sh: could not create .venv (on Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
# (re)install only when pyproject.toml changed since the last install
stamp=.venv/.jobsight-install-stamp
want=$(cksum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/jobsight ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "demo.sh: installing jobsight into .venv ..."
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
  echo "$want" > "$stamp"
fi
exec .venv/bin/jobsight demo --jobs 3000 --days 28 --seed 1 --out demo-data --db demo-data/demo.duckdb "$@"
