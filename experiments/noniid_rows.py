"""The rows of the non-IID section: the policy, weighting, aggregation and options of each table row.

Contract
--------
:data:`ROWS` maps a row's name to a :class:`Row` (policy, label, weighting, inner strategy, quota
floor, cycling, further strategy options), built from what the installed strategies offer: a row
on a weighting they lack (:func:`normalised_weighting`) is left out by :func:`available_rows`, the
rescale-cap rows exist once ``AdaptiveStrategy`` takes such an option (:func:`rescale_cap_option`),
and :func:`default_row` names the row on the weighting a user gets by default
(:func:`default_weighting`). :data:`MAIN_ROWS`, :data:`QUICK_ROWS`, :data:`MEASURED_ROWS` and
:data:`LATER_ALPHA_ROWS` are the rows of the main part, of the quick form, of the measured clock and of
the second and later α.

Cost
----
Importing builds :data:`ROWS`: it imports the strategies (Flower) and reads ``AdaptiveStrategy``'s
signature; :func:`default_weighting` builds one ``AdaptiveStrategy``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

ALPHAS = (0.3, 0.1)
FLOORS = (0.25, 0.5, 0.75)  # floor on a quota as a share of the equal split (budget / nodes)
PROX_MU = 0.1
RESCALE_CAPS = (4.0, 8.0, 16.0)  # caps on the normalised rule's rescaling factor (rows when the strategies offer one)
#: Lower caps for min-energy with its former default floor of one batch, where its split parks its energy-hungry nodes.
MIN_ENERGY_CAPS = (2.0, 4.0)
#: ``min_local_steps`` of the step-floor rows. With 1100 samples over 11 nodes and batches of 32, Equal gives every node
#: 100 samples (4 steps; the floor learns B ≤ 33 from it); a floor of 4 steps is then the equal share for everyone,
#: the Equal split itself, and 3 steps (99 samples) nearly so.
STEP_FLOORS = (2, 3)


@dataclass(frozen=True)
class Row:
    """One row of the tables: a policy with its aggregation and options."""

    policy: str
    label: str
    weighting: str | None = None  # None: the strategies' default for private data
    inner: str = "fedavg"
    floor: float = 0.0  # share of the equal split
    cycling: bool = False
    options: tuple = ()  # further strategy options, ((name, value), …)


def normalised_weighting() -> str | None:
    """The strategies' name of the normalised (FedNova) weighting, or ``None`` when they have none."""
    from flwr_adaptive.strategies import core

    names = [w for w in core.WEIGHTINGS if w not in ("samples", "data-size")]
    return names[0] if names else None


def default_weighting() -> str:
    """The weighting an ``AdaptiveStrategy`` uses with private data when the user names none."""
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    return str(AdaptiveStrategy(FedAvg(), budget=10, allow_cycling=False).weighting)


def rescale_cap_option() -> str | None:
    """The strategies' option that caps the normalised rule's rescaling factor, or ``None`` when they have none.

    Read from ``AdaptiveStrategy``'s signature (the first keyword with ``rescale`` in its name), so the rows
    appear as soon as the library offers the cap, whatever it is called.
    """
    import inspect

    from flwr_adaptive.strategies import AdaptiveStrategy

    names = [n for n in inspect.signature(AdaptiveStrategy.__init__).parameters if "rescale" in n]
    return names[0] if names else None


def _rows() -> dict[str, Row]:
    norm = normalised_weighting() or "normalised"
    rows = {"equal-fedavg": Row("equal", "Equal + FedAvg", "samples"),
            "equal-norm": Row("equal", "Equal + normalised", norm)}
    for policy, name in (("time", "Time-only"), ("min-energy", "Min-energy")):
        for w, wl in (("samples", "samples"), ("data-size", "data-size"), (norm, "normalised")):
            rows[f"{policy}-{wl}"] = Row(policy, f"{name} + {wl}", w)
    cap = rescale_cap_option()
    if step_floor_option():  # min-energy's former default floor of one batch with private data, switched off
        rows["min-energy-norm-nofloor"] = Row(
            "min-energy", "Min-energy + normalised, no step floor" + (", rescale ≤ 8" if cap else ""), norm,
            options=(("min_local_steps", 0), *(((cap, 8.0),) if cap else ())))
    if step_floor_option() and batch_shrinking_option():  # min-energy with shrunk batches in place of its step floor
        rows["min-energy-norm-shrink"] = Row(
            "min-energy", "Min-energy + normalised, no step floor, slow nodes' batches shrunk, rescale ≤ 8", norm,
            options=(("min_local_steps", 0), ("scale_batch_size", "shrink"), *(((cap, 8.0),) if cap else ())))
        if cap:
            rows["min-energy-norm-shrink-cap2"] = Row(
                "min-energy", "Min-energy + normalised, no step floor, slow nodes' batches shrunk, rescale ≤ 2", norm,
                options=(("min_local_steps", 0), ("scale_batch_size", "shrink"), (cap, 2.0)))
    rows["time-fedprox"] = Row("time", f"Time-only + FedProx (μ={PROX_MU:g})", None, inner="fedprox")
    rows["static"] = Row("static", "Static", None)
    rows["oort"] = Row("oort", "Oort-like", None)
    rows["fedasync"] = Row("fedasync", "FedAsync", "samples")
    rows["pyramid"] = Row("pyramid", "PyramidFL-style", "samples", cycling=True)
    for f in FLOORS:
        rows[f"time-floor{f:g}"] = Row("time", f"Time-only, floor {f:g} × equal", None, floor=f)
    for c in MIN_ENERGY_CAPS if cap else ():  # min-energy with its former default floor and a lower rescale cap
        rows[f"min-energy-norm-cap{c:g}"] = Row("min-energy", f"Min-energy + normalised, rescale ≤ {c:g}", norm,
                                                options=((cap, c),))
    for c in RESCALE_CAPS if cap else ():
        rows[f"time-norm-cap{c:g}"] = Row("time", f"Time-only + normalised, rescale ≤ {c:g}", norm,
                                          options=((cap, c),))
    if cap:  # the normalised rule's runs without options ran before the cap existed: FedNova's factors, unbounded
        rows["time-normalised"] = Row("time", "Time-only + normalised, rescale unbounded (FedNova)", norm,
                                      options=((cap, math.inf),))
    if cap and step_floor_option():
        for k in STEP_FLOORS:
            rows[f"time-norm-cap8-steps{k}"] = Row("time", f"Time-only + normalised, rescale ≤ 8, ≥ {k} steps", norm,
                                                   options=((cap, 8.0), ("min_local_steps", k)))
            rows[f"time-samples-steps{k}"] = Row("time", f"Time-only + samples, ≥ {k} steps", "samples",
                                                 options=(("min_local_steps", k),))
    if cap and batch_scaling_option():
        rows["time-norm-cap8-eqsteps"] = Row("time", "Time-only + normalised, rescale ≤ 8, equal steps (scaled batches)",
                                             norm, options=((cap, 8.0), ("scale_batch_size", True)))
        if batch_shrinking_option():
            rows["time-norm-cap8-shrink"] = Row("time", "Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk",
                                                norm, options=((cap, 8.0), ("scale_batch_size", "shrink")))
            rows["time-norm-shrink"] = Row("time", "Time-only + normalised, rescale unbounded, slow nodes' batches "
                                           "shrunk", norm, options=((cap, math.inf), ("scale_batch_size", "shrink")))
    rows["time-samples-floor0.5"] = Row("time", "Time-only + samples, floor 0.5 × equal", "samples", floor=0.5)
    if cap and batch_shrinking_option() and edge_option():  # the default with the trust rule before the edge, or off
        shrink = ((cap, 8.0), ("scale_batch_size", "shrink"))
        before_edge = _trust_before_edge()
        rows["time-norm-cap8-shrink-trust-median"] = Row(
            "time", "Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk, every implausible cost claim "
            f"at the median (`CostTrust(absurd_range={before_edge.absurd_range:g})`)", norm,
            options=(*shrink, ("trust", before_edge)))
        rows["time-norm-cap8-shrink-trust-off"] = Row(
            "time", "Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk, cost trust off (`trust=False`)",
            norm, options=(*shrink, ("trust", False)))
    if cap and batch_shrinking_option() and objective_option():  # the default on the objective before equal-split
        rows["time-norm-cap8-shrink-datasize"] = Row(
            "time", "Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk, data-size objective", norm,
            options=((cap, 8.0), ("scale_batch_size", "shrink"), ("objective", "data-size")))
    if step_floor_option():  # the rows measured while min-energy's default was one batch (and a cap of 8) keep them
        for name, row in rows.items():
            if row.policy == "min-energy" and "min_local_steps" not in dict(row.options):
                opts = dict(row.options)
                label = f"{row.label}, ≥ 1 step"
                if cap and row.weighting == norm and cap not in opts:
                    opts[cap], label = 8.0, f"{label}, rescale ≤ 8"
                rows[name] = replace(row, label=label, options=(("min_local_steps", 1), *opts.items()))
    if batch_shrinking_option():  # the rows measured before "shrink" was the default keep the user's batch size
        for name, row in rows.items():
            if row.policy in _SCALING_POLICIES and "scale_batch_size" not in dict(row.options):
                rows[name] = replace(row, options=(*row.options, ("scale_batch_size", False)))
    return rows


#: The policies whose strategy takes ``scale_batch_size`` (the baselines train at the user's batch size).
_SCALING_POLICIES = ("equal", "time", "min-energy")


def step_floor_option() -> bool:
    """Whether ``AdaptiveStrategy`` takes ``min_local_steps`` (the step-floor rows exist then)."""
    import inspect

    from flwr_adaptive.strategies import AdaptiveStrategy

    return "min_local_steps" in inspect.signature(AdaptiveStrategy.__init__).parameters


def batch_scaling_option() -> bool:
    """Whether ``AdaptiveStrategy`` takes ``scale_batch_size`` (the equal-steps rows exist then)."""
    import inspect

    from flwr_adaptive.strategies import AdaptiveStrategy

    return "scale_batch_size" in inspect.signature(AdaptiveStrategy.__init__).parameters


def edge_option() -> bool:
    """Whether ``CostTrust`` takes ``absurd_range`` (a claim between the plausible and the absurd range is taken at
    the range's edge; the trust rows exist then)."""
    import dataclasses

    from flwr_adaptive.strategies import CostTrust

    return "absurd_range" in {f.name for f in dataclasses.fields(CostTrust)}


def _trust_before_edge() -> Any:
    """The default ``CostTrust`` with ``absurd_range`` at its ``plausible_range``: the rule before the edge (every
    claim below the range taken at the others' median)."""
    from flwr_adaptive.strategies import CostTrust

    return CostTrust(absurd_range=CostTrust().plausible_range)


def objective_option() -> bool:
    """Whether ``AdaptiveStrategy`` takes ``objective`` (the normalised rule's data weights; the rows exist then)."""
    import inspect

    from flwr_adaptive.strategies import AdaptiveStrategy

    return "objective" in inspect.signature(AdaptiveStrategy.__init__).parameters


def batch_shrinking_option() -> bool:
    """Whether ``scale_batch_size`` takes ``"shrink"`` (only the slow nodes' batches shrink; the row exists then)."""
    try:
        from flwr_adaptive.strategies.round_quotas import check_scale_batch_size

        check_scale_batch_size("shrink")
    except (ImportError, ValueError):
        return False
    return True


def step_floor_of(row: Row) -> int:
    """The step floor a run of ``row`` trains with: the row's own ``min_local_steps``, else :func:`implicit_steps`."""
    own = dict(row.options).get("min_local_steps")
    return implicit_steps(row) if own is None else int(own)


def implicit_steps(row: Row) -> int:
    """The step floor a run of ``row`` gets without naming one: 0 when the row sets ``min_local_steps``, else the
    strategies' default for its policy and data setting (none since 75ee1c0; min-energy with private data had one
    batch before)."""
    if "min_local_steps" in dict(row.options):
        return 0
    steps = strategy_defaults().get("min_local_steps", 0)
    if steps is None:
        try:
            from flwr_adaptive.strategies.step_floor import default_min_local_steps
        except ImportError:  # strategies without a per-policy default
            return 0
        steps = default_min_local_steps(None, row.policy, row.cycling)
    return int(steps or 0)


def strategy_defaults() -> dict:
    """``AdaptiveStrategy``'s defaults of the options the rows set (``max_rescale``, ``min_local_steps``,
    ``scale_batch_size``, ``objective``; ``min_local_steps=None``: the policy's own default, :func:`implicit_steps`)."""
    import inspect

    from flwr_adaptive.strategies import AdaptiveStrategy

    params = inspect.signature(AdaptiveStrategy.__init__).parameters
    names = ("max_rescale", "min_local_steps", "scale_batch_size", "objective")
    return {n: params[n].default for n in names if n in params}


ROWS = _rows()
#: Rows of the quick form (the suite): the reference, the adaptive default (and the one before it, the floor table's
#: "none"), one baseline of each kind.
QUICK_ROWS = ("equal-fedavg", "equal-norm", "time-samples", "time-norm-cap8-shrink", "time-norm-cap8",
              "time-norm-cap8-steps2", "pyramid", "time-fedprox")
#: The main part's rows (``--noniid-rows main``, the default): the reference, Equal on the normalised rule, Time-only
#: as a user gets it (the default) and before the slow nodes' batches shrank, Time-only on FedAvg's and the data
#: size's weights, Min-energy as a user gets it, the PyramidFL-style baseline, and the floors on a quota (steps, a
#: share of the equal split) on the normalised rule and on samples. The other parts run rows of their own; a few rows
#: (other rescale caps and floors) run only with ``--noniid-rows all``.
MAIN_ROWS = ("equal-fedavg", "equal-norm", "time-norm-cap8-shrink", "time-norm-cap8", "time-samples", "time-data-size",
             "min-energy-norm-shrink-cap2", "pyramid", "time-norm-cap8-steps2", "time-floor0.5", "time-samples-steps2",
             "time-samples-floor0.5")
MEASURED_ROWS = ("equal-fedavg", "time-samples", "time-norm-cap8-shrink")
#: Rows run at the second and later α (the first α runs every asked row): the reference, both Equal rules, Time-only
#: and Min-energy as a user gets them, Time-only on FedAvg's weights, and the PyramidFL-style baseline.
LATER_ALPHA_ROWS = ("equal-fedavg", "equal-norm", "time-samples", "time-norm-cap8-shrink", "min-energy-norm-shrink-cap2",
                    "pyramid")


def available_rows(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(rows that can run, rows left out)``: a normalised row needs the strategies' normalised weighting."""
    norm = normalised_weighting()
    ok, left = [], []
    for name in names:
        row = ROWS[name]
        (left if row.weighting == "normalised" and norm is None else ok).append(name)
    return ok, left


def settings_of(row: Row) -> tuple:
    """What a run of ``row`` is: policy, inner strategy, cycling, quota-share floor, the weighting (resolved) and,
    filled in with the strategies' defaults, the options the rows set (``max_rescale`` only where it applies)."""
    w = row.weighting or default_weighting()
    opts = {**strategy_defaults(), **dict(row.options)}
    if opts.get("min_local_steps", 0) is None:
        opts["min_local_steps"] = implicit_steps(row)
    if "max_rescale" in opts and opts["max_rescale"] is None:
        opts["max_rescale"] = _default_max_rescale(row)
    if w != normalised_weighting():
        opts.pop("max_rescale", None)
        opts.pop("objective", None)
    if "scale_batch_size" in opts:
        if row.policy in _SCALING_POLICIES:
            from flwr_adaptive.strategies.round_quotas import resolve_scale_batch_size

            floor = opts.get("min_local_steps")
            floor = implicit_steps(row) if floor is None else floor
            opts["scale_batch_size"] = resolve_scale_batch_size(opts["scale_batch_size"], w, floor)
        else:
            opts.pop("scale_batch_size")
    return row.policy, row.inner, row.cycling, row.floor, w, tuple(sorted(opts.items()))


def _default_max_rescale(row: Row) -> float:
    """The cap a run of ``row`` gets without naming one: the strategies' default for its policy and data setting."""
    from flwr_adaptive.strategies.normalization import default_max_rescale

    return default_max_rescale(None, row.policy, row.cycling)


def default_row(policy: str = "time") -> str:
    """The row of ``policy`` that runs what a user gets by default (private data): the strategies' default
    weighting with their default options, no floor on a quota's share (the first such row)."""
    want = settings_of(Row(policy, ""))
    return next(n for n, r in ROWS.items() if r.weighting is not None and settings_of(r) == want)
