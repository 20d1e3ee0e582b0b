#!/usr/bin/env bash
# Mutation testing of the core and the strategies (cosmic-ray; see scripts/mutation.py and
# docs/testing.md). Installs cosmic-ray into .venv on first use (not part of the [test] extra).
# Usage: scripts/mutation.sh [--quick | --sample N] [--targets a,b] [--seed S] [--list]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if ! .venv/bin/python -c 'import cosmic_ray' 2>/dev/null; then
  echo "[mutation] installing cosmic-ray into .venv" >&2
  # -c constraints.txt: cosmic-ray's dependencies (click, rich, ...) never move a pinned package
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt "cosmic-ray==8.4.1" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
  .venv/bin/python -c 'import cosmic_ray' || { echo "[mutation] cosmic-ray did not install: see above" >&2; exit 2; }
fi
exec .venv/bin/python scripts/mutation.py "$@"
