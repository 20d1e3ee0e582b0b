"""The hierarchical strategy (HFL-DDP): its rules with fabricated silo replies, then the whole
hierarchy in Flower's simulation engine (``run_simulation``).

In the simulation, four silos (SuperNodes) of the HFL app (``apps/hfl``): silos 0–2 run DDP groups of
2, 3 and 2 emulated testbed devices on their own MNIST partitions; silo 3's ranks cannot start
(its data volume is "not mounted": every rank raises while loading it). One Ray actor serves
all silos and keeps their ranks between rounds.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from adaptive_support import FakeGrid
from hfl_support import once_per_session


# --------------------------------------------------------------------------- fabricated replies
pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def silo_reply(msg, partition, rank_costs, *, value=0.0, rank_quotas=None, extra=None):
    """What a silo sends back: rank i processed its quota at ``rank_costs[i]`` seconds per sample."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    from flwr_adaptive.clients.silo import split_budget

    config = msg.content["config"]
    quotas = rank_quotas or split_budget(config[keys.QUOTA], len(rank_costs), config.get(keys.RANK_QUOTAS))
    times = [q * c for q, c in zip(quotas, rank_costs)]
    metrics = {keys.NUM_EXAMPLES: sum(quotas), keys.SAMPLES: sum(quotas), keys.TIME_S: max(times),
               keys.CPU_TIME_S: sum(times), keys.WALL_TIME_S: max(times), keys.ENERGY_J: keys.UNMEASURED_ENERGY,
               keys.DATA_SIZE: 1000, keys.PARTITION_ID: partition, keys.QUOTA_CAPPED: 0, keys.IDLE_W: 2.0,
               keys.VIRTUAL_CLOCK: 1, keys.RANK_SAMPLES: list(quotas), keys.RANK_TIME_S: times,
               keys.RANK_ENERGY_J: [keys.UNMEASURED_ENERGY] * len(quotas), keys.RANK_WAIT_S: [0.0] * len(quotas),
               **(extra or {})}
    return Message(RecordDict({"arrays": ArrayRecord([np.full(2, float(value))]),
                               "metrics": MetricRecord(metrics)}), reply_to=msg)


def play(strategy, rnd, costs, *, fail=(), value_of=None, cold=()):
    """One round: configure_train, every silo replies with its ranks' costs (or fails), aggregate.
    Silos in ``cold`` report that they started their ranks this round (``keys.COLD_START``)."""
    from flwr.app import ArrayRecord, ConfigRecord, Error, Message

    node_of = {1000 + p: p for p in costs}
    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
    replies = []
    for m in msgs:
        p = node_of[m.metadata.dst_node_id]
        if p in fail:
            replies.append(Message(Error(code=2, reason=f"silo {p}: its ranks failed to start"), reply_to=m))
        else:
            replies.append(silo_reply(m, p, costs[p], value=(value_of or {}).get(p, 0.0),
                                      extra={keys.COLD_START: int(p in cold)}))
    arrays, metrics = strategy.aggregate_train(rnd, replies)
    sent = {node_of[m.metadata.dst_node_id]: (m.content["config"][keys.QUOTA],
                                              m.content["config"].get(keys.RANK_QUOTAS),
                                              m.content["config"][keys.DDP_STEPS]) for m in msgs}
    return sent, arrays, metrics


def hierarchical(n, **kw):
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy, aggregate_silo_metrics

    kw.setdefault("budget", 600)
    kw.setdefault("steps", 10)
    return HierarchicalAdaptiveStrategy(
        FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n,
               train_metrics_aggr_fn=aggregate_silo_metrics), **kw)


def test_ranks_are_split_by_cost_inside_their_silo_only():
    # Prepare: silo 0's ranks differ 1:3, silo 1's 1:1:2, silo 2 is uniformly 10x slower
    costs = {0: [0.001, 0.003], 1: [0.002, 0.002, 0.004], 2: [0.01, 0.01]}
    strategy = hierarchical(3, deadband=0.0)
    # Execute
    first, _, _ = play(strategy, 1, costs)
    second, _, _ = play(strategy, 2, costs)
    # Assert: round 1 sends only the budgets (silos split evenly); round 2 the in-silo split
    assert first == {0: (600, None, 10), 1: (600, None, 10), 2: (600, None, 10)}
    assert second == {0: (600, [450, 150], 10), 1: (600, [240, 240, 120], 10), 2: (600, [300, 300], 10)}
    assert sorted(strategy.controller.groups.items()) == [
        ("0/0", 0), ("0/1", 0), ("1/0", 1), ("1/1", 1), ("1/2", 1), ("2/0", 2), ("2/1", 2)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.lists(st.floats(1e-4, 1e-1), min_size=1, max_size=4), min_size=1, max_size=5),
       st.lists(st.floats(0.25, 4.0), min_size=4, max_size=4), st.integers(2, 8),
       st.sampled_from(["equal", "time"]))
def test_property_no_sample_ever_moves_between_silos(base, drift, steps, policy):
    # Prepare: per-rank costs that drift every round, one silo failing in round 3
    budget = 4 * 8 * 3 + 7  # fits 4 ranks × min quota of 8 steps
    strategy = hierarchical(len(base), budget=budget, steps=steps, policy=policy)
    for rnd in range(1, 5):
        costs = {p: [c * drift[(p + r + rnd) % 4] for r, c in enumerate(ranks)] for p, ranks in enumerate(base)}
        # Execute
        sent, _, _ = play(strategy, rnd, costs, fail={0} if rnd == 3 else ())
        # Assert: every silo is sent its whole budget; its ranks' quotas sum to it, each >= steps
        for p, (quota, rank_quotas, _) in sent.items():
            assert quota == budget
            if rank_quotas is not None:
                assert len(rank_quotas) == len(base[p]) and sum(rank_quotas) == budget
                assert min(rank_quotas) >= steps
        # a silo with rank quotas is one that replied before; from round 2 every silo has them
        assert all((r is not None) == (rnd >= 2) for _, r, _ in sent.values())
    assert set(strategy.history["quota_sum"]) == {budget * len(base)}


def test_a_failed_silo_keeps_its_budget_and_the_others_are_not_given_it():
    # Prepare
    costs = {0: [0.001, 0.002], 1: [0.001, 0.001], 2: [0.002, 0.001]}
    strategy = hierarchical(3, deadband=0.0)
    play(strategy, 1, costs)
    play(strategy, 2, costs)
    # Execute: silo 1 fails in round 3, comes back in round 4
    third, _, _ = play(strategy, 3, costs, fail={1})
    fourth, _, _ = play(strategy, 4, costs)
    rows = strategy.client_history
    # Assert: no probation, no re-split across silos; its ranks' split is kept for its return
    assert [q for q, _, _ in third.values()] == [600] * 3 and [q for q, _, _ in fourth.values()] == [600] * 3
    assert fourth[1][1] == third[1][1] == [300, 300]
    assert fourth[0][1] == third[0][1] == [400, 200]
    assert list(rows[rows["round"] == 3].sort_values("status")["status"]) == ["error", "ok", "ok"]
    assert list(rows[rows["round"] == 4]["status"]) == ["ok"] * 3
    assert strategy.history.set_index("round").loc[3, "skipped"] == 1


def test_a_silo_whose_rank_count_changes_is_replanned_and_the_round_completes(caplog):
    # Prepare: two rounds with k = 2, 3 and 2; the server has a rank split for every silo
    caplog.set_level("INFO", logger="flwr")
    strategy = hierarchical(3, deadband=0.0)
    before = {0: [0.001, 0.003], 1: [0.002, 0.002, 0.004], 2: [0.001, 0.001]}
    play(strategy, 1, before)
    play(strategy, 2, before)
    # Execute: in round 3 silo 0 restarts with 3 ranks, silo 1 with 2 (each splits evenly)
    after = {0: [0.001, 0.003, 0.002], 1: [0.002, 0.002], 2: [0.001, 0.001]}
    third, _, _ = play(strategy, 3, after)
    fourth, _, _ = play(strategy, 4, after)
    # Assert: round 3 aggregates all three silos; their ranks are recorded without the stale quotas
    assert third[0][1] == [450, 150] and third[1][1] == [240, 240, 120]
    assert strategy.history.set_index("round").loc[3, "clients"] == 3
    ranks = strategy.rank_history
    third_ranks = ranks[ranks["round"] == 3]
    quotas = {(p, r): q for p, r, q in third_ranks[["partition_id", "rank", "quota"]].itertuples(index=False)}
    assert all(math.isnan(quotas[0, r]) for r in range(3)) and all(math.isnan(quotas[1, r]) for r in range(2))
    assert [quotas[2, r] for r in range(2)] == [300, 300]
    assert any("re-plan" in r.getMessage() and "silo 0" in r.getMessage() for r in caplog.records)
    # round 4 plans the new k of each silo
    assert len(fourth[0][1]) == 3 and sum(fourth[0][1]) == 600
    assert len(fourth[1][1]) == 2 and sum(fourth[1][1]) == 600


def test_a_start_up_round_seeds_the_split_and_the_first_warm_round_replaces_it():
    # Prepare: rank 0 costs 1 ms per sample, rank 1 3 ms; starting the ranks made rank 0 look 1.5 ms
    strategy = hierarchical(1, deadband=0.0)
    # Execute: round 1 starts the ranks (cold), rounds 2 and 3 are warm
    play(strategy, 1, {0: [0.0015, 0.003]}, cold={0})
    second, _, _ = play(strategy, 2, {0: [0.001, 0.003]})
    third, _, _ = play(strategy, 3, {0: [0.001, 0.003]})
    # Assert: round 2 is split on the start-up round (not evenly); round 3 on the warm round alone
    # (averaged with the start-up round it would be 1.25 ms : 3 ms, i.e. [424, 176])
    assert second[0][1] == [400, 200]
    assert third[0][1] == [450, 150]


def test_a_restarted_silo_keeps_its_rank_estimates(caplog):
    # Prepare: two warm rounds after the start-up round
    caplog.set_level("INFO", logger="flwr")
    strategy = hierarchical(2, deadband=0.0)
    play(strategy, 1, {0: [0.001, 0.003], 1: [0.002, 0.002]}, cold={0, 1})
    play(strategy, 2, {0: [0.001, 0.003], 1: [0.002, 0.002]})
    # Execute: silo 0's ranks are started again in round 3 (start-up makes both look 10 ms)
    play(strategy, 3, {0: [0.01, 0.01], 1: [0.002, 0.002]}, cold={0})
    fourth, _, _ = play(strategy, 4, {0: [0.001, 0.003], 1: [0.002, 0.002]})
    # Assert: the restart's round is not taken for slowness; the line names the silo and its ranks
    assert fourth[0][1] == [450, 150] and fourth[1][1] == [300, 300]
    line = next(r.getMessage() for r in caplog.records if "started its ranks again" in r.getMessage())
    assert "round 3" in line and "silo 0" in line and "0/0, 0/1" in line


def test_a_start_up_round_after_a_failed_round_replaces_the_earlier_one():
    # Prepare: start-up rounds read 10 ms for both ranks; they really cost 1 and 3 ms (the paper's
    # EMA: no drift detection would rescue an average)
    strategy = hierarchical(1, deadband=0.0, paper=True)
    play(strategy, 1, {0: [0.01, 0.01]}, cold={0})
    # Execute: round 2 fails, round 3 starts the ranks again, round 4 is warm
    play(strategy, 2, {0: [0.01, 0.01]}, fail={0})
    play(strategy, 3, {0: [0.01, 0.01]}, cold={0})
    play(strategy, 4, {0: [0.001, 0.003]})
    fifth, _, _ = play(strategy, 5, {0: [0.001, 0.003]})
    # Assert: neither start-up round is averaged in (it would give 5.5 : 6.5 ms, i.e. [325, 275])
    assert fifth[0][1] == [450, 150]


def test_a_silo_that_starts_its_ranks_every_round_is_observed_as_usual():
    # Prepare: a silo whose process does not outlive a round pays the start-up every round
    strategy = hierarchical(1, deadband=0.0, paper=True)
    # Execute
    play(strategy, 1, {0: [0.0015, 0.003]}, cold={0})
    play(strategy, 2, {0: [0.001, 0.003]}, cold={0})
    third, _, _ = play(strategy, 3, {0: [0.001, 0.003]}, cold={0})
    # Assert: both rounds are averaged (EMA 0.5: rank 0 at 1.25 ms, rank 1 at 3 ms)
    assert third[0][1] == [424, 176]


@pytest.mark.parametrize("kwargs, expected", [
    ({}, [449, 151]),  # default: re-split every round (moving rank quotas moves no data)
    ({"deadband": 0.02}, [450, 150]),  # a 0.2 % predicted gain is inside a 2 % deadband
    ({"paper": True}, [450, 150]),  # the paper's 5 % total-variation deadband
])
def test_ranks_are_re_split_every_round_unless_a_deadband_is_asked_for(kwargs, expected):
    # Prepare: rank 0 turns 2 % slower after round 1 (EMA 0.5: 1.01 ms vs 3 ms per sample)
    strategy = hierarchical(1, **kwargs)
    play(strategy, 1, {0: [0.001, 0.003]})
    second, _, _ = play(strategy, 2, {0: [0.00102, 0.003]})
    # Execute
    third, _, _ = play(strategy, 3, {0: [0.00102, 0.003]})
    # Assert
    assert second[0][1] == [450, 150]
    assert third[0][1] == expected


def test_a_subclass_rank_quotas_hook_decides_what_each_silo_is_sent():
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy, aggregate_silo_metrics

    # Prepare: a subclass that lets silo 1 split evenly on its own
    class EvenSilo1(HierarchicalAdaptiveStrategy):
        def rank_quotas(self, node_id):
            return None if node_id == 1001 else super().rank_quotas(node_id)

    strategy = EvenSilo1(FedAvg(fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2,
                                train_metrics_aggr_fn=aggregate_silo_metrics), budget=600, steps=10, deadband=0.0)
    costs = {0: [0.001, 0.003], 1: [0.001, 0.003]}
    play(strategy, 1, costs)
    # Execute
    second, _, _ = play(strategy, 2, costs)
    # Assert: silo 0 gets the learned split, silo 1 none, and its ranks are recorded without quotas
    assert second[0][1] == [450, 150] and second[1][1] is None
    ranks = strategy.rank_history
    silo1 = ranks[(ranks["round"] == 2) & (ranks["partition_id"] == 1)]
    assert silo1["quota"].isna().all() and list(silo1["samples"]) == [300, 300]


@pytest.mark.parametrize("extra, match", [
    ({keys.RANK_TIME_S: [0.1]}, "one entry per rank"),
    ({keys.RANK_SAMPLES: [300, 200]}, "add up to"),
    ({keys.RANK_WAIT_S: [0.0, -1.0]}, "seconds >= 0"),
    ({keys.RANK_ENERGY_J: [-2.0, 1.0]}, "joules >= 0"),
    ({keys.RANK_TIME_S: [0.1, math.nan]}, "finite numbers"),
    ({keys.RANK_SAMPLES: [300.5, 299.5]}, "whole numbers"),
])
def test_a_silo_with_bad_rank_lists_is_skipped_and_the_others_aggregated(extra, match, caplog):
    from flwr.app import ArrayRecord, ConfigRecord

    # Prepare
    strategy = hierarchical(2)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid([1000, 1001])))
    replies = [silo_reply(msgs[0], 0, [0.001, 0.002], value=1.0),
               silo_reply(msgs[1], 1, [0.001, 0.002], value=5.0, extra=extra)]
    # Execute
    arrays, _ = strategy.aggregate_train(1, replies)
    # Assert: only silo 0's model counts, and the skip names the node, the key and the value
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [1.0, 1.0])
    status = strategy.client_history.set_index("node_id")["status"].to_dict()
    assert status == {msgs[0].metadata.dst_node_id: "ok", msgs[1].metadata.dst_node_id: "invalid"}
    line = next(r.getMessage() for r in caplog.records if "[hfl]" in r.getMessage() and "skipped" in r.getMessage())
    assert match in line and f"node {msgs[1].metadata.dst_node_id}" in line
    assert set(strategy.controller.estimates()) == {"0/0", "0/1"}


def test_silo_metrics_with_different_rank_counts_are_aggregated_silo_by_silo():
    from flwr.app import MetricRecord, RecordDict

    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import aggregate_silo_metrics

    # Prepare: replies arrive silo 2 first; silo 2 has 3 ranks, silo 0 two
    records = [RecordDict({"m": MetricRecord({keys.PARTITION_ID: 2, "num-examples": 300, "loss": 1.0,
                                              keys.RANK_SAMPLES: [100, 100, 100], keys.RANK_TIME_S: [0.1, 0.2, 0.3]})}),
               RecordDict({"m": MetricRecord({keys.PARTITION_ID: 0, "num-examples": 100, "loss": 3.0,
                                              keys.RANK_SAMPLES: [60, 40], keys.RANK_TIME_S: [1, 2]})})]
    # Execute
    out = aggregate_silo_metrics(records, "num-examples")
    # Assert: scalars weighted by num-examples, lists concatenated in partition order
    assert out["loss"] == pytest.approx(1.5)
    assert out[keys.RANK_SAMPLES] == [60, 40, 100, 100, 100]
    assert out[keys.RANK_TIME_S] == [1.0, 2.0, 0.1, 0.2, 0.3]
    assert "num-examples" not in out


def test_an_inner_strategy_with_flowers_default_metric_aggregation_gets_the_silo_one():
    from flwr.serverapp.strategy import FedAvg, FedProx

    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy, aggregate_silo_metrics

    # Prepare
    custom = lambda records, key: None  # noqa: E731
    # Execute
    default = HierarchicalAdaptiveStrategy(FedProx(proximal_mu=0.1), budget=100, steps=5)
    kept = HierarchicalAdaptiveStrategy(FedAvg(train_metrics_aggr_fn=custom), budget=100, steps=5)
    # Assert
    assert default.strategy.train_metrics_aggr_fn is aggregate_silo_metrics
    assert kept.strategy.train_metrics_aggr_fn is custom


@pytest.mark.parametrize("kwargs, match", [
    ({"budget": 4, "steps": 5}, "budget must be an int >= steps"),
    ({"budget": 100, "steps": 0}, "steps must be an int >= 1"),
    ({"budget": 100, "steps": 5, "min_rank_quota": -1}, "min_rank_quota"),
    ({"budget": 100, "steps": 5, "min_rank_quota": 101}, "min_rank_quota=101 exceeds the silo budget of 100 samples"),
])
def test_bad_settings_are_refused_naming_the_value(kwargs, match):
    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy

    with pytest.raises(ValueError, match=match):
        HierarchicalAdaptiveStrategy(**kwargs)


def test_a_restarted_server_resumes_the_rank_estimates(tmp_path):
    # Prepare
    costs = {0: [0.001, 0.003], 1: [0.002, 0.002]}
    first = hierarchical(2, state_dir=tmp_path, deadband=0.0)
    play(first, 1, costs)
    play(first, 2, costs)
    # Execute: a new ServerApp run (new node ids would not matter: state is keyed by rank id)
    second = hierarchical(2, state_dir=tmp_path, deadband=0.0)
    sent1, _, _ = play(second, 1, costs)
    sent2, _, _ = play(second, 2, costs)
    # Assert: string rank ids survive; after one reply per silo the learned split is back
    assert set(second.controller.estimates()) == {"0/0", "0/1", "1/0", "1/1"}
    assert sent1[0][1] is None and sent2[0][1] == [450, 150]


def test_a_rank_that_claims_a_thousandth_of_its_silos_others_is_taken_at_their_median(caplog):
    # Prepare: silo 0's rank 0 claims 1/1000 of ranks 1 and 2 (which really run at 2 and 4 ms per
    # sample, it at 2 ms); silo 1 is honest, its rank 0 really 3x faster than the others (plausible)
    caplog.set_level("WARNING", logger="flwr")
    costs = {0: [0.002 / 1000, 0.002, 0.004], 1: [0.001, 0.003, 0.003]}
    held, believing = hierarchical(2, deadband=0.0), hierarchical(2, deadband=0.0, trust=False)
    # Execute
    for strategy in (held, believing):
        play(strategy, 1, costs)
    sent, believed = play(held, 2, costs)[0], play(believing, 2, costs)[0]
    # Assert: held, the liar is taken at the median of its silo's other ranks (3 ms): the split of
    # costs 3, 2, 4 ms; believed, it takes all but the others' minimum quota (10 samples: one per
    # step). Silo 1's fast rank is believed (3x is within the 4x range).
    assert sent[0][1] == [185, 277, 138]
    assert believed[0][1] == [580, 10, 10]
    assert sent[1][1] == believed[1][1] == [360, 120, 120]
    assert any("partition 0, rank 0 claims" in r.getMessage() and "not believed" in r.getMessage() for r in caplog.records)


def test_a_tampered_resumed_state_is_checked_against_the_ranks_first_replies(tmp_path, caplog):
    # Prepare: two honest rounds saved, then the state edited (valid, but a lie): rank 0/0 at 1e-12 s
    # per sample, every other rank 1,000x slower than measured; and the same state left as saved
    costs = {0: [0.001, 0.003], 1: [0.002, 0.002]}
    for folder in ("tampered", "honest"):
        first = hierarchical(2, state_dir=tmp_path / folder, deadband=0.0)
        play(first, 1, costs)
        play(first, 2, costs)
    path = tmp_path / "tampered" / "adaptive-state.json"
    state = json.loads(path.read_text())
    c = state["controller"]
    c["time_per_sample"] = [1e-12 if rid == "0/0" else v * 1000 for rid, v in zip(c["ids"], c["time_per_sample"])]
    path.write_text(json.dumps(state))
    caplog.set_level("WARNING", logger="flwr")
    # Execute: restarted servers resume each state and play 3 rounds
    tampered, honest = (hierarchical(2, state_dir=tmp_path / f, deadband=0.0) for f in ("tampered", "honest"))
    sent = [play(tampered, rnd, costs)[0] for rnd in (1, 2, 3)]
    expected = [play(honest, rnd, costs)[0] for rnd in (1, 2, 3)]
    # Assert: the first warm replies contradict every saved rank estimate (more than 4x off), which
    # are dropped with one warning and learned again from those replies: from round 2 on (the first
    # round a resumed server plans ranks) the split is the honest resume's, not 0/0 holding silo 0
    assert sent == expected and sent[1][0][1] == [450, 150]
    lines = [r.getMessage() for r in caplog.records if "contradicted" in r.getMessage()]
    assert len(lines) == 1 and "4 rank(s)" in lines[0] and "0/0: saved 1e-12 s" in lines[0]


def test_a_resumed_server_still_replaces_a_start_up_round(tmp_path):
    # Prepare: the server stops after the ranks' start-up round (10 ms read for both; really 1 and 3)
    first = hierarchical(1, state_dir=tmp_path, deadband=0.0, paper=True)
    play(first, 1, {0: [0.01, 0.01]}, cold={0})
    # Execute: a new ServerApp run resumes; the silo's ranks are warm
    second = hierarchical(1, state_dir=tmp_path, deadband=0.0, paper=True)
    play(second, 1, {0: [0.001, 0.003]})
    sent, _, _ = play(second, 2, {0: [0.001, 0.003]})
    # Assert: the warm round replaced the start-up one (averaged: 5.5 : 6.5 ms, i.e. [325, 275])
    assert json.loads((tmp_path / "adaptive-state.json").read_text())["start_up_seeded"] == []
    assert sent[0][1] == [450, 150]


@pytest.mark.parametrize("bad", [5, ["0/0", 7], {"0/0": True}])
def test_a_state_with_a_bad_start_up_list_is_set_aside(tmp_path, bad, caplog):
    # Prepare: a valid state whose start_up_seeded was tampered with
    first = hierarchical(1, state_dir=tmp_path)
    play(first, 1, {0: [0.001, 0.003]}, cold={0})
    path = tmp_path / "adaptive-state.json"
    state = json.loads(path.read_text())
    state["start_up_seeded"] = bad
    path.write_text(json.dumps(state))
    caplog.set_level("WARNING", logger="flwr")
    # Execute
    second = hierarchical(1, state_dir=tmp_path)
    # Assert: a fresh start, with a warning naming the field
    assert second.controller.estimates() == {}
    assert any("start_up_seeded" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- simulation
ROUNDS = 2
BUDGET = 300
RANKS = {0: 2, 1: 3, 2: 2, 3: 2}
BROKEN = 3


def unmounted_data():
    """Silo 3's data source: every rank that loads it fails (module level: spawned ranks import it)."""
    raise FileNotFoundError("silo 3's data volume /mnt/silo-3 is not mounted")


@pytest.fixture(scope="module")
def simulation(request, tmp_path_factory):
    return once_per_session(request, tmp_path_factory, "hfl-simulation", lambda: _simulate(tmp_path_factory))


def _simulate(tmp_path_factory):
    """One run_simulation of the HFL app; plain data for the tests."""
    import logging
    from dataclasses import replace

    from flwr.simulation import run_simulation

    from hfl_app.task import make_apps, task_silo_spec

    def silo_spec(partition_id, num_partitions, cfg):
        spec = task_silo_spec(partition_id, num_partitions, cfg)
        return replace(spec, data=unmounted_data) if partition_id == BROKEN else spec

    out = tmp_path_factory.mktemp("hfl")
    state = tmp_path_factory.mktemp("hfl-state")
    config = {"num-server-rounds": ROUNDS, "num-silos": len(RANKS), "silo-budget": BUDGET, "steps": 5,
              "ranks": ",".join(str(RANKS[p]) for p in sorted(RANKS)), "rank-timeout": 20.0,
              "out-dir": str(out), "state-dir": str(state)}
    apps = make_apps(config, silo_spec=silo_spec)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.INFO)
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(handler)
    try:
        # One actor with every core: it serves the silos one after the other and keeps their ranks.
        run_simulation(apps.server_app, apps.client_app, num_supernodes=len(RANKS),
                       backend_config={"client_resources": {"num_cpus": os.cpu_count() or 1}})
    finally:
        flwr_logger.removeHandler(handler)
    strategy = apps.strategy
    return {"history": strategy.history, "client_history": strategy.client_history,
            "rank_history": strategy.rank_history,
            "train_metrics": {rnd: dict(m) for rnd, m in apps.result.train_metrics_clientapp.items()},
            "summary": json.loads((out / "summary-time.json").read_text()),
            "files": sorted(p.name for p in out.iterdir()), "lines": [r.getMessage() for r in records],
            "state_files": sorted(p.name for p in state.iterdir()),
            "run_checkpoint": json.loads((state / "run-checkpoint.json").read_text()),
            "csv_rows": {p.name: len(pd.read_csv(p)) for p in out.glob("history-*.csv")}}


@pytest.mark.slow
def test_every_round_completes_with_the_silos_that_started(simulation):
    # Prepare
    history = simulation["history"].set_index("round")
    silos = simulation["client_history"]
    summary = simulation["summary"]
    # Assert: every round aggregated the three good silos and skipped the broken one
    assert list(history.index) == list(range(1, ROUNDS + 1))
    assert list(history["clients"]) == [3] * ROUNDS and list(history["skipped"]) == [1] * ROUNDS
    ok = silos[silos["status"] == "ok"]
    assert sorted(ok.groupby("round")["partition_id"].apply(sorted).tolist()) == [[0, 1, 2]] * ROUNDS
    # the broken silo never replied with telemetry, so only its error is known, every round
    failed = silos[silos["status"] != "ok"]
    assert list(failed["status"]) == ["error"] * ROUNDS and failed["partition_id"].isna().all()
    assert summary["status"] == "finished" and [r["round"] for r in summary["rounds"]] == list(range(ROUNDS + 1))
    assert all(np.isfinite(r["loss"]) for r in summary["rounds"])


@pytest.mark.slow
def test_the_app_checkpoints_the_model_every_round_and_writes_its_tables_as_it_goes(simulation):
    # helper-56: with state-dir the app saved only the controller state (no model: a restarted ServerApp began
    # again from an untrained model) and wrote its CSVs once at the end (a killed run left none)
    assert {"model-checkpoint.npz", "run-checkpoint.json"} <= set(simulation["state_files"])
    assert simulation["run_checkpoint"]["round"] == ROUNDS
    rows = simulation["csv_rows"]
    assert rows["history-time.csv"] == len(simulation["history"])
    assert rows["history-time-clients.csv"] == len(simulation["client_history"])
    assert rows["history-time-ranks.csv"] == len(simulation["rank_history"])


@pytest.mark.slow
def test_a_silo_whose_ranks_fail_to_start_is_reported_clearly(simulation):
    # Prepare
    lines = simulation["lines"]
    failures = [line for line in lines if "failed to start" in line and "[adaptive]" in line]
    # Assert: one skip line per round naming the silo, the reason and the cause
    assert len(failures) == ROUNDS
    for line in failures:
        assert "silo 3: its 2 DDP ranks failed to start" in line
        assert "not mounted" in line and "skipped" in line


@pytest.mark.slow
def test_silo_budgets_stay_fixed_while_ranks_get_their_own_quotas(simulation):
    # Prepare
    ranks = simulation["rank_history"]
    per_silo = ranks.groupby(["round", "partition_id"])
    # Assert: k ranks per silo, each silo processed exactly its budget every round
    assert per_silo.size().unstack().iloc[0].to_dict() == {p: k for p, k in RANKS.items() if p != BROKEN}
    assert (per_silo["samples"].sum() == BUDGET).all()
    # from round 2 the ranks run the server's split, which is uneven inside the silos
    later = ranks[ranks["round"] >= 2]
    assert later["quota"].notna().all() and (later["quota"] == later["samples"]).all()
    assert (later.groupby(["round", "partition_id"])["quota"].agg(lambda q: q.max() - q.min()) > 0).all()
    assert "history-time-ranks.csv" in simulation["files"]


@pytest.mark.slow
def test_per_rank_lists_of_different_lengths_are_aggregated_silo_by_silo(simulation):
    # Prepare
    metrics = simulation["train_metrics"]
    # Assert: the aggregate holds every rank of the good silos once, in partition order
    for rnd in range(1, ROUNDS + 1):
        samples = metrics[rnd][keys.RANK_SAMPLES]
        assert len(samples) == RANKS[0] + RANKS[1] + RANKS[2]
        assert sum(samples[:2]) == sum(samples[2:5]) == sum(samples[5:]) == BUDGET
        assert len(metrics[rnd][keys.RANK_TIME_S]) == len(samples)


# --------------------------------------------------------------------------- the ranks' device fleets
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_wide_spread_is_the_results_wide_fleet_with_the_same_ratios(seed):
    import experiments  # noqa: F401  (puts apps/hfl on sys.path)
    from experiments.reproduce import scenario_profiles
    from hfl_app.task import silo_devices, wide_fleet

    # Prepare: the PMA results' wide fleet of this seed
    pma = [p.slowdown for p in scenario_profiles("wide", seed)]
    # Execute
    fleet = wide_fleet(seed)
    ranks = [d.slowdown for pid in range(3) for d in silo_devices("2,3,2", pid, spread="wide", seed=seed)]
    # Assert: same ratios between devices (the fleet is only rescaled so its fastest is >= 1), the
    # ranks take the devices in turn, and the spread really is wide (σ of log-slowdowns near 1)
    assert min(p.slowdown for p in fleet) >= 1.0
    assert np.allclose(np.array([p.slowdown for p in fleet]) / fleet[0].slowdown, np.array(pma) / pma[0], rtol=1e-3)
    assert ranks == [p.slowdown for p in fleet[:7]]
    assert 0.5 < np.std(np.log(pma)) < 1.6
    testbed = [d.slowdown for d in silo_devices("2", 1)]
    assert [d.slowdown for d in silo_devices("2", 1, spread="testbed", seed=seed)] == testbed != ranks[2:4]


def test_an_unknown_spread_is_refused_naming_the_choices():
    import experiments  # noqa: F401
    from hfl_app.task import make_apps, silo_devices

    with pytest.raises(ValueError, match=r"spread must be one of \('testbed', 'wide'\), got 'narrow'"):
        silo_devices("2", 0, spread="narrow")
    with pytest.raises(ValueError, match="spread must be one of"):
        make_apps({"spread": "narrow"})


def test_the_hfl_driver_passes_the_spread_and_deadband_to_the_app():
    import argparse
    from pathlib import Path

    from experiments.hfl import flwr_command

    args = argparse.Namespace(rounds=2, silos=2, budget=600, steps=10, ranks="2", task="mnist", seed=3,
                              drift_round=0, drift_factor=2.0, cpus_per_client=2, spread="wide", deadband=0.05)
    run_config = flwr_command("time", args, Path("/tmp/x"))
    config = run_config[run_config.index("-c") + 1]
    assert "spread='wide'" in config and "seed=3" in config and "deadband=0.05" in config


def test_the_hfl_table_gives_the_settled_rank_cv_once_the_run_reaches_it():
    import pandas as pd

    from experiments.hfl import result_row

    hist = pd.DataFrame({"round": range(1, 9), "makespan_s": [1.0] * 8,
                         "rank_cv_mean": [0.2, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01, 0.03]})
    summary = {"rounds": [{"loss": 0.3, "accuracy": 0.9}], "wall_s": 12.0}
    row = result_row("Time-only", hist, summary, settled_round=7)
    assert row["rank CV, rounds >= 3"] == pytest.approx(0.03)  # (0.05 + ... + 0.03) / 6
    assert row["rank CV, rounds >= 7"] == pytest.approx(0.02)
    assert "rank CV, rounds >= 9" not in result_row("Time-only", hist, summary, settled_round=9)


def test_the_round_line_counts_every_silos_budget_and_the_cv_ignores_an_absurd_rank_claim(caplog):
    # Prepare: three silos of 600 samples each; in round 2 silo 1 fails and a rank of silo 2 claims an
    # absurd time beside an ordinary silo time (its observation is refused; its squares overflowed, so
    # the silo's CV was inf and so was the round's mean)
    from flwr.app import ArrayRecord, ConfigRecord, Error, Message

    costs = {0: [0.001, 0.003], 1: [0.002, 0.002, 0.004], 2: [0.01, 0.01]}
    strategy = hierarchical(3, deadband=0.0)
    play(strategy, 1, costs)
    caplog.clear()
    node_of = {1000 + p: p for p in costs}
    msgs = list(strategy.configure_train(2, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
    replies = []
    for m in msgs:
        p = node_of[m.metadata.dst_node_id]
        if p == 1:
            replies.append(Message(Error(code=2, reason="silo 1: its ranks failed to start"), reply_to=m))
        else:
            replies.append(silo_reply(m, p, [1e200, 0.01] if p == 2 else costs[p],
                                      extra={keys.TIME_S: 3.0, keys.WALL_TIME_S: 3.0} if p == 2 else None))
    # Execute
    strategy.aggregate_train(2, replies)
    # Assert: 600 of the federation's 1800 were not processed (helper-56: "of 600"), and the CV is finite
    row = strategy.history.iloc[-1]
    assert (row["quota_sum"], row["short_skipped"], row["short_unassigned"]) == (1800, 600, 0)
    assert any("600 of 1800 budgeted samples not processed" in r.getMessage() for r in caplog.records)
    assert math.isfinite(row["rank_cv_mean"]) and math.isfinite(row["rank_cv_max"])


def test_silos_whose_rank_claims_cannot_be_judged_are_said_once(caplog):
    # Prepare: two 2-rank silos (trust compares from 3 ranks) and a 3-rank one
    costs = {0: [0.001, 0.003], 1: [0.002, 0.002, 0.004], 2: [0.01, 0.01]}
    strategy = hierarchical(3, deadband=0.0)
    # Execute
    for rnd in (1, 2, 3):
        play(strategy, rnd, costs)
    # Assert: one line per 2-rank silo, in the round they first trained warm, none for silo 1
    said = [r.getMessage() for r in caplog.records if "are not judged against each other" in r.getMessage()]
    assert sorted(m.split(":")[0] for m in said) == ["[hfl] silo 0", "[hfl] silo 2"]


def test_two_silos_claiming_one_partition_have_their_own_rank_cv(caplog):
    # Prepare: nodes 1000 and 1001 both say partition 0 (the second is kept apart as node-1001)
    from flwr.app import ArrayRecord, ConfigRecord

    strategy = hierarchical(2, deadband=0.0)
    node_of = {1000: 0, 1001: 1}
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
    costs = {1000: [0.001, 0.001], 1001: [0.001, 0.003]}
    # Execute
    strategy.aggregate_train(1, [silo_reply(m, 0, costs[m.metadata.dst_node_id]) for m in msgs])
    # Assert: both silos' CVs are in the line and the row (one overwrote the other under "0")
    line = next(r.getMessage() for r in caplog.records if "CV of rank compute time" in r.getMessage())
    cvs = line.split("{")[1].split("}")[0]  # the one that claimed it first owns it: either may
    assert cvs in ("0: 0.000, node-1001: 0.500", "0: 0.500, node-1000: 0.000")
    assert strategy.history.iloc[-1]["rank_cv_max"] == pytest.approx(0.5)
