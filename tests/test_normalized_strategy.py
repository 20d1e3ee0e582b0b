"""Normalised aggregation and capped weights in the strategies (both APIs), with messages built by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adaptive_support as sup
from adaptive_support import FakeGrid
from flwr_adaptive import keys
from flwr_adaptive.normalized_averaging import MAX_RESCALE, fednova_update, local_work
from flwr_adaptive.strategies import AdaptiveStrategy, HierarchicalAdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.normalization import MIN_ENERGY_MAX_RESCALE, default_max_rescale
from flwr_adaptive.strategies.registry import build_strategy

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def telemetry(samples, partition, *, steps=None, data_size=1000, momentum=None, lr=None, mu=None):
    out = {keys.SAMPLES: samples, keys.TIME_S: 0.001 * samples, keys.CPU_TIME_S: 0.001 * samples,
           keys.WALL_TIME_S: 0.001 * samples, keys.ENERGY_J: -1.0, keys.DATA_SIZE: data_size,
           keys.PARTITION_ID: partition, keys.QUOTA_CAPPED: 0, keys.IDLE_W: 1.0, keys.VIRTUAL_CLOCK: 1}
    for key, value in ((keys.LOCAL_STEPS, steps), (keys.LOCAL_MOMENTUM, momentum), (keys.LOCAL_LR, lr),
                       (keys.LOCAL_PROXIMAL_MU, mu)):
        if value is not None:
            out[key] = value
    return out


def reply(msg, metrics, model):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.asarray(a) for a in model]),
                               "metrics": MetricRecord({"num-examples": 1, **metrics})}), reply_to=msg)


def _fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def message_round(strategy, x, per_node, rnd=1):
    """One configure/aggregate round; ``per_node[i] = (metrics_kwargs, model)`` for the i-th node."""
    from flwr.app import ArrayRecord, ConfigRecord

    nodes = [100 + i for i in range(len(per_node))]
    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.asarray(a) for a in x]), ConfigRecord(), FakeGrid(nodes)))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    quota = {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in msgs}
    replies = []
    for i, (kw, model) in enumerate(per_node):
        node = nodes[i]
        kw = dict(kw)
        samples = min(kw.pop("samples", quota[node]), quota[node])
        replies.append(reply(by_node[node], telemetry(samples, i, **kw), model))
    arrays, _ = strategy.aggregate_train(rnd, replies)
    return arrays.to_numpy_ndarrays()


X = [np.array([1.0, -2.0])]


def test_default_weighting_follows_the_data_setting():
    assert AdaptiveStrategy(budget=10).weighting == "normalized"
    assert AdaptiveStrategy(budget=10, allow_cycling=True).weighting == "samples"
    assert LegacyAdaptiveStrategy(budget=10).weighting == "normalized"
    assert LegacyAdaptiveStrategy(budget=10, allow_cycling=True).weighting == "samples"
    assert HierarchicalAdaptiveStrategy(budget=10, steps=2).weighting == "normalized"  # silos own their data
    assert build_strategy("time", budget=10).weighting == "normalized"
    assert build_strategy("static", budget=10, allow_cycling=True).weighting == "samples"
    assert build_strategy("oort", budget=10).weighting == "normalized"


@pytest.mark.parametrize("cls", [AdaptiveStrategy, LegacyAdaptiveStrategy])
@pytest.mark.parametrize("options", [{"weighting": "samples"}, {"weighting": "data-size"}, {"allow_cycling": True}])
def test_a_rescale_cap_where_nothing_is_rescaled_is_refused_with_the_fix(cls, options):
    # Only the normalised rule rescales updates: a cap beside another weighting would do nothing
    for cap in (4.0, math.inf):
        with pytest.raises(ValueError, match="has no effect with weighting=.*pass weighting='normalized'"):
            cls(budget=10, max_rescale=cap, **options)
    assert cls(budget=10, **options).max_rescale == MAX_RESCALE  # the default stays accepted
    assert cls(budget=10, max_rescale=MAX_RESCALE, **options).max_rescale == MAX_RESCALE  # named, as the default
    assert cls(budget=10, max_rescale=4.0).max_rescale == 4.0


def test_message_api_aggregates_fednova_steps_for_sgd_momentum_and_proximal_clients():
    # Prepare: three nodes, different data sizes, steps, momentum and a proximal term
    models = [[np.array([0.0, -1.0])], [np.array([-3.0, 4.0])], [np.array([2.0, -2.5])]]
    kws = [dict(steps=2, data_size=100), dict(steps=6, data_size=300, momentum=0.9),
           dict(steps=4, data_size=200, lr=0.1, mu=1.0)]
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", objective="data-size")
    strategy.step_tolerance = 10.0  # the claims here are hand-picked, not a round's plausible spread
    # Execute
    got = message_round(strategy, X, list(zip(kws, models)))
    # Assert: FedNova's x − τ_eff Σ p_i Δ_i/‖a_i‖₁, with ‖a‖ = 2, momentum's and the proximal closed form
    work = local_work([2, 6, 4], [0.0, 0.9, 0.0], [0.0, 0.0, 0.1])
    expected = fednova_update(X, models, [100, 300, 200], work)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    fedavg = np.average([m[0] for m in models], axis=0, weights=[100, 300, 200])
    assert not np.allclose(got[0], fedavg)


def test_equal_steps_give_the_data_weighted_fedavg_exactly():
    models = [[np.array([0.5, 1.5])], [np.array([-1.0, 2.0])], [np.array([3.0, 0.25])]]
    kws = [dict(steps=5, data_size=n) for n in (100, 300, 200)]
    got = message_round(AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", objective="data-size"), X, list(zip(kws, models)))
    np.testing.assert_allclose(got[0], np.average([m[0] for m in models], axis=0, weights=[100, 300, 200]),
                               rtol=1e-15)


def test_integer_arrays_are_passed_through_unscaled():
    x = [np.array([0.0]), np.array([3], dtype=np.int64)]
    models = [[np.array([1.0]), np.array([4], dtype=np.int64)], [np.array([2.0]), np.array([6], dtype=np.int64)],
              [np.array([3.0]), np.array([8], dtype=np.int64)]]
    kws = [dict(steps=s) for s in (10, 10, 40)]
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal")
    strategy.step_tolerance = 10.0
    got = message_round(strategy, x, list(zip(kws, models)))
    # the float array is FedNova's; the counter is FedAvg's average of what the clients sent
    assert got[0][0] == pytest.approx(fednova_update(x[:1], [m[:1] for m in models], [1, 1, 1], [10, 10, 40])[0][0])
    assert got[1][0] == int(np.average([4, 6, 8]))


@pytest.mark.parametrize("lie", [2**53 - 1, 10 * 1000])
def test_with_the_data_size_objective_one_node_of_five_claiming_a_huge_size_gets_at_most_twice_its_fair_weight(
        lie, caplog):
    # Prepare: the liar's model is 1, the others' 0, all with the same steps: the aggregate is its share
    per_node = [(dict(steps=3, data_size=1000), [np.zeros(2)]) for _ in range(4)]
    per_node.append((dict(steps=3, data_size=lie), [np.ones(2)]))
    strategy = AdaptiveStrategy(_fedavg(5), budget=500, policy="equal", objective="data-size")
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        got = message_round(strategy, [np.zeros(2)], per_node)
    # Assert: at most 2× the fair 1/5 (it gets 2/6), with one warning naming its partition
    assert got[0][0] <= 2 * 0.2 and got[0][0] == pytest.approx(2 / 6)
    warned = [line for line in sup.adaptive_lines(caplog) if "aggregation weight is capped" in line]
    assert len(warned) == 1 and "(partition 4)" in warned[0]


def test_data_size_weighting_is_capped_too():
    per_node = [(dict(steps=3, data_size=1000), [np.zeros(2)]) for _ in range(4)]
    per_node.append((dict(steps=3, data_size=2**53 - 1), [np.ones(2)]))
    got = message_round(AdaptiveStrategy(_fedavg(5), budget=500, policy="equal", weighting="data-size"),
                        [np.zeros(2)], per_node)
    assert got[0][0] == pytest.approx(2 / 6)


def test_a_node_claiming_one_step_does_not_get_its_update_inflated(caplog):
    # Prepare: every node took 10 steps for its 100 samples; the liar claims 1 to get a 10× factor
    per_node = [(dict(steps=10), [np.zeros(1)]) for _ in range(3)] + [(dict(steps=1), [np.ones(1)])]
    strategy = AdaptiveStrategy(_fedavg(4), budget=400, policy="equal")
    with caplog.at_level("WARNING", logger="flwr"):
        got = message_round(strategy, [np.zeros(1)], per_node)
    # Assert: its steps are raised to 100·0.1/2 = 5: factor τ_eff/5 with τ_eff = (30 + 5)/4
    assert got[0][0] == pytest.approx(0.25 * (35 / 4) / 5)
    assert any("claims 1 local steps for 100 samples" in line for line in sup.adaptive_lines(caplog))


def test_a_node_claiming_a_strong_proximal_term_does_not_get_its_update_inflated(caplog):
    # Prepare: four nodes took 10 plain steps; the liar claims lr 0.5 × mu 1.99 (α ≈ 1: ‖a‖₁ ≈ 1, factor
    # τ_eff/1 up to the cap of 8) though FedAvg asks for no proximal term
    per_node = [(dict(steps=10), [np.zeros(1)]) for _ in range(3)] + [(dict(steps=10, lr=0.5, mu=1.99), [np.ones(1)])]
    strategy = AdaptiveStrategy(_fedavg(4), budget=400, policy="equal")
    with caplog.at_level("WARNING", logger="flwr"):
        got = message_round(strategy, [np.zeros(1)], per_node)
    # Assert: its work is kept at 10/2 (the median optimizer's work for its steps, within 2×)
    assert got[0][0] == pytest.approx(0.25 * (35 / 4) / 5)
    assert any("whose local work for its 10 steps lies outside 2×" in line for line in sup.adaptive_lines(caplog))


def test_a_momentum_claim_next_to_one_lengthens_every_step_by_at_most_the_tolerance():
    # the liar's momentum 1 − 1e-7 would make its ‖a‖₁ ≈ 55 for 10 steps and τ_eff (every node's factor) 5×
    per_node = [(dict(steps=10), [np.ones(1)]) for _ in range(3)] + [(dict(steps=10, momentum=1 - 1e-7), [np.zeros(1)])]
    strategy = AdaptiveStrategy(_fedavg(4), budget=400, policy="equal")
    got = message_round(strategy, [np.zeros(1)], per_node)
    assert got[0][0] == pytest.approx(0.75 * ((30 + 20) / 4) / 10)  # its work kept at 2 × 10


def test_an_honest_momentum_node_beside_plain_sgd_ones_keeps_its_share_of_the_objective(caplog):
    # 3 plain-SGD nodes (10 steps: work 10) and 2 momentum-0.9 nodes (work 41.4, above 2× the median's 10).
    # Clipping the momentum nodes' work to 20 scaled their updates by τ/20, twice FedNova's τ/41.4: their
    # data weighed twice its share. More work than plausible now lengthens only the claimant's own
    # normalisation; τ_eff counts it at 20: τ = (3·10 + 2·20)/5 = 14.
    r = float(local_work(10, 0.9))
    per_node = [(dict(steps=10), [np.zeros(1)]) for _ in range(3)]
    per_node += [(dict(steps=10, momentum=0.9), [np.zeros(1)]) for _ in range(2)]
    strategy = AdaptiveStrategy(_fedavg(5), budget=500, policy="equal")
    with caplog.at_level("WARNING", logger="flwr"):
        message_round(strategy, [np.zeros(1)], per_node)
    scales = [strategy.last_scales[100 + i] for i in range(5)]
    assert scales == pytest.approx([1.4, 1.4, 1.4, 14 / r, 14 / r])
    # every node's share of the objective, p_i·scale_i·work_i, is its data share: FedNova's objective
    shares = np.array(scales) * np.array([10, 10, 10, r, r])
    np.testing.assert_allclose(shares / shares.sum(), 0.2)
    assert sum("its own update is normalised by its claim" in line for line in sup.adaptive_lines(caplog)) == 2


@pytest.mark.parametrize("steps, momentum, lr, mu",
                         [(10, 0.5, 1e-300, 1e-20), (10, 0.9, 0.01, 1e-20), (6, 0.999, 0.87, 1.0)])
def test_an_optimizer_claim_whose_work_the_closed_form_got_wrong_completes_the_round(steps, momentum, lr, mu):
    # α = lr·μ below ~1e-16 beside momentum made the closed form NaN or −1.6e6, and 6 steps at ρ = 0.999 with
    # α = 0.87 have a sum of coefficients below 0: either raised in aggregate_train and stopped the run
    per_node = [(dict(steps=10), [np.zeros(1)]) for _ in range(3)]
    per_node.append((dict(steps=steps, momentum=momentum, lr=lr, mu=mu), [np.ones(1)]))
    got = message_round(AdaptiveStrategy(_fedavg(4), budget=400, policy="equal"), [np.zeros(1)], per_node)
    assert np.isfinite(got[0][0]) and 0 < got[0][0] <= 0.25 * 8


@pytest.mark.parametrize("field, value, match", [
    ("steps", 0, "'local-steps' must be >= 1"),
    ("momentum", 1.5, "'local-momentum' must be in"),
    ("momentum", float("nan"), "'local-momentum' must be finite"),
    ("lr", -0.1, "'local-lr' must be > 0"),
    ("mu", 20.0, "must be < 1"),
])
def test_an_absurd_local_work_claim_skips_the_reply_with_one_line(field, value, match, caplog):
    kws = [dict(steps=4), dict(steps=4), dict(steps=4, lr=0.1)]
    kws[2][field] = value
    models = [[np.zeros(2)], [np.zeros(2)], [np.ones(2)]]
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal")
    with caplog.at_level("WARNING", logger="flwr"):
        got = message_round(strategy, [np.zeros(2)], list(zip(kws, models)))
    assert got[0].tolist() == [0.0, 0.0]  # the round completed without it
    assert strategy.history.iloc[-1]["skipped"] == 1
    assert any(match in line for line in sup.adaptive_lines(caplog))


def test_missing_steps_fall_back_to_samples_with_one_warning(caplog):
    # Prepare: no local-steps key (a client not wrapped by this release); quotas 100 each, one of
    # them processed 50 samples only: samples stand in for steps (factor τ_eff/50 on its change)
    per_node = [(dict(samples=100), [np.zeros(1)]), (dict(samples=100), [np.zeros(1)]),
                (dict(samples=50), [np.ones(1)])]
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal")
    with caplog.at_level("WARNING", logger="flwr"):
        got = message_round(strategy, [np.zeros(1)], per_node)
        message_round(strategy, [np.zeros(1)], per_node, rnd=2)
    tau_eff = (100 + 100 + 50) / 3
    assert got[0][0] == pytest.approx(tau_eff / 50 / 3)
    warned = [line for line in sup.adaptive_lines(caplog) if "do not report their local optimizer steps" in line]
    assert len(warned) == 1


def test_legacy_api_aggregates_the_same_fednova_step():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    from test_strategy_core import _Manager

    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=300, policy="equal", objective="data-size")
    strategy.step_tolerance = 10.0
    pairs = strategy.configure_fit(1, ndarrays_to_parameters(X), _Manager([11, 12, 13]))
    models = [[np.array([0.0, -1.0])], [np.array([-3.0, 4.0])], [np.array([2.0, -2.5])]]
    kws = [dict(steps=2, data_size=100), dict(steps=6, data_size=300, momentum=0.9), dict(steps=4, data_size=200)]
    ok = Status(Code.OK, "")
    results = [(proxy, FitRes(ok, ndarrays_to_parameters(m), 1, telemetry(100, i, **kw)))
               for i, ((proxy, _), m, kw) in enumerate(zip(pairs, models, kws))]
    params, _ = strategy.aggregate_fit(1, results, [])
    expected = fednova_update(X, models, [100, 300, 200], local_work([2, 6, 4], [0.0, 0.9, 0.0]))
    np.testing.assert_allclose(parameters_to_ndarrays(params)[0], expected[0], rtol=1e-12)


def test_fedadam_applies_its_server_logic_to_the_fednova_step():
    from flwr.serverapp.strategy import FedAdam

    # Prepare: the same replies through FedAvg and through FedAdam (server optimizer on the average)
    models = [[np.array([0.0, -1.0])], [np.array([-3.0, 4.0])], [np.array([2.0, -2.5])]]
    kws = [dict(steps=2), dict(steps=6), dict(steps=4)]
    adam = AdaptiveStrategy(FedAdam(fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3, eta=0.1),
                            budget=300, policy="equal")
    # Execute
    got = message_round(adam, X, list(zip(kws, models)))
    # Assert: FedAdam's first step moves x by η·sign-like m/√v of FedNova's pseudo-gradient
    nova = fednova_update(X, models, [1000, 1000, 1000], [2, 6, 4])[0]
    delta = nova - X[0]
    assert np.all(np.sign(got[0] - X[0]) == np.sign(delta))


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_fedadam_keeps_training_float32_clients_after_it_sends_float64(api):
    # Flower's FedAdam returns float64 arrays from float32 replies (a NumPy float64 scalar promotes them); a
    # torch client loads them into its float32 model and sends float32 back. Screened as another model, every
    # reply from round 2 on was skipped: the run went on with the round-1 model and exited 0.
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAdam as LegacyFedAdam
    from flwr.serverapp.strategy import FedAdam
    from test_strategy_core import _Manager

    x = [np.array([1.0, -2.0], dtype=np.float32)]
    kws = [dict(steps=2), dict(steps=6), dict(steps=4)]
    if api == "message":
        strategy = AdaptiveStrategy(FedAdam(fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3,
                                            eta=0.1), budget=300, policy="equal")
    else:
        strategy = LegacyAdaptiveStrategy(LegacyFedAdam(min_fit_clients=3, min_available_clients=3, eta=0.1,
                                                        initial_parameters=ndarrays_to_parameters(x)),
                                          budget=300, policy="equal")
    for rnd in (1, 2, 3):
        models = [[(x[0] + i + 1).astype(np.float32)] for i in range(3)]
        if api == "message":
            x = message_round(strategy, x, list(zip(kws, models)), rnd=rnd)
        else:
            pairs = strategy.configure_fit(rnd, ndarrays_to_parameters(x), _Manager([11, 12, 13]))
            ok = Status(Code.OK, "")
            results = [(proxy, FitRes(ok, ndarrays_to_parameters(m), 1, telemetry(100, i, **kw)))
                       for i, ((proxy, _), m, kw) in enumerate(zip(pairs, models, kws))]
            params, _ = strategy.aggregate_fit(rnd, results, [])
            x = parameters_to_ndarrays(params)
        assert strategy.history.iloc[-1]["clients"] == 3 and strategy.history.iloc[-1]["skipped"] == 0
    assert x[0].dtype == np.float64  # what FedAdam sends: the float32 replies were kept beside it


def test_in_a_sampled_federation_a_round_of_two_screens_an_optimizer_claim_against_the_population(caplog):
    # FedAvg samples 2 of 5 nodes a round: a round of two has no median of its own, and a claim of
    # α = lr·μ = 0.995 (10 steps worth ~1) once got the liar's update scaled to the cap while its honest
    # partner's shrank to ~0.5. The nodes seen in earlier rounds (momentum 0.9) are now the median.
    import random

    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    random.seed(3)
    nodes = [100 + i for i in range(5)]
    liar = nodes[4]
    strategy = AdaptiveStrategy(FedAvg(fraction_train=0.4, fraction_evaluate=0.0, min_train_nodes=2,
                                       min_available_nodes=5), budget=200, policy="equal")
    honest_work = float(local_work(10, 0.9))
    judged, x = [], [np.zeros(2)]
    with caplog.at_level("WARNING", logger="flwr"):
        for rnd in range(1, 13):
            msgs = list(strategy.configure_train(rnd, ArrayRecord(x), ConfigRecord(), FakeGrid(nodes)))
            sampled = [m.metadata.dst_node_id for m in msgs]
            seen_before = set(strategy.aggregation.peer_optimizers) - set(sampled)
            replies = []
            for m in msgs:
                node = m.metadata.dst_node_id
                claim = dict(steps=10, lr=0.1, mu=9.95) if node == liar else dict(steps=10, momentum=0.9, lr=0.1)
                replies.append(reply(m, telemetry(100, nodes.index(node), **claim), [np.ones(2)]))
            strategy.aggregate_train(rnd, replies)
            if liar in sampled and len(seen_before) >= 2:
                judged.append(rnd)
                scales = strategy.last_scales
                partner = next(n for n in sampled if n != liar)
                # its work is kept at ≥ r/2, so its factor is at most 2 and its partner's at least 0.75
                assert scales[liar] <= 2.0 + 1e-9 and scales[partner] >= 0.75 - 1e-9
                assert scales[liar] == pytest.approx((honest_work + honest_work / 2) / 2 / (honest_work / 2))
    assert judged  # the seed samples the liar after the population is known
    assert any("claims an optimizer" in line for line in sup.adaptive_lines(caplog))


def test_a_resumed_server_screens_its_first_round_of_two_against_the_claims_saved_before_the_restart():
    # The population's claims are in the state: a ServerApp restarted between rounds (node ids survive a
    # SuperLink on its database) judges its first sampled round of two as the uninterrupted one would.
    # Without them that round had no median: the liar's α = 0.995 claim got its update scaled to the cap.
    import json
    import random

    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    nodes = [100 + i for i in range(5)]
    honest = dict(steps=10, momentum=0.9, lr=0.1)

    def sampled_strategy(fraction):
        return AdaptiveStrategy(FedAvg(fraction_train=fraction, fraction_evaluate=0.0, min_train_nodes=2,
                                       min_available_nodes=5), budget=500, policy="equal")

    def play(strategy, rnd, liar=None):
        msgs = list(strategy.configure_train(rnd, ArrayRecord(X), ConfigRecord(), FakeGrid(nodes)))
        liar = msgs[0].metadata.dst_node_id if liar else None
        strategy.aggregate_train(rnd, [
            reply(m, telemetry(100, nodes.index(m.metadata.dst_node_id),
                               **(dict(steps=10, lr=0.1, mu=9.95) if m.metadata.dst_node_id == liar else honest)),
                  [np.ones(2)]) for m in msgs])
        return liar

    first = sampled_strategy(1.0)
    play(first, 1)  # every node replies honestly once
    saved = json.loads(json.dumps(first.state_dict()))  # as the state file holds it
    assert {n for n, _ in saved["peer_optimizers"]} == {n for n, _ in saved["peer_steps"]} == set(nodes)
    resumed = sampled_strategy(0.4)
    resumed.load_state_dict(saved)
    assert resumed.aggregation.peer_steps == first.aggregation.peer_steps  # the step claims come back too
    random.seed(0)
    liar = play(resumed, 2, liar=True)
    partner = next(n for n in resumed.last_scales if n != liar)
    # its work is kept at half the honest one's, as in an uninterrupted run (the population test above)
    assert resumed.last_scales == pytest.approx({liar: 1.5, partner: 0.75})


def test_a_state_written_before_the_claims_were_saved_resumes_without_them():
    from flwr.serverapp.strategy import FedAvg

    def make():
        return AdaptiveStrategy(FedAvg(fraction_evaluate=0.0), budget=200, policy="equal")

    state = make().state_dict()
    del state["peer_steps"], state["peer_optimizers"]
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.aggregation.peer_steps == {} and resumed.aggregation.peer_optimizers == {}


def test_colluders_who_reply_first_do_not_hold_the_small_rounds_medians():
    # Nodes 1 and 2 collude (lr·μ = 0.995: 10 steps worth ~1), 3, 4, 5 are honest (momentum 0.9), 2 per round.
    # Keeping only the claims that passed, the colluders' unscreened first round filled the memory, every
    # honest claim was then clipped and never kept, and the colluders took ~98 % of each later round's
    # update. Every claim is kept now: once the honest nodes have replied, they are the medians.
    from flwr_adaptive.strategies.normalization import AggregationWeights
    from flwr_adaptive.strategies.reports import ClientReport

    def play(rnd, pairs):
        reports = [ClientReport(node_id=n, partition_id=n, quota=100, samples=100, time_s=1.0, cpu_time_s=1.0,
                                wall_time_s=1.0, energy_j=None, data_size=100, capped=False, idle_w=None,
                                virtual_clock=True, steps=10, **kw) for n, kw in pairs]
        return agg.update_scales(rnd, reports, agg.weights(rnd, reports))

    honest, liar = dict(momentum=0.9, lr=0.1), dict(lr=0.1, proximal_mu=9.95)
    agg = AggregationWeights("normalized", lambda *a, **k: None)
    play(1, [(1, liar), (2, liar)])  # nothing to compare with: believed
    play(2, [(3, honest), (4, honest)])  # judged against the colluders too (a transient)
    assert play(3, [(5, honest), (3, honest)]) == {5: 1.0, 3: 1.0}  # equal work: FedAvg
    # as if the honest nodes had replied first: the liar's work is kept at half the honest one's
    assert play(4, [(1, liar), (5, honest)]) == pytest.approx({1: 1.5, 5: 0.75})
    assert play(5, [(2, liar), (4, honest)]) == pytest.approx({2: 1.5, 4: 0.75})
    agg.retain({1, 3, 4, 5})  # node 2 left: its claims go
    assert set(agg.peer_optimizers) == set(agg.peer_steps) == {1, 3, 4, 5}


def _precision_round(api, strategy, x, per_node, rnd):
    """One round through either API; the aggregate's arrays."""
    if api == "message":
        return message_round(strategy, x, per_node, rnd=rnd)
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    from test_strategy_core import _Manager

    pairs = strategy.configure_fit(rnd, ndarrays_to_parameters(x), _Manager([11 + i for i in range(len(per_node))]))
    results = [(proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(m), 1, telemetry(100, i, **kw)))
               for i, ((proxy, _), (kw, m)) in enumerate(zip(pairs, per_node))]
    params, _ = strategy.aggregate_fit(rnd, results, [])
    return parameters_to_ndarrays(params)


def _precision_strategy(api, n):
    if api == "message":
        return AdaptiveStrategy(_fedavg(n), budget=100 * n, policy="equal")
    from flwr.server.strategy import FedAvg

    return LegacyAdaptiveStrategy(FedAvg(min_fit_clients=n, min_available_clients=n), budget=100 * n, policy="equal")


F32 = [np.array([1.0, -2.0], dtype=np.float32)]


def test_only_replies_below_single_precision_are_cast_and_no_further_than_float32():
    from flwr_adaptive.strategies.screening import lower_precision

    model = {"w": ((2,), "float32"), "v": ((2,), "float64"), "n": ((), "int64")}
    # float16 is raised to the model's float32, and to float32 (not float64) beside a float64 model
    assert lower_precision({"w": ((2,), "float16"), "v": ((2,), "float16"), "n": ((), "int64")}, model) == {
        "w": "float32", "v": "float32"}
    # FedAdam's float64 model with float32 replies: nothing to copy; a float16 model's float16: nothing
    assert lower_precision({"w": ((2,), "float32"), "v": ((2,), "float32"), "n": ((), "int64")}, model) == {}
    assert lower_precision({"w": ((2,), "float16")}, {"w": ((2,), "float16")}) == {}


def test_the_rescale_bound_by_hand():
    from flwr_adaptive.strategies.screening import rescale_reason

    x = {"w": np.array([3e38, 0.0], dtype=np.float32)}
    # |x| + 8·|x_i − x| = [3e38, 8e30] fits float32 (the coarse bound 9·3e38 + 8·3e38 does not: the exact one
    # decides); moving the large entry by 1e37 reaches 3e38 + 8e37 = 3.8e38, beyond 3.4e38
    assert rescale_reason({"w": np.array([3e38, 1e30], dtype=np.float32)}, x, 8.0) is None
    reason = rescale_reason({"w": np.array([2.9e38, 0.0], dtype=np.float32)}, x, 8.0)
    assert reason is not None and "could reach 3.8e+38" in reason and "max_rescale 8" in reason
    assert rescale_reason({"w": np.array([2.9e38, 0.0], dtype=np.float32)}, x, math.inf) is None  # no bound


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_float32_first_reply_does_not_lower_a_float64_model(api):
    # Flower's average accumulates in the first reply's dtype: a float64 model (a numpy client) whose first
    # reply came from a float32 client came back float32, and every float64 reply of the next round was
    # refused as more precise than the model
    strategy = _precision_strategy(api, 3)
    x = [np.array([1.0, -2.0])]
    for rnd in (1, 2):
        per_node = [(dict(steps=10), [np.full(2, 0.5, dtype=np.float32)])]
        per_node += [(dict(steps=10), [np.full(2, 0.5 + i)]) for i in (1, 2)]
        x = _precision_round(api, strategy, x, per_node, rnd=rnd)
        assert x[0].dtype == np.float64 and x[0].tolist() == pytest.approx([1.5, 1.5])
        assert strategy.history.iloc[-1]["clients"] == 3 and strategy.history.iloc[-1]["skipped"] == 0


def test_an_aggregate_is_put_back_at_the_models_dtype_by_hand():
    from flwr_adaptive.strategies.screening import at_model_dtype

    got = at_model_dtype(np.array([7.6, -1.0, 300.0]), np.dtype(np.uint8))
    assert got.dtype == np.uint8 and got.tolist() == [8, 0, 255]  # rounded and clipped, not wrapped to 255
    assert at_model_dtype(np.array([0.49, 0.5, 1.0]), np.dtype(bool)).tolist() == [False, True, True]
    assert at_model_dtype(np.array([1.5], dtype=np.float32), np.dtype(np.float64)).dtype == np.float64
    above = np.array([1.5])  # FedAdam's float64 beside a float32 model: left as the inner strategy made it
    assert at_model_dtype(above, np.dtype(np.float32)) is above


def test_an_integer_buffer_stays_an_integer_and_its_replies_keep_being_averaged():
    # Flower's Message-API average multiplies each reply by a float weight: BatchNorm's int64
    # num_batches_tracked came back float64, and from round 2 on every node's int64 buffer no longer
    # matched the model: every reply was refused and the run went on with the round-1 model.
    strategy = _precision_strategy("message", 3)
    x = [F32[0], np.array(7, dtype=np.int64)]
    for rnd in (1, 2, 3):
        per_node = [(dict(steps=10), [np.full(2, 0.5, np.float32), np.array(7 + rnd + i, np.int64)]) for i in range(3)]
        x = _precision_round("message", strategy, x, per_node, rnd=rnd)
        assert x[1].dtype == np.int64 and int(x[1]) == 7 + rnd + 1  # the average of 7+rnd, 8+rnd, 9+rnd
        assert strategy.history.iloc[-1]["clients"] == 3 and strategy.history.iloc[-1]["skipped"] == 0


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_float16_reply_is_rescaled_at_the_models_precision(api):
    # A float16 reply of 60000 that took half the others' steps is moved to x + 1.75·(x_i − x) ≈ 105000:
    # beyond float16's 65504. Rescaled at its own dtype it became inf and the global model with it.
    per_node = [(dict(steps=10), [np.full(2, 0.5, dtype=np.float32)]) for _ in range(3)]
    per_node.append((dict(steps=5), [np.full(2, 60000.0, dtype=np.float16)]))
    strategy = _precision_strategy(api, 4)
    strategy.max_update_ratio = math.inf  # such an update is outsized (test_update_size.py): the rescale is what is tested
    got = _precision_round(api, strategy, F32, per_node, rnd=1)
    assert got[0].dtype == np.float32 and np.isfinite(got[0]).all()
    fair = fednova_update([F32[0].astype(np.float64)], [[m[0].astype(np.float64)] for _, m in per_node],
                          [1, 1, 1, 1], [10, 10, 10, 5])[0]
    np.testing.assert_allclose(got[0], fair, rtol=1e-6)


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_float16_first_reply_does_not_make_the_model_float16(api):
    # Flower's average accumulates in the first reply's dtype: a float16 first reply made the global model
    # float16, and from the next round on every honest float32 reply had more precision than the model and
    # was refused, leaving the float16 client the whole federation.
    strategy = _precision_strategy(api, 4)
    x = F32
    for rnd in (1, 2):
        per_node = [(dict(steps=10), [np.full(2, 0.5, dtype=np.float16)])]
        per_node += [(dict(steps=10), [(x[0] + i).astype(np.float32)]) for i in range(3)]
        x = _precision_round(api, strategy, x, per_node, rnd=rnd)
        assert x[0].dtype == np.float32
        assert strategy.history.iloc[-1]["clients"] == 4 and strategy.history.iloc[-1]["skipped"] == 0


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_an_update_that_a_bounded_rescale_could_overflow_is_skipped_at_screening(api, caplog):
    # float32 3e38 rescaled by 1.75 is beyond float32's 3.4e38: inf, which would make the global model inf.
    # The factor is at most max_rescale (8): 3e38 + 8·|3e38 − 1| > 3.4e38 is refused with the other bad
    # replies, before the controller learns from it or its 5 steps enter τ_eff.
    per_node = [(dict(steps=10), [np.full(2, 0.5, dtype=np.float32)]) for _ in range(3)]
    per_node.append((dict(steps=5), [np.full(2, 3e38, dtype=np.float32)]))
    strategy = _precision_strategy(api, 4)
    with caplog.at_level("WARNING", logger="flwr"):
        got = _precision_round(api, strategy, F32, per_node, rnd=1)
    np.testing.assert_allclose(got[0], 0.5, rtol=1e-6)  # the three others, at equal steps: their FedAvg
    lines = [line for line in sup.adaptive_lines(caplog) if "once its update is rescaled by up to max_rescale 8" in line]
    assert len(lines) == 1 and "skipped" in lines[0]
    assert strategy.history.iloc[-1]["clients"] == 3 and strategy.history.iloc[-1]["skipped"] == 1
    assert len(strategy.last_scales) == 3  # it never entered the round's factors


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_with_an_unbounded_rescale_an_overflowing_update_is_skipped_after_rescaling(api, caplog):
    # max_rescale=inf (FedNova's factors) gives screening no bound: the rescaled update is checked instead
    per_node = [(dict(steps=10), [np.full(2, 0.5, dtype=np.float32)]) for _ in range(3)]
    per_node.append((dict(steps=5), [np.full(2, 3e38, dtype=np.float32)]))
    strategy = _precision_strategy(api, 4)
    strategy.max_rescale = math.inf
    strategy.max_update_ratio = math.inf  # by default the update-size screen skips it first (test_update_size.py)
    with caplog.at_level("WARNING", logger="flwr"):
        got = _precision_round(api, strategy, F32, per_node, rnd=1)
    # the three others at the scale the round computed with all four (τ_eff = 35/4, scale 0.875 for 10 steps)
    np.testing.assert_allclose(got[0], F32[0] + 0.875 * (0.5 - F32[0]), rtol=1e-6)
    lines = [line for line in sup.adaptive_lines(caplog) if "rescaled by 1.75" in line and "non-finite" in line]
    assert len(lines) == 1 and "skipped" in lines[0]
    assert strategy.history.iloc[-1]["clients"] == 3 and strategy.history.iloc[-1]["skipped"] == 1


def test_client_history_shows_each_updates_weight_and_scale():
    per_node = [(dict(steps=2, data_size=100), [np.zeros(1)]), (dict(steps=6, data_size=300), [np.zeros(1)]),
                (dict(steps=4, data_size=200), [np.zeros(1)])]
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", objective="data-size")
    strategy.step_tolerance = 10.0
    message_round(strategy, [np.zeros(1)], per_node)
    rows = strategy.client_history.sort_values("partition_id")
    tau_eff = (100 * 2 + 300 * 6 + 200 * 4) / 600
    assert rows["agg_weight"].tolist() == [100, 300, 200]
    np.testing.assert_allclose(rows["agg_scale"], [tau_eff / 2, tau_eff / 6, tau_eff / 4], rtol=1e-12)


@pytest.mark.parametrize("weighting, expected", [(None, (1 * 100 + 2 * 300 + 3 * 200) / 600),
                                                  ("samples", (1 * 600 + 2 * 100 + 3 * 300) / 1000)])
def test_hfl_silos_with_different_budgets_are_weighted_by_their_data_by_default(weighting, expected):
    from flwr.app import ArrayRecord, ConfigRecord
    from test_hfl import hierarchical, silo_reply

    # Prepare: silo budgets 600, 100, 300 samples, partitions of 100, 300, 200; each silo's model
    # is its partition id + 1, and it claims 1 local step (the strategy sent 10: its own count is used)
    budgets, sizes = {0: 600, 1: 100, 2: 300}, {0: 100, 1: 300, 2: 200}

    class Budgets(type(hierarchical(3))):
        def silo_budget(self, silo):
            return budgets.get(silo, self.budget)

    kw = {} if weighting is None else {"weighting": weighting}
    strategy = hierarchical(3, **kw)
    strategy.__class__ = Budgets
    node_of = {1000 + p: p for p in budgets}
    for rnd in (1, 2):  # round 1 learns the partitions, round 2 uses their budgets
        msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
        replies = [silo_reply(m, node_of[m.metadata.dst_node_id], [0.001, 0.002],
                              value=node_of[m.metadata.dst_node_id] + 1.0,
                              extra={keys.DATA_SIZE: sizes[node_of[m.metadata.dst_node_id]], keys.LOCAL_STEPS: 1})
                   for m in msgs]
        arrays, _ = strategy.aggregate_train(rnd, replies)
    # Assert: normalised = the data-weighted average (every silo ran the same 10 steps); samples
    # = weighted by the silo budgets
    assert strategy.weighting == (weighting or "normalized")
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [expected] * 2, rtol=1e-12)
    assert set(strategy.last_scales.values()) <= {1.0}


def test_a_reply_with_its_arrays_in_another_order_is_rescaled_array_by_array():
    from collections import OrderedDict

    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    # Prepare: the model has arrays "0" (= 0) and "1" (= 10); node 2's reply lists them reversed
    x = [np.zeros(1), np.full(1, 10.0)]
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal")
    strategy.step_tolerance = 10.0
    msgs = list(strategy.configure_train(1, ArrayRecord(x), ConfigRecord(), FakeGrid([100, 101, 102])))
    steps = {100: 10, 101: 10, 102: 40}
    replies = []
    for m in msgs:
        node = m.metadata.dst_node_id
        items = [("0", Array(np.ones(1))), ("1", Array(np.full(1, 11.0)))]
        record = ArrayRecord(array_dict=OrderedDict(items[::-1] if node == 102 else items))
        metrics = MetricRecord({"num-examples": 1, **telemetry(100, node - 100, steps=steps[node])})
        replies.append(Message(RecordDict({"arrays": record, "metrics": metrics}), reply_to=m))
    # Execute
    arrays, _ = strategy.aggregate_train(1, replies)
    got = dict(arrays.items())
    # Assert: every node moved each array by +1; FedNova's step is the same for both arrays
    expected = fednova_update([np.zeros(1)], [[np.ones(1)]] * 3, [1, 1, 1], [10, 10, 40])[0][0]
    assert got["0"].numpy()[0] == pytest.approx(expected)
    assert got["1"].numpy()[0] == pytest.approx(10.0 + expected)


def test_sizes_the_operator_configured_bound_a_claim_instead_of_the_median_cap():
    # Prepare: partition 4 really holds 5000 samples (5x the others): the median cap alone would
    # clip it; with the operator's sizes it keeps 5000 and a claim above its size is lowered
    per_node = [(dict(steps=3, data_size=1000), [np.zeros(1)]) for _ in range(4)]
    per_node.append((dict(steps=3, data_size=5000), [np.ones(1)]))
    capped = message_round(AdaptiveStrategy(_fedavg(5), budget=500, policy="equal", objective="data-size"), [np.zeros(1)], per_node)
    strategy = AdaptiveStrategy(_fedavg(5), budget=500, policy="equal", objective="data-size")
    strategy.data_sizes = {4: 5000}
    known = message_round(strategy, [np.zeros(1)], per_node)
    strategy.data_sizes = {4: 5000, 0: 10}  # partition 0 claims 1000 but the operator knows 10
    lower = message_round(strategy, [np.zeros(1)], per_node, rnd=2)
    # Assert
    assert capped[0][0] == pytest.approx(2000 / 6000)
    assert known[0][0] == pytest.approx(5000 / 9000)
    assert lower[0][0] == pytest.approx(5000 / (3 * 1000 + 10 + 5000))


# --------------------------------------------------------------------------- max_rescale
CAPPED_MODELS = [[np.array([-1.0, 0.5])], [np.array([-4.0, 2.0])], [np.array([-3.0, -2.5])]]
CAPPED_KWS = [dict(steps=1, momentum=0.9), dict(steps=10, momentum=0.9), dict(steps=10, momentum=0.9)]


def _capped_expected(cap):
    return fednova_update(X, CAPPED_MODELS, [1000, 1000, 1000], local_work([1, 10, 10], 0.9), cap)[0]


def test_message_api_caps_the_one_step_nodes_factor_at_max_rescale():
    # Prepare: node 0 took one momentum step, the others ten (FedNova would scale node 0 ~28×)
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", max_rescale=3.0)
    strategy.step_tolerance = 20.0  # hand-picked claims
    strategy.max_update_ratio = math.inf  # node 0's one step is 20× the others' average: the cap is tested here
    # Execute
    got = message_round(strategy, X, list(zip(CAPPED_KWS, CAPPED_MODELS)))
    # Assert: node 0's factor is the cap, the others' FedNova's, and the model is the capped rule's
    scales = [strategy.last_scales[100 + i] for i in range(3)]
    work = local_work([1, 10, 10], 0.9)
    tau_eff = work.mean()
    assert scales[0] == 3.0 and tau_eff / work[0] > 20
    np.testing.assert_allclose(scales[1:], tau_eff / work[1:], rtol=1e-12)
    np.testing.assert_allclose(got[0], _capped_expected(3.0), rtol=1e-12)
    assert not np.allclose(got[0], _capped_expected(None))
    rows = strategy.client_history.sort_values("partition_id")
    assert rows["agg_scale"].iloc[0] == 3.0


def test_legacy_api_caps_the_factor_the_same_way():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    from test_strategy_core import _Manager

    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=300,
                                      policy="equal", max_rescale=3.0)
    strategy.step_tolerance = 20.0
    strategy.max_update_ratio = math.inf  # as in the Message-API test
    pairs = strategy.configure_fit(1, ndarrays_to_parameters(X), _Manager([11, 12, 13]))
    ok = Status(Code.OK, "")
    results = [(proxy, FitRes(ok, ndarrays_to_parameters(m), 1, telemetry(100, i, **kw)))
               for i, ((proxy, _), m, kw) in enumerate(zip(pairs, CAPPED_MODELS, CAPPED_KWS))]
    params, _ = strategy.aggregate_fit(1, results, [])
    np.testing.assert_allclose(parameters_to_ndarrays(params)[0], _capped_expected(3.0), rtol=1e-12)
    assert max(strategy.last_scales.values()) == 3.0


@pytest.mark.parametrize("cap", [math.inf, 1.2])
def test_hfl_caps_a_silo_whose_optimizer_does_less_work(cap):
    from flwr.app import ArrayRecord, ConfigRecord
    from test_hfl import hierarchical, silo_reply

    # Prepare: three silos run the 10 steps sent; silo 0 with plain SGD (‖a‖₁ = 10), the others
    # with momentum 0.9 (41.38): FedNova scales silo 0's change τ_eff/10 = 3.09×
    strategy = hierarchical(3, max_rescale=cap)
    strategy.step_tolerance = 20.0  # the silos' optimizers differ 4.1× in work: beyond the default tolerance
    momentum = {0: 0.0, 1: 0.9, 2: 0.9}
    node_of = {1000 + p: p for p in momentum}
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
    replies = [silo_reply(m, node_of[m.metadata.dst_node_id], [0.001, 0.002], value=1.0,
                          extra={keys.LOCAL_MOMENTUM: momentum[node_of[m.metadata.dst_node_id]]}) for m in msgs]
    arrays, _ = strategy.aggregate_train(1, replies)
    # Assert: every silo moved by 1; the aggregate is Σ p_i·scale_i·1 with silo 0's scale capped
    work = local_work([10, 10, 10], [0.0, 0.9, 0.9])
    tau_eff = work.mean()
    want0 = min(tau_eff / 10, cap)
    assert strategy.max_rescale == cap
    assert strategy.last_scales[1000] == pytest.approx(want0, rel=1e-12)
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [(want0 + 2 * tau_eff / work[1]) / 3] * 2, rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, **kw),
    lambda **kw: HierarchicalAdaptiveStrategy(budget=10, steps=2, **kw),
    lambda **kw: build_strategy("time", budget=10, **kw),
    lambda **kw: build_strategy("static", budget=10, **kw),
    lambda **kw: build_strategy("oort", budget=10, **kw),
], ids=["message", "legacy", "hfl", "build-time", "build-static", "build-oort"])
def test_max_rescale_reaches_every_strategy_and_is_checked(make):
    assert make().max_rescale == MAX_RESCALE == 8.0  # the default of every policy but min-energy (the sweep's choice)
    assert make(max_rescale=None).max_rescale == MAX_RESCALE  # None: the policy's default
    assert make(max_rescale=math.inf).max_rescale == math.inf  # FedNova's factors, unbounded
    assert make(max_rescale=4).max_rescale == 4.0
    with pytest.raises(ValueError, match="max_rescale must be >= 1"):
        make(max_rescale=0.5)


@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, **kw),
], ids=["message", "legacy"])
def test_max_rescale_set_later_is_resolved_and_checked_as_at_construction(make):
    # Prepare: a Time-only and a Min-energy strategy on private data, and one on shared data ("samples")
    time, energy, shared = make(), make(policy="min-energy"), make(allow_cycling=True)

    # Execute: the attribute set to None, to math.inf and to a bad value
    time.max_rescale, energy.max_rescale = None, None
    energy_default = energy.max_rescale
    energy.max_rescale = math.inf

    # Assert: None is the policy's default, not FedNova's unbounded factors; inf is unbounded; a bad value or a
    # cap beside a weighting that rescales nothing is refused and leaves the setting as it was
    assert (time.max_rescale, energy_default, energy.max_rescale) == (MAX_RESCALE, MIN_ENERGY_MAX_RESCALE, math.inf)
    assert time.aggregation.max_rescale == MAX_RESCALE
    with pytest.raises(ValueError, match=r"max_rescale must be >= 1 \(math.inf: unbounded\)"):
        time.max_rescale = 0.5
    with pytest.raises(ValueError, match="has no effect with weighting='samples'"):
        shared.max_rescale = 3
    assert (time.max_rescale, shared.max_rescale) == (MAX_RESCALE, MAX_RESCALE)


@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, policy="min-energy", **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, policy="min-energy", **kw),
], ids=["message", "legacy"])
def test_a_weighting_set_later_judges_the_cap_the_user_gave_not_a_resolved_default(make):
    # Prepare: Min-energy on private data resolves max_rescale=None to 2; the user then moves to shared data
    default, given = make(), make(max_rescale=4)
    default.allow_cycling = given.allow_cycling = True

    # Execute: "samples", which rescales nothing, on both
    default.weighting = "samples"

    # Assert: no cap was asked for, so none is refused (2 was private data's default, no choice of the user); the cap
    # the user did give is refused with the fix, and the weighting stays as it was
    assert default.weighting == "samples"
    with pytest.raises(ValueError, match="max_rescale=4 has no effect with weighting='samples'"):
        given.weighting = "samples"
    assert given.weighting == "normalized"

    # Assert: the cap left to its default follows the data setting (shared data: 8; back to private: 2), the one
    # the user gave stays
    given.weighting = "normalized"
    default.weighting = "normalized"
    assert (default.max_rescale, given.max_rescale) == (MAX_RESCALE, 4.0)
    default.allow_cycling = False
    default.weighting = None
    assert (default.weighting, default.max_rescale) == ("normalized", MIN_ENERGY_MAX_RESCALE)


def test_fedasync_refuses_max_rescale_rather_than_ignoring_it():
    with pytest.raises(ValueError, match="max_rescale does not apply to policy 'fedasync'"):
        build_strategy("fedasync", budget=10, max_rescale=4)


def test_the_default_cap_binds_on_a_one_step_node_next_to_ten_step_ones():
    # FedNova would scale node 0 (one momentum step next to two ten-step nodes) 28×: the default caps it at 8
    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal")
    strategy.step_tolerance = 20.0
    strategy.max_update_ratio = math.inf  # as above
    got = message_round(strategy, X, list(zip(CAPPED_KWS, CAPPED_MODELS)))
    assert strategy.last_scales[100] == 8.0
    np.testing.assert_allclose(got[0], _capped_expected(8.0), rtol=1e-12)


# --------------------------------------------------------------------------- objective
def test_the_equal_split_objective_weighs_each_node_at_most_its_equal_share():
    # Prepare: budget 300 over 3 nodes (equal share 100), data sizes 50, 300 and 200, equal steps
    models = [[np.array([0.5, 1.5])], [np.array([-1.0, 2.0])], [np.array([3.0, 0.25])]]
    kws = [dict(steps=5, data_size=n) for n in (50, 300, 200)]
    # Execute
    pooled = message_round(AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", objective="data-size"), X, list(zip(kws, models)))
    split = message_round(AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", objective="equal-split"), X,
                          list(zip(kws, models)))
    # Assert: in round 1 (sizes not yet known) the data weights are min(size, 100) = 50, 100, 100,
    # what the equal split trains of each node; "data-size" keeps the sizes
    average = [m[0] for m in models]
    np.testing.assert_allclose(split[0], np.average(average, axis=0, weights=[50, 100, 100]), rtol=1e-15)
    np.testing.assert_allclose(pooled[0], np.average(average, axis=0, weights=[50, 300, 200]), rtol=1e-15)


def test_the_equal_split_objective_follows_the_equal_split_once_the_data_sizes_are_known():
    # Prepare: from round 2 the equal split knows the sizes 50, 300, 200 and gives the small node's
    # unused share to the others: quotas 50, 125, 125, FedAvg's weights under it
    models = [[np.array([0.5, 1.5])], [np.array([-1.0, 2.0])], [np.array([3.0, 0.25])]]
    kws = [dict(steps=4, data_size=n) for n in (50, 300, 200)]
    split = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal")
    fedavg = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", weighting="samples")
    for rnd in (1, 2):
        got = message_round(split, X, list(zip(kws, models)), rnd=rnd)
        message_round(fedavg, X, list(zip(kws, models)), rnd=rnd)
    # Assert: the same weights as Equal + FedAvg, the level the split filled to
    assert split.aggregation.equal_share == 125
    assert split.last_weights == fedavg.last_weights == {100: 50, 101: 125, 102: 125}
    np.testing.assert_allclose(got[0], np.average([m[0] for m in models], axis=0, weights=[50, 125, 125]),
                               rtol=1e-14)


def test_the_equal_split_level_by_hand():
    from flwr_adaptive.strategies.normalization import equal_split_level

    assert equal_split_level(300, [50, 300, 200]) == 125  # 50 + 125 + 125
    assert equal_split_level(300, [None, None, None]) == 100  # nothing capped: budget // nodes
    assert equal_split_level(300, [50, None, None]) == 125
    assert equal_split_level(1000, [50, 60, 70]) == 70  # every node trains all its data
    assert equal_split_level(10, []) is None


@settings(max_examples=100, deadline=None)
@given(caps=st.lists(st.one_of(st.none(), st.integers(1, 5000)), min_size=1, max_size=12), budget=st.integers(1, 20000))
def test_the_equal_split_level_fills_the_budget_as_the_equal_split_does(caps, budget):
    from flwr_adaptive.strategies.normalization import equal_split_level

    level = equal_split_level(budget, caps)
    trained = sum(level if c is None else min(c, level) for c in caps)
    total = sum(c for c in caps if c is not None) if all(c is not None for c in caps) else None
    if total is not None and total <= budget:  # every node capped: each trains all its data
        assert trained == total
    else:  # the budget is spent, up to the integer remainder the split hands out one by one
        uncapped = sum(1 for c in caps if c is None or c > level)
        assert trained <= budget and budget - trained < max(uncapped, 1) or level == 1


def test_the_equal_split_objective_is_equal_fedavg_when_every_node_trains_its_share():
    # Prepare: every node holds more than its share and takes the same steps for it
    models = [[np.array([0.5, 1.5])], [np.array([-1.0, 2.0])], [np.array([3.0, 0.25])]]
    kws = [dict(steps=4, data_size=n) for n in (800, 3000, 200)]
    fedavg = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", weighting="samples")
    normalised = AdaptiveStrategy(_fedavg(3), budget=300, policy="equal", objective="equal-split")
    # Execute / Assert: Equal + FedAvg's result to within float rounding
    np.testing.assert_allclose(message_round(normalised, X, list(zip(kws, models)))[0],
                               message_round(fedavg, X, list(zip(kws, models)))[0], rtol=1e-14)


@pytest.mark.parametrize("lie", [2**53 - 1, 10 * 1000])
def test_with_the_equal_split_objective_a_huge_claim_gets_no_more_than_a_fair_weight(lie, caplog):
    # Prepare: the liar's model is 1, the others' 0; everyone holds more than the share (100)
    per_node = [(dict(steps=3, data_size=1000), [np.zeros(2)]) for _ in range(4)]
    per_node.append((dict(steps=3, data_size=lie), [np.ones(2)]))
    strategy = AdaptiveStrategy(_fedavg(5), budget=500, policy="equal", objective="equal-split")
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        got = message_round(strategy, [np.zeros(2)], per_node)
    # Assert: exactly the fair 1/5, and no warning: a claim above the share is not a reason to warn
    assert got[0][0] == pytest.approx(0.2)
    assert not [line for line in sup.adaptive_lines(caplog) if "aggregation weight is capped" in line]


def test_the_equal_split_objective_bounds_an_operator_size_too_and_follows_the_round_budget():
    per_node = [(dict(steps=3, data_size=1000), [np.zeros(1)]) for _ in range(4)]
    per_node.append((dict(steps=3, data_size=5000), [np.ones(1)]))
    strategy = AdaptiveStrategy(_fedavg(5), budget_per_node=40, policy="equal", objective="equal-split")
    strategy.data_sizes = {4: 5000, 0: 10}
    got = message_round(strategy, [np.zeros(1)], per_node)
    # the operator's 5000 is bounded by the share 40 (budget_per_node × 5 nodes / 5); partition 0 by its 10
    assert got[0][0] == pytest.approx(40 / (10 + 3 * 40 + 40))
    assert strategy.aggregation.equal_share == 40 and strategy.last_weights == {100: 10, 101: 40, 102: 40, 103: 40,
                                                                                104: 40}


def test_the_objective_is_checked_when_set_later_and_reaches_the_legacy_api():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    from test_strategy_core import _Manager

    strategy = AdaptiveStrategy(_fedavg(3), budget=300)
    with pytest.raises(ValueError, match="objective must be one of .*'equal-split'"):
        strategy.objective = "equal"
    assert strategy.objective == "equal-split"
    legacy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=300, policy="equal",
                                    objective="equal-split")
    pairs = legacy.configure_fit(1, ndarrays_to_parameters(X), _Manager([11, 12, 13]))
    models = [[np.array([0.0, -1.0])], [np.array([-3.0, 4.0])], [np.array([2.0, -2.5])]]
    ok = Status(Code.OK, "")
    results = [(proxy, FitRes(ok, ndarrays_to_parameters(m), 1, telemetry(100, i, steps=4, data_size=n)))
               for i, ((proxy, _), m, n) in enumerate(zip(pairs, models, (50, 300, 200)))]
    params, _ = legacy.aggregate_fit(1, results, [])
    np.testing.assert_allclose(parameters_to_ndarrays(params)[0],
                               np.average([m[0] for m in models], axis=0, weights=[50, 100, 100]), rtol=1e-14)


@settings(max_examples=60, deadline=None)
@given(claims=st.lists(st.integers(1, 2**53 - 1), min_size=1, max_size=12), budget=st.integers(1, 5000),
       cap=st.sampled_from([None, 2.0]))
def test_an_equal_split_weight_never_exceeds_the_equal_share_nor_the_claim(claims, budget, cap):
    from flwr_adaptive.strategies.normalization import AggregationWeights
    from flwr_adaptive.strategies.reports import ClientReport

    weights = AggregationWeights("normalized", lambda *a: None)
    weights.objective, weights.weight_cap = "equal-split", cap
    weights.equal_share = max(1, budget // len(claims))
    reports = [ClientReport(node_id=i, partition_id=i, quota=weights.equal_share, samples=1, time_s=1.0, cpu_time_s=1.0,
                            wall_time_s=1.0, energy_j=None, data_size=c, capped=False, idle_w=None,
                            virtual_clock=True) for i, c in enumerate(claims)]
    got = weights.weights(1, reports)
    assert all(1 <= got[i] <= max(1, min(c, weights.equal_share)) for i, c in enumerate(claims))
    if cap is None:  # nothing else bounds it: each weight is exactly its claim up to the share
        assert all(got[i] == min(c, weights.equal_share) for i, c in enumerate(claims))


@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, **kw),
    lambda **kw: build_strategy("time", budget=10, **kw),
    lambda **kw: build_strategy("static", budget=10, **kw),
    lambda **kw: build_strategy("oort", budget=10, **kw),
], ids=["message", "legacy", "build-time", "build-static", "build-oort"])
def test_the_objective_reaches_every_budget_splitting_strategy_and_is_checked(make):
    assert make().objective == "equal-split"  # the default: the objective of the equal split
    assert make(objective="data-size").aggregation.objective == "data-size"
    with pytest.raises(ValueError, match="objective must be one of"):
        make(objective="pooled")


def test_fedasync_refuses_an_objective_rather_than_ignoring_it():
    with pytest.raises(ValueError, match="objective does not apply to policy 'fedasync'"):
        build_strategy("fedasync", budget=10, objective="data-size")


def test_an_objective_where_nothing_weighs_by_it_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="objective='data-size' has no effect with weighting='samples'"):
        AdaptiveStrategy(budget=10, weighting="samples", objective="data-size")
    with pytest.raises(ValueError, match="pass weighting='normalized' or leave objective out"):
        LegacyAdaptiveStrategy(budget=10, allow_cycling=True, objective="data-size")
    assert AdaptiveStrategy(budget=10, weighting="data-size").weighting == "data-size"  # the default is fine


def test_the_hierarchical_strategy_says_it_keeps_its_silos_data_sizes():
    strategy = HierarchicalAdaptiveStrategy(budget=10, steps=2)
    assert strategy.objective == "data-size"


@pytest.mark.parametrize("cls", [AdaptiveStrategy, LegacyAdaptiveStrategy])
def test_min_energy_with_private_data_defaults_to_shrunk_batches_and_a_rescale_cap_of_2(cls):
    # the split parks its energy-hungry nodes at a few samples: they shrink their batches (no step floor) and
    # their updates are extrapolated at most 2x; a user's own setting is kept, shared data keeps the samples rule
    plain = cls(budget=10, policy="min-energy")
    assert (plain.weighting, plain.min_local_steps, plain.scale_batch_size) == ("normalized", 0, "shrink")
    assert plain.max_rescale == MIN_ENERGY_MAX_RESCALE == 2.0
    assert cls(budget=10, policy="min-energy", max_rescale=8).max_rescale == 8.0
    assert cls(budget=10, policy="min-energy", min_local_steps=1).scale_batch_size is False  # a floor: user's batch
    shared = cls(budget=10, policy="min-energy", allow_cycling=True)
    assert (shared.weighting, shared.max_rescale) == ("samples", MAX_RESCALE)
    # min-energy's own default beside a weighting that rescales nothing is accepted, set later too; a cap named
    # there is refused
    plain.weighting = "samples"
    assert cls(budget=10, policy="min-energy", weighting="data-size").weighting == "data-size"
    with pytest.raises(ValueError, match="max_rescale=8 has no effect with weighting='samples'"):
        cls(budget=10, policy="min-energy", weighting="samples", max_rescale=8)


def test_the_hierarchical_strategy_keeps_the_cap_of_8_for_min_energy():
    # silos run the steps sent: no node is parked at a few samples' steps, so min-energy's lower cap does not apply
    assert HierarchicalAdaptiveStrategy(budget=10, steps=2, policy="min-energy").max_rescale == MAX_RESCALE


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["equal", "time", "low-energy", "energy", "min-energy"]), st.booleans(),
       st.one_of(st.none(), st.floats(1.0, 1e6), st.just(math.inf)))
def test_property_only_min_energy_with_private_data_gets_the_lower_default_cap(policy, cycling, value):
    got = default_max_rescale(value, policy, cycling)
    if value is not None:
        assert got == value  # a cap the user names is kept, whatever the policy
    else:
        assert got == (MIN_ENERGY_MAX_RESCALE if policy == "min-energy" and not cycling else MAX_RESCALE)
