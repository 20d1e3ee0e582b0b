"""Helpers of the AllocationController tests on hostile input (``test_controller_limits.py``,
``test_controller_state_files.py``, ``test_controller_ageing.py``, ``test_controller_interleavings.py``)."""

from __future__ import annotations

import json

from flwr_adaptive.controller import AllocationController, Report


def snapshot(ctrl: AllocationController) -> str:
    return json.dumps(ctrl.state_dict(), sort_keys=True)


def report_for(n: int, per_sample_s: float, per_sample_j: float | None = None) -> Report:
    return Report(time_s=n * per_sample_s, energy_j=None if per_sample_j is None else n * per_sample_j, samples=n)
