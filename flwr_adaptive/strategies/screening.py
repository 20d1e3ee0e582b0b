"""Screening of untrusted replies: what the inner aggregation needs, checked before it runs.

Contract
--------
Clients are untrusted: a reply may carry arrays of another shape or dtype than the model that was
sent, non-finite weights, metric keys the others do not send, or come twice. The strategies call
these functions before the inner Flower strategy (``FedAvg``…) sees a reply, so that one reply can
neither stop the round (Flower's aggregation raises on a shape mismatch or on replies whose keys
differ) nor corrupt the global model (one NaN weight makes the average NaN):

- :func:`array_layout` and :func:`check_arrays` compare a reply's arrays with the layout of the
  model the server sent (same names, shapes and dtypes; a floating-point array may come back at
  lower precision, as a float32 client returns a model its inner FedAdam sent as float64) and
  require finite values. The layout the
  server sent is the reference, not the majority's: a colluding majority cannot make the model
  change shape. :func:`lower_precision` names the arrays of an accepted reply to cast up to the
  model's dtype (at most float32) before they are rescaled or averaged: a float16 reply's
  precision must not become the model's. :func:`at_model_dtype` puts an aggregate back at the
  model's dtype where Flower's average changed it. :func:`rescale_reason` (:class:`RescaleBound`, which
  :func:`check_arrays` can run as it decodes) refuses a reply whose update could overflow its dtype
  when normalised aggregation rescales it.
- :func:`check_ndarrays` does the same for the legacy API's deserialised ``Parameters``.
- :func:`check_weight` checks an evaluation reply's weight (``num-examples``, which the
  inner strategy divides by): a finite number in ``[0, MAX_COUNT]``. A negative weight could
  cancel the others' (a division by zero out of the inner aggregation) or flip the average.
- :func:`harmonize_metrics` decides key consistency on what aggregation needs: every kept reply
  keeps the metric keys that **all** kept replies carry with a value of the same kind (number, or
  list of one length when ``strict_lists``); other keys are removed from the replies that carry
  them, so an extra key sent by a majority never gets the minority skipped. Records are renamed to
  one name per kind, as Flower's consistency check requires.

- :func:`size_reason` runs first, on the wire shapes alone: how many metric keys, how long each
  list (or string), how many arrays and how many bytes each holds against the model sent. A
  reply beyond :data:`MAX_METRIC_KEYS` keys or :data:`MAX_METRIC_VALUES` values, or with an
  array of more bytes than the model's array (plus a ``.npy`` header), is skipped before any
  value is looked at: a 10,000,000-entry list costs one ``len``, not a pass over its entries.

Every function returns a reason (a short string for the log line) or ``None``; none raises on
hostile input.

Cost
----
:func:`size_reason`: O(keys) ``len`` calls per reply, at most :data:`MAX_METRIC_KEYS` (one
``len`` of the record first), and one ``len`` per array: no element is read. Then one pass over
each kept reply's arrays (``Array.numpy()`` once, as the inner aggregation does anyway) and
O(replies × values) for the metrics, values bounded by :data:`MAX_METRIC_VALUES` per reply. The
reply itself was deserialised by Flower before the strategy sees it (its size is bounded by the
transport's message limit); screening adds no copy of it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from flwr_adaptive.normalized_averaging import aggregation_dtype
from flwr_adaptive.strategies.reports import MAX_COUNT

__all__ = [
    "MAX_METRIC_KEYS",
    "MAX_METRIC_VALUES",
    "size_reason",
    "record_sizes",
    "ArrayLayout",
    "array_layout",
    "ndarray_layout",
    "check_arrays",
    "check_ndarrays",
    "lower_precision",
    "at_model_dtype",
    "rescale_reason",
    "RescaleBound",
    "bounded_rescale",
    "unbounded_rescale",
    "check_weight",
    "harmonize_metrics",
    "metric_kind",
    "describe_removed",
]

ArrayLayout = dict[str, tuple[tuple[int, ...], str]]  # array name -> (shape, dtype)

#: Most metric keys one reply may carry. The telemetry is a dozen keys and a train function's own
#: metrics a handful; 1,024 leaves room for per-class metrics while bounding the pure-Python
#: passes over a reply's keys (100,000 keys took seconds per round).
MAX_METRIC_KEYS = 1024
#: Most metric values one reply may carry, every list entry (and, legacy API, every character of
#: a str or byte of a bytes) counted. Below it the values are screened one by one in pure Python
#: (about half a microsecond each), so 11 replies at the limit cost ~40 ms per round; a
#: 10,000,000-entry list took over a second. HFL's per-rank lists are bounded by their own rule.
MAX_METRIC_VALUES = 8192
#: Bytes an array's ``.npy`` serialisation may hold beyond its values: the header (a few hundred
#: bytes for any shape a model has).
NPY_HEADER_SLACK = 4096


def _nbytes(shape: tuple[int, ...], dtype: str) -> int | None:
    try:
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    except (TypeError, ValueError, OverflowError):
        return None


def record_sizes(record: Any) -> dict[str, int]:
    """``{array name: bytes on the wire}`` of a Flower ``ArrayRecord`` (no array is decoded)."""
    return {str(name): len(arr.data) for name, arr in record.items()}


def size_reason(
    metrics: Any,
    array_bytes: Mapping[str, int] | None = None,
    reference: ArrayLayout | None = None,
    sized_elsewhere: Collection[str] = (),
) -> str | None:
    """Why a reply is too large to screen value by value, or ``None``; reads sizes only.

    Parameters
    ----------
    metrics : Mapping
        The reply's metrics (a ``MetricRecord``, a ``ConfigRecord``-like mapping or legacy
        ``FitRes.metrics``).
    array_bytes : mapping, optional
        ``{array name: serialised bytes}`` (:func:`record_sizes`; legacy: each tensor's length).
    reference : dict, optional
        Layout of the model the server sent: each array may hold its values' bytes plus a
        ``.npy`` header, and there may be no more arrays than the model has.
    sized_elsewhere : collection of str
        Keys whose lists the caller bounds by its own rule, by length, before reading them (HFL's
        per-rank lists, at most the silo's plannable ranks): each counts as one value here.
    """
    try:
        count = len(metrics)
        if count > MAX_METRIC_KEYS:
            return f"{count} metric keys, more than the {MAX_METRIC_KEYS} a reply may carry"
        total, longest, longest_key = 0, 0, None
        for key, value in metrics.items():
            sized = isinstance(value, (list, tuple, str, bytes, bytearray)) and key not in sized_elsewhere
            n = len(value) if sized else 1
            total += n
            if n > longest:
                longest, longest_key = n, key
        if total > MAX_METRIC_VALUES:
            return (
                f"{total} metric values (the longest, {longest_key!r}, holds {longest}), more than the "
                f"{MAX_METRIC_VALUES} a reply may carry (aggregate long metrics in the client before replying)"
            )
        if array_bytes is not None and reference is not None:
            if len(array_bytes) > len(reference):
                return f"{len(array_bytes)} arrays, the model has {len(reference)}"
            for name, size in array_bytes.items():
                want = reference.get(str(name))
                limit = None if want is None else _nbytes(*want)
                if limit is not None and size > limit + NPY_HEADER_SLACK:
                    return f"array {name!r} holds {size} bytes, the model's {limit} (+ a header)"
    except Exception as err:  # noqa: BLE001 - a record that cannot even be sized is the client's fault
        return f"the reply cannot be sized ({type(err).__name__}: {err})"
    return None


def array_layout(record: Any) -> ArrayLayout:
    """``{name: (shape, dtype)}`` of a Flower ``ArrayRecord`` (what a reply must match)."""
    return {str(name): (tuple(int(d) for d in arr.shape), str(arr.dtype)) for name, arr in record.items()}


def ndarray_layout(arrays: Sequence[np.ndarray]) -> ArrayLayout:
    """The layout of a list of numpy arrays (legacy ``Parameters``), keyed by position."""
    return {str(i): (tuple(a.shape), str(a.dtype)) for i, a in enumerate(arrays)}


def _finite_reason(name: str, values: np.ndarray) -> str | None:
    if values.dtype.kind in "fc" and values.size and not np.isfinite(values).all():
        bad = int(values.size - np.isfinite(values).sum())
        return f"array {name!r} holds {bad} non-finite value(s) (NaN or inf)"
    return None


def _same_values(shape: tuple[int, ...], dtype: str, want_shape: tuple[int, ...], want_dtype: str) -> bool:
    """A floating-point array at no more precision than the model's: the model's values, as the client's
    model holds them. Flower's FedAdam / FedYogi / FedAdagrad return float64 arrays from float32 replies
    (a NumPy float64 scalar promotes them), and a torch client loads them into its float32 model and sends
    float32 back: the same model, not another one."""
    try:
        got, want = np.dtype(dtype), np.dtype(want_dtype)
    except TypeError:
        return False
    return shape == want_shape and got.kind == want.kind == "f" and got.itemsize <= want.itemsize


def lower_precision(layout: ArrayLayout, reference: ArrayLayout | None) -> dict[str, str]:
    """``{name: dtype}`` for the arrays of an accepted reply held below single precision, each with the
    dtype it is cast up to (:func:`flwr_adaptive.normalized_averaging.aggregation_dtype`: the model's,
    at most float32).

    The strategies cast these up before anything else reads the reply. Left as sent, such a reply would
    set the precision of what it touches: Flower's average accumulates in the first reply's dtype (a
    float16 first reply made the global model float16, and every float32 reply of the next round then
    had more precision than the model and was refused), and a rescaled update cast back to float16
    overflows at 65504. float32 replies to a float64 model (FedAdam's) are left as they are.
    """
    if reference is None:
        return {}
    out = {}
    for name, (_, dtype) in layout.items():
        if name in reference and dtype != reference[name][1]:
            try:
                target = str(aggregation_dtype(np.dtype(reference[name][1]), np.dtype(dtype)))
            except TypeError:  # a dtype numpy does not know: the layout check refused it already
                continue
            if target != dtype:
                out[name] = target
    return out


def at_model_dtype(aggregate: np.ndarray, model: np.dtype) -> np.ndarray:
    """An aggregated array back at the dtype of the model sent, where the average changed it.

    Flower's average multiplies each reply by a float weight and accumulates in the first reply's
    dtype: an int64 buffer (BatchNorm's ``num_batches_tracked``) comes back float64, and a float64
    model whose first reply was float32 comes back float32; either way every reply of the next round
    at the model's dtype would no longer match it and be refused. An integer aggregate is rounded and
    clipped to the dtype's range (a server optimizer can move a uint8 buffer below 0); a boolean one
    is the majority (an average of at least 0.5 is ``True``); a float one is cast up. An array at the
    model's dtype, or above it, is returned as it is.
    """
    model = np.dtype(model)
    if aggregate.dtype == model or aggregate.dtype.kind not in "fiub":
        return aggregate
    if model.kind == "b":
        return np.asarray(aggregate >= 0.5)
    if model.kind in "iu" and aggregate.dtype.kind == "f":
        info = np.iinfo(model)
        rounded = np.clip(np.rint(np.nan_to_num(aggregate)), float(info.min), float(info.max))
        return np.asarray(rounded).astype(model)
    if model.kind == "f" and aggregate.dtype.kind == "f" and aggregate.dtype.itemsize < model.itemsize:
        return aggregate.astype(model)
    return aggregate


class RescaleBound:
    """Why one reply array's update could overflow once rescaled by up to ``max_rescale`` from the model
    sent (normalised aggregation: ``x + s·(x_i − x)``, ``0 < s ≤ max_rescale``), or ``None``.

    ``|x + s·(x_i − x)| ≤ |x| + c·|x_i − x|``: a reply within range after that bound can be rescaled by
    any factor the round gives it; one beyond it is refused at screening, before the controller learns
    from its telemetry or its steps enter the round's τ_eff, and no rescaled update needs checking. The
    range is that of the dtype the array is aggregated at (``aggregation_dtype``: a float16 reply is
    cast up first). The cheap bound ``(1 + c)·max|x| + c·max|x_i|`` is tried first (the model's
    ``max|x|`` once per round); only a reply beyond it (values within a factor ~2c of the dtype's
    largest, never an honest model's) is bounded element by element. Build one per round.
    """

    def __init__(self, sent: Mapping[str, np.ndarray], max_rescale: float) -> None:
        if not math.isfinite(max_rescale) or max_rescale < 1:
            raise ValueError(f"max_rescale must be finite and >= 1 here, got {max_rescale!r}")
        self.sent, self.c = sent, float(max_rescale)
        self._largest: dict[str, float] = {}

    def __call__(self, name: str, xi: np.ndarray) -> str | None:
        x = self.sent.get(name)
        if x is None or xi.dtype.kind != "f" or not xi.size or x.dtype.kind != "f":
            return None
        if name not in self._largest:
            self._largest[name] = float(max(np.max(x), -np.min(x)))
        limit = float(np.finfo(aggregation_dtype(x.dtype, xi.dtype)).max)
        c = self.c
        if (1 + c) * self._largest[name] + c * float(max(np.max(xi), -np.min(xi))) <= limit:
            return None
        x64 = np.asarray(x, dtype=np.float64)
        reach = float(np.max(np.abs(x64) + c * np.abs(xi.astype(np.float64) - x64)))
        if reach <= limit:
            return None
        return (
            f"array {name!r} could reach {reach:.3g} once its update is rescaled by up to max_rescale "
            f"{c:g}, beyond the largest value {limit:.3g} of the dtype it is averaged at"
        )


def unbounded_rescale(max_rescale: float | None) -> bool:
    """Whether normalised aggregation's factors have no bound (``None`` or ``math.inf``)."""
    return max_rescale is None or not math.isfinite(max_rescale)


def bounded_rescale(
    weighting: str, max_rescale: float | None, sent: Mapping[str, np.ndarray] | None
) -> RescaleBound | None:
    """The round's :class:`RescaleBound` when updates will be rescaled by a bounded factor, else ``None``."""
    if weighting != "normalized" or sent is None or max_rescale is None or unbounded_rescale(max_rescale):
        return None
    return RescaleBound(sent, float(max_rescale))


def rescale_reason(
    arrays: Mapping[str, np.ndarray], sent: Mapping[str, np.ndarray], max_rescale: float | None
) -> str | None:
    """:class:`RescaleBound` over a reply's arrays (``max_rescale`` ``None`` or infinite: no bound, the
    strategies check the rescaled update instead)."""
    if max_rescale is None or not math.isfinite(max_rescale):
        return None
    bound = RescaleBound(sent, max_rescale)
    for name, xi in arrays.items():
        if reason := bound(name, xi):
            return reason
    return None


def _layout_reason(layout: ArrayLayout, reference: ArrayLayout) -> str | None:
    if set(layout) != set(reference):
        missing, extra = sorted(set(reference) - set(layout)), sorted(set(layout) - set(reference))
        return f"arrays {sorted(layout)[:5]} do not match the model's (missing {missing[:5]}, extra {extra[:5]})"
    for name, (shape, dtype) in layout.items():
        if (shape, dtype) != reference[name] and not _same_values(shape, dtype, *reference[name]):
            want_shape, want_dtype = reference[name]
            return (
                f"array {name!r} has shape {shape} and dtype {dtype}, the model's has shape "
                f"{want_shape} and dtype {want_dtype}"
            )
    return None


def check_arrays(
    record: Any,
    reference: ArrayLayout | None,
    value_check: Callable[[str, np.ndarray], str | None] | None = None,
) -> str | None:
    """Why a reply's ``ArrayRecord`` cannot be averaged into the model, or ``None`` when it can.

    Parameters
    ----------
    record : flwr.app.ArrayRecord
        The reply's arrays.
    reference : dict, optional
        Layout of the model the server sent (:func:`array_layout`); ``None`` checks finiteness only.
    value_check : callable, optional
        ``value_check(name, values)``: a further reason to refuse an array (e.g. :class:`RescaleBound`),
        run on each array as it is decoded for the finiteness check.
    """
    try:
        layout = array_layout(record)
        if reference is not None and (reason := _layout_reason(layout, reference)):
            return reason
        for name, arr in record.items():
            values = arr.numpy()
            if tuple(values.shape) != layout[str(name)][0] or str(values.dtype) != layout[str(name)][1]:
                return f"array {name!r} declares shape {layout[str(name)][0]} but holds {values.shape}"
            if reason := _finite_reason(str(name), values):
                return reason
            if value_check is not None and (reason := value_check(str(name), values)):
                return reason
    except Exception as err:  # noqa: BLE001 - any undecodable array is the client's fault, not ours
        return f"arrays cannot be decoded ({type(err).__name__}: {err})"
    return None


def check_ndarrays(arrays: Sequence[np.ndarray], reference: ArrayLayout | None) -> str | None:
    """:func:`check_arrays` for the legacy API's deserialised ``Parameters``."""
    layout = ndarray_layout(arrays)
    if reference is not None and (reason := _layout_reason(layout, reference)):
        return reason.replace("array '", "array #").replace("' has", " has")
    for i, values in enumerate(arrays):
        if reason := _finite_reason(str(i), np.asarray(values)):
            return reason
    return None


def check_weight(key: str, value: Any) -> str | None:
    """Why ``value`` cannot weight a reply in an average, or ``None`` when it can.

    A weight is a finite number in ``[0, MAX_COUNT]`` (``MAX_COUNT``: the largest count a reply
    may state, see :mod:`flwr_adaptive.strategies.reports`).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"weight {key!r} must be a number, got {value!r}"
    if not (math.isfinite(value) and 0 <= value <= MAX_COUNT):
        return f"weight {key!r} = {value!r} is not a finite number in [0, {MAX_COUNT}]"
    return None


def metric_kind(value: Any, strict_lists: bool) -> Any:
    """What Flower's metric aggregation needs to be equal across replies: number, or list (+ length)."""
    if isinstance(value, list):
        return ("list", len(value)) if strict_lists else ("list",)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("number",)
    return ("other", type(value).__name__)


def _finite_metric(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def harmonize_metrics(
    contents: Sequence[Any], required: Iterable[str], strict_lists: bool = True
) -> dict[str, list[int]]:
    """Make the kept replies' records consistent for aggregation, in place.

    Keeps, in every reply's single ``MetricRecord``, the keys that every reply carries with a
    finite value of the same :func:`metric_kind`; removes the others. Renames each reply's
    ``ArrayRecord`` and ``MetricRecord`` to the most common names. ``required`` keys (telemetry,
    the weight key) were validated before and are never removed.

    Returns
    -------
    dict
        ``{removed key: [indices of the replies that sent it differently]}`` (for the log line): of the
        replies with a finite value of the key's most common kind and the others (missing, not finite,
        another kind), the fewer: a NaN loss in one reply of six names that reply, not the six it was
        removed from; an extra key sent by one names the one.
    """
    if not contents:
        return {}
    from flwr_adaptive.strategies.records import split_records

    views = [split_records(c) for c in contents]  # one pass per reply instead of a view per access
    records = [m[0][1] for _, m in views]
    required = set(required)
    kinds: list[dict[str, Any]] = [
        {k: metric_kind(v, strict_lists) for k, v in r.items() if _finite_metric(v)} for r in records
    ]
    common = set(kinds[0])
    for k in kinds[1:]:
        common &= set(k)
    common = {key for key in common if len({k[key] for k in kinds}) == 1} | required
    removed: dict[str, list[int]] = {}
    for key in sorted({k for rec in records for k in rec.keys()} - common):
        alike = Counter(k[key] for k in kinds if key in k).most_common(1)
        good = [i for i, k in enumerate(kinds) if alike and k.get(key, _MISSING) == alike[0][0]]
        bad = sorted(set(range(len(records))) - set(good))
        removed[key] = bad if len(bad) <= len(good) or not good else good  # none alike: every reply
        for rec in records:
            if key in rec:
                del rec[key]
    for kind in (0, 1):  # array records, metric records
        if any(len(v[kind]) != 1 for v in views):
            continue  # e.g. evaluation replies carry no arrays
        names = Counter(v[kind][0][0] for v in views)
        name = names.most_common(1)[0][0]
        for c, v in zip(contents, views):
            old = v[kind][0][0]
            if old != name:
                c[name] = c.pop(old)
    return removed


_MISSING = object()  # a kind no metric has


def describe_removed(removed: Mapping[str, list[int]], nodes: Sequence[Hashable]) -> str:
    """``"'x' (nodes 1, 2); 'y' (node 3)"`` for the one log line about harmonized metrics."""
    parts = []
    for key, idx in sorted(removed.items()):
        who = [str(nodes[i]) for i in idx]
        parts.append(f"{key!r} (node{'s' if len(who) > 1 else ''} {', '.join(who[:5])}{'…' if len(who) > 5 else ''})")
    return "; ".join(parts)
