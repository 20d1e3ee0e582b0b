#!/usr/bin/env bash
# Run the main job (sets everything up first). Extra arguments go to experiments.main.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python -m experiments.main "$@"
