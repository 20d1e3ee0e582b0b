"""node_partition: a SuperNode's partition identity, or an error that gives the --node-config fix."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flwr_adaptive.clients import node_partition


@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n))))
def test_valid_ids_come_back_as_ints_whatever_type_the_node_config_used(pair):
    pid, n = pair
    assert node_partition({"partition-id": pid, "num-partitions": n}) == (pid, n)
    assert node_partition({"partition-id": float(pid), "num-partitions": str(n), "slowdown": 4}) == (pid, n)


@pytest.mark.parametrize("config", [
    {}, {"num-partitions": 3}, {"partition-id": 0}, {"partition-id": "a", "num-partitions": 3},
    {"partition-id": 1.5, "num-partitions": 3}, {"partition-id": 3, "num-partitions": 3},
    {"partition-id": -1, "num-partitions": 3}, {"partition-id": True, "num-partitions": 3},
    {"partition-id": 0, "num-partitions": 0},
])
def test_a_missing_or_bad_partition_id_names_the_config_and_the_node_config_line(config):
    with pytest.raises(ValueError, match=r'--node-config "partition-id=<i> num-partitions=<n>"'):
        node_partition(config)
