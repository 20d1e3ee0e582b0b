"""Fixtures shared by the test files (``tests/`` is on ``sys.path``, see ``adaptive_support``)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# Wall-clock limits make property tests fail on a loaded machine (CI shares its two cores with
# Flower simulations): no per-example deadline, no "too slow" health check. Example counts stay
# what each test asks for.
settings.register_profile("shared-cores", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# CI (.ci/run sets HYPOTHESIS_PROFILE=ci) draws the same examples on every run, so that a stop's
# verdict does not depend on which examples a random draw found; ./test.sh explores new ones
# each run (a failure it finds is a bug to fix or a property to correct).
settings.register_profile("ci", parent=settings.get_profile("shared-cores"), derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "shared-cores"))

# The repository's Flower Apps (apps/pma, apps/hfl) on sys.path, so that `pma_app` / `hfl_app`
# import in any test file run alone (and in Flower's simulation workers, which inherit sys.path).
import experiments  # noqa: F401


@pytest.fixture
def flower_identity(monkeypatch):
    """Messages need a run identity; the ServerApp / ClientApp runtimes set it, unit tests do here."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, attr, value)
