"""flwr-adaptive: the framework-free core (numpy and psutil only; no flwr or torch at import time).

``controller`` re-splits a fixed sample budget by measured cost per sample; ``schedule`` turns
per-rank quotas into DDP batch schedules; ``energy`` measures; ``devices`` emulates a
heterogeneous testbed on a virtual clock.
"""

from flwr_adaptive.controller import POLICIES, AllocationController, Policy, Report

__all__ = ["AllocationController", "Report", "Policy", "POLICIES"]
__version__ = "0.1.0"
