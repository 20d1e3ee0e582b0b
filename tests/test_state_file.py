"""State files: atomic and durable writes, an unwritable folder refused early, and a resume test
for every corruption (set aside with one warning, never a crash in round 2, never bad numbers)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from flwr_adaptive import keys

import adaptive_support as sup
from adaptive_support import FakeGrid
from flwr_adaptive.strategies.core import STATE_FILE
from flwr_adaptive.strategies.state_file import write_atomic

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

NODES = [9001, 9002, 9003, 9004]
COSTS = [0.001, 0.002, 0.004, 0.004]
BUDGET = 1000


def strategy(state_dir, policy="time", **kw):
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    return AdaptiveStrategy(FedAvg(fraction_evaluate=0.0, min_train_nodes=4, min_available_nodes=4),
                            budget=BUDGET, policy=policy, state_dir=state_dir, deadband=0.0, **kw)


def play(s, rnd, nodes=NODES, cold=()):
    """One round; the partitions in ``cold`` report a cold start (1.5 s of start-up on top)."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    msgs = list(s.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(nodes)))
    q = {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in msgs}
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        p = nodes.index(n)
        t = q[n] * COSTS[p] + (1.5 if p in cold else 0.0)
        metrics = {keys.NUM_EXAMPLES: q[n], keys.SAMPLES: q[n], keys.TIME_S: t, keys.CPU_TIME_S: t,
                   keys.WALL_TIME_S: t, keys.ENERGY_J: q[n] * 0.01, keys.DATA_SIZE: 10_000, keys.PARTITION_ID: p,
                   keys.QUOTA_CAPPED: 0, keys.IDLE_W: 2.0, keys.VIRTUAL_CLOCK: 1, keys.COLD_START: int(p in cold)}
        replies.append(Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord(metrics)}),
                               reply_to=m))
    s.aggregate_train(rnd, replies)
    return q


def saved(tmp_path, policy="time"):
    """A state file written by two honest rounds; returns the parsed state."""
    s = strategy(tmp_path, policy)
    play(s, 1)
    play(s, 2)
    return json.loads((tmp_path / STATE_FILE).read_text())


# --------------------------------------------------------------------------- writing
def test_write_is_atomic_durable_and_leaves_no_temp_file(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.path.isdir(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd)))
    path = tmp_path / "state.json"
    write_atomic(path, '{"a": 1}')
    assert json.loads(path.read_text()) == {"a": 1}
    assert synced == [False, True]  # the file, then its folder
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write_atomic(path, "old")

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["state.json"]


def test_an_unwritable_state_dir_is_refused_at_construction(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="state_dir .*a-file.* is not a writable folder"):
        strategy(blocker / "state")


@pytest.mark.parametrize("kwargs, match", [
    ({"state_dir": 5}, r"state_dir must be a folder path .*got int 5.*state_dir='adaptive-state'"),
    ({"context": "x"}, r"context must be the ServerApp's flwr.app.Context.*got str 'x'.*context=context"),
])
def test_a_state_dir_or_context_of_the_wrong_type_is_refused_with_the_fix(kwargs, match):
    kwargs = {"state_dir": None, **kwargs}
    with pytest.raises(ValueError, match=match):
        strategy(**kwargs)


# --------------------------------------------------------------------------- resuming
def _truncate_arrays(state):
    state["controller"]["time_per_sample"] = state["controller"]["time_per_sample"][:1]
    return state


def _cost(value):
    def edit(state):
        state["controller"]["time_per_sample"][1] = value
        return state
    return edit


def _quotas_off(state):
    state["controller"]["current"]["quota"][0] += 7
    return state


def _no_controller(state):
    del state["controller"]
    return state


def _version(state):
    state["version"] = 99
    return state


def _rounds(state):
    state["rounds"] = -3
    return state


def _peer_claim(field, entry):
    def edit(state):
        state[field] = entry
        return state
    return edit


CORRUPTIONS = {
    "empty": lambda path, state: path.write_text(""),
    "truncated": lambda path, state: path.write_text(json.dumps(state)[:57]),
    "garbage": lambda path, state: path.write_bytes(os.urandom(64)),
    "a-list": lambda path, state: path.write_text("[1, 2, 3]"),
    "negative-cost": lambda path, state: path.write_text(json.dumps(_cost(-0.002)(state))),
    "zero-cost": lambda path, state: path.write_text(json.dumps(_cost(0.0)(state))),
    "quotas-do-not-sum": lambda path, state: path.write_text(json.dumps(_quotas_off(state))),
    "truncated-arrays": lambda path, state: path.write_text(json.dumps(_truncate_arrays(state))),
    "no-controller": lambda path, state: path.write_text(json.dumps(_no_controller(state))),
    "other-version": lambda path, state: path.write_text(json.dumps(_version(state))),
    "negative-rounds": lambda path, state: path.write_text(json.dumps(_rounds(state))),
    "peer-momentum-1": lambda path, state: path.write_text(
        json.dumps(_peer_claim("peer_optimizers", [[7, [1.0, 0.0]]])(state))),
    "peer-steps-short": lambda path, state: path.write_text(
        json.dumps(_peer_claim("peer_steps", [[7, [0.1, 0.1]]])(state))),
    "peer-steps-fractional": lambda path, state: path.write_text(
        json.dumps(_peer_claim("peer_steps", [[7, [0.1, 0.1, 0.5]]])(state))),
    "peer-steps-zero": lambda path, state: path.write_text(
        json.dumps(_peer_claim("peer_steps", [[7, [0.0, 0.1, 10]]])(state))),
    "peer-claims-a-dict": lambda path, state: path.write_text(
        json.dumps(_peer_claim("peer_steps", {"7": [0.1, 0.1, 10]})(state))),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_state_file_is_set_aside_with_one_warning_and_the_run_continues(tmp_path, corruption, caplog):
    # Prepare
    state = saved(tmp_path)
    path = tmp_path / STATE_FILE
    CORRUPTIONS[corruption](path, state)
    caplog.clear()
    # Execute: a restarted ServerApp resumes and plays two rounds
    s = strategy(tmp_path)
    quotas = [play(s, rnd) for rnd in (1, 2, 3)]
    # Assert: one warning names the file and where it went; the strategy started fresh, exactly
    lines = [line for line in sup.adaptive_lines(caplog) if "unusable" in line]
    assert len(lines) == 1 and str(path) in lines[0] and ".bad-" in lines[0]
    assert len(list(tmp_path.glob(f"{STATE_FILE}.bad-*"))) == 1
    assert quotas[0] == {n: BUDGET // 4 for n in NODES}  # nothing of the bad state was used
    assert all(sum(q.values()) == BUDGET for q in quotas)
    assert all(t > 0 for t, _ in s.controller.estimates().values())
    assert json.loads(path.read_text())["rounds"] == 3  # a good state file again


def test_a_state_saved_under_another_policy_is_refused_with_the_fix(tmp_path):
    saved(tmp_path, policy="time")
    with pytest.raises(ValueError, match="policy 'time'.*runs policy 'low-energy'.*fresh state_dir"):
        strategy(tmp_path, policy="low-energy")
    assert (tmp_path / STATE_FILE).exists()  # refused, not moved: the user decides


def test_an_intact_state_file_resumes_the_estimates(tmp_path):
    state = saved(tmp_path)
    s = strategy(tmp_path)
    assert s._rounds_done == state["rounds"] == 2
    assert sorted(s.controller.estimates()) == [0, 1, 2, 3]


def test_a_corrupt_state_in_the_serverapp_context_is_dropped_with_a_warning(caplog):
    from flwr.app import ConfigRecord, Context, RecordDict

    from flwr_adaptive.strategies.core import CONTEXT_STATE_KEY

    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context.state[CONTEXT_STATE_KEY] = ConfigRecord({"json": '{"version": 1, "policy": "time", "rou'})
    s = strategy(None, context=context)
    assert any("not valid JSON" in line for line in sup.adaptive_lines(caplog))
    q = play(s, 1)
    assert sum(q.values()) == BUDGET


# --------------------------------------------------------------------------- the disk fills
def _disk_full_during(monkeypatch):
    """Every file's fsync fails with ENOSPC while the returned flag is on: what a full disk does
    to a file system with delayed allocation (ext4, XFS), where the data meets the disk at fsync."""
    real_fsync = os.fsync
    full = {"on": False}

    def fsync(fd):
        if full["on"]:
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return full


def test_a_disk_that_fills_while_the_state_is_written_costs_one_error_line_and_the_run_goes_on(
    tmp_path, monkeypatch, caplog
):
    # Prepare: an honest round 1 is saved; then the disk is full for round 2
    s = strategy(tmp_path)
    play(s, 1)
    before = (tmp_path / STATE_FILE).read_text()
    full = _disk_full_during(monkeypatch)
    full["on"] = True
    caplog.clear()
    # Execute: round 2 writes into the full disk, round 3 after space was freed
    q2 = play(s, 2)
    during = (tmp_path / STATE_FILE).read_text()
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    full["on"] = False
    q3 = play(s, 3)
    # Assert: round 2 completed (its history row, its split exact), one error line naming the file,
    # the old state file untouched and no temporary file left; round 3 wrote the state again
    assert sum(q2.values()) == sum(q3.values()) == BUDGET
    assert list(s.history["round"]) == [1, 2, 3]
    assert len(errors) == 1 and str(tmp_path / STATE_FILE) in errors[0].getMessage()
    assert "No space left" in errors[0].getMessage()
    assert during == before and json.loads(during)["rounds"] == 1
    assert json.loads((tmp_path / STATE_FILE).read_text())["rounds"] == 3
    assert sorted(os.listdir(tmp_path)) == [STATE_FILE]
    assert any("again" in r.getMessage() for r in caplog.records if r.levelname == "INFO")


def test_a_disk_full_for_many_rounds_logs_each_failed_write_and_keeps_the_context_copy(tmp_path, monkeypatch, caplog):
    from flwr.app import Context, RecordDict

    from flwr_adaptive.strategies.core import CONTEXT_STATE_KEY

    # Prepare: state in a folder and in the ServerApp context; the disk is full from the start
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    s = strategy(tmp_path, context=context)
    full = _disk_full_during(monkeypatch)
    full["on"] = True
    caplog.clear()
    # Execute
    for rnd in (1, 2, 3):
        play(s, rnd)
    # Assert: one error line per failed write, no file, and the context holds round 3's state
    assert sum(r.levelname == "ERROR" for r in caplog.records) == 3
    assert not (tmp_path / STATE_FILE).exists() and os.listdir(tmp_path) == []
    assert json.loads(context.state[CONTEXT_STATE_KEY]["json"])["rounds"] == 3


# --------------------------------------------------------------------------- a tampered, valid state
def _tampered(state):
    """One node at 1e-12 s per sample, every other node 1,000x slower: computable, and a lie."""
    c = state["controller"]
    c["time_per_sample"] = [1e-12 if pid == 0 else v * 1000 for pid, v in zip(c["ids"], c["time_per_sample"])]
    return state


def test_a_tampered_but_valid_state_is_checked_against_the_first_replies_and_recovers_in_two_rounds(tmp_path, caplog):
    # Prepare: the state of two honest rounds, edited so that partition 0 looks 1e9x faster than it is
    honest = [play(strategy(tmp_path / "honest"), rnd) for rnd in (1, 2, 3)][-1]
    state = _tampered(saved(tmp_path))
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    caplog.clear()
    # Execute: a restarted ServerApp resumes it (it is valid: nothing is set aside) and plays 3 rounds
    s = strategy(tmp_path)
    quotas = [play(s, rnd) for rnd in (1, 2, 3)]
    # Assert: round 1 trains on the saved split (the tampered node holds most of the budget); its
    # replies contradict the saved estimates, which are dropped with one warning, and from round 2 on
    # the split is the honest federation's
    assert quotas[0][NODES[0]] > 0.9 * BUDGET
    assert quotas[1] == quotas[2] == honest
    lines = [line for line in sup.adaptive_lines(caplog) if "contradicted" in line]
    assert len(lines) == 1 and "4 participant(s)" in lines[0]
    assert not list(tmp_path.glob(f"{STATE_FILE}.bad-*"))


def test_an_honest_resumed_state_is_confirmed_by_the_first_replies_and_kept(tmp_path, caplog):
    # Prepare: the state of two honest rounds, resumed as saved
    saved(tmp_path)
    s = strategy(tmp_path)
    before = s.controller.estimates()
    caplog.clear()
    # Execute
    play(s, 1)
    # Assert: nothing contradicted, the estimates continued (not re-initialised) and all confirmed
    assert not [line for line in sup.adaptive_lines(caplog) if "contradicted" in line]
    assert s._unverified == set()
    assert s.controller.estimates().keys() == before.keys()


def test_a_resumed_estimate_no_reply_confirmed_is_not_a_median_a_sampled_round_is_judged_by(tmp_path, caplog):
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    # Prepare: the state of two honest rounds, edited to make partitions 2 and 3 1,000x slower (4 s per
    # sample); the resumed run samples only nodes 9001 and 9002 (honest, 1 and 2 ms), so 2 and 3 send no
    # reply that could contradict their edit. An unconfirmed resumed estimate is a claim, not history
    # (docs/security.md): counted in cost trust's median, the edit alone would make both honest nodes
    # "absurd" (4e3x and 2e3x below 4 s), believe them at 4 s per sample, drop their correct saved
    # estimates as contradicted and split the budget 500/500 instead of by their real costs.
    state = saved(tmp_path)
    c = state["controller"]
    c["time_per_sample"] = [v * 1000 if pid in (2, 3) else v for pid, v in zip(c["ids"], c["time_per_sample"])]
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    s = AdaptiveStrategy(FedAvg(fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2),
                         budget=BUDGET, policy="time", state_dir=tmp_path, deadband=0.0)
    assert s._unverified == {0, 1, 2, 3}
    caplog.clear()
    # Execute
    quotas = [play(s, rnd, nodes=NODES[:2]) for rnd in (1, 2)]
    # Assert: the two claims are believed as they came (a round of two has no median of its own), no claim
    # or contradiction warning, and round 2 splits by their real costs: 1000 x (1/1 ms) / (1/1 ms + 1/2 ms)
    assert {n: b.time_s / b.samples for n, b in s._believed.items()} == {9001: pytest.approx(0.001),
                                                                        9002: pytest.approx(0.002)}
    assert not [line for line in sup.adaptive_lines(caplog) if "claims" in line or "contradicted" in line]
    assert quotas[1] == {9001: 667, 9002: 333}


@pytest.mark.parametrize("cold", [(), (0, 1)])
def test_a_resumed_node_whose_first_reply_is_a_cold_start_keeps_its_saved_share(tmp_path, cold):
    # A restarted federation (new node ids, as in simulation) whose nodes 0 and 1 start cold: their cold replies
    # are held (start-up is not a per-sample cost), so they are not observed in round 1. Their saved estimates
    # stood, but they were capped like newcomers at the cautious share: round 2 was 250 each (a fresh run's)
    # instead of the saved split, which the warm resume gets
    first = strategy(tmp_path)
    for rnd in (1, 2, 3, 4):
        settled = play(first, rnd)
    resumed = strategy(tmp_path)
    new_ids = [7001, 7002, 7003, 7004]
    play(resumed, 1, new_ids, cold=cold)  # the equal split: node ids are new
    by_partition = {new_ids.index(n): q for n, q in play(resumed, 2, new_ids).items()}
    assert by_partition == pytest.approx({NODES.index(n): q for n, q in settled.items()}, abs=5)
