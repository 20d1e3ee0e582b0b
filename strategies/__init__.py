"""Flower server side: the adaptive strategy for both Flower strategy APIs.

``AdaptiveStrategy`` wraps a Message-API strategy (``flwr.serverapp.strategy``, what ``flwr new``
generates); ``LegacyAdaptiveStrategy`` wraps a legacy one (``flwr.server.strategy``). Both share
:class:`strategies.core.AdaptiveCore`: quotas out, telemetry in, history and resumable state.
"""

from strategies.core import AdaptiveCore
from strategies.legacy import LegacyAdaptiveStrategy
from strategies.message import AdaptiveStrategy
from strategies.reports import ClientReport, parse_report

__all__ = ["AdaptiveStrategy", "LegacyAdaptiveStrategy", "AdaptiveCore", "ClientReport", "parse_report"]
