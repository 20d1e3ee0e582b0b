"""Stop a run whose client app was set up wrongly, in its first round, with the fix.

Contract
--------
A Flower app that forgets the telemetry wrapper, puts ``@telemetry_train`` above ``@app.train()``
or never calls ``quota_data`` still runs: without this check every reply would be skipped (no
telemetry) or rejected (more samples than its quota), the global model would never change and
``flwr run`` would exit 0. Every node runs the same ClientApp (Flower ships it to all of them), so
such a mistake shows on **every** reply of the first round:

- :func:`setup_mistake` classifies one reply: ``NO_TELEMETRY`` (none of the telemetry keys),
  ``NO_QUOTA_DATA`` (more samples than the quota and no local data size: ``quota_data`` never
  selected the data), ``NO_STEPS`` (``local-steps`` 0: the call read none of its quota and took no
  optimizer step, e.g. a DataLoader with ``drop_last=True`` and a batch size above every round-1
  quota), or ``None``; the strategies add ``CLIENT_SETUP`` for an error reply that
  says the ClientApp could not be loaded or carries a set-up error of the client wrapper (the
  wrapper raises one when it sits above ``@app.train()``).
- :class:`SetupCheck` (a component both strategy APIs hold) looks at the first round in which any node
  replied: when every reply there shows the **same** mistake it raises :class:`SetupError` whose
  message says what to add and where, for the API in use. Any other mix (one bad node among good
  ones, a hostile client) is screened reply by reply as before: no single client can stop the run.
  Later rounds are never checked.

Cost
----
One pass over the first round's replies' metric keys; nothing after the first round with replies.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, TypeGuard

from flwr_adaptive import keys

__all__ = [
    "SetupError",
    "SetupCheck",
    "setup_mistake",
    "NO_TELEMETRY",
    "NO_QUOTA_DATA",
    "NO_STEPS",
    "CLIENT_SETUP",
    "CLIENT_SETUP_MARK",
]

NO_TELEMETRY = "no-telemetry"
NO_QUOTA_DATA = "no-quota-data"
NO_STEPS = "no-steps"
CLIENT_SETUP = "client-setup"
CLIENT_SETUP_MARK = keys.SETUP_ERROR_MARK

_MESSAGE_WRAP = (
    "wrap the ClientApp's train function with @telemetry_train, on the line directly BELOW "
    "@app.train() (decorators apply bottom-up: above it, Flower registers the unwrapped "
    "function):\n\n"
    "    from flwr_adaptive.clients import quota_data, telemetry_train\n\n"
    "    @app.train()\n"
    "    @telemetry_train          # or @telemetry_train(meter=...)\n"
    "    def train(msg, context):\n"
    "        ...\n"
)
_LEGACY_WRAP = (
    "wrap the NumPyClient in client_fn with TelemetryClient:\n\n"
    "    from flwr_adaptive.clients import TelemetryClient, quota_data\n\n"
    "    def client_fn(context):\n"
    "        ...\n"
    "        return TelemetryClient(FlowerClient(...), context).to_client()\n"
)
_QUOTA_DATA = (
    "call quota_data where the client builds its training data, so that it trains on exactly "
    "its quota:\n\n"
    "    trainloader = quota_data(trainloader)   # a DataLoader, dataset, array or list\n"
)
_NO_STEPS = (
    "read each quota in at least one batch. A DataLoader with drop_last=True yields no batch for a quota "
    "below its batch size: pass the DataLoader itself to quota_data, which reads such a quota as one batch\n\n"
    "    trainloader = quota_data(DataLoader(dataset, batch_size=B, drop_last=True))\n\n"
    "or set drop_last=False, or pass min_quota >= B (and a budget of at least nodes x B) to the strategy.\n"
)
FIXES = {
    ("message", NO_TELEMETRY): _MESSAGE_WRAP,
    ("legacy", NO_TELEMETRY): _LEGACY_WRAP,
    ("message", NO_QUOTA_DATA): _QUOTA_DATA + "\ninside the train function wrapped by @telemetry_train.\n",
    ("legacy", NO_QUOTA_DATA): _QUOTA_DATA + "\nin client_fn, on the data the wrapped client's fit() reads.\n",
    ("message", NO_STEPS): _NO_STEPS,
    ("legacy", NO_STEPS): _NO_STEPS,
}


class SetupError(RuntimeError):
    """The client app is set up so that nothing could be trained; the message gives the fix."""


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def setup_mistake(metrics: Mapping[str, Any], quota: int | None) -> str | None:
    """Which set-up mistake one reply's metrics show, or ``None``.

    ``NO_TELEMETRY``: none of :data:`flwr_adaptive.keys.TELEMETRY_KEYS` is present.
    ``NO_QUOTA_DATA``: ``samples`` exceeds ``quota`` while ``data-size`` is unknown (-1): the
    wrapper ran but ``quota_data`` never selected the data, so the client trained on all of it.
    ``NO_STEPS``: ``local-steps`` is 0 (the wrapper's word for a call that read none of its quota).
    """
    if not any(k in metrics for k in keys.TELEMETRY_KEYS):
        return NO_TELEMETRY
    samples, size = metrics.get(keys.SAMPLES), metrics.get(keys.DATA_SIZE)
    if quota is not None and _is_number(samples) and _is_number(size) and samples > quota and size == keys.UNKNOWN:
        return NO_QUOTA_DATA
    steps = metrics.get(keys.LOCAL_STEPS)
    if _is_number(steps) and steps == 0:
        return NO_STEPS
    return None


class SetupCheck:
    """Raise :class:`SetupError` when the first round with replies shows one set-up mistake everywhere.

    The strategy calls :meth:`check_setup` once per round from its aggregation, with one entry per
    node that replied: the mistake its reply shows (:func:`setup_mistake`), ``CLIENT_SETUP`` with
    the reason for an error reply carrying :data:`CLIENT_SETUP_MARK`, or ``None`` for anything else
    (a usable reply, or an error unrelated to the set-up).

    Parameters
    ----------
    api : str (default: "message")
        Which API's fix to print: ``"message"`` (``@telemetry_train``) or ``"legacy"`` (``TelemetryClient``).
    """

    def __init__(self, api: str = "message") -> None:
        if (api, NO_TELEMETRY) not in FIXES:
            raise ValueError(f"api must be 'message' or 'legacy', got {api!r}")
        self.setup_api = api
        self._setup_checked = False

    def check_setup(
        self, server_round: int, mistakes: Mapping[Hashable, str | None], reasons: Mapping[Hashable, str] | None = None
    ) -> None:
        """Raise if every reply of the first round with replies shows the same set-up mistake."""
        if self._setup_checked or not mistakes:
            return
        self._setup_checked = True
        found = set(mistakes.values())
        kind = found.pop() if len(found) == 1 else None
        if kind is None:
            return
        nodes = sorted(mistakes, key=str)
        shown = ", ".join(map(str, nodes[:5])) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        if kind == CLIENT_SETUP:
            reason = next(iter((reasons or {}).values()), "")
            raise SetupError(
                f"round {server_round}: the ClientApp could not be loaded or set up on any node "
                f"({shown}), so nothing can be trained. The client said (in deployment the "
                f"SuperNode's log has the full traceback):\n{reason}"
            )
        what = {
            NO_TELEMETRY: "carried no telemetry (no 'samples', 'time-s', ... in its metrics)",
            NO_QUOTA_DATA: "trained on more samples than its quota and reported no local data size "
            "(quota_data was not called)",
            NO_STEPS: f"read none of its quota and took no optimizer step ({keys.LOCAL_STEPS!r} = 0)",
        }[kind]
        raise SetupError(
            f"round {server_round}: the reply of every node ({shown}) {what}, so no update could "
            f"be used and the model would never train. Fix: {FIXES[(self.setup_api, kind)]}"
        )
