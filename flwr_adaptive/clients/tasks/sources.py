"""Choosing between the Hugging Face hub and the offline data, and reading hub splits.

Contract
--------
``source="offline"`` never touches the network. ``source="hub"`` loads the hub dataset through
Flower Datasets and raises if it cannot. ``source="auto"`` (the default for users) decides in
this order, each step fast:

1. hub data already prepared in the per-machine cache → use it (no network needed);
2. ``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE`` set to a true value → offline data at once;
3. a TCP connect to the hub endpoint (``HF_ENDPOINT``, default huggingface.co:443; the
   ``HTTPS_PROXY`` when one is set) that does not succeed within ``HUB_CHECK_TIMEOUT_S`` →
   offline data;
4. otherwise try the hub; any failure → offline data, with the error in the log line.

Step 3 exists because an unreachable hub makes ``datasets`` retry for ≈ 23 s before failing; a
client must not stall a round for that.

Cost
----
At most ``HUB_CHECK_TIMEOUT_S`` (1.5 s) of waiting when the hub is unreachable; nothing when the
environment says offline or the hub data is cached.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from urllib.parse import urlparse

__all__ = [
    "SOURCES",
    "HUB_CHECK_TIMEOUT_S",
    "offline_by_env",
    "hub_reachable",
    "choose_source",
    "load_hub_split",
]

SOURCES = ("auto", "hub", "offline")
HUB_CHECK_TIMEOUT_S = 1.5
_TRUE = {"1", "true", "yes", "on"}


def offline_by_env() -> str | None:
    """The name of the environment variable that forbids hub access, or ``None``."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return var
    return None


def hub_reachable(timeout: float = HUB_CHECK_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub endpoint opens within ``timeout`` seconds.

    The connect (DNS lookup included, which ``socket`` timeouts do not bound) runs in a daemon
    thread so the caller waits at most ``timeout``.
    """
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    proxy = os.environ.get(f"{url.scheme}_proxy") or os.environ.get(f"{url.scheme.upper()}_PROXY")
    if proxy:  # behind a proxy the hub is reached through it, so the proxy is what must answer
        url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    ok: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def choose_source(source: str, hub_cached: bool, check: Callable[[], bool] = hub_reachable) -> tuple[str, str]:
    """Pick ``"hub"`` or ``"offline"`` for ``source`` and say why.

    Parameters
    ----------
    source : {"auto", "hub", "offline"}
    hub_cached : bool
        Whether the hub data is already in the per-machine cache.
    check : callable
        Connectivity check (injected by tests).

    Returns
    -------
    choice, reason : str, str
    """
    if source not in SOURCES:
        raise ValueError(f"source={source!r} is not known; use one of {', '.join(SOURCES)}")
    if source != "auto":
        return source, f"source={source!r}"
    if hub_cached:
        return "hub", "hub data cached on this machine"
    var = offline_by_env()
    if var:
        return "offline", f"{var} is set"
    if not check():
        return "offline", "hub unreachable"
    return "hub", "hub reachable"


def load_hub_split(dataset: str, split: str):
    """One split of a hub dataset through Flower Datasets (downloaded once, cached by ``datasets``).

    The partitioner is a placeholder: partitioning happens later over the prepared arrays, the
    same way for hub and offline data.
    """
    from flwr_datasets import FederatedDataset

    fds = FederatedDataset(dataset=dataset, partitioners={"train": 1}, shuffle=False)
    return fds.load_split(split)
