#!/usr/bin/env bash
# Run the whole test suite (sets everything up first). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
# --dist loadfile: a file's module-scoped fixtures (one Flower simulation each) are built once.
exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
