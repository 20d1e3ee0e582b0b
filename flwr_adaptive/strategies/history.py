"""The per-round and per-client history tables every server strategy of this package keeps.

Contract
--------
A class that mixes in :class:`HistoryMixin` appends plain ``dict`` rows to ``self._round_rows``
(one per round; per round-equivalent for FedAsync) and ``self._client_rows`` (one per client and
round, or per job). ``history`` and ``client_history`` return them as ``pandas.DataFrame``\\s and
``save_history(path)`` writes both as CSV: ``path`` and ``<stem>-clients<suffix>`` next to it.

Cost
----
One DataFrame built per access (pandas is imported then, not at import time).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["HistoryMixin"]


class HistoryMixin:
    """``history`` / ``client_history`` / ``save_history`` over rows the strategy appends."""

    _round_rows: list[dict[str, Any]]
    _client_rows: list[dict[str, Any]]

    @property
    def history(self):
        """One row per round (per round-equivalent for FedAsync), as a ``pandas.DataFrame``."""
        import pandas as pd

        return pd.DataFrame(self._round_rows)

    @property
    def client_history(self):
        """One row per client and round (per job for FedAsync; skipped clients included)."""
        import pandas as pd

        return pd.DataFrame(self._client_rows)

    def save_history(self, path: str | os.PathLike) -> None:
        """Write ``history`` to ``path`` and ``client_history`` next to it (CSV)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.history.to_csv(path, index=False)
        self.client_history.to_csv(path.with_name(path.stem + "-clients" + path.suffix), index=False)
