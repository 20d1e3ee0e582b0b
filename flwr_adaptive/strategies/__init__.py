"""Flower server side: the adaptive strategy for both Flower strategy APIs, and the baselines.

``AdaptiveStrategy`` wraps a Message-API strategy (``flwr.serverapp.strategy``, what ``flwr new``
generates); ``LegacyAdaptiveStrategy`` wraps a legacy one (``flwr.server.strategy``);
``HierarchicalAdaptiveStrategy`` splits each silo's budget among its DDP ranks. The baselines the
adaptive policies are compared with: ``StaticProfilingStrategy``, ``OortStrategy`` and
``FedAsyncStrategy``; ``build_strategy`` builds any of them from a policy name.

This package does not import torch (the server needs none).
"""

from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy
from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy
from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy, aggregate_silo_metrics
from flwr_adaptive.strategies.legacy_adaptive_strategy import LegacyAdaptiveStrategy
from flwr_adaptive.strategies.oort_strategy import OortStrategy
from flwr_adaptive.strategies.registry import POLICY_NAMES, build_strategy
from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy
from flwr_adaptive.strategies.trust import CostTrust

__all__ = [
    "AdaptiveStrategy",
    "LegacyAdaptiveStrategy",
    "HierarchicalAdaptiveStrategy",
    "StaticProfilingStrategy",
    "OortStrategy",
    "FedAsyncStrategy",
    "build_strategy",
    "aggregate_silo_metrics",
    "POLICY_NAMES",
    "CostTrust",
]
