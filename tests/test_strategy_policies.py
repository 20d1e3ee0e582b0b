"""The strategies with the policies beyond the paper: min-energy with the idle watts clients report,
``slack``, ``paper=True`` and ``deadband=None`` (the policy's own default), in every API."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flwr_adaptive import keys
from adaptive_support import FakeGrid
from flwr_adaptive.controller import POLICIES

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

SECONDS_PER_SAMPLE = 0.001
# Two equally fast devices; device 0 draws 10 W while computing, device 1 draws 12 W.
ACTIVE_W = {0: 10.0, 1: 12.0}


def _fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def _reply(msg, metrics):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]),
                               "metrics": MetricRecord({keys.NUM_EXAMPLES: 1, **metrics})}), reply_to=msg)


def _play_pma(strategy, rounds, idle_w):
    """Rounds of two clients (partitions 0 and 1); returns the last round's quota by partition."""
    from flwr.app import ArrayRecord, ConfigRecord

    node_of = {7000 + p: p for p in ACTIVE_W}
    for rnd in range(1, rounds + 1):
        msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
        quota = {node_of[m.metadata.dst_node_id]: m.content["config"][keys.QUOTA] for m in msgs}
        replies = []
        for m in msgs:
            p = node_of[m.metadata.dst_node_id]
            t = SECONDS_PER_SAMPLE * quota[p]
            replies.append(_reply(m, {
                keys.SAMPLES: quota[p], keys.TIME_S: t, keys.CPU_TIME_S: t, keys.WALL_TIME_S: t,
                keys.ENERGY_J: ACTIVE_W[p] * t, keys.DATA_SIZE: 10_000, keys.PARTITION_ID: p,
                keys.QUOTA_CAPPED: 0, keys.IDLE_W: idle_w[p], keys.VIRTUAL_CLOCK: 1}))
        strategy.aggregate_train(rnd, replies)
    return quota


# --------------------------------------------------------------------------- idle watts reach min-energy
# Energy of a round: Σ active_i·t_i + Σ idle_i·(T − t_i). Without idle draw, the 10 W device should
# take every sample the slack allows (550 of 1000: rounds 10 % longer); with 5 W and 11 W idle,
# waiting costs more than the frugal device saves, so the even split (nobody waits) is cheapest.
@pytest.mark.parametrize("idle_w, expected", [({0: 5.0, 1: 11.0}, {0: 500, 1: 500}),
                                              ({0: keys.UNKNOWN, 1: keys.UNKNOWN}, {0: 550, 1: 450})])
def test_min_energy_prices_waiting_with_the_idle_watts_clients_report(idle_w, expected):
    from flwr_adaptive.strategies import AdaptiveStrategy

    # Prepare
    strategy = AdaptiveStrategy(_fedavg(2), budget=1000, policy="min-energy", deadband=0.0)
    # Execute
    quota = _play_pma(strategy, 4, idle_w)
    # Assert
    assert quota == expected


@pytest.mark.parametrize("hostile", [1.7e308, 1e6 * (1 + 1e-9)])
def test_a_hostile_idle_figure_is_screened_and_the_rounds_complete(hostile, caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    # Prepare: one client claims an idle draw beyond a megawatt (it would overflow the idle term)
    strategy = AdaptiveStrategy(_fedavg(2), budget=1000, policy="min-energy", deadband=0.0)
    # Execute
    quota = _play_pma(strategy, 4, {0: 5.0, 1: hostile})
    # Assert: every round completed with the honest client, the budget is still split exactly,
    # and the skip names the node's field
    assert sum(quota.values()) == 1000
    assert list(strategy.history["clients"]) == [1, 1, 1, 1]
    assert list(strategy.history["skipped"]) == [1, 1, 1, 1]
    assert "idle-w" in caplog.text and "at most 1e+06 W" in caplog.text


def test_an_idle_figure_at_the_bound_is_used():
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(_fedavg(2), budget=1000, policy="min-energy", deadband=0.0)
    quota = _play_pma(strategy, 4, {0: 5.0, 1: 1e6})
    assert sum(quota.values()) == 1000 and list(strategy.history["skipped"]) == [0, 0, 0, 0]
    assert max(quota.values()) <= 550  # within the slack of the shortest round


# --------------------------------------------------------------------------- the policy's defaults
def _adaptive(**kw):
    from flwr_adaptive.strategies import AdaptiveStrategy

    return AdaptiveStrategy(_fedavg(2), budget=1000, **kw)


def _legacy(**kw):
    from flwr_adaptive.strategies import LegacyAdaptiveStrategy

    return LegacyAdaptiveStrategy(budget=1000, **kw)


def _hierarchical(**kw):
    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy

    return HierarchicalAdaptiveStrategy(budget=600, steps=10, **kw)


def _registry(**kw):
    from flwr_adaptive.strategies import build_strategy

    return build_strategy(kw.pop("policy", "time"), budget=1000, **kw)


BUILDERS = [_adaptive, _legacy, _hierarchical, _registry]


@pytest.mark.parametrize("build", BUILDERS)
def test_without_deadband_each_policy_uses_its_own_default(build):
    # Execute
    named = build(policy="time").controller
    paper = build(policy="time", paper=True).controller
    explicit = build(policy="time", deadband=0.07).controller
    # Assert: 2 % predicted gain beyond the paper (0 for a silo's ranks: re-splitting them moves no
    # data); the paper's 5 % total-variation rule with paper=True
    default = 0.0 if build is _hierarchical else 0.02
    assert (named.deadband, named.deadband_rule, named.cost_model) == (default, "gain", "affine")
    assert (paper.deadband, paper.deadband_rule, paper.cost_model, paper.drift) == (0.05, "tv", "per-sample", None)
    assert explicit.deadband == 0.07 and explicit.deadband_rule == "gain"


@pytest.mark.parametrize("build", BUILDERS)
def test_min_energy_and_its_slack_are_accepted_everywhere(build):
    # Execute
    default = build(policy="min-energy").controller
    looser = build(policy="min-energy", slack=0.25).controller
    unlimited = build(policy="min-energy", slack=math.inf).controller
    # Assert
    assert default.objective == "min-energy" and default.slack == POLICIES["min-energy"].slack
    assert looser.slack == 0.25 and unlimited.slack == math.inf


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("policy", ["time", "equal", "energy"])
def test_slack_with_a_policy_that_has_none_fails_naming_the_fix(build, policy):
    with pytest.raises(ValueError, match="slack=0.2 applies to policy 'min-energy' only"):
        build(policy=policy, slack=0.2)


@pytest.mark.parametrize("build", BUILDERS)
def test_bad_deadband_slack_or_paper_fail_loudly(build):
    for kw, needle in ((dict(deadband=-0.1), "deadband"), (dict(deadband=1.5), "deadband"),
                       (dict(policy="min-energy", slack=-1.0), "slack"), (dict(paper="yes"), "paper")):
        kw.setdefault("policy", "time")
        with pytest.raises(ValueError, match=needle):
            build(**kw)


# --------------------------------------------------------------------------- HFL: ranks
def _silo_reply(msg, partition, idle_w):
    """Silo ``partition``'s two equally fast ranks (10 W and 12 W) processed the quotas sent."""
    from flwr_adaptive.clients.silo import split_budget

    config = msg.content["config"]
    quotas = split_budget(config[keys.QUOTA], 2, config.get(keys.RANK_QUOTAS))
    times = [SECONDS_PER_SAMPLE * q for q in quotas]
    return _reply(msg, {
        keys.SAMPLES: sum(quotas), keys.TIME_S: max(times), keys.CPU_TIME_S: sum(times),
        keys.WALL_TIME_S: max(times), keys.ENERGY_J: sum(ACTIVE_W[r] * t for r, t in enumerate(times)),
        keys.DATA_SIZE: 1000, keys.PARTITION_ID: partition, keys.QUOTA_CAPPED: 0, keys.IDLE_W: idle_w,
        keys.VIRTUAL_CLOCK: 1, keys.RANK_SAMPLES: list(quotas), keys.RANK_TIME_S: times,
        keys.RANK_ENERGY_J: [ACTIVE_W[r] * t for r, t in enumerate(times)], keys.RANK_WAIT_S: [0.0, 0.0]})


@pytest.mark.parametrize("silo_idle_w, expected", [(16.0, [300, 300]), (keys.UNKNOWN, [330, 270])])
def test_hierarchical_min_energy_shares_the_silo_idle_watts_among_its_ranks(silo_idle_w, expected):
    from flwr.app import ArrayRecord, ConfigRecord

    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import aggregate_silo_metrics

    # Prepare: one silo of two ranks; 16 W idle for the silo is 8 W per rank
    from flwr.serverapp.strategy import FedAvg

    strategy = _hierarchical(strategy=FedAvg(fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=1,
                                             train_metrics_aggr_fn=aggregate_silo_metrics),
                             policy="min-energy", deadband=0.0)
    plans = []
    for rnd in range(1, 5):
        msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid([5000])))
        plans.append(msgs[0].content["config"].get(keys.RANK_QUOTAS))
        strategy.aggregate_train(rnd, [_silo_reply(msgs[0], 0, silo_idle_w)])
    # Assert: with idle draw nobody should wait; without it the 10 W rank takes what the slack allows
    assert plans[-1] == expected


# --------------------------------------------------------------------------- the apps' run configs
@pytest.mark.parametrize("app, module", [("pma", "pma_app"), ("hfl", "hfl_app")])
def test_apps_run_configs_declare_the_policy_defaults_as_negative_numbers(app, module):
    import importlib
    import tomllib

    from experiments import APPS_DIR

    # Prepare: flwr run refuses -c keys the app config does not declare
    config = tomllib.loads((APPS_DIR / app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    task = importlib.import_module(f"{module}.task")
    # Assert: a negative deadband / slack stands for the policy's default (None); paper is off
    assert task.DEFAULTS == config
    assert (config["deadband"], config["slack"], config["paper"]) == (-1.0, -1.0, False)
    policy_default = getattr(task, "policy_default", None) or importlib.import_module(f"{module}.server_app").policy_default
    assert policy_default(-1.0) is None and policy_default(0.0) == 0.0 and policy_default(0.3) == 0.3
