"""Tests of the DDP batch schedules, loss scales, the schedule-driven sampler and the EMA sizer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive.ema_batching import EmaBatchSizer
from flwr_adaptive.schedule import (
    IndexStream,
    ScheduleSampler,
    batch_schedule,
    loss_scales,
    step_makespan,
)

quota_lists = st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=12)
small_quota_lists = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=8)
step_counts = st.integers(min_value=1, max_value=60)


# ---------------------------------------------------------------------------- batch_schedule
@settings(max_examples=300, deadline=None)
@given(quotas=quota_lists, steps=step_counts)
def test_schedule_rows_sum_to_quotas(quotas, steps):
    # Execute
    sched = batch_schedule(quotas, steps)
    # Assert
    assert sched.shape == (len(quotas), steps)
    assert sched.sum(axis=1).tolist() == quotas


@settings(max_examples=300, deadline=None)
@given(quotas=quota_lists, steps=step_counts)
def test_schedule_entries_are_floor_or_ceil_of_quota_per_step(quotas, steps):
    # Prepare
    q = np.array(quotas)[:, None]
    # Execute
    sched = batch_schedule(quotas, steps)
    # Assert
    assert ((sched == q // steps) | (sched == -(-q // steps))).all()


@settings(max_examples=300, deadline=None)
@given(quotas=quota_lists, steps=step_counts)
def test_schedule_columns_sum_to_floor_or_ceil_of_global_batch(quotas, steps):
    # Prepare
    total = sum(quotas)
    # Execute
    cols = batch_schedule(quotas, steps).sum(axis=0)
    # Assert
    assert set(cols.tolist()) <= {total // steps, -(-total // steps)}


@settings(max_examples=200, deadline=None)
@given(quotas=small_quota_lists, steps=st.integers(min_value=10, max_value=60))
def test_quotas_below_step_count_give_zero_entries_and_keep_every_invariant(quotas, steps):
    # Prepare: quotas (mostly) below the step count, the case the DDP worker's empty batches cover
    total = sum(quotas)
    # Execute
    sched = batch_schedule(quotas, steps)
    # Assert
    for q, row in zip(quotas, sched):
        if q < steps:
            assert set(row.tolist()) <= {0, 1}
            assert int((row == 0).sum()) == steps - q
    assert sched.sum(axis=1).tolist() == quotas
    assert set(sched.sum(axis=0).tolist()) <= {total // steps, -(-total // steps)}
    assert sched.dtype == np.int64 and (sched >= 0).all()


def test_schedule_of_the_design_example():
    # Execute
    sched = batch_schedule([700, 200, 100], steps=10)
    # Assert
    assert sched.tolist() == [[70] * 10, [20] * 10, [10] * 10]


@pytest.mark.parametrize(
    "quotas, steps, match",
    [([3, -1], 2, "quotas must be >= 0"), ([1.5, 2], 2, "quotas must be ints"), ([[1, 2]], 2, "1-D"),
     ([3, 4], 0, "steps must be an int >= 1"), ([3, 4], 2.0, "steps must be an int >= 1")],
)
def test_schedule_rejects_bad_input_naming_the_value(quotas, steps, match):
    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        batch_schedule(quotas, steps)


# ---------------------------------------------------------------------------- loss scales
@settings(max_examples=200, deadline=None)
@given(quotas=quota_lists, steps=step_counts)
def test_loss_scales_are_world_over_column_sum_and_zero_for_empty_steps(quotas, steps):
    # Prepare
    sched = batch_schedule(quotas, steps)
    world = len(quotas)
    cols = sched.sum(axis=0)
    # Execute
    scales = loss_scales(sched)
    # Assert
    assert np.isfinite(scales).all()
    assert np.allclose(scales[cols > 0] * cols[cols > 0], world)
    assert (scales[cols == 0] == 0).all()


@settings(max_examples=200, deadline=None)
@given(quotas=st.lists(st.integers(0, 30), min_size=2, max_size=6), steps=st.integers(1, 8),
       seed=st.integers(0, 2**16))
def test_scaled_loss_sums_averaged_over_ranks_equal_the_global_batch_mean(quotas, steps, seed):
    # Prepare: per-sample "losses" (stand-ins for per-sample gradients, which average the same way)
    sched = batch_schedule(quotas, steps)
    world = len(quotas)
    rng = np.random.default_rng(seed)
    scales = loss_scales(sched)
    for s in range(steps):
        per_rank = [rng.normal(size=int(n)) for n in sched[:, s]]
        union = np.concatenate(per_rank)
        # Execute: what the DDP all-reduce average computes
        averaged = sum(scales[s] * x.sum() for x in per_rank) / world
        # Assert
        expected = union.mean() if union.size else 0.0
        assert averaged == pytest.approx(expected, rel=1e-12, abs=1e-12)


# ---------------------------------------------------------------------------- makespan
def test_step_makespan_sums_the_slowest_rank_of_each_step():
    # Prepare: rank 0 is slow at step 0, rank 1 at step 1 — both totals are 4, the makespan 6
    times = np.array([[3.0, 1.0], [1.0, 3.0]])
    # Execute
    makespan = step_makespan(times)
    # Assert
    assert makespan == 6.0
    assert makespan > times.sum(axis=1).max()


# ---------------------------------------------------------------------------- sampler
@settings(max_examples=150, deadline=None)
@given(quotas=st.lists(st.integers(0, 50), min_size=1, max_size=6), steps=st.integers(1, 12),
       size=st.integers(1, 80), seed=st.integers(0, 1000), start=st.integers(0, 200))
def test_rank_batches_are_disjoint_and_their_union_is_the_single_process_batch(quotas, steps, size, seed, start):
    # Prepare
    sched = batch_schedule(quotas, steps)
    samplers = [ScheduleSampler(sched, r, size, seed=seed, start=start) for r in range(len(quotas))]
    reference = IndexStream(size, seed=seed, start=start)
    # Execute
    per_rank = [list(s) for s in samplers]
    # Assert
    for s in range(steps):
        global_batch = reference.take(int(sched[:, s].sum())).tolist()
        got = [per_rank[r][s] for r in range(len(quotas))]
        assert [len(b) for b in got] == sched[:, s].tolist()
        assert sum(got, []) == global_batch  # disjoint slices, rank order, nothing lost
    assert all(len(s) == steps for s in samplers)


@settings(max_examples=100, deadline=None)
@given(size=st.integers(1, 50), seed=st.integers(0, 1000), epochs=st.integers(1, 4))
def test_index_stream_visits_every_sample_once_per_epoch(size, seed, epochs):
    # Prepare
    stream = IndexStream(size, seed=seed)
    # Execute
    drawn = stream.take(size * epochs).reshape(epochs, size)
    # Assert
    for row in drawn:
        assert sorted(row.tolist()) == list(range(size))


def test_consecutive_rounds_continue_the_stream_instead_of_repeating_it():
    # Prepare
    sched = batch_schedule([7, 5], steps=3)
    first = ScheduleSampler(sched, 0, dataset_size=1000, seed=3, start=0)
    second = ScheduleSampler(sched, 0, dataset_size=1000, seed=3, start=first.end)
    # Execute
    a, b = sum(first, []), sum(second, [])
    # Assert
    assert first.end == 12
    assert not set(a) & set(b)
    assert first.samples == len(a) == 7


def test_sampler_rejects_a_rank_outside_the_schedule():
    # Execute / Assert
    with pytest.raises(ValueError, match="rank must be an int in"):
        ScheduleSampler(batch_schedule([2, 2], 2), rank=2, dataset_size=10)


# ---------------------------------------------------------------------------- EMA sizer
@settings(max_examples=200, deadline=None)
@given(world=st.integers(1, 8), batch=st.integers(0, 500),
       thr=st.lists(st.floats(0.01, 1000.0), min_size=8, max_size=8), min_batch=st.integers(0, 3))
def test_ema_split_sums_to_the_global_batch_and_respects_min_batch(world, batch, thr, min_batch):
    # Prepare
    sizer = EmaBatchSizer(world, smoothing=1.0, min_batch=min_batch)
    sizer.update(np.ones(world), thr[:world])  # throughput = thr (1 s per step)
    # Execute
    split = sizer.split(batch)
    # Assert
    assert int(split.sum()) == batch
    assert (split >= min(min_batch, batch // world)).all()


@settings(max_examples=200, deadline=None)
@given(thr=st.lists(st.floats(0.1, 100.0), min_size=2, max_size=8), batch=st.integers(50, 5000))
def test_ema_split_is_proportional_to_throughput_within_rounding(thr, batch):
    # Prepare
    world = len(thr)
    sizer = EmaBatchSizer(world, smoothing=1.0, min_batch=0)
    sizer.update(np.ones(world), thr)
    # Execute
    split = sizer.split(batch)
    # Assert
    ideal = np.array(thr) / sum(thr) * batch
    assert np.abs(split - ideal).max() < 1.0


def test_ema_update_blends_throughput_and_keeps_ranks_without_samples():
    # Prepare
    sizer = EmaBatchSizer(3, smoothing=0.25)
    sizer.update([1.0, 2.0, 4.0], [10, 10, 10])  # first observation initialises: 10, 5, 2.5
    # Execute
    sizer.update([1.0, 1.0, 0.0], [20, 0, 5])  # rank 1 empty, rank 2 bad time: both keep theirs
    # Assert
    assert sizer.throughput.tolist() == [0.25 * 20 + 0.75 * 10, 5.0, 2.5]


def test_ema_unmeasured_ranks_get_the_median_speed_and_start_equal():
    # Prepare
    sizer = EmaBatchSizer(4)
    # Execute
    first = sizer.split(100)
    sizer.update([1.0, 1.0, 1.0, 1.0], [10, 30, 0, 20])
    # Assert
    assert first.tolist() == [25, 25, 25, 25]
    assert sizer.weights().tolist() == [10.0, 30.0, 20.0, 20.0]


def test_ema_state_round_trips():
    # Prepare
    sizer = EmaBatchSizer(2)
    sizer.update([1.0, 2.0], [4, 0])
    other = EmaBatchSizer(2)
    # Execute
    other.load_state_dict(sizer.state_dict())
    # Assert
    assert other.split(9).tolist() == sizer.split(9).tolist()
    assert other.state_dict() == {"throughput": [4.0, None]}
