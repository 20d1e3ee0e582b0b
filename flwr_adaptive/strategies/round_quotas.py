"""Quotas out: the round coordinator's split of one round's budget among the nodes that train.

Contract
--------
:func:`split_round` is :meth:`AdaptiveCore.quotas_for
<flwr_adaptive.strategies.core.AdaptiveCore.quotas_for>`: ``{node_id: quota}`` summing to the
round's budget (``budget_per_node`` × the nodes sampled when that is set), zero quotas left out
(no message). Who trains is ``core.trainers`` (all, unless the budget cannot give each its
minimum quota). While no node's partition is known (round 1) the split is equal; after, the
controller splits by partition id (``PartitionMap.inherit_vacancies`` lets a new node id take
over a departed partition), each node within its data size when cycling is off (a provisional
size for a node that never replied, ``core.prior_caps`` for the never measured) and, with
``core.min_local_steps``, at least its step floor (``core.step_floor.quota``). A node on
probation (it failed last round) gets ``core.probe_quota()`` samples and its share is re-split
among the others; when every node is on probation, none is. When the budget exceeds all the
nodes' local data (cycling off) every node trains on all of it. Every hook it calls is the
coordinator's, so a strategy that overrides one changes it here too.

With ``scale_batch_size=True`` the strategies also send every node the round's reference quota
(:func:`reference_quota`: the equal share, ``budget // nodes trained``, at least 1; of the samples
trained when every node trains on all its local data), by which a
client scales its batch size (:mod:`flwr_adaptive.clients.batch_scaling`). With
``scale_batch_size="shrink"`` (:data:`SHRINK`) node i is sent ``max(reference, q_i)``
(:func:`node_references`): a node below the reference shrinks its batches to take the reference's
steps, a node at or above it computes ``ceil(B·q/q) = B``, keeps the user's batch size and takes
more steps (which the normalised rule corrects). No client change is needed. It is the default
(``scale_batch_size=None``, :func:`resolve_scale_batch_size`) with the normalised weighting and no
step floor. ``None`` is remembered: setting ``weighting`` or ``min_local_steps`` on the strategy later
(:class:`FollowedSetting`) resolves it again, so ``strategy.weighting = "samples"`` after construction
turns the default "shrink" off, as passing it to the constructor does, and ``"normalized"`` turns it on.
An explicit value (``True``, ``False``, ``"shrink"``) is never changed: a later setting it does not
combine with (a step floor under scaled batches) is refused with the fix, as at construction, and
leaves the setting as it was.

Cost
----
One ``allocate`` of the controller (or of an equal-split controller in round 1) over the
round's trainers, and O(nodes) dictionary work.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flwr_adaptive.controller import AllocationController
from flwr_adaptive.strategies.delegation import Delegated
from flwr_adaptive.strategies.quota_bounds import all_local_data

if TYPE_CHECKING:
    from flwr_adaptive.strategies.core import AdaptiveCore

__all__ = [
    "SHRINK",
    "split_round",
    "reference_quota",
    "node_references",
    "check_floor_and_scaling",
    "check_scale_batch_size",
    "resolve_scale_batch_size",
    "ScaleBatchSize",
    "FollowedSetting",
]

_GIVEN = "_scale_batch_size_given"  # the value the user set (None: follow weighting and min_local_steps)

#: ``scale_batch_size="shrink"``: only nodes below the reference quota scale (shrink) their batches.
SHRINK = "shrink"


def check_scale_batch_size(value: object) -> bool | str:
    """``scale_batch_size`` as given (``True``, ``False`` or ``"shrink"``), or ``ValueError`` with the fix
    (``"no"`` would read as True)."""
    if not (isinstance(value, bool) or value == SHRINK):
        raise ValueError(
            f"scale_batch_size must be True, False or {SHRINK!r} (True: send each node the round's reference "
            f"quota so that clients scale their batch size to take equal local steps; {SHRINK!r}: only the nodes "
            f"below the reference shrink their batches, the others keep the user's batch size), got {value!r}"
        )
    return value


def resolve_scale_batch_size(value: object, weighting: str, min_local_steps: int = 0) -> bool | str:
    """``scale_batch_size`` as the strategies use it: ``None`` (the default) is :data:`SHRINK` with the
    normalised weighting (the default with private data) and no step floor, ``False`` otherwise: with
    ``"samples"`` or ``"data-size"`` no rule corrects the fast nodes' extra steps, and a step floor
    (``min_local_steps`` > 0) learns each node's batch size from its replies,
    so a shrunk batch would lower the floor it sets. Any other value as :func:`check_scale_batch_size`;
    ``True`` or ``"shrink"`` with a step floor is refused with the fix (each shrunk reply lowers the
    node's learnt batch size, so the floor decays round by round: one batch of 32 fell to 1 sample
    in five rounds)."""
    if value is None:
        return SHRINK if weighting == "normalized" and not min_local_steps else False
    mode = check_scale_batch_size(value)
    check_floor_and_scaling(mode, min_local_steps)
    return mode


def check_floor_and_scaling(mode: bool | str, min_local_steps: int) -> None:
    """``ValueError`` with the fix when batches are scaled (``mode`` True or ``"shrink"``) under a step floor."""
    if mode is not False and min_local_steps:
        raise ValueError(
            f"scale_batch_size={mode!r} does not combine with min_local_steps={min_local_steps}: the step "
            f"floor learns each node's batch size from its replies, which scaled batches lower round by "
            f"round, so the floor would not hold. Pass "
            f"min_local_steps=0 to scale batches without a floor, or scale_batch_size=None (or False) to keep it"
        )


class ScaleBatchSize:
    """The strategies' ``scale_batch_size`` attribute: checked when set, after construction too.

    Setting it resolves the value (``None`` by the strategy's ``weighting`` and ``min_local_steps``
    now, :func:`resolve_scale_batch_size`; anything but ``True``, ``False``, ``"shrink"`` or
    ``None`` is refused) and keeps the plausibility rule's ``equal_steps`` in step with it (equal
    step claims are plausible with ``True`` only), so ``strategy.scale_batch_size = True`` after
    construction does not have the fast nodes' honest equal steps clipped as too few. A class whose
    ``keeps_batch_size`` names a reason (the Static and Oort-like baselines) refuses anything but ``False``.
    """

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else obj.__dict__["_scale_batch_size"]

    def __set__(self, obj: Any, value: object) -> None:
        fixed = getattr(obj, "keeps_batch_size", None)  # why a subclass trains at the user's batch size
        mode = False if fixed and value is None else resolve_scale_batch_size(value, obj.weighting, obj.min_local_steps)
        if fixed and mode is not False:
            raise ValueError(
                f"{type(obj).__name__} trains at the user's batch size ({fixed}): scale_batch_size must be False "
                f"or None, got {value!r}"
            )
        obj.__dict__["_scale_batch_size"] = mode
        obj.__dict__[_GIVEN] = value
        obj.aggregation.equal_steps = mode is True


class FollowedSetting(Delegated):
    """A setting ``scale_batch_size`` is resolved by (``weighting``, ``min_local_steps``): delegated to a
    component (:class:`~flwr_adaptive.strategies.delegation.Delegated`), checked by ``check(obj, value)``
    when set, and once the strategy's ``scale_batch_size`` is set, followed by resolving the value the
    user gave for it again (:class:`ScaleBatchSize`). A ``ValueError`` of either leaves the setting as it was.
    """

    def __init__(self, component: str, name: str, doc: str, check: Callable[[Any, Any], Any]) -> None:
        super().__init__(component, name, doc)
        self.check = check

    def __set__(self, instance: Any, value: Any) -> None:
        value = self.check(instance, value)
        if _GIVEN not in instance.__dict__:  # during construction: scale_batch_size is set after it
            super().__set__(instance, value)
            return
        old = self.__get__(instance)
        super().__set__(instance, value)
        try:
            instance.scale_batch_size = instance.__dict__[_GIVEN]
        except ValueError:
            super().__set__(instance, old)
            raise


def node_references(
    mode: bool | str, budget: int, quotas: Mapping[Hashable, int], min_local_steps: int = 0
) -> tuple[int | None, dict[Hashable, int]]:
    """``(step reference, {node: reference sent})`` of a round for ``scale_batch_size=mode``.

    ``False``: ``(None, {})`` (nothing sent). ``True``: every node gets :func:`reference_quota`,
    and the step reference is ``None`` (equal steps: the plausibility rule's own interval).
    ``"shrink"``: node i gets ``max(reference, q_i)``, so a node at or above the reference keeps the
    user's batch size (``ceil(B·q_i/q_i) = B``) and only the nodes below it shrink their batches;
    the step reference is the reference (``AggregationWeights.step_reference``).
    ``min_local_steps``: the strategy's step floor now (it may have been set after construction),
    refused with scaled batches as at construction (:func:`check_floor_and_scaling`).
    """
    check_floor_and_scaling(mode, min_local_steps)
    if mode is False or not quotas:
        return None, {}
    r = reference_quota(budget, quotas)
    if mode == SHRINK:
        return r, {n: max(r, int(q)) for n, q in quotas.items()}
    return None, {n: r for n in quotas}


def reference_quota(budget: int, quotas: Mapping[Hashable, int]) -> int:
    """The round's reference quota (``keys.REFERENCE_QUOTA``): ``min(budget, Σ quotas) // len(quotas)``, at least 1.

    The split sums to the budget unless every node trains on all its local data (the budget exceeds
    it, cycling off); the equal share is then that of the samples trained, not of the budget: a
    reference above every node's data would shrink every batch and multiply every node's steps.
    """
    trained = min(int(budget), sum(int(q) for q in quotas.values()))
    return max(1, trained // max(1, len(quotas)))


def split_round(core: AdaptiveCore, server_round: int, node_ids: Sequence[Hashable]) -> dict[Hashable, int]:
    """``{node_id: quota}`` summing to ``core.budget`` for this round's nodes (module doc)."""
    if core.budget_per_node is not None:
        core.set_round_budget(core.budget_per_node * len(node_ids))
    core._round_sampled = set(node_ids)  # the others' estimates are the population cost trust judges by
    node_ids = core.trainers(server_round, list(node_ids))
    core._round_keys = {}
    if not node_ids:
        return {}
    probe = core.probe_quota()
    book = core.nodes
    probation = [n for n in node_ids if n in book.probation]
    if len(probation) == len(node_ids):
        probation = []  # nobody healthy to take the share: everyone tries again, observed
        book.probation -= set(node_ids)
    # a node that replied is known by its partition, or by its node id when its replies name none (a
    # TelemetryClient without the Context, a SuperNode without --node-config partition-id): it adapts too
    known = any(n in book.partition_of or n in book.replied for n in node_ids)
    ids = (
        book.inherit_vacancies(server_round, node_ids, book.keys(node_ids), core.controller.current)
        if known
        else node_ids
    )
    caps = [probe if n in probation else (core.bounds.caps.get(k) if known else None) for n, k in zip(node_ids, ids)]
    full = [c for c in caps if c is not None]
    if len(full) == len(caps) and core.budget == sum(full) and core.policy != "equal" and not probation:
        # the only exact split is all of everyone's data: nothing to balance (said once, like a setting)
        core._warn_once(
            "budget-is-all-data",
            "[adaptive] round %s: the budget %d equals the local data of the %d nodes training this round, so "
            "the only split is all of each node's data and no time is balanced; pass a smaller budget (or "
            "budget_per_node when the strategy samples nodes). Said once",
            server_round,
            core.budget,
            len(node_ids),
        )
    if len(full) == len(caps) and core.budget > sum(full):
        split = all_local_data(server_round, node_ids, full, core.budget)
    elif not known:
        equal = AllocationController(
            core.budget,
            w_time=0.0,
            w_energy=0.0,
            deadband=0.0,
            min_quota=core.min_quota,
            max_quota={n: probe for n in probation},
        )
        split = equal.allocate(node_ids)
    else:
        if not core.allow_cycling:
            caps = core._with_provisional_caps(node_ids, caps)
        if core.policy != "equal":
            caps = core.prior_caps(node_ids, ids, caps, probation)
        book.node_keys.update(k for k in ids if type(k) is str)
        share = core.budget // len(ids)  # floors within the equal share always fit the budget
        for n, k, c in zip(node_ids, ids, caps):
            core.controller.set_max_quota(k, c)
            if core.step_floor.steps:  # a probe stays a probe: no floor on probation
                floor = None if n in probation else core.step_floor.quota(k, share, c)
                core.controller.set_min_quota(k, None if floor is None else max(floor, core._min_of()))
        by_key = core.controller.allocate(ids)
        split = {n: by_key[k] for n, k in zip(node_ids, ids)}
        core._round_keys = dict(zip(node_ids, ids))  # for the round's predicted makespan
    quotas = {n: q for n, q in split.items() if q > 0}  # a zero quota trains nothing: no message
    for n in quotas:
        book.last_trained[n] = server_round
    return quotas
