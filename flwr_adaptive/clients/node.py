"""Which partition a SuperNode serves: the one identity that survives restarts.

Contract
--------
Flower's node ids are random and change whenever a SuperNode restarts; the partition id a node
is started with (``flower-supernode --node-config "partition-id=<i> num-partitions=<n>"``; the
simulation engine sets both) does not. :func:`node_partition` reads the pair from a node config
and raises a ``ValueError`` that names the config it got and the ``--node-config`` line to add
when either is missing or not an integer, so a misconfigured SuperNode fails its first message
with the fix instead of training on the wrong data.

Cost
----
Two dict look-ups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["node_partition"]


def node_partition(node_config: Mapping[str, Any]) -> tuple[int, int]:
    """``(partition-id, num-partitions)`` of this node.

    Parameters
    ----------
    node_config : mapping
        ``context.node_config`` of the ClientApp.

    Raises
    ------
    ValueError
        Either key missing, not an integer, or the id outside ``0..num-partitions-1``.
    """
    fix = (
        'start the SuperNode with --node-config "partition-id=<i> num-partitions=<n>" '
        "(a distinct i in 0..n-1 per SuperNode)"
    )
    try:
        pid, n = node_config["partition-id"], node_config["num-partitions"]
    except KeyError:
        raise ValueError(
            f"this SuperNode's node config {dict(node_config)!r} lacks partition-id and num-partitions: {fix}"
        ) from None
    if any(isinstance(v, bool) or not isinstance(v, (int, float, str)) for v in (pid, n)):
        raise ValueError(f"node config partition-id={pid!r} num-partitions={n!r} must be integers: {fix}")
    try:
        pid_i, n_i = int(pid), int(n)
    except ValueError:
        raise ValueError(f"node config partition-id={pid!r} num-partitions={n!r} must be integers: {fix}") from None
    if float(pid) != pid_i or float(n) != n_i or n_i < 1 or not 0 <= pid_i < n_i:
        raise ValueError(
            f"node config partition-id={pid!r} num-partitions={n!r}: need integers with "
            f"0 <= partition-id < num-partitions; {fix}"
        )
    return pid_i, n_i
