"""Static profiling never changes its split after the profiling round."""

from __future__ import annotations

import math

import pytest

from flwr_adaptive.controller import Report
from flwr_adaptive.static_profiling_controller import StaticProfilingController


def test_split_is_fixed_after_profiling_round_despite_drift():
    # Prepare: round 1 measures a 1:2 speed ratio.
    ctrl = StaticProfilingController(300)
    first = ctrl.allocate(["a", "b"])
    ctrl.observe("a", Report(time_s=first["a"] * 1.0, samples=first["a"]))
    ctrl.observe("b", Report(time_s=first["b"] * 2.0, samples=first["b"]))
    profiled = ctrl.allocate(["a", "b"])

    # Execute: "a" becomes 10× slower; reports keep coming.
    later = []
    for _ in range(5):
        ctrl.observe("a", Report(time_s=profiled["a"] * 10.0, samples=profiled["a"]))
        ctrl.observe("b", Report(time_s=profiled["b"] * 2.0, samples=profiled["b"]))
        later.append(ctrl.allocate(["a", "b"]))

    # Assert
    assert first == {"a": 150, "b": 150}
    assert profiled == {"a": 200, "b": 100}
    assert all(split == profiled for split in later)
    assert ctrl.frozen


def test_frozen_costs_are_resplit_when_a_participant_leaves():
    ctrl = StaticProfilingController(300)
    ctrl.allocate(["a", "b", "c"])
    for pid, tau in zip("abc", (1.0, 2.0, 2.0)):
        ctrl.observe(pid, Report(time_s=100 * tau, samples=100))
    ctrl.allocate(["a", "b", "c"])
    assert ctrl.allocate(["a", "b"]) == {"a": 200, "b": 100}


def test_reports_are_still_validated_after_freezing():
    ctrl = StaticProfilingController(10)
    ctrl.allocate(["a"])
    ctrl.allocate(["a"])
    with pytest.raises(ValueError, match="participant 'a': time_s must be finite, got nan"):
        ctrl.observe("a", Report(time_s=math.nan, samples=1))
