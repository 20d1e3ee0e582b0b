"""FedAsync: staleness functions match their formulas; stale updates move the model less."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from flwr_adaptive.fedasync_mixer import FedAsyncMixer, VirtualClockQueue, staleness_weight


@pytest.mark.parametrize(
    "kind, staleness, a, b, expected",
    [
        ("constant", 7, 0.5, 4, 1.0),
        ("polynomial", 0, 0.5, 4, 1.0),
        ("polynomial", 3, 0.5, 4, 4 ** -0.5),
        ("hinge", 4, 10, 4, 1.0),
        ("hinge", 6, 10, 4, 1 / (10 * 2 + 1)),
    ],
)
def test_staleness_functions_match_their_formulas(kind, staleness, a, b, expected):
    assert staleness_weight(kind, staleness, a, b) == pytest.approx(expected)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["polynomial", "hinge"]), st.integers(0, 50))
def test_property_staleness_weight_never_increases(kind, staleness):
    assert staleness_weight(kind, staleness + 1) <= staleness_weight(kind, staleness) <= 1.0


def test_mix_is_the_fedasync_update():
    mixer = FedAsyncMixer(alpha=0.5, staleness="constant")
    model = [np.array([0.0, 2.0]), np.array([[1.0]])]
    update = [np.array([2.0, 4.0]), np.array([[3.0]])]
    mixed = mixer.mix(model, update, base_version=0)
    np.testing.assert_allclose(mixed[0], [1.0, 3.0])
    np.testing.assert_allclose(mixed[1], [[2.0]])
    assert mixer.version == 1


def test_stale_update_moves_the_model_less():
    # Prepare: the same update arrives fresh, or 5 versions stale.
    model, update = [np.zeros(3)], [np.ones(3)]
    fresh, stale = FedAsyncMixer(alpha=0.6), FedAsyncMixer(alpha=0.6)
    stale.version = 5

    # Execute
    moved_fresh = np.abs(fresh.mix(model, update, base_version=0)[0]).sum()
    moved_stale = np.abs(stale.mix(model, update, base_version=0)[0]).sum()

    # Assert: polynomial a = 0.5: 0.6 vs 0.6 / sqrt(6).
    assert moved_fresh == pytest.approx(3 * 0.6)
    assert moved_stale == pytest.approx(3 * 0.6 / np.sqrt(6))


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="unknown staleness function 'linear'"):
        FedAsyncMixer(staleness="linear")
    with pytest.raises(ValueError, match="alpha must lie in"):
        FedAsyncMixer(alpha=0.0)
    with pytest.raises(ValueError, match="newer than the model"):
        FedAsyncMixer().mix([np.zeros(1)], [np.zeros(1)], base_version=3)
    with pytest.raises(ValueError, match="does not match"):
        FedAsyncMixer().mix([np.zeros(2)], [np.zeros(3)], base_version=0)


def test_virtual_clock_queue_orders_by_finish_time_then_submission():
    queue = VirtualClockQueue()
    queue.push("slow", 9.0)
    queue.push("fast", 1.0, payload="x")
    queue.push("tie", 9.0)
    assert [queue.pop()[0] for _ in range(3)] == ["fast", "slow", "tie"]
    assert queue.peek_time() == float("inf")


# =========================================================================== arrival order on a live Grid
class ArrivalGrid:
    """A Grid whose replies become available in a scripted order, one per ``pull_messages``.

    ``arrivals`` lists the node whose in-flight job replies next (then the oldest in-flight job);
    a node without a job in flight when its turn comes fails the test (the strategy did not push
    its next job at once). ``time_s`` is each node's claimed duration per job, ``values`` the
    value of every entry of the model its j-th reply carries (``None``: the model it was sent plus
    ``step[node]``), ``fail`` nodes reply with an error, ``silent`` nodes never reply; ``samples``
    nodes process that many samples of any quota (capped at their data).
    """

    def __init__(self, time_s, values=None, arrivals=(), fail=(), silent=(), step=None, samples=None):
        self.time_s, self.values = dict(time_s), values or {}
        self.arrivals, self.fail, self.silent = list(arrivals), set(fail), set(silent)
        self.step, self.samples = step or {}, samples or {}
        self.in_flight: dict[str, object] = {}
        self.events: list[tuple] = []  # ("push", node, job number, model value) / ("reply", node, job number)

    def get_node_ids(self):
        return list(self.time_s)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            message_id = f"m{len(self.events)}"
            msg.metadata.__dict__["_message_id"] = message_id
            self.in_flight[message_id] = msg
            config = msg.content["config"]
            self.events.append(("push", msg.metadata.dst_node_id, int(config[keys.ROUND]),
                                float(msg.content["arrays"].to_numpy_ndarrays()[0][0])))
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids):
        from flwr.app import ArrayRecord, Error, Message, MetricRecord, RecordDict

        live = [i for i in message_ids if self.in_flight[i].metadata.dst_node_id not in self.silent]
        if not live:
            return []
        if self.arrivals:
            node = self.arrivals.pop(0)
            mine = [i for i in live if self.in_flight[i].metadata.dst_node_id == node]
            assert mine, f"node {node} replies next but has no job in flight"
            message_id = mine[0]
        else:
            message_id = live[0]
        msg = self.in_flight.pop(message_id)
        node, config = msg.metadata.dst_node_id, msg.content["config"]
        job = int(config[keys.ROUND])
        self.events.append(("reply", node, job))
        if node in self.fail:
            return [Message(Error(code=1, reason=f"node {node} always fails"), reply_to=msg)]
        quota, t = int(config[keys.QUOTA]), self.time_s[node]
        n = min(self.samples.get(node, quota), quota)
        metrics = {"num-examples": n, keys.SAMPLES: n, keys.TIME_S: t, keys.CPU_TIME_S: t,
                   keys.WALL_TIME_S: t, keys.ENERGY_J: 10.0 * t, keys.DATA_SIZE: 1000, keys.PARTITION_ID: node,
                   keys.QUOTA_CAPPED: int(n < quota), keys.IDLE_W: 1.0, keys.VIRTUAL_CLOCK: 1}
        value = None if node in self.step and node not in self.values else self.values.get(node, [1.0] * job)[job - 1]
        sent = msg.content["arrays"].to_numpy_ndarrays()
        arrays = ArrayRecord([a + self.step[node] if value is None else np.full_like(a, value, dtype=float)
                              for a in sent])
        return [Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)}), reply_to=msg)]


def _run_arrival(grid, budget, rounds, evaluate_fn=None, timeout=3600.0, **kw):
    from flwr.app import ArrayRecord

    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    strategy = FedAsyncStrategy(budget=budget, min_nodes=len(grid.time_s), order="arrival", **kw)
    strategy.poll_interval_s = 0.001
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=rounds,
                            timeout=timeout, evaluate_fn=evaluate_fn)
    return strategy, result


@pytest.mark.usefixtures("flower_identity")  # tests/conftest.py
def test_arrival_order_mixes_replies_as_they_arrive_and_pushes_next_job_at_once(caplog):
    # Prepare: node 1 claims 10 s per job, node 2 1 s: the virtual clock would mix node 2 first,
    # but node 1's reply arrives first. budget 4 = 2 samples per node; 2 rounds = 4 jobs.
    caplog.set_level("WARNING", logger="flwr")
    grid = ArrivalGrid({1: 10.0, 2: 1.0}, values={1: [1.0, 4.0], 2: [2.0, 3.0]}, arrivals=[1, 2, 2, 1])
    evaluated = []

    # Execute
    strategy, result = _run_arrival(grid, budget=4, rounds=2, alpha=0.5, staleness="polynomial", a=0.5,
                                    evaluate_fn=lambda r, arrays: evaluated.append(r))

    # Assert: each reply is followed at once by that node's next job on the newest model.
    w = [0.5 * (s + 1) ** -0.5 for s in (0, 1, 0, 2)]  # staleness by hand: versions mixed since sent
    x1 = w[0] * 1.0
    x2 = (1 - w[1]) * x1 + w[1] * 2.0
    x3 = (1 - w[2]) * x2 + w[2] * 3.0
    x4 = (1 - w[3]) * x3 + w[3] * 4.0
    assert grid.events == [("push", 1, 1, 0.0), ("push", 2, 1, 0.0),
                           ("reply", 1, 1), ("push", 1, 2, pytest.approx(x1)),
                           ("reply", 2, 1), ("push", 2, 2, pytest.approx(x2)),
                           ("reply", 2, 2), ("reply", 1, 2)]
    jobs = strategy.client_history
    assert list(jobs["node_id"]) == [1, 2, 2, 1]
    assert list(jobs["staleness"]) == [0, 1, 0, 2]
    assert list(jobs["alpha_t"]) == pytest.approx(w)
    assert int(jobs["samples"].sum()) == 2 * 4
    np.testing.assert_allclose(result.arrays.to_numpy_ndarrays()[0], np.full(3, x4))
    hist = strategy.history
    assert list(hist["samples"]) == [4, 4] and evaluated == [0, 1, 2]
    assert set(hist["order"]) == {"arrival"} and set(hist["timeline"]) == {"wall"}
    assert hist["virtual_time_s"].isna().all() and (hist["elapsed_s"].diff().dropna() >= 0).all()
    assert "every update is mixed unjudged (connect 3 or more nodes" in caplog.text  # 2 nodes: said once


@pytest.mark.usefixtures("flower_identity")
def test_arrival_order_survives_a_failing_and_a_silent_node(caplog):
    # Prepare: node 3 answers every job with an error, node 4 never answers; budget 8 = 2 per node.
    grid = ArrivalGrid({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}, fail={3}, silent={4})

    # Execute: 2 rounds = 16 samples.
    with caplog.at_level("WARNING", logger="flwr"):
        strategy, _ = _run_arrival(grid, budget=8, rounds=2, timeout=0.2)

    # Assert: nodes 3 and 4 fail twice each and are dropped; nodes 1 and 2 process all 16 samples.
    jobs = strategy.client_history
    bad = jobs[jobs["status"] != "ok"]
    assert sorted(bad["node_id"]) == [3, 3, 4, 4]
    assert all(s.startswith("no reply within timeout") for s in bad[bad["node_id"] == 4]["status"])
    ok = jobs[jobs["status"] == "ok"]
    assert set(ok["node_id"]) == {1, 2} and int(ok["samples"].sum()) == 16
    assert list(strategy.history["samples"]) == [8, 8]
    assert sum(1 for e in grid.events if e[0] == "push" and e[1] in (3, 4)) == 4
    assert "dropped for the rest of the run" in caplog.text


@pytest.mark.usefixtures("flower_identity")
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_reply_with_non_finite_arrays_is_not_mixed_into_the_model(bad, caplog):
    # FedAsync mixes every accepted reply into the model it keeps: one NaN stayed there for the rest of
    # the run (final model [nan nan nan]). Node 1's every reply is NaN / inf, node 2's 1.0.
    grid = ArrivalGrid({1: 1.0, 2: 1.0}, values={1: [bad] * 50})
    with caplog.at_level("WARNING", logger="flwr"):
        strategy, result = _run_arrival(grid, budget=4, rounds=2)
    final = result.arrays.to_numpy_ndarrays()[0]
    assert np.isfinite(final).all() and final[0] > 0  # node 2's updates moved it towards 1.0
    jobs = strategy.client_history
    assert set(jobs[jobs["status"] == "ok"]["node_id"]) == {2}
    assert "non-finite value(s)" in caplog.text



@pytest.mark.usefixtures("flower_identity")
@pytest.mark.parametrize("arrivals", [[1, 2, 3, 3], [3, 1, 2, 3], [1, 3, 2, 3]])
def test_arrival_order_skips_a_scaled_model_whenever_it_arrives(arrivals, caplog):
    # Node 3 replies 1e30 every job (updates of 1 and 2 from the zero model for nodes 1 and 2): 5e29× the
    # lower median, beyond max_update_ratio 100; failed twice, dropped. A liar need not train, so it replies
    # first: mixed unjudged before 3 nodes were measured, it took the model (final 4e29) and every later
    # update was measured from it; the first replies now wait and are judged as one group.
    grid = ArrivalGrid({1: 1.0, 2: 1.0, 3: 1.0}, values={1: [1.0] * 50, 2: [2.0] * 50, 3: [1e30] * 50},
                       arrivals=arrivals)
    with caplog.at_level("WARNING", logger="flwr"):
        strategy, result = _run_arrival(grid, budget=6, rounds=2)
    final = result.arrays.to_numpy_ndarrays()[0]
    assert np.isfinite(final).all() and 0.0 < final[0] <= 2.0
    jobs = strategy.client_history
    liar = jobs[jobs["node_id"] == 3]
    assert len(liar) == 2 and liar["status"].str.contains("beyond max_update_ratio").all()
    assert int(jobs[jobs["status"] == "ok"]["samples"].sum()) == 12


def test_latest_updates_judges_the_arriving_with_the_peers_latest_by_hand():
    from flwr_adaptive.strategies.update_size import LatestUpdates

    screen = LatestUpdates(10.0)
    assert screen.judge({1: 1e30, 2: 1.0}) == {}  # two lengths: no median to judge by
    screen.latest.update({1: 1.0, 2: 2.0})  # (judge records what it judges)
    assert screen.judge({3: 21.0}) == {3: 10.5}  # lower median of 1, 2, 21: 2
    assert screen.judge({3: 19.0}) == {}
    assert screen.judge({2: 30.0, 3: 1.0}) == {2: 30.0}  # node 2's arriving length replaces its latest
    # a skipped length stays its node's latest: beside 1, 1, 30 and 1e30 (the last two skipped) node 5's 25 is
    # the lower median; counting accepted lengths only (1, 1, 2) it was 25x a median of 1 and skipped
    assert screen.judge({4: 1e30}) == {4: 1e30 / 1.0}
    assert screen.judge({5: 25.0}) == {}


@pytest.mark.usefixtures("flower_identity")
def test_a_second_start_judges_updates_by_its_own_run_and_bad_ratios_fail_early():
    from flwr.app import ArrayRecord

    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    # the first run's lengths (a model of scale 1e-3) judged the second run's first updates (scale 1e3)
    strategy = FedAsyncStrategy(budget=6, min_nodes=3, order="arrival")
    strategy.poll_interval_s = 0.001
    for run, scale in enumerate((1e-3, 1e3)):
        grid = ArrivalGrid({1: 1.0, 2: 1.0, 3: 1.0}, values={n: [n * scale] * 50 for n in (1, 2, 3)})
        strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=3)
        assert (strategy.client_history["status"] == "ok").all(), run
        # each run's history is its own (a second run's rows were numbered after the first's, helper-57)
        assert list(strategy.history["round"]) == [1, 2, 3] and len(strategy.client_history) == 9, run
        assert list(strategy.history["model_version"]) == [3, 6, 9], run
    for bad in (None, -1, 0.5, float("nan"), True):
        with pytest.raises(ValueError, match="max_update_ratio"):
            FedAsyncStrategy(budget=6, max_update_ratio=bad)
    strategy.max_update_ratio = float("inf")
    assert strategy.updates.ratio == float("inf")


@pytest.mark.usefixtures("flower_identity")
def test_two_liars_of_five_replying_first_are_judged_by_the_whole_first_wave(caplog):
    # Seen on a real deployment (helper-55): two nodes replying 1e30 without training came first; judged with the
    # first 3 replies, the lower median was a liar's, both were mixed, every honest node then replied NaN and was
    # dropped: the run stopped after 1 of 3 round-equivalents. Judged with the whole wave the median is honest.
    values = {n: [float(n)] * 50 for n in (1, 2, 3)} | {4: [1e30] * 50, 5: [1e30] * 50}
    grid = ArrivalGrid({n: 1.0 for n in range(1, 6)}, values=values, arrivals=[4, 5, 1, 2, 3])
    from flwr.app import ArrayRecord

    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    strategy = FedAsyncStrategy(budget=10, min_nodes=5, order="arrival")
    strategy.poll_interval_s = 0.001
    evaluated = []
    with caplog.at_level("INFO", logger="flwr"):
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=3,
                                evaluate_fn=lambda r, arrays: evaluated.append((r, len(strategy._round_rows))))
    final = result.arrays.to_numpy_ndarrays()[0]
    assert np.isfinite(final).all() and 0.0 < final[0] <= 3.0
    jobs = strategy.client_history
    liars = jobs[jobs["node_id"].isin([4, 5])]
    assert len(liars) == 4 and liars["status"].str.contains("beyond max_update_ratio").all()
    assert liars["round"].notna().all()  # a failed job's row belongs to a round-equivalent (appended to the CSV)
    assert int(jobs[jobs["status"] == "ok"]["samples"].sum()) == 30
    assert "the first wave's replies are mixed once all 5 nodes' first jobs replied" in caplog.text
    # each round-equivalent's row is in the history when it is evaluated (an app appends it to its CSV there)
    assert evaluated == [(0, 0), (1, 1), (2, 2), (3, 3)]


@pytest.mark.usefixtures("flower_identity")
def test_two_liars_of_five_cannot_mix_a_scaled_model_after_an_honest_node_fails(caplog):
    # helper-57: node 3 crashes and is dropped; its length left the pool, the liars' near-zero updates (the model
    # sent + 1e-9) were then half of it, both honest nodes were skipped and dropped, and with 2 lengths left
    # nothing was judged: node 4's x 1e30 model was mixed. A dropped node's latest length stays.
    values = {1: [1.0] * 50, 2: [2.0] * 50, 4: [None, None] + [1e30] * 48}
    grid = ArrivalGrid({n: 1.0 for n in range(1, 6)}, values=values, fail={3}, step={4: 1e-9, 5: 1e-9})
    with caplog.at_level("WARNING", logger="flwr"):
        strategy, result = _run_arrival(grid, budget=10, rounds=5)
    final = result.arrays.to_numpy_ndarrays()[0]
    assert np.isfinite(final).all() and np.abs(final).max() <= 2.0
    jobs = strategy.client_history
    scaled = jobs[(jobs["node_id"] == 4) & jobs["status"].str.contains("beyond max_update_ratio")]
    assert len(scaled) >= 1 and 4 in strategy._dropped


@pytest.mark.usefixtures("flower_identity")
def test_nodes_capped_at_a_few_samples_do_not_make_full_jobs_outsized():
    # helper-57: 3 nodes holding 8 samples beside 2 with the full share, updates in proportion to the samples:
    # the raw lengths' median was a capped node's and both full nodes were dropped at 103-150x it
    grid = ArrivalGrid({n: 1.0 for n in range(1, 6)},
                       step={1: 8e-3, 2: 8e-3, 3: 8e-3, 4: 1.0, 5: 1.0}, samples={1: 8, 2: 8, 3: 8})
    strategy, _ = _run_arrival(grid, budget=5000, rounds=1)
    assert (strategy.client_history["status"] == "ok").all()


@pytest.mark.usefixtures("flower_identity")
def test_a_silent_node_holds_the_first_wave_for_one_timeout_and_the_wait_is_idle_energy(monkeypatch):
    # helper-57: the wave waited for the silent node's retry too (max_failures x timeout: 2 h by default), and the
    # nodes waiting were not counted idle (round 1's idle_j was 0)
    import types

    from flwr_adaptive.strategies import fedasync_strategy

    clock = [0.0]
    fake = types.SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda dt: clock.__setitem__(0, clock[0] + dt))
    monkeypatch.setattr(fedasync_strategy, "time", fake)
    grid = ArrivalGrid({n: 1.0 for n in range(1, 6)}, silent={5})
    strategy, _ = _run_arrival(grid, budget=10, rounds=2, timeout=1.0)
    jobs = strategy.client_history
    second = jobs[(jobs["node_id"] == 1) & (jobs["job"] == 2)]["start_s"].iloc[0]
    assert 1.0 < second < 1.1  # released at node 5's first timeout, not its retry's (2 s)
    assert 4 * 1.0 <= strategy.history["idle_j"].iloc[0] < 4 * 1.1  # 4 nodes at 1 W idled until then


@pytest.mark.usefixtures("flower_identity")  # tests/conftest.py
def test_a_node_without_a_first_job_does_not_hold_the_first_wave(monkeypatch):
    # helper-58: budget 2 over 3 nodes leaves node 3 no job; the wave waited for its first reply forever
    # (a busy loop: nothing in flight, two replies held)
    import types

    from flwr_adaptive.strategies import fedasync_strategy

    polls = [0]

    def monotonic():
        polls[0] += 1
        if polls[0] > 10_000:
            raise AssertionError("the first wave never released its replies")
        return 0.0

    monkeypatch.setattr(fedasync_strategy, "time", types.SimpleNamespace(monotonic=monotonic, sleep=lambda dt: None))
    grid = ArrivalGrid({1: 1.0, 2: 1.0, 3: 1.0})
    strategy, _ = _run_arrival(grid, budget=2, rounds=1)
    assert strategy.history["samples"].sum() == 2
