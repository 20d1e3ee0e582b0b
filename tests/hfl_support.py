"""Helpers of the HFL-DDP tests (``test_silo.py``, ``test_hfl.py``).

:func:`once_per_session` builds an expensive end-to-end fixture (DDP processes, a Flower
simulation) once per test session even under ``pytest -n 2``: pytest-xdist spreads a module's
tests over both workers, and each worker would otherwise build the module fixture itself (the
``loadgroup`` distribution that should prevent it does not group with this pytest / xdist pair).
The first worker builds and pickles the result next to the workers' temp dirs; the other waits on
a file lock and loads it. (The pytest-xdist documentation's recipe, with ``fcntl`` instead of
the filelock package.)
"""

from __future__ import annotations

import fcntl
import pickle
from typing import Any, Callable


def once_per_session(request, tmp_path_factory, name: str, build: Callable[[], Any]) -> Any:
    """``build()``'s result, computed by one worker of the session; it must be picklable."""
    # xdist's own worker_id fixture is missing under -p no:xdist: read the worker from the config
    worker_id = getattr(request.config, "workerinput", {}).get("workerid", "master")
    if worker_id == "master":  # not under xdist
        return build()
    root = tmp_path_factory.getbasetemp().parent
    path = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.exists():
                return pickle.loads(path.read_bytes())
            result = build()
            path.write_bytes(pickle.dumps(result))
            return result
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
