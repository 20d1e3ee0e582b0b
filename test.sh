#!/usr/bin/env bash
# Run the whole test suite (sets everything up first). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 "$@"
