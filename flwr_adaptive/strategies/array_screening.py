"""The Message-API train replies whose arrays can be averaged into the model, and the rest skipped.

Contract
--------
:func:`usable_arrays` keeps the replies whose ArrayRecord matches the reference layout (the model
sent this round: names, shapes, dtypes) and holds finite values (``screening.check_arrays``); each
other reply is marked ``"invalid"`` in ``skipped`` with one warning naming its node and why (its
update would break the inner average or corrupt the model). A kept reply holding an array at lower
precision than the model's gets it cast up to the model's dtype, in the reply and in
``records_of`` (``screening.lower_precision``); ``value_checks`` runs a further check on each array
as it is decoded (the strategies': ``screening.RescaleBound``, which skips a reply whose update could
overflow its dtype when rescaled, and the update-size screen's measurement). Without a known model layout
(``configure_train`` not called) the most common layout among the replies is the reference, so a
minority of odd replies cannot set it.

Cost
----
One layout and finiteness check per reply (``check_arrays``), one copy of each array cast up; the
fallback reference decodes each reply's layout once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, MutableMapping
from logging import WARNING
from typing import Any

from flwr.app import Message

from flwr_adaptive._logging import logger
from flwr_adaptive.strategies.records import cast_record, replace_record
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.screening import ArrayLayout, array_layout, check_arrays, lower_precision
from flwr_adaptive.strategies.update_size import ValueCheck

__all__ = ["usable_arrays"]


def usable_arrays(
    server_round: int,
    pairs: list[tuple[Message, ClientReport]],
    skipped: dict[Hashable, str],
    reference: ArrayLayout | None,
    records_of: MutableMapping[int, tuple[Any, Any]],
    who: Callable[[Hashable], str],
    value_checks: Callable[[Hashable], ValueCheck | None] | None = None,
) -> list[tuple[Message, ClientReport]]:
    """The ``(reply, report)`` pairs whose arrays can be averaged (see the module docstring).

    ``records_of``: ``{id(reply): (its ArrayRecord, its MetricRecord)}`` as screening found them;
    ``who``: how a log line names a node; ``value_checks(node)``: the ``check_arrays`` value check for
    that node's reply (``None``: none).
    """
    if reference is None and pairs:
        layouts = []
        for msg, _ in pairs:
            try:
                layouts.append(tuple(sorted(array_layout(next(iter(msg.content.array_records.values()))).items())))
            except Exception:  # noqa: BLE001 - undecodable: check_arrays says why below
                layouts.append(())
        reference = dict(Counter(layouts).most_common(1)[0][0])
    kept = []
    for msg, report in pairs:
        record = records_of[id(msg)][0] if id(msg) in records_of else next(iter(msg.content.array_records.values()))
        reason = check_arrays(record, reference, value_checks(report.node_id) if value_checks else None)
        if reason is None:
            if dtypes := lower_precision(array_layout(record), reference):
                cast = cast_record(record, dtypes)
                replace_record(msg, record, cast)
                if id(msg) in records_of:
                    records_of[id(msg)] = (cast, records_of[id(msg)][1])
            kept.append((msg, report))
            continue
        skipped[report.node_id] = "invalid"
        logger.log(
            WARNING,
            "[adaptive] round %s: %s: %s; skipped (its update would break or corrupt the average)",
            server_round,
            who(report.node_id),
            reason,
        )
    return kept
