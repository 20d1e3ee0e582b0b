"""``quota_data(DataLoader(..., num_workers>0, persistent_workers=True))`` built outside the training call reads each
call's own quota: the workers kept between epochs of one call are not kept into the next call (they would read the
selection of the call that started them)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from flwr_adaptive.clients.data import QuotaWindow, close_window, open_window, quota_data


@pytest.mark.parametrize(
    "context", [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]
)
def test_persistent_workers_read_each_calls_own_quota(context):
    # Prepare: the user's loader with persistent workers, wrapped once (client_fn), read in three calls
    x = torch.arange(200, dtype=torch.float32)
    user = DataLoader(TensorDataset(x), batch_size=32, num_workers=1, persistent_workers=True,
                      multiprocessing_context=context)
    loader = quota_data(user)
    for server_round, quota in ((1, 20), (2, 60), (3, 40)):
        window = QuotaWindow(quota, seed=1, partition=0, server_round=server_round)
        token = open_window(window)
        try:
            # Execute: two epochs in the call
            epochs, workers = [], []
            for _ in range(2):
                epochs.append(sorted(int(v) for b in loader for v in b[0]))
                workers.append(loader._iterator)
        finally:
            close_window(token)
        # Assert: each epoch reads exactly this call's selection (round 2 raised IndexError in the worker, round 3
        # read round 1's 20 samples, before)
        expected = sorted(int(i) for i in window.indices(200))
        assert epochs == [expected, expected] and len(expected) == quota
        assert workers[0] is workers[1] is not None  # kept between the epochs of one call
