"""The model a Message-API training round sent: what its replies' arrays are screened and rescaled against.

Contract
--------
:class:`SentModel` holds the ``ArrayRecord`` ``configure_train`` sent this round (:meth:`start`), its
layout (names, shapes, dtypes: :func:`~flwr_adaptive.strategies.screening.array_layout`; ``None``
for a record it cannot read, and before the first round: replies are then compared with each other)
and its arrays decoded once per round (:meth:`numpy`). :meth:`bound` is the rescale bound screening
checks each reply's values against (:class:`~flwr_adaptive.strategies.screening.RescaleBound`), and
:meth:`rescaled` moves a reply's model ``x_i`` to ``x + scale·(x_i − x)`` (normalised aggregation),
refusing with the reason a rescaled update that overflows its dtype when the factor is unbounded
(a bounded factor was checked at screening). Without a model sent nothing is rescaled.

Cost
----
One decode of the model per round (on first use); O(model) per rescaled reply.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord

from flwr_adaptive.strategies.records import rescaled_record
from flwr_adaptive.strategies.screening import (
    ArrayLayout,
    RescaleBound,
    array_layout,
    bounded_rescale,
    check_arrays,
    unbounded_rescale,
)

__all__ = ["SentModel"]


class SentModel:
    """The model sent this round, its layout and its decoded arrays (see the module contract)."""

    def __init__(self) -> None:
        self.arrays: ArrayRecord | None = None
        #: Names, shapes and dtypes of the model sent (``None``: replies are compared with each other).
        self.layout: ArrayLayout | None = None
        self._numpy: dict[str, np.ndarray] | None = None

    def start(self, arrays: ArrayRecord) -> None:
        """This round's model (``configure_train``)."""
        self.arrays, self._numpy = arrays, None
        try:
            self.layout = array_layout(arrays)
        except Exception:  # noqa: BLE001 - an unusual model record: replies are compared with each other
            self.layout = None

    def numpy(self) -> dict[str, np.ndarray] | None:
        """The model sent as ``{name: array}``, decoded once per round (``None``: none sent)."""
        if self.arrays is None:
            return None
        if self._numpy is None:
            self._numpy = {k: v.numpy() for k, v in self.arrays.items()}
        return self._numpy

    def bound(self, weighting: str, max_rescale: float | None) -> RescaleBound | None:
        """What screening checks a reply's values against so that its rescaled update fits its dtype
        (``None``: nothing to check, e.g. no normalised weighting or an unbounded factor)."""
        return bounded_rescale(weighting, max_rescale, self.numpy())

    def rescaled(
        self, record: ArrayRecord, scale: float, max_rescale: float | None
    ) -> tuple[ArrayRecord | None, str | None]:
        """``(record moved to x + scale·(x_i − x), None)``; ``(None, None)`` when there is nothing to
        rescale from (no model sent, or names the model lacks: screening refuses such a reply);
        ``(None, reason)`` when the rescaled update overflows (checked here for an unbounded factor
        only).

        Arrays are paired by name; only floating-point arrays move
        (:func:`flwr_adaptive.normalized_averaging.rescale_update`).
        """
        sent = self.numpy()
        if sent is None:
            return None, None
        new = rescaled_record(record, sent, scale)
        if new is None:
            return None, None
        if unbounded_rescale(max_rescale) and (reason := check_arrays(new, None)):
            return None, f"its update rescaled by {scale:.3g}: {reason}"
        return new, None
