"""Runners that compose flwr-adaptive and the repository's Flower Apps (not installed).

The apps under ``apps/`` are Flower App projects, not installed packages: importing this package
puts their folders on ``sys.path`` so that runners and tests can import ``pma_app`` / ``hfl_app``
in-process (Flower's simulation workers inherit the driver's ``sys.path``); ``lite_app`` likewise.
"""

import sys
from pathlib import Path

APPS_DIR = Path(__file__).resolve().parent.parent / "apps"
for _app in ("pma", "hfl", "lite"):
    if str(APPS_DIR / _app) not in sys.path:
        sys.path.append(str(APPS_DIR / _app))
