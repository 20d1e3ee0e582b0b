"""Where the adaptive strategy's state lives, and the checks a saved state passes before it is used.

Contract
--------
- :class:`StateStore` holds the two places a strategy's state is kept: ``state_dir`` (the JSON
  file ``adaptive-state.json``, written atomically and durably) and the ServerApp ``context.state``
  (under ``CONTEXT_STATE_KEY``). ``save(text, rounds)`` writes both; a file write that fails
  (disk full) is one error line, never an exception (``state_file.write_or_log``), and the next
  round writes it again. ``resume(load)`` reads the context first, else the file, and hands the
  state to ``load`` (the coordinator's ``load_state_dict``); it returns where the state came from,
  or ``None`` when there was none or it was set aside.
- A saved state is untrusted input. :func:`parse_state` refuses, with :class:`StateFileError`
  (nothing changed), a state of another version, a round count, partition map, data sizes, peer claims or
  overheads that are not what this strategy writes, and a controller whose numbers cannot be
  computed with (:func:`check_controller`: non-finite or non-positive costs, a split that does not
  sum to its budget, an ``allocate`` that fails); a state of another policy is a ``ValueError``
  with the fix. ``resume`` renames an unusable file ``<file>.bad-<time>`` (or drops the context
  entry) with one warning, so the strategy starts fresh instead of crashing in round 2.
- :func:`contradiction`: once running, each participant's resumed estimate is checked against
  its first believed reply, like a claim; a saved cost more than ``plausible_range`` times off
  is reported, so the coordinator drops it and learns the participant again.

Cost
----
One small JSON write per round; ``parse_state`` runs one ``allocate`` on a copy of the loaded
controller, once, at start-up.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from logging import WARNING
from pathlib import Path
from typing import Any

from flwr_adaptive._logging import logger
from flwr_adaptive.controller import AllocationController
from flwr_adaptive.strategies.reports import MAX_COUNT
from flwr_adaptive.strategies.state_file import StateFileError, check_state_dir, read_state, set_aside, write_or_log

__all__ = [
    "STATE_FILE",
    "CONTEXT_STATE_KEY",
    "STATE_VERSION",
    "SavedState",
    "StateStore",
    "parse_state",
    "check_controller",
    "contradiction",
    "encode_state",
    "warn_contradicted",
]

STATE_FILE = "adaptive-state.json"
CONTEXT_STATE_KEY = "flwr-adaptive"
STATE_VERSION = 1
UPDATE_UNITS = ("step", "sample", "update")  # what an update-size screen's saved length is per

#: The latest claims kept to screen small rounds: ``({node id: (steps per sample, steps per reference
#: quota, steps)}, {node id: (momentum, α)})`` (``AggregationWeights.peer_steps`` / ``peer_optimizers``).
PeerClaims = tuple[Mapping[Hashable, tuple[float, ...]], Mapping[Hashable, tuple[float, ...]]]


class StateStore:
    """The state file under ``state_dir`` and/or the ServerApp ``context`` (see the module docstring).

    Parameters
    ----------
    state_dir : str or Path, optional
        Folder of ``adaptive-state.json``; ``None``: no file.
    context : flwr.app.Context, optional
        The ServerApp context; ``None``: no context copy.
    """

    def __init__(self, state_dir: str | os.PathLike | None, context: Any) -> None:
        if state_dir is not None and not isinstance(state_dir, (str, os.PathLike)):
            raise ValueError(
                f"state_dir must be a folder path (str or pathlib.Path), got {type(state_dir).__name__} "
                f"{state_dir!r}; pass e.g. state_dir='adaptive-state', or None to keep no state file"
            )
        if context is not None and not hasattr(context, "state"):
            raise ValueError(
                f"context must be the ServerApp's flwr.app.Context (the one @app.main() receives), got "
                f"{type(context).__name__} {context!r}: pass context=context, or None"
            )
        self.path: Path | None = None if not state_dir else check_state_dir(state_dir) / STATE_FILE
        self.context = context

    def save(self, text: str, rounds: int) -> None:
        """Write ``text`` to the context and/or the file (atomically, durably; a failure is one line)."""
        if self.context is not None:
            from flwr.app import ConfigRecord

            self.context.state[CONTEXT_STATE_KEY] = ConfigRecord({"json": text})
        if self.path is not None:
            write_or_log(self.path, text, f"the strategy state after {rounds} rounds")

    def resume(self, load: Callable[[Mapping[str, Any]], None]) -> str | None:
        """Load the context's state, else the file's, with ``load``; returns where it came from.

        A state saved under another policy is refused (``ValueError`` with the fix, naming where
        it is). A state that is empty, truncated, not this strategy's or holds numbers the
        controller cannot compute with is set aside with one warning and ``None`` is returned:
        the strategy starts fresh (the costs are learned again in a round or two).
        """
        fix = "the strategy starts without it and learns the costs again"
        if self.context is not None and CONTEXT_STATE_KEY in self.context.state:
            where = "the ServerApp context"
            try:
                load(json.loads(self.context.state[CONTEXT_STATE_KEY]["json"]))
            except StateFileError as err:
                logger.log(WARNING, "[adaptive] saved state in %s is unusable: %s; %s", where, err, fix)
                del self.context.state[CONTEXT_STATE_KEY]
                return None
            except (KeyError, TypeError, RecursionError) as err:
                logger.log(WARNING, "[adaptive] saved state in %s is unusable (%s); %s", where, err, fix)
                del self.context.state[CONTEXT_STATE_KEY]
                return None
            except ValueError as err:
                if isinstance(err, json.JSONDecodeError):
                    logger.log(WARNING, "[adaptive] saved state in %s is not valid JSON (%s); %s", where, err, fix)
                    del self.context.state[CONTEXT_STATE_KEY]
                    return None
                raise ValueError(f"{err} (state in {where})") from None
            return where
        if self.path is None:
            return None
        where = str(self.path)
        try:
            state = read_state(self.path, fix)
            if state is None:
                return None
            load(state)
        except StateFileError as err:
            moved = set_aside(self.path)
            logger.log(
                WARNING,
                "[adaptive] state file %s is unusable: %s; it was moved to %s and %s",
                where,
                str(err).replace(f"; {fix}", ""),
                moved,
                fix,
            )
            return None
        except ValueError as err:
            raise ValueError(f"{err} (state file {where})") from None
        return where


def encode_state(
    policy: str,
    budget: int,
    rounds: int,
    controller: AllocationController,
    partition_of: Mapping[Hashable, int],
    caps: Mapping[Hashable, int],
    overheads: list[list],
    peer_claims: PeerClaims,
    update_lengths: Mapping[Hashable, tuple[str, float]],
) -> dict[str, Any]:
    """The saved state, as JSON types (what :func:`parse_state` reads back), keyed by partition id."""
    steps, optimizers = peer_claims
    return {
        "version": STATE_VERSION,
        "policy": policy,
        "budget": budget,
        "rounds": rounds,
        "controller": controller.state_dict(),
        # node id -> partition: a resumed ServerApp (or one behind a SuperLink restarted on
        # its database: node ids survive) keys its first round by partition, not equally
        "partitions": [[n, p] for n, p in partition_of.items() if isinstance(n, (int, str))],
        # partition -> local data size (cycling off): the same bounds, so the split is held
        "caps": [[k, c] for k, c in caps.items() if type(k) is int],
        # partition -> its recent server-observed overheads: the fixed terms survive a resume
        "overheads": overheads,
        # node id -> its latest step and optimizer claims: a resumed server's rounds of fewer than 3
        # replies are screened against the nodes that replied before the restart, not left unscreened
        "peer_steps": [[n, list(v)] for n, v in steps.items() if isinstance(n, (int, str))],
        "peer_optimizers": [[n, list(v)] for n, v in optimizers.items() if isinstance(n, (int, str))],
        # node id -> its latest judged update length and its unit: the same, for the update-size screen
        "update_lengths": [
            [n, unit, v] for n, (unit, v) in update_lengths.items() if isinstance(n, (int, str)) and math.isfinite(v)
        ],
    }


@dataclass
class SavedState:
    """A saved state that passed :func:`parse_state`: ready to be applied."""

    rounds: int
    controller: AllocationController
    partitions: dict[Hashable, int]
    caps: dict[Hashable, int]
    overheads: dict[int, list[float]]
    peer_claims: PeerClaims
    update_lengths: dict[Hashable, tuple[str, float]]


def parse_state(state: Any, policy: str, controller: AllocationController) -> SavedState:
    """Check a ``state_dict()`` output and load its controller state into ``controller``.

    Raises
    ------
    StateFileError
        The state is not one this strategy wrote, or its numbers cannot be computed with
        (another version, a truncated or tampered controller state: non-positive costs,
        quotas that do not sum to the budget…).
    ValueError
        The state was saved under another policy: resuming it would apply one policy's
        estimates to another's objective.
    """
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        version = state.get("version") if isinstance(state, Mapping) else None
        raise StateFileError(
            f"unsupported adaptive strategy state version {version!r}; this release reads version {STATE_VERSION}"
        )
    if state.get("policy") != policy:
        raise ValueError(
            f"the saved state was written under policy {state.get('policy')!r}, this "
            f"strategy runs policy {policy!r}; resume with policy="
            f"{state.get('policy')!r}, or use a fresh state_dir (or delete the state) to "
            f"start {policy!r} from scratch"
        )
    rounds = state.get("rounds")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise StateFileError(f"the saved round count {rounds!r} is not an int >= 0")
    try:
        controller.load_state_dict(copy.deepcopy(state["controller"]))
    except Exception as err:  # noqa: BLE001 - any malformed field: the state is unusable
        raise StateFileError(f"the controller state cannot be loaded ({type(err).__name__}: {err})") from None
    partitions = _saved_pairs(state.get("partitions", []))
    caps = _saved_pairs(state.get("caps", []), what="partition data size")
    if any(c < 1 for c in caps.values()):
        raise StateFileError(f"a saved partition data size is < 1: {caps}")
    check_controller(controller)
    overheads = _saved_overheads(state.get("overheads", []))
    peer_claims = (
        _saved_claims(state.get("peer_steps", []), "step", _plausible_step_claim),
        _saved_claims(state.get("peer_optimizers", []), "optimizer", _plausible_optimizer_claim),
    )
    lengths = _saved_update_lengths(state.get("update_lengths", []))
    return SavedState(rounds, controller, partitions, caps, overheads, peer_claims, lengths)


def _saved_update_lengths(entries: Any) -> dict[Hashable, tuple[str, float]]:
    """The saved ``[[node id, unit, length], ...]`` of the update-size screen (``StateFileError`` when
    malformed; absent in a state written before they were kept: none)."""
    if not isinstance(entries, list):
        raise StateFileError(f"the saved update lengths are not a list of [node id, unit, length]: {entries!r:.200}")
    out: dict[Hashable, tuple[str, float]] = {}
    for entry in entries:
        ok = (
            isinstance(entry, list)
            and len(entry) == 3
            and not isinstance(entry[0], bool)
            and isinstance(entry[0], (int, str))
            and entry[1] in UPDATE_UNITS
            and isinstance(entry[2], (int, float))
            and not isinstance(entry[2], bool)
            and math.isfinite(entry[2])
            and entry[2] >= 0
        )
        if not ok:
            raise StateFileError(f"a saved update length {entry!r:.200} is not [node id, unit, length >= 0]")
        out[entry[0]] = (entry[1], float(entry[2]))
    return out


def _plausible_step_claim(v: tuple[float, ...]) -> bool:
    """(steps per sample, steps per reference quota, steps): what ``parse_report`` accepts, 1 to
    ``MAX_COUNT`` steps for at least one sample."""
    return len(v) == 3 and all(0 < x <= MAX_COUNT for x in v) and v[2] >= 1


def _plausible_optimizer_claim(v: tuple[float, ...]) -> bool:
    """(momentum, α = lr × μ): what ``parse_report`` accepts, both in [0, 1)."""
    return len(v) == 2 and 0 <= v[0] < 1 and 0 <= v[1] < 1


def _saved_claims(
    pairs: Any, what: str, plausible: Callable[[tuple[float, ...]], bool]
) -> dict[Hashable, tuple[float, ...]]:
    """The saved ``[[node id, [claim, ...]], ...]`` (``StateFileError`` when malformed).

    Absent in a state written before they were kept: no saved claims (small rounds are then screened
    once nodes have replied, as before)."""
    if not isinstance(pairs, list):
        raise StateFileError(f"the saved peer {what} claims are not a list of [node id, [numbers]]: {pairs!r:.200}")
    out: dict[Hashable, tuple[float, ...]] = {}
    for pair in pairs:
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and not isinstance(pair[0], bool)
            and isinstance(pair[0], (int, str))
            and isinstance(pair[1], list)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in pair[1])
        )
        claim = tuple(float(v) for v in pair[1]) if ok else ()
        if not (ok and plausible(claim)):
            raise StateFileError(f"a saved peer {what} claim {pair!r:.200} is not one this strategy writes")
        out[pair[0]] = claim
    return out


def _saved_overheads(pairs: Any) -> dict[int, list[float]]:
    """The saved ``[[partition id, [seconds, ...]], ...]`` (``StateFileError`` when malformed)."""
    if not isinstance(pairs, list):
        raise StateFileError(f"the saved overheads are not a list of [partition id, [seconds]]: {pairs!r:.200}")
    out: dict[int, list[float]] = {}
    for pair in pairs:
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and type(pair[0]) is int
            and isinstance(pair[1], list)
            and 0 < len(pair[1]) <= 1000
            and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1e7
                for v in pair[1]
            )
        )
        if not ok:
            raise StateFileError(f"a saved overhead entry {pair!r:.200} is not [partition id, [seconds >= 0]]")
        out[pair[0]] = [float(v) for v in pair[1]]
    return out


def _saved_pairs(pairs: Any, what: str = "node partition") -> dict[Hashable, int]:
    """The saved ``[[node id, partition id], ...]`` (``StateFileError`` when malformed).

    Also reads the saved ``[[partition id, data size], ...]`` (``what`` names it in errors).
    """
    if not isinstance(pairs, list):
        raise StateFileError(f"the saved {what}s are not a list of [id, int] pairs: {pairs!r:.200}")
    out: dict[Hashable, int] = {}
    for pair in pairs:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or isinstance(pair[0], bool)
            or not isinstance(pair[0], (int, str))
            or isinstance(pair[1], bool)
            or not isinstance(pair[1], int)
            or pair[1] < 0
        ):
            raise StateFileError(f"a saved {what} {pair!r:.200} is not [id (int or str), int >= 0]")
        out[pair[0]] = pair[1]
    return out


def check_controller(controller: AllocationController) -> None:
    """Refuse a loaded controller whose numbers cannot be computed with (``StateFileError``).

    Every estimate must be a finite positive time per sample (and a finite energy >= 0), the
    committed split must sum to its budget, and one ``allocate`` over its participants (on a
    copy) must succeed and sum exactly: a truncated array or a tampered quota fails here, at
    start-up, and not in round 2.
    """
    try:
        for pid, (tau, eps) in controller.estimates().items():
            if not (math.isfinite(tau) and tau > 0) or (eps is not None and not (math.isfinite(eps) and eps >= 0)):
                raise StateFileError(
                    f"participant {pid!r} has cost estimates ({tau!r} s, {eps!r} J per "
                    "sample); they must be finite, the time > 0 and the energy >= 0"
                )
        current = controller.current
        if any(isinstance(q, bool) or not isinstance(q, int) or q < 0 for q in current.values()):
            raise StateFileError(f"the saved split holds quotas that are not ints >= 0: {current}")
        groups = controller.groups
        budgets = controller.budget if isinstance(controller.budget, dict) else {None: controller.budget}
        sums: dict[Any, int] = {}
        for pid, q in current.items():
            group = None if groups is None else groups.get(pid)
            sums[group] = sums.get(group, 0) + q
        for group, total in sums.items():
            if total not in (0, budgets.get(group)):
                raise StateFileError(
                    f"the saved split gives {total} samples"
                    f"{'' if group is None else f' to group {group!r}'} for a budget of "
                    f"{budgets.get(group)}"
                )
        if current:
            probe = copy.deepcopy(controller)
            split = probe.allocate(list(current))
            for group in sums:
                got = sum(q for pid, q in split.items() if (None if groups is None else groups.get(pid)) == group)
                if got != budgets.get(group):
                    raise StateFileError(f"the saved state splits {got} samples for a budget of {budgets.get(group)}")
    except StateFileError:
        raise
    except Exception as err:  # noqa: BLE001 - a state that makes the controller fail is unusable
        raise StateFileError(f"the controller fails on the saved state ({type(err).__name__}: {err})") from None


def contradiction(
    key: Hashable,
    saved: tuple[float, float | None],
    believed_time_s: float,
    believed_energy_j: float | None,
    samples: int,
    bound: float,
) -> str | None:
    """``"<key>: saved x, believed y"`` when a resumed estimate is more than ``bound`` times off.

    A state file is untrusted input: edited to give one node 1e-12 s per sample it would hand
    that node the budget for as long as the smoothing takes to forget it. The participant's first
    believed reply is the check: a saved time (or energy) per sample outside ``[believed / bound,
    believed × bound]`` contradicts it. ``None``: the saved estimate stands.
    """
    pairs = [(saved[0], believed_time_s / samples, "s")]
    if saved[1] is not None and believed_energy_j is not None and saved[1] > 0 and believed_energy_j > 0:
        pairs.append((saved[1], believed_energy_j / samples, "J"))
    for old, new, unit in pairs:
        if not (new / bound <= old <= new * bound):
            return f"{key}: saved {old:.3g} {unit}, believed {new:.3g} {unit} per sample"
    return None


def warn_contradicted(server_round: int, discarded: list[str], bound: float) -> None:
    """One warning for the resumed estimates this round's replies contradicted (``contradiction``)."""
    logger.log(
        WARNING,
        "[adaptive] round %s: the resumed state is contradicted by this round's replies for %d "
        "participant(s) (%s): their saved estimates are more than %g× off what the server believes of "
        "their replies, so they are learned again from these replies (a tampered or stale state file)",
        server_round,
        len(discarded),
        "; ".join(discarded[:5]) + ("…" if len(discarded) > 5 else ""),
        bound,
    )
