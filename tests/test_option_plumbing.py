"""The strategies' options reach what they configure: the controller, and the clients' config.

A strategy that dropped ``smoothing=`` (or replaced it by the default) on its way to the controller
passed every other test: those build strategies with the defaults, or only check that they build.
Here each option is given a value unlike its default and the strategy's controller must behave
exactly like one built directly with that value, on a scenario in which the value changes the
splits (checked too: the scenario tells the value from the default). The controller is driven
through its public methods only (``allocate``, ``observe``, ``estimates``), so that moving its
code between files changes nothing here.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_adaptive import keys
from flwr_adaptive.controller import AllocationController, Report
from flwr_adaptive.static_profiling_controller import StaticProfilingController
from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy
from flwr_adaptive.strategies.registry import build_strategy
from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

import adaptive_support as sup

BUDGET = 900
IDS = ["a", "b", "c"]
# Per-sample seconds per round: "a" jitters (under the 30 % drift threshold, so smoothing and the
# deadband decide), "b" is steady, "c" is 20x slower and reports in round 1 only (its estimate is
# clipped by cost_clip, its quota floored by min_quota, and forgotten after forget_after silent quotas).
A_COST = [1.0, 1.12, 1.0, 1.15, 1.05, 0.95, 1.1, 1.0]
C_COST = 20.0

#: A value unlike the default for each option (defaults: 0.5, 3, 100, the policy's 2 %, 1).
VALUES = {"smoothing": 0.2, "forget_after": 5, "cost_clip": 4.0, "deadband": 0.3, "min_quota": 50}


def fingerprint(ctrl, grouped=False):
    """Every split and estimate of a fixed 8-round scenario, through the public methods."""
    if grouped:  # the hierarchical strategy's controller: one group per silo, budgets set per silo
        for p in IDS:
            ctrl.set_group(p, "silo", BUDGET)
    out = []
    for rnd, a_cost in enumerate(A_COST):
        quotas = ctrl.allocate(IDS)
        for pid, cost in (("a", a_cost), ("b", 1.0), ("c", C_COST if rnd == 0 else None)):
            if cost is not None and quotas[pid] > 0:
                ctrl.observe(pid, Report(time_s=cost * quotas[pid], samples=quotas[pid]))
        out.append((quotas, {p: round(t, 9) for p, (t, _) in ctrl.estimates().items()}))
    return out


def _reference(policy="time", paper=False, **kw):
    return AllocationController.from_policy(policy, BUDGET, paper=paper, **kw)


# (label, build the strategy with the option, the controller built directly with it, options it takes)
CASES = [
    ("AdaptiveStrategy", lambda **kw: AdaptiveStrategy(budget=BUDGET, **kw), _reference,
     ("smoothing", "forget_after", "cost_clip", "deadband", "min_quota")),
    # the paper's total-variation deadband (5 %) already holds this scenario's jitter: 0 re-splits it
    ("AdaptiveStrategy paper", lambda **kw: AdaptiveStrategy(budget=BUDGET, paper=True, **kw),
     lambda **kw: _reference(paper=True, **kw), ("smoothing", "forget_after", "cost_clip", ("deadband", 0.0),
                                                 "min_quota")),
    ("AdaptiveStrategy low-energy", lambda **kw: AdaptiveStrategy(budget=BUDGET, policy="low-energy", **kw),
     lambda **kw: _reference("low-energy", **kw), ("smoothing", "forget_after", "cost_clip", "min_quota")),
    ("LegacyAdaptiveStrategy", lambda **kw: LegacyAdaptiveStrategy(budget=BUDGET, **kw), _reference,
     ("smoothing", "forget_after", "cost_clip", "deadband", "min_quota")),
    ("build_strategy time", lambda **kw: build_strategy("time", budget=BUDGET, **kw), _reference,
     ("smoothing", "forget_after", "cost_clip", "deadband", ("deadband", 0.0), "min_quota")),
    ("StaticProfilingStrategy",
     lambda **kw: StaticProfilingStrategy(budget=BUDGET, profile_rounds=3, **kw),
     lambda **kw: StaticProfilingController(BUDGET, profile_rounds=3, w_time=1.0, w_energy=0.0, **kw),
     ("smoothing", "cost_clip", "deadband", "min_quota")),
    ("build_strategy static", lambda **kw: build_strategy("static", budget=BUDGET, **kw),
     lambda **kw: StaticProfilingController(BUDGET, profile_rounds=1, w_time=1.0, w_energy=0.0, **kw),
     ("cost_clip", "min_quota")),  # one profiled round: no smoothing, and a frozen split has no deadband
]
PARAMS = [pytest.param(label, make, ref, *((o, VALUES[o]) if isinstance(o, str) else o),
                       id=f"{label}-{o if isinstance(o, str) else '='.join(map(str, o))}")
          for label, make, ref, options in CASES for o in options]


@pytest.mark.parametrize("label, make, reference, option, value", PARAMS)
def test_an_option_given_to_the_strategy_configures_its_controller(label, make, reference, option, value):
    # Prepare (the low-energy case's reports carry energy: its policy weighs it)
    strategy = make(**{option: value})
    # Execute
    got = _run(strategy.controller, label)
    want = _run(reference(**{option: value}), label)
    default = _run(reference(), label)
    # Assert: the strategy's controller is the one built with the value, and the scenario tells
    # that value from the default (else the first assertion would prove nothing)
    assert got == want, f"{label}: {option}={value!r} did not reach the controller"
    assert want != default, f"the scenario does not depend on {option}: it cannot check its plumbing"


def _run(ctrl, label):
    if "low-energy" in label:
        return fingerprint_energy(ctrl)
    return fingerprint(ctrl)


def fingerprint_energy(ctrl):
    """``fingerprint`` with energy in every report (2 W for everyone), for energy-weighted policies."""
    out = []
    for rnd, a_cost in enumerate(A_COST):
        quotas = ctrl.allocate(IDS)
        for pid, cost in (("a", a_cost), ("b", 1.0), ("c", C_COST if rnd == 0 else None)):
            if cost is not None and quotas[pid] > 0:
                t = cost * quotas[pid]
                ctrl.observe(pid, Report(time_s=t, energy_j=2.0 * t, samples=quotas[pid]))
        out.append((quotas, {p: round(t, 9) for p, (t, _) in ctrl.estimates().items()}))
    return out


@pytest.mark.parametrize("option", ["smoothing", "forget_after", "cost_clip", "deadband", "min_rank_quota"])
def test_hierarchical_strategy_options_configure_its_rank_controller(option):
    # Prepare: the rank controller has one group per silo; its defaults are deadband 0 and
    # min_quota = steps (1 here)
    value = {**VALUES, "min_rank_quota": 50}[option]
    strategy = HierarchicalAdaptiveStrategy(budget=BUDGET, steps=1, **{option: value})
    name = "min_quota" if option == "min_rank_quota" else option
    base = {"deadband": 0.0, "min_quota": 1}

    def reference(**kw):
        return AllocationController.from_policy("time", {}, groups={}, **{**base, **kw})

    # Execute
    got = fingerprint(strategy.controller, grouped=True)
    want = fingerprint(reference(**{name: value}), grouped=True)
    default = fingerprint(reference(), grouped=True)
    # Assert
    assert got == want, f"{option}={value!r} did not reach the rank controller"
    assert want != default


# --------------------------------------------------------------------------- allow-cycling on the wire
@pytest.mark.parametrize("cycling", [False, True])
def test_message_api_sends_allow_cycling_as_given(cycling, flower_identity):
    from flwr.app import ArrayRecord, ConfigRecord

    # Prepare
    strategy = AdaptiveStrategy(budget=400, allow_cycling=cycling)
    # Execute
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(), sup.FakeGrid([1, 2, 3, 4])))
    # Assert: every node's config carries the flag as a bool (the client reads it with `is True`)
    assert len(msgs) == 4
    assert all(m.content["config"][keys.ALLOW_CYCLING] is cycling for m in msgs)


class _Proxy:
    def __init__(self, cid):
        self.cid = str(cid)


class _Manager:
    """Just enough of a ClientManager for the legacy FedAvg.configure_fit."""

    def __init__(self, cids):
        self.proxies = [_Proxy(c) for c in cids]

    def num_available(self):
        return len(self.proxies)

    def all(self):
        return {p.cid: p for p in self.proxies}

    def sample(self, num_clients, min_num_clients=None, criterion=None):
        return self.proxies[:num_clients]


@pytest.mark.parametrize("cycling", [False, True])
def test_legacy_api_sends_allow_cycling_as_given(cycling):
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    # Prepare
    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=300,
                                      allow_cycling=cycling)
    # Execute
    pairs = strategy.configure_fit(1, ndarrays_to_parameters([np.zeros(2)]), _Manager([11, 12, 13]))
    # Assert
    assert len(pairs) == 3
    assert all(ins.config[keys.ALLOW_CYCLING] is cycling for _, ins in pairs)


@pytest.mark.parametrize("cycling", [False, True])
def test_fedasync_sends_allow_cycling_as_given(cycling, flower_identity):
    from flwr.app import ArrayRecord

    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    # Prepare: two nodes, one job each (budget 2 × share), replies from a scripted grid
    sent = []

    class Grid:
        def __init__(self):
            self.in_flight = {}

        def get_node_ids(self):
            return [1, 2]

        def push_messages(self, messages):
            ids = []
            for msg in messages:
                mid = f"m{len(sent)}"
                msg.metadata.__dict__["_message_id"] = mid
                self.in_flight[mid] = msg
                sent.append(msg.content["config"])
                ids.append(mid)
            return ids

        def pull_messages(self, message_ids):
            from flwr.app import Message, MetricRecord, RecordDict

            out = []
            for mid in message_ids:
                msg = self.in_flight.pop(mid)
                q, node = int(msg.content["config"][keys.QUOTA]), msg.metadata.dst_node_id
                metrics = {"num-examples": q, keys.SAMPLES: q, keys.TIME_S: 1.0, keys.CPU_TIME_S: 1.0,
                           keys.WALL_TIME_S: 1.0, keys.ENERGY_J: 1.0, keys.DATA_SIZE: 1000,
                           keys.PARTITION_ID: node, keys.QUOTA_CAPPED: 0, keys.IDLE_W: 1.0, keys.VIRTUAL_CLOCK: 1}
                out.append(Message(RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord(metrics)}),
                                   reply_to=msg))
            return out

        def send_and_receive(self, messages, timeout=None):
            return self.pull_messages(self.push_messages(messages))

    strategy = FedAsyncStrategy(budget=20, min_nodes=2, allow_cycling=cycling)
    strategy.poll_interval_s = 0.001
    # Execute
    strategy.start(grid=Grid(), initial_arrays=ArrayRecord([np.zeros(2)]), num_rounds=1, timeout=60.0)
    # Assert
    assert sent and all(c[keys.ALLOW_CYCLING] is cycling for c in sent)


def test_every_node_of_a_grid_listing_some_twice_gets_one_message(flower_identity):
    import random

    from flwr.app import ArrayRecord, ConfigRecord

    # Prepare: the grid lists every node twice (Flower's sampling shuffles the list, seeded here);
    # scripts/mutation.sh: skipping the rest of the list at the first repeat survived
    random.seed(0)
    strategy = AdaptiveStrategy(budget=400)
    # Execute
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(),
                                         sup.FakeGrid([1, 2, 3, 4, 1, 2, 3, 4])))
    # Assert
    assert sorted(m.metadata.dst_node_id for m in msgs) == [1, 2, 3, 4]
    assert sum(m.content["config"][keys.QUOTA] for m in msgs) == 400


def test_slack_with_a_policy_other_than_min_energy_names_the_policy_that_takes_it():
    # scripts/mutation.sh: the list of policies named in the message inverted survived
    with pytest.raises(ValueError, match=r"slack=0.2 applies to policy 'min-energy' only, not 'time'"):
        AdaptiveStrategy(budget=100, policy="time", slack=0.2)


def test_legacy_history_path_takes_a_path_and_refuses_anything_else(tmp_path):
    # scripts/mutation.sh: the type check inverted survived
    assert LegacyAdaptiveStrategy(budget=10, history_path=str(tmp_path / "h.csv")).history_path == str(tmp_path / "h.csv")
    assert LegacyAdaptiveStrategy(budget=10, history_path=tmp_path / "h.csv").history_path == tmp_path / "h.csv"
    with pytest.raises(ValueError, match="history_path must be a CSV file path .* got int 123"):
        LegacyAdaptiveStrategy(budget=10, history_path=123)


def test_legacy_configure_fit_with_a_manager_that_cannot_list_its_clients():
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    # Prepare: all() fails (nothing is pruned), sampling works (scripts/mutation.sh: the except
    # clause narrowed survived)
    class Unlisted(_Manager):
        def all(self):
            raise RuntimeError("cannot list")

    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=2, min_available_clients=2), budget=100)
    # Execute
    pairs = strategy.configure_fit(1, ndarrays_to_parameters([np.zeros(2)]), Unlisted([11, 12]))
    # Assert
    assert sorted(ins.config[keys.QUOTA] for _, ins in pairs) == [50, 50]
