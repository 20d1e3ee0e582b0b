"""HFL-DDP without the simulation engine: the hierarchical strategy and the silo client, in-process.

The strategy's ``configure_train`` / ``aggregate_train`` and the silo ClientApp body
(``clients.silo.silo_train``) exchange real Flower messages; each silo runs real DDP ranks
(spawned processes, gloo) on its own MNIST partition, with emulated per-rank slowness that
drifts from round ``DRIFT_ROUND`` on. The same kept ranks serve an Equal run and an adaptive
(time-only) run, so both see the same devices.

Compute times are the ranks' process-CPU seconds × the emulated slowdown (torch on one thread
per rank), so the CV comparison does not depend on how busy the shared machine is.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from flwr_adaptive import keys

pytestmark = pytest.mark.slow

SILOS = 3
RANKS = 2
BUDGET = 400  # samples per silo and round
STEPS = 5
ROUNDS = 6
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
def hierarchy(tmp_path_factory):
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from clients.ddp_tasks import task_spec
    from clients.silo import audit_reads, close_silos, read_audit, silo_train
    from clients.tasks import get_task
    from strategies.hierarchical import HierarchicalAdaptiveStrategy

    task = get_task("mnist", source="offline")
    partitions = {pid: task.load(pid, SILOS, seed=0)[0] for pid in range(SILOS)}
    audit = tmp_path_factory.mktemp("audit")
    specs = {pid: audit_reads(replace(task_spec("mnist"), data=partitions[pid]), audit / f"silo-{pid}")
             for pid in range(SILOS)}
    initial = ArrayRecord(task.make_model(seed=0).state_dict())
    out = {"partitions": partitions, "audit": audit, "runs": {}}
    with pytest.MonkeyPatch.context() as mp:
        # Messages need a run identity; the ServerApp runtime sets it, the test does here.
        for attr, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
            mp.setattr(TaskIdentity, attr, value)
        try:
            for policy in ("equal", "time"):
                strategy = HierarchicalAdaptiveStrategy(budget=BUDGET, steps=STEPS, policy=policy)
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
                out["runs"][policy] = {"strategy": strategy, "sent": sent, "final": arrays,
                                       "last_replies": [(r.content["metrics"][keys.SAMPLES],
                                                         r.content["arrays"].to_numpy_ndarrays()) for r in replies]}
        finally:
            close_silos()
    out["reads"] = {pid: read_audit(audit / f"silo-{pid}") for pid in range(SILOS)}
    return out


def test_silo_budgets_are_the_same_every_round_and_no_sample_leaves_its_silo(hierarchy):
    # Prepare
    import pandas as pd

    for policy, run in hierarchy["runs"].items():
        sent = pd.DataFrame(run["sent"])
        ranks = run["strategy"].rank_history
        history = run["strategy"].history
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
        own = set(partitions[pid].ids.tolist())
        others = set().union(*(partitions[p].ids.tolist() for p in range(SILOS) if p != pid))
        assert sorted(reads[pid]) == list(range(RANKS))
        for rank, ids in reads[pid].items():
            expected = 0
            for run in hierarchy["runs"].values():
                rows = run["strategy"].rank_history
                expected += rows[(rows["partition_id"] == pid) & (rows["rank"] == rank)]["samples"].sum()
            assert len(ids) == expected
            assert set(ids.tolist()) <= own and not set(ids.tolist()) & others


def test_inside_each_silo_the_rank_cv_is_below_equal_from_round_3_despite_drift(hierarchy):
    # Prepare
    equal = rank_cv(hierarchy["runs"]["equal"]["strategy"].rank_history)
    adaptive = rank_cv(hierarchy["runs"]["time"]["strategy"].rank_history)
    # Assert: in every silo, in every round from 3 on (the drift round included)
    for rnd in range(3, ROUNDS + 1):
        for pid in range(SILOS):
            assert adaptive[(rnd, pid)] < equal[(rnd, pid)], (rnd, pid, adaptive[(rnd, pid)], equal[(rnd, pid)])


def test_the_split_follows_the_drift_inside_each_silo(hierarchy):
    # Prepare: the slow rank's share of its silo's budget, before the drift and at the end
    ranks = hierarchy["runs"]["time"]["strategy"].rank_history
    share = ranks.set_index(["round", "partition_id", "rank"])["samples"] / BUDGET
    # Assert: the rank that got relatively slower lost samples, the other gained; all inside its silo
    assert share[(ROUNDS, 0, 1)] < share[(DRIFT_ROUND - 1, 0, 1)]
    assert share[(ROUNDS, 1, 0)] < share[(DRIFT_ROUND - 1, 1, 0)]
    assert share[(ROUNDS, 2, 0)] > share[(DRIFT_ROUND - 1, 2, 0)]
    # and the slower rank of every silo ends with less than half of the silo's budget
    for pid, slow in ((0, 1), (1, 1), (2, 0)):
        assert share[(ROUNDS, pid, slow)] < 0.5


def test_silo_models_are_averaged_by_samples_into_one_global_model(hierarchy):
    # Prepare
    run = hierarchy["runs"]["time"]
    weights = np.array([w for w, _ in run["last_replies"]], dtype=float)
    models = [arrays for _, arrays in run["last_replies"]]
    # Execute
    expected = [sum(w * m[i] for w, m in zip(weights, models)) / weights.sum() for i in range(len(models[0]))]
    final = run["final"].to_numpy_ndarrays()
    # Assert: the global model is the samples-weighted mean of the silo models (equal budgets)
    assert len(models) == SILOS and (weights == BUDGET).all()
    for got, want in zip(final, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any(not np.allclose(models[0][i], models[1][i]) for i in range(len(final)))  # silos differ
