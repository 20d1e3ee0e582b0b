"""The HFL-DDP silo client: its reply, its rank split and its read audit; then, without the
simulation engine, the hierarchical strategy and real silos exchanging messages in-process.

In the slow part, the strategy's ``configure_train`` / ``aggregate_train`` and the silo ClientApp body
(``flwr_adaptive.clients.silo.silo_train``) exchange real Flower messages; each silo runs real DDP ranks
(spawned processes, gloo) on its own MNIST partition, with emulated per-rank slowness that
drifts from round ``DRIFT_ROUND`` on. The same kept ranks serve an Equal run and an adaptive
(time-only) run, so both see the same devices.

Compute times are the ranks' process-CPU seconds × the emulated slowdown (torch on one thread
per rank), so the CV comparison does not depend on how busy the shared machine is.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from hfl_support import once_per_session

SILOS = 3
RANKS = 2
BUDGET = 400  # samples per silo and round
STEPS = 5
# Four rounds from the drift on: the balance hold (flwr_adaptive.deadband) keeps a split while the
# reports at it are balanced within the noise pooled over every rank of every silo, so one rank's
# one-round hiccup anywhere (CPU time 2x once) holds every silo's split, even one clearly off after
# the drift, until its own repeats outweigh it: 4 reports at the held split (measured with
# balanced_within_noise: held at 2 and 3 repeats, released at 4). One CI run with 6 rounds (2 after
# the drift) saw all three silos keep round 4's split to the end.
ROUNDS = 8
DRIFT_ROUND = 4
# Per silo: per-rank slowdowns before and from DRIFT_ROUND on. Speed ratios of at least 3 inside
# every silo keep Equal's CV far above what timing noise on a busy machine can blur, and no drift
# swaps which rank is faster, so even the drift round (still on the old split) beats Equal.
SLOWDOWNS = {0: ([1.0, 3.0], [1.0, 6.0]),   # the slow rank slows down further
             1: ([1.0, 6.0], [2.0, 6.0]),   # the fast rank slows down
             2: ([6.0, 1.0], [3.0, 1.0])}   # the slow rank speeds up
NODES = {101: 0, 102: 1, 103: 2}  # node id -> partition id


def slowdowns_of(partition_id: int, server_round: int) -> list[float]:
    before, after = SLOWDOWNS[partition_id]
    return after if server_round >= DRIFT_ROUND else before


class FakeGrid:
    def get_node_ids(self):
        return list(NODES)


def rank_cv(rank_history):
    """CV of the ranks' compute time per (round, partition)."""
    return rank_history.groupby(["round", "partition_id"])["time_s"].agg(lambda t: t.std(ddof=0) / t.mean())


@pytest.fixture(scope="module")
def hierarchy(request, tmp_path_factory):
    return once_per_session(request, tmp_path_factory, "hfl-silos", partial(_run_hierarchy, tmp_path_factory))


def _run_hierarchy(tmp_path_factory):
    """Equal, then adaptive: ROUNDS rounds each on the same kept silos; plain data for the tests."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from flwr_adaptive.clients.ddp.tasks import task_spec
    from flwr_adaptive.clients.silo import audit_reads, close_silos, read_audit, silo_train
    from flwr_adaptive.clients.tasks import get_task
    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy

    task = get_task("mnist", source="offline")
    partitions = {pid: task.load(pid, SILOS, seed=0)[0] for pid in range(SILOS)}
    audit = tmp_path_factory.mktemp("audit")
    specs = {pid: audit_reads(replace(task_spec("mnist"), data=partitions[pid]), audit / f"silo-{pid}")
             for pid in range(SILOS)}
    initial = ArrayRecord(task.make_model(seed=0).state_dict())
    out = {"partitions": {pid: p.ids for pid, p in partitions.items()}, "runs": {}}
    with pytest.MonkeyPatch.context() as mp:
        # Messages need a run identity; the ServerApp runtime sets it, the test does here.
        for attr, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
            mp.setattr(TaskIdentity, attr, value)
        try:
            for policy in ("equal", "time"):
                # smoothing=1: each split follows the latest measurement, so the drift shows within a round;
                # with it, a deadband keeps a round's noise from moving the split (silo 2's slow rank has a
                # fixed cost above its partner's whole round, so its few samples swing with every round)
                strategy = HierarchicalAdaptiveStrategy(budget=BUDGET, steps=STEPS, policy=policy, smoothing=1.0,
                                                        deadband=0.02)
                contexts = {node: Context(run_id=1, node_id=node, node_config={"partition-id": pid,
                                                                               "num-partitions": SILOS},
                                          state=RecordDict(), run_config={})
                            for node, pid in NODES.items()}
                arrays, sent = initial, []
                for rnd in range(1, ROUNDS + 1):
                    messages = list(strategy.configure_train(rnd, arrays, ConfigRecord({}), FakeGrid()))
                    for m in messages:
                        config = m.content["config"]
                        sent.append({"round": rnd, "partition_id": NODES[m.metadata.dst_node_id],
                                     "quota": config[keys.QUOTA], "rank_quotas": config.get(keys.RANK_QUOTAS)})
                    replies = [silo_train(m, contexts[m.metadata.dst_node_id], specs[NODES[m.metadata.dst_node_id]],
                                          ranks=RANKS, steps=1,  # the server's keys.DDP_STEPS wins
                                          slowdowns=partial(slowdowns_of, NODES[m.metadata.dst_node_id]))
                               for m in messages]
                    arrays, _ = strategy.aggregate_train(rnd, replies)
                out["runs"][policy] = {"history": strategy.history, "rank_history": strategy.rank_history,
                                       "client_history": strategy.client_history, "sent": sent,
                                       "final": arrays.to_numpy_ndarrays(),
                                       "last_replies": [(r.content["metrics"][keys.SAMPLES],
                                                         r.content["arrays"].to_numpy_ndarrays()) for r in replies]}
        finally:
            close_silos()
    out["reads"] = {pid: read_audit(audit / f"silo-{pid}") for pid in range(SILOS)}
    return out


@pytest.mark.slow
def test_silo_budgets_are_the_same_every_round_and_no_sample_leaves_its_silo(hierarchy):
    # Prepare
    import pandas as pd

    for policy, run in hierarchy["runs"].items():
        sent = pd.DataFrame(run["sent"])
        ranks = run["rank_history"]
        history = run["history"]
        # Assert: every silo was sent its budget, and its ranks' quotas add up to it
        assert len(history) == ROUNDS and (history["skipped"] == 0).all(), policy
        assert (sent["quota"] == BUDGET).all(), policy
        split = sent.dropna(subset=["rank_quotas"])
        assert sorted(split["round"].unique()) == list(range(2, ROUNDS + 1)), policy  # round 1: even split
        assert all(sum(q) == BUDGET and len(q) == RANKS for q in split["rank_quotas"]), policy
        # the ranks processed exactly their quotas, and each silo exactly its budget
        processed = ranks.groupby(["round", "partition_id"])["samples"].sum()
        assert len(processed) == ROUNDS * SILOS and (processed == BUDGET).all(), policy
        assert ranks.dropna(subset=["quota"]).eval("quota == samples").all(), policy
    # Assert: what every rank read lies in its own silo's partition, and nothing else was read
    partitions, reads = hierarchy["partitions"], hierarchy["reads"]
    for pid in range(SILOS):
        own = set(partitions[pid].tolist())
        others = set().union(*(partitions[p].tolist() for p in range(SILOS) if p != pid))
        assert sorted(reads[pid]) == list(range(RANKS))
        for rank, ids in reads[pid].items():
            expected = 0
            for run in hierarchy["runs"].values():
                rows = run["rank_history"]
                expected += rows[(rows["partition_id"] == pid) & (rows["rank"] == rank)]["samples"].sum()
            assert len(ids) == expected
            assert set(ids.tolist()) <= own and not set(ids.tolist()) & others


@pytest.mark.slow
def test_inside_each_silo_the_rank_cv_is_below_equal_from_round_3_despite_drift(hierarchy):
    # Prepare
    equal = rank_cv(hierarchy["runs"]["equal"]["rank_history"])
    adaptive = rank_cv(hierarchy["runs"]["time"]["rank_history"])
    table = f"CV per round and silo, Equal:\n{equal.unstack()}\nadaptive:\n{adaptive.unstack()}"
    # Assert: over the rounds from 3 on (the drift round included), the mean CV is at most half
    # Equal's, in every silo below Equal's, and most (silo, round) cells are below Equal's.
    # Measured: Equal's mean 3.2-5.2x the adaptive one's (two runs, 3 silos each, machine load ~20;
    # docs/hfl.md's ~5x is over rounds >= 3 of its own runs; the drift round, still on the old split,
    # is worse than Equal by design). Per silo only "below": ranks are real processes timed on a
    # shared 2-core machine, and one CI run under load saw silo 1's Equal CV fall to 0.06-0.21 in
    # two rounds (3x apart in speed: 0.5 expected), so that silo's own mean was 0.49x Equal's and
    # 2 of its 4 rounds below; the pooled figures were 4.6x and 10 of 12.
    late = range(3, ROUNDS + 1)
    cells = [(rnd, pid) for rnd in late for pid in range(SILOS)]
    assert np.mean([adaptive[c] for c in cells]) < 0.5 * np.mean([equal[c] for c in cells]), table
    assert sum(adaptive[c] < equal[c] for c in cells) > 2 * len(cells) / 3, table
    for pid in range(SILOS):
        mean_adaptive = np.mean([adaptive[(rnd, pid)] for rnd in late])
        mean_equal = np.mean([equal[(rnd, pid)] for rnd in late])
        assert mean_adaptive < mean_equal, f"silo {pid}; {table}"


@pytest.mark.slow
def test_the_split_follows_the_drift_inside_each_silo(hierarchy):
    # Prepare: each rank's share of its silo's budget in round DRIFT_ROUND (the last split made from
    # measurements before the drift) and in the last round
    ranks = hierarchy["runs"]["time"]["rank_history"]
    share = ranks.set_index(["round", "partition_id", "rank"])["samples"] / BUDGET
    before = DRIFT_ROUND
    table = (share.unstack(["partition_id", "rank"]).round(3).to_string() + "\nrank seconds:\n"
             + ranks.set_index(["round", "partition_id", "rank"])["time_s"].unstack(["partition_id", "rank"]).round(3).to_string())
    # Assert: the rank that got relatively slower lost samples, the other gained; all inside its silo
    assert share[(ROUNDS, 0, 1)] < share[(before, 0, 1)], table
    assert share[(ROUNDS, 1, 0)] < share[(before, 1, 0)], table
    assert share[(ROUNDS, 2, 0)] > share[(before, 2, 0)], table
    # and the slower rank of every silo ends with less than half of the silo's budget
    for pid, slow in ((0, 1), (1, 1), (2, 0)):
        assert share[(ROUNDS, pid, slow)] < 0.5, table


@pytest.mark.slow
def test_silo_models_are_averaged_by_samples_into_one_global_model(hierarchy):
    # Prepare
    run = hierarchy["runs"]["time"]
    weights = np.array([w for w, _ in run["last_replies"]], dtype=float)
    models = [arrays for _, arrays in run["last_replies"]]
    # Execute
    expected = [sum(w * m[i] for w, m in zip(weights, models)) / weights.sum() for i in range(len(models[0]))]
    final = run["final"]
    # Assert: the global model is the samples-weighted mean of the silo models (equal budgets)
    assert len(models) == SILOS and (weights == BUDGET).all()
    for got, want in zip(final, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any(not np.allclose(models[0][i], models[1][i]) for i in range(len(final)))  # silos differ


# --------------------------------------------------------------------------- without processes
def telemetry(rank, samples, time_s, step_compute, energy=None, world=2):
    from flwr_adaptive.clients.ddp.worker import RankTelemetry

    return RankTelemetry(rank=rank, world=world, steps=len(step_compute[0]), samples=samples, time_s=time_s,
                         energy_j=energy, wait_s=0.01 * (rank + 1), wall_s=1.0, clock="process", slowdown=1.0,
                         forward_s=[0.1] * len(step_compute[0]), backward_s=[0.2] * len(step_compute[0]),
                         optimizer_s=[0.05] * len(step_compute[0]), step_compute_s=step_compute)


def test_a_silo_round_reports_the_silo_telemetry_and_one_list_per_rank():
    from flwr_adaptive.clients.silo import SiloRound

    # Prepare: two ranks, two steps; rank 1 is the slower one at step 0, rank 0 at step 1
    steps = [[0.3, 0.5], [0.4, 0.2]]
    result = SiloRound(quotas=[120, 80], telemetry=[telemetry(0, 120, 0.8, steps, 8.0), telemetry(1, 80, 0.6, steps, 3.0)],
                       state=None, start=0, end=200, wall_s=2.5)
    # Execute
    m = result.metrics(partition_id=4, data_size=1333, idle_w=3.5)
    # Assert: the silo's time is the per-step makespan (waits excluded), energy the ranks' sum
    assert m[keys.TIME_S] == pytest.approx(0.4 + 0.5)
    assert m[keys.SAMPLES] == m[keys.NUM_EXAMPLES] == 200 and m[keys.ENERGY_J] == 11.0
    assert m[keys.CPU_TIME_S] == pytest.approx(2 * 2 * 0.35) and m[keys.WALL_TIME_S] == 2.5
    assert (m[keys.PARTITION_ID], m[keys.DATA_SIZE], m[keys.IDLE_W], m[keys.VIRTUAL_CLOCK]) == (4, 1333, 3.5, 1)
    assert m[keys.RANK_SAMPLES] == [120, 80] and m[keys.RANK_TIME_S] == [0.8, 0.6]
    assert m[keys.RANK_ENERGY_J] == [8.0, 3.0] and m[keys.RANK_WAIT_S] == [0.01, 0.02]
    assert set(keys.TELEMETRY_KEYS) | set(keys.SILO_RANK_KEYS) <= set(m)
    assert m[keys.COLD_START] == 0  # ranks that already ran a round


def test_one_unmeasured_rank_leaves_the_silo_energy_unmeasured():
    from flwr_adaptive.clients.silo import SiloRound

    steps = [[0.3], [0.4]]
    result = SiloRound(quotas=[1, 1], telemetry=[telemetry(0, 1, 0.3, steps, 1.0), telemetry(1, 1, 0.4, steps)],
                       state=None, start=0, end=2, wall_s=1.0)
    m = result.metrics()
    assert m[keys.ENERGY_J] == keys.UNMEASURED_ENERGY and m[keys.RANK_ENERGY_J] == [1.0, keys.UNMEASURED_ENERGY]
    assert m[keys.PARTITION_ID] == keys.UNKNOWN and m[keys.DATA_SIZE] == keys.UNKNOWN


def test_an_emulated_silo_caps_host_spikes_in_rank_times_makespan_and_energy():
    from flwr_adaptive.clients.ddp.worker import RankTelemetry
    from flwr_adaptive.clients.silo import SiloRound

    # Prepare: 4 steps of 10 samples each; rank 0 (slowdown 4) had one host spike at step 2
    # (0.8 s emulated instead of ~0.4), rank 1 none. Rank 0's median step is 0.4 s: cap 0.5 s.
    steps = [[0.4, 0.38, 0.8, 0.4], [0.2, 0.21, 0.19, 0.2]]

    def rank(r, watts):
        row = steps[r]
        return RankTelemetry(rank=r, world=2, steps=4, samples=40, time_s=sum(row), energy_j=watts * sum(row),
                             wait_s=0.0, wall_s=2.0, clock="process", slowdown=4.0 if r == 0 else 2.0,
                             batch_sizes=[10] * 4, forward_s=[0.0] * 4, backward_s=[0.0] * 4,
                             optimizer_s=[0.0] * 4, step_compute_s=steps)

    tel = [rank(0, 5.0), rank(1, 2.0)]
    emulated = SiloRound(quotas=[40, 40], telemetry=tel, state=None, start=0, end=80, wall_s=3.0, emulated=True)
    real = SiloRound(quotas=[40, 40], telemetry=tel, state=None, start=0, end=80, wall_s=3.0)
    # Execute
    m, raw = emulated.metrics(), real.metrics()
    # Assert: the spike counts at the cap (0.4 + 0.38 + 0.5 + 0.4 = 1.68 s), rank 1 is untouched,
    # the makespan and the modelled energy (5 W × 1.68 s) follow; a real silo reports as measured
    assert m[keys.RANK_TIME_S] == pytest.approx([1.68, 0.80])
    assert m[keys.TIME_S] == pytest.approx(1.68)
    assert m[keys.RANK_ENERGY_J] == pytest.approx([8.4, 1.6]) and m[keys.ENERGY_J] == pytest.approx(10.0)
    assert raw[keys.RANK_TIME_S] == pytest.approx([1.98, 0.8]) and raw[keys.TIME_S] == pytest.approx(1.98)


def test_despiked_steps_cap_only_the_top_and_let_larger_batches_cost_more():
    from flwr_adaptive.clients.silo import despiked_steps

    # median 1.0 → cap 1.25; the batch of 20 (median 10) may cost up to 2.5; empty steps stay 0
    out = despiked_steps([1.0, 0.5, 3.0, 2.4, 0.0, 0.9], [10, 10, 10, 20, 0, 10])
    assert out.tolist() == pytest.approx([1.0, 0.5, 1.25, 2.4, 0.0, 0.9])
    # fewer than 3 non-empty steps: no median to trust, nothing changes
    assert despiked_steps([1.0, 9.0], [10, 10]).tolist() == [1.0, 9.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 10.0), st.integers(0, 50)), min_size=1, max_size=20))
def test_property_despiking_never_raises_a_step_and_keeps_a_uniformly_slower_round(steps):
    from flwr_adaptive.clients.silo import despiked_steps

    seconds = np.array([t if b > 0 else 0.0 for t, b in steps])
    batches = np.array([b for _, b in steps])
    out = despiked_steps(seconds, batches)
    assert (out <= seconds + 1e-12).all() and (out >= 0).all()
    # the same round 1.3× slower at every step (sustained contention, a throttled device) is
    # not clipped away: it is 1.3× the despiked original
    assert np.allclose(despiked_steps(1.3 * seconds, batches), 1.3 * out)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6),
       st.one_of(st.none(), st.lists(st.integers(0, 3000), min_size=0, max_size=7)))
def test_property_the_rank_split_always_sums_to_the_silo_budget(budget, ranks, rank_quotas):
    from flwr_adaptive.clients.silo import split_budget

    # Execute
    q = split_budget(budget, ranks, rank_quotas)
    # Assert: the server's split when it fits, else the even split; never another total
    assert len(q) == ranks and sum(q) == budget and min(q) >= 0
    fits = rank_quotas is not None and len(rank_quotas) == ranks and sum(rank_quotas) == budget
    assert q == (list(rank_quotas) if fits else [budget // ranks + (i < budget % ranks) for i in range(ranks)])


def test_a_plan_that_does_not_fit_the_silo_is_refused_before_any_rank_starts():
    from flwr_adaptive.clients.silo import Silo

    silo = Silo(spec=None, ranks=2, name="7")  # the spec is not used: nothing starts
    with pytest.raises(ValueError, match=r"silo 7: quotas has 3 entries for 2 ranks"):
        silo.train([10, 10, 10], steps=5)
    with pytest.raises(ValueError, match=r"silo 7: .*below steps"):
        silo.train([1, 1], steps=5)
    assert not silo.alive
    with pytest.raises(ValueError, match=r"silo 7: ranks must be an int >= 1, got 0"):
        Silo(spec=None, ranks=0, name="7")


class _BlockingGroup:
    """Stands in for LocalDDPGroup: ``run_round`` waits for ``release``; records what happened when."""

    def __init__(self, *args, **kwargs):
        self.in_round = threading.Event()
        self.release = threading.Event()
        self.events: list[str] = []
        _BlockingGroup.made.append(self)

    def run_round(self, plan):
        self.events.append("round")
        self.in_round.set()
        self.release.wait(30)
        self.events.append("round done")
        return []

    def get_state(self):
        return None

    def close(self):
        self.events.append("close")


def test_closing_a_silo_mid_round_waits_for_the_round_to_end(monkeypatch):
    import flwr_adaptive.clients.silo as silo_mod

    # Prepare: a round that runs until released
    _BlockingGroup.made = []
    monkeypatch.setattr(silo_mod, "LocalDDPGroup", _BlockingGroup)
    silo = silo_mod.Silo(spec=None, ranks=2, name="4")
    trainer = threading.Thread(target=silo.train, args=([5, 5], 5), daemon=True)
    trainer.start()
    group = _BlockingGroup.made[0] if _BlockingGroup.made else None
    assert group is not None and group.in_round.wait(30)
    # Execute: close from another thread (what eviction and close_silos do), then end the round
    closer = threading.Thread(target=silo.close, daemon=True)
    closer.start()
    closer.join(0.5)
    closed_early = "close" in group.events
    group.release.set()
    trainer.join(30)
    closer.join(30)
    # Assert: the ranks were stopped only after the round ended
    assert not closed_early and group.events == ["round", "round done", "close"]
    assert not silo.alive and not closer.is_alive()


def test_only_the_round_that_starts_the_ranks_is_reported_cold(monkeypatch):
    import flwr_adaptive.clients.silo as silo_mod

    # Prepare: ranks that finish at once; kept alive between rounds, then not
    _BlockingGroup.made = []
    monkeypatch.setattr(silo_mod, "LocalDDPGroup", _BlockingGroup)
    kept = silo_mod.Silo(spec=None, ranks=2, name="4")
    fresh = silo_mod.Silo(spec=None, ranks=2, name="5", keep_alive=False)
    # Execute
    rounds = []
    for silo in (kept, kept, fresh, fresh):
        thread = threading.Thread(target=lambda s=silo: rounds.append(s.train([5, 5], 5)), daemon=True)
        thread.start()
        while thread.is_alive():
            for group in _BlockingGroup.made:
                group.release.set()
            thread.join(0.05)
    # Assert: a kept group is cold in its first round only; one restarted every round always is
    assert [r.cold_start for r in rounds] == [True, False, True, True]
    assert [r.metrics()[keys.COLD_START] for r in rounds] == [1, 0, 1, 1]


class _FakeSilo:
    def __init__(self, name):
        self.name, self.closed = name, 0

    def close(self):
        self.closed += 1


def test_kept_silos_of_an_earlier_run_are_closed_when_a_new_run_asks_for_one(monkeypatch):
    import flwr_adaptive.clients.silo as silo_mod
    from collections import OrderedDict

    # Prepare: two silos kept by run 1
    monkeypatch.setattr(silo_mod, "_ALIVE", OrderedDict())
    old = [silo_mod._kept_silo((1, str(p), 2, "gloo"), lambda p=p: _FakeSilo(p), max_alive=4) for p in range(2)]
    # Execute: run 2's first silo; then run 2 asks for the same silo again
    new = silo_mod._kept_silo((2, "0", 2, "gloo"), lambda: _FakeSilo("0"), max_alive=4)
    again = silo_mod._kept_silo((2, "0", 2, "gloo"), lambda: _FakeSilo("other"), max_alive=4)
    # Assert: run 1's silos are stopped and forgotten; run 2's is kept and reused
    assert [s.closed for s in old] == [1, 1]
    assert again is new and new.closed == 0 and list(silo_mod._ALIVE) == [(2, "0", 2, "gloo")]


def test_silo_train_without_a_budget_from_the_server_or_the_caller_says_what_to_do(monkeypatch):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from flwr_adaptive.clients.silo import silo_train

    for attr, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, attr, value)
    msg = Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "config": ConfigRecord({})}), dst_node_id=5,
                  message_type="train")
    context = Context(run_id=1, node_id=5, node_config={"partition-id": 2}, state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match=r"silo 2: the server sent no 'quota' and silo_train got no budget="):
        silo_train(msg, context, spec=None)


def test_the_audit_logs_the_ids_of_the_samples_read_and_passes_the_batch_on(tmp_path):
    from dataclasses import dataclass

    import torch

    from flwr_adaptive.clients.ddp.worker import WorkerSpec
    from flwr_adaptive.clients.silo import audit_reads, read_audit

    @dataclass
    class WithIds(torch.utils.data.Dataset):
        x: torch.Tensor
        ids: np.ndarray

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i], self.x[i]

    # Prepare: a partition whose samples carry global ids 100..109; tensors without ids
    data = WithIds(torch.arange(10.0), np.arange(100, 110))
    spec = audit_reads(WorkerSpec(model_fn=None, data=data, loss_fn=None), tmp_path / "a")
    plain = audit_reads(WorkerSpec(model_fn=None, data=(torch.arange(5.0), torch.arange(5)), loss_fn=None),
                        tmp_path / "b")
    # Execute: what a rank does (no process group: rank 0)
    dataset = spec.data()
    batch = spec.collate_fn(dataset, np.array([3, 7]))
    spec.collate_fn(dataset, np.array([0]))
    rows = plain.data()
    tensor_batch = plain.collate_fn(rows, np.array([4, 1]))
    # Assert
    assert list(read_audit(tmp_path / "a")) == [0] and read_audit(tmp_path / "a")[0].tolist() == [103, 107, 100]
    assert read_audit(tmp_path / "b")[0].tolist() == [4, 1]
    torch.testing.assert_close(batch[0], torch.tensor([3.0, 7.0]))
    torch.testing.assert_close(tensor_batch[1], torch.tensor([4, 1]))


@pytest.mark.parametrize("gpus, ranks, requested, expected", [
    (0, 2, None, "gloo"), (2, 2, None, "nccl"), (4, 3, None, "nccl"),
    (1, 2, None, "gloo"),  # NCCL cannot put two ranks on one GPU
    (1, 2, "nccl", "nccl"), (4, 2, "gloo", "gloo"),
])
def test_silos_use_nccl_only_when_every_rank_can_have_its_own_gpu(monkeypatch, gpus, ranks, requested, expected):
    import torch

    from flwr_adaptive.clients.silo import silo_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert silo_backend(ranks, requested) == expected

