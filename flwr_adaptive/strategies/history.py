"""The per-round and per-client history tables every server strategy of this package keeps.

Contract
--------
A class that mixes in :class:`HistoryMixin` appends plain ``dict`` rows to ``self._round_rows``
(one per round; per round-equivalent for FedAsync) and ``self._client_rows`` (one per client and
round, or per job). ``history`` and ``client_history`` return them as ``pandas.DataFrame``\\s and
``save_history(path)`` writes both as CSV: ``path`` and ``<stem>-clients<suffix>`` next to it.
``append_history(path, server_round)`` appends only that round's rows to the same two files
(header when a file is new): called after every round, a run that dies keeps its history, and
a resumed run continues the files of the run it resumes.

:class:`RunHistory` is the component the round coordinator
(:class:`~flwr_adaptive.strategies.core.AdaptiveCore`) holds: the two tables (the client rows
a :class:`ClientRows`), ``path`` (``history_path``) and ``write_round(server_round)``, which
appends the round to ``path`` after every round; a fresh run (``resumed`` False) first clears the
files a previous run left there, so two runs never mix in one file; a write that fails (disk
full) is one warning and the rows stay in memory.

``self._client_rows`` may be a :class:`ClientRows`: it keeps at most ``limit`` rows in memory and
appends older ones, as CSV, to an anonymous temporary file (deleted when the strategy is), so a
long cross-device run holds a bounded number of rows however many clients it samples;
``client_history`` still returns every row (the spilled ones read back from the CSV, so their
types are those ``pandas.read_csv`` infers: ``None`` becomes NaN).

Cost
----
One DataFrame built per access (pandas is imported then, not at import time). A spill writes the
rows in memory once (``csv`` module, no pandas); memory is O(limit) rows.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Iterator
from logging import WARNING
from pathlib import Path
from typing import Any

from flwr_adaptive._logging import logger

__all__ = ["HistoryMixin", "RunHistory", "ClientRows", "CLIENT_ROWS_IN_MEMORY", "checked_history_path"]

#: Client rows an adaptive strategy keeps in memory before spilling older ones to a temporary CSV
#: (about 0.7 KB each: ~14 MB).
CLIENT_ROWS_IN_MEMORY = 20_000


def checked_history_path(history_path: str | os.PathLike | None) -> str | os.PathLike | None:
    """``history_path`` as given (a CSV file path or ``None``), or ``ValueError`` with the fix."""
    if history_path is not None and not isinstance(history_path, (str, os.PathLike)):
        raise ValueError(
            f"history_path must be a CSV file path (str or pathlib.Path), got {type(history_path).__name__} "
            f"{history_path!r}; pass e.g. history_path='history.csv', or None"
        )
    return history_path


class ClientRows:
    """An append-only list of row dicts holding at most ``limit`` of them in memory.

    Parameters
    ----------
    limit : int (default: ``CLIENT_ROWS_IN_MEMORY``)
        Rows kept in memory; when one more is appended, the rows in memory are written to the
        spill file and dropped. The columns are those of the first row spilled; a later row's
        unknown keys are dropped from the spill (the strategies write one fixed set of keys).
    """

    def __init__(self, limit: int = CLIENT_ROWS_IN_MEMORY) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1 (rows kept in memory), got {limit!r}")
        self.limit = limit
        self._rows: list[dict[str, Any]] = []
        self._spill: Any = None  # text file, opened on the first spill
        self._writer: csv.DictWriter | None = None
        self._spilled = 0

    def append(self, row: dict[str, Any]) -> None:
        """Add one row (spilling the rows in memory first when ``limit`` is reached)."""
        if len(self._rows) >= self.limit:
            self._write_out()
        self._rows.append(row)

    def _write_out(self) -> None:
        if self._writer is None:
            self._spill = tempfile.TemporaryFile("w+", newline="", prefix="flwr-adaptive-clients-")
            self._writer = csv.DictWriter(self._spill, fieldnames=list(self._rows[0]), extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerows(self._rows)
        self._spilled += len(self._rows)
        self._rows = []

    @property
    def in_memory(self) -> int:
        """Rows held in memory now (at most ``limit``)."""
        return len(self._rows)

    @property
    def spilled(self) -> int:
        """Rows written to the spill file so far."""
        return self._spilled

    def __len__(self) -> int:
        return self._spilled + len(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The rows in memory only (the spilled ones are read by :meth:`frame`)."""
        return iter(self._rows)

    def frame(self):
        """Every row, spilled and in memory, as one ``pandas.DataFrame``."""
        import pandas as pd

        recent = pd.DataFrame(self._rows)
        if self._spill is None:
            return recent
        self._spill.flush()
        self._spill.seek(0)
        old = pd.read_csv(io.StringIO(self._spill.read()))
        self._spill.seek(0, os.SEEK_END)
        return pd.concat([old, recent], ignore_index=True) if len(recent) else old


class HistoryMixin:
    """``history`` / ``client_history`` / ``save_history`` over rows the strategy appends."""

    _round_rows: list[dict[str, Any]]
    _client_rows: list[dict[str, Any]] | ClientRows

    @property
    def history(self):
        """One row per round (per round-equivalent for FedAsync), as a ``pandas.DataFrame``."""
        import pandas as pd

        return pd.DataFrame(self._round_rows)

    @property
    def client_history(self):
        """One row per client and round (per job for FedAsync; skipped clients included)."""
        import pandas as pd

        if isinstance(self._client_rows, ClientRows):
            return self._client_rows.frame()
        return pd.DataFrame(self._client_rows)

    def save_history(self, path: str | os.PathLike) -> None:
        """Write ``history`` to ``path`` and ``client_history`` next to it (CSV)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.history.to_csv(path, index=False)
        self.client_history.to_csv(path.with_name(path.stem + "-clients" + path.suffix), index=False)

    def append_history(self, path: str | os.PathLike, server_round: int) -> None:
        """Append the rows of ``server_round`` to ``path`` and its ``-clients`` file (CSV)."""
        import pandas as pd

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for rows, target in (
            (self._round_rows, path),
            (self._client_rows, path.with_name(path.stem + "-clients" + path.suffix)),
        ):
            if isinstance(rows, ClientRows) and rows.spilled:  # some rows (maybe of this round) are in the spill file
                frame = rows.frame()
                new = frame[frame["round"] == server_round]
            else:
                new = pd.DataFrame([r for r in rows if r.get("round") == server_round])
            append_csv(new, target)


def append_csv(rows: Any, target: Path) -> None:
    """Append the ``pandas.DataFrame`` ``rows`` to the CSV ``target`` (its header only into an empty or new file)."""
    if len(rows):
        rows.to_csv(target, mode="a", header=not (target.exists() and target.stat().st_size > 0), index=False)


class RunHistory(HistoryMixin):
    """The round and client tables of one strategy, and their per-round CSV (see the module docstring)."""

    def __init__(self) -> None:
        self._round_rows: list[dict[str, Any]] = []
        self._client_rows: list[dict[str, Any]] | ClientRows = ClientRows()  # older rows spilled to a temporary CSV
        #: CSV the round's rows are appended to after every round (``None``: in memory only).
        self.path: str | os.PathLike | None = None
        #: Whether the run resumed a saved state: its files are continued, not cleared.
        self.resumed = False
        self._started = False

    def add_round(self, row: dict[str, Any]) -> None:
        """One row per round."""
        self._round_rows.append(row)

    def add_client(self, row: dict[str, Any]) -> None:
        """One row per client and round (skipped clients included)."""
        self._client_rows.append(row)

    def write_round(self, server_round: int) -> None:
        """Append this round's rows to ``path`` (a fresh run first clears old files); never raises on I/O."""
        if self.path is None:
            return
        path = Path(self.path)
        if not self._started:
            self._started = True
            if not self.resumed:
                for old in (path, path.with_name(path.stem + "-clients" + path.suffix)):
                    old.unlink(missing_ok=True)
        try:
            self.append_history(path, server_round)
        except OSError as err:  # a full disk must not stop training: the rows stay in memory
            logger.log(
                WARNING, "[adaptive] round %s: history not written to %s (%s); kept in memory", server_round, path, err
            )
