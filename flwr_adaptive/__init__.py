"""flwr-adaptive: the framework-free core (numpy and psutil only; no flwr or torch at import time).

``controller`` re-splits a fixed sample budget by measured cost per sample; ``schedule`` turns
per-rank quotas into DDP batch schedules; ``energy`` measures; ``devices`` emulates a
heterogeneous testbed on a virtual clock.

The names below are imported on first use (PEP 562): a client that imports only
``flwr_adaptive.clients`` (a Flower ClientApp process, started once per message under the
Deployment Engine) does not pay for the controller and its solver.
"""

from typing import Any

__all__ = ["AllocationController", "Report", "Policy", "POLICIES"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from flwr_adaptive import controller

        return getattr(controller, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
