"""The records of the messages the Message-API strategy reads and builds, without Flower's views.

Contract
--------
``RecordDict.array_records`` / ``.metric_records`` build a new typed dictionary, validating every
entry, on each access; screening a reply touched them half a dozen times, which was about half of
the strategy's own time per reply at 1,000 sampled nodes (``python -m experiments.scale``).
:func:`split_records` walks ``content.items()`` once and returns the ``(name, record)`` pairs of
each kind; the records are the reply's own objects (editing one edits the reply).
:func:`with_config` returns a new message to the same node with ``extra`` merged into each of
its ConfigRecords (the inner strategy's own entries kept), or in a new one under ``default_key``
when it has none. :func:`rescaled_record` is a reply's ArrayRecord moved to ``x + scale·(x_i −
x)`` from the model sent, paired by name (normalised aggregation;
:func:`flwr_adaptive.normalized_averaging.rescale_update`: only floating-point arrays move), or
``None`` when the reply holds a name the model sent does not. :func:`cast_record` is a reply's
ArrayRecord with the named arrays cast to the given dtypes (screening casts a lower-precision reply
up to the model's), and :func:`replace_record` puts a new ArrayRecord in a reply in place of its old
one. :func:`with_model_dtypes` puts the aggregate's arrays back at the dtypes of the model sent where
Flower's average changed them (``screening.at_model_dtype``: an int64 buffer came back float64, a
float64 model float32, and from the next round on every honest reply no longer matched the model).

Cost
----
``split_records``: O(records in the reply), no validation, no copies; ``with_config``: one
ConfigRecord copy, the ArrayRecord shared; ``rescaled_record``: one pass over the model;
``cast_record``: one copy of each array it casts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, ConfigRecordValues, Message, MetricRecord, RecordDict

from flwr_adaptive.normalized_averaging import rescale_update
from flwr_adaptive.strategies.screening import at_model_dtype

__all__ = ["split_records", "with_config", "rescaled_record", "cast_record", "replace_record", "with_model_dtypes"]


def split_records(content: Any) -> tuple[list[tuple[str, ArrayRecord]], list[tuple[str, MetricRecord]]]:
    """``(array records, metric records)`` of a ``RecordDict`` as ``(name, record)`` lists."""
    arrays, metrics = [], []
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            arrays.append((name, record))
        elif isinstance(record, MetricRecord):
            metrics.append((name, record))
    return arrays, metrics


def with_config(msg: Message, extra: Mapping[str, ConfigRecordValues], default_key: str) -> Message:
    """A new message to ``msg``'s node with ``extra`` added to its config (see the module docstring)."""
    content = RecordDict()
    found = False
    for name, record in msg.content.items():
        if isinstance(record, ConfigRecord):
            record, found = ConfigRecord({**record, **extra}), True
        content[name] = record
    if not found:
        content[default_key] = ConfigRecord(dict(extra))
    return Message(
        content=content,
        dst_node_id=msg.metadata.dst_node_id,
        message_type=msg.metadata.message_type,
        group_id=msg.metadata.group_id or None,
    )


def rescaled_record(record: ArrayRecord, sent: Mapping[str, np.ndarray], scale: float) -> ArrayRecord | None:
    """``record`` moved to ``x + scale·(x_i − x)`` (``sent``: the model sent, by name), or ``None``."""
    names = list(record.keys())
    if any(k not in sent for k in names):
        return None
    moved = rescale_update([sent[k] for k in names], [record[k].numpy() for k in names], scale)
    return ArrayRecord(array_dict=OrderedDict((k, Array(v)) for k, v in zip(names, moved)))


def cast_record(record: ArrayRecord, dtypes: Mapping[str, str]) -> ArrayRecord:
    """``record`` with each array named in ``dtypes`` cast to its dtype, the others as they are."""
    return ArrayRecord(
        array_dict=OrderedDict((k, Array(v.numpy().astype(dtypes[k])) if k in dtypes else v) for k, v in record.items())
    )


def replace_record(msg: Message, old: ArrayRecord, new: ArrayRecord) -> None:
    """Put ``new`` in ``msg``'s content under the name(s) that hold ``old``."""
    for name, rec in list(msg.content.items()):
        if rec is old:
            msg.content[name] = new


def with_model_dtypes(record: ArrayRecord, sent: Mapping[str, np.ndarray]) -> ArrayRecord:
    """``record`` with each array the average moved off the dtype ``sent`` holds put back at it
    (``screening.at_model_dtype``); the record itself when none moved."""
    moved = {k for k, v in record.items() if k in sent and str(v.dtype) != str(sent[k].dtype)}
    if not moved:
        return record
    return ArrayRecord(
        array_dict=OrderedDict(
            (k, Array(np.asarray(at_model_dtype(v.numpy(), sent[k].dtype))) if k in moved else v)
            for k, v in record.items()
        )
    )
