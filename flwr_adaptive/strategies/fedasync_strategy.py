"""FedAsync baseline: asynchronous PMA over Flower's Grid, replayed on the virtual clock or live.

Contract
--------
:class:`FedAsyncStrategy` runs FedAsync (Xie, Koyejo & Gupta, "Asynchronous Federated
Optimization", arXiv:1903.03934) from a ServerApp ``main`` through the Grid; its ``start`` takes
the arguments of Flower's ``Strategy.start`` so a ServerApp can swap it in. Every node trains on
its equal share of ``budget`` (so one job per node is one round's worth of samples), replies, and
restarts at once on the newest model. The server mixes each arriving update
``x ← (1 − α_t)·x + α_t·x_new`` with ``α_t = α·s(staleness)``
(:class:`~flwr_adaptive.fedasync_mixer.FedAsyncMixer`: constant, polynomial ``(s+1)^-a`` or hinge);
staleness = model versions mixed since the job's model was sent.

Two orders (constructor option ``order``):

- ``"virtual"`` (default, the emulated comparison): arrival order is the **virtual clock's**
  (docs/energy.md, "The virtual clock"): a job that starts at virtual time ``t`` finishes at
  ``t + time_s``, the device time its client reports as the server believes it (``trust``; the
  first wave's claims are judged as one group, each later one against the other nodes' latest;
  the growth cap counts per round-equivalent and starts from the judged claims' median).
  The replay keeps finished jobs in a :class:`~flwr_adaptive.fedasync_mixer.VirtualClockQueue`;
  it pops the earliest finisher, mixes its update, sends that node its next job on the new model
  and **waits for the reply before popping the next event** (the next job may finish before
  everything queued). The first wave goes to every node at once. Real processes therefore run
  one job at a time after the first wave, whatever the host's contention; the virtual timeline
  is what an asynchronous deployment of those devices would see.
- ``"arrival"`` (a real deployment): ``start`` pushes one job to every node, then polls
  ``grid.pull_messages`` for the outstanding jobs (sleeping ``poll_interval_s`` between empty
  polls), mixes **every** reply in the order it is pulled, and pushes that node's next job at
  once on the newest model, so every device works all the time. Times are the server's wall
  clock (seconds since the first wave; a job starts when pushed and finishes when its reply is
  pulled). A job without a reply after ``timeout`` seconds fails like an error reply.

The virtual replay on a real deployment would leave the devices idle while one job at a time
runs: use it to measure FedAsync on the emulated testbed, and ``order="arrival"`` to deploy it.

Both orders process exactly ``num_rounds × budget`` samples (the last jobs are shortened), the
same total as ``num_rounds`` synchronous rounds. Each time the mixed samples pass a multiple of
``budget`` a *round-equivalent* closes: ``evaluate_fn(r, arrays)`` is called, one log line and one
history row are written with that stretch's time and energy (active energy of the work done in
it, pro-rated for jobs that straddle the boundary, plus idle power of nodes that have no work
left: FedAsync's only idle time is at the end), so totals compare with synchronous policies. In
``"arrival"`` order a job's energy counts in the round-equivalent that mixes it. Each history row
says which ``order`` and which ``timeline`` clock (``virtual``/``wall``; ``virtual_time_s`` is
NaN on the wall clock, ``elapsed_s`` always set) produced it.

A failed job (error reply, timeout, invalid telemetry or arrays, a reply too large to screen:
``screening.size_reason``, an update more than ``max_update_ratio`` × the lower median of the
arriving updates and the other nodes' latest judged ones: ``update_size.LatestUpdates``, judged
from 3 lengths; the first wave as one group, in ``"arrival"`` order held by ``fedasync_first_wave``)
is logged; its samples go back to the pool and the node is retried; after ``max_failures``
consecutive failures it is dropped for the rest of the run (in ``"arrival"`` order its samples go
to nodes that had run out of work). A bad client never stops the run.

Cost
----
One message per job (``num_rounds × nodes`` jobs); one weighted sum and one float64 difference
(the update's length) over the model's arrays per update; each in-flight job holds the model it was
sent (a reference: up to one model per node in ``"arrival"`` order); O(log P) queue operations; the
accounting keeps one small record per job (``fedasync_jobs``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from flwr_adaptive import keys
from flwr_adaptive.controller import AllocationController
from flwr_adaptive.fedasync_mixer import STALENESS_FUNCTIONS, FedAsyncMixer, VirtualClockQueue
from flwr_adaptive.strategies.core import log
from flwr_adaptive.strategies.fedasync_belief import FedAsyncBelief
from flwr_adaptive.strategies.fedasync_first_wave import FirstWave
from flwr_adaptive.strategies.fedasync_jobs import FEDASYNC, Job, client_row, energy_until, segment_row
from flwr_adaptive.strategies.history import HistoryMixin
from flwr_adaptive.strategies.node_wait import wait_for_nodes
from flwr_adaptive.strategies.reports import parse_report
from flwr_adaptive.strategies.screening import check_arrays, record_sizes, size_reason
from flwr_adaptive.strategies.trust import CostTrust, TrustSetting
from flwr_adaptive.strategies.update_size import MAX_UPDATE_RATIO, LatestUpdates, checked_update_ratio, update_length

__all__ = ["FedAsyncStrategy", "FEDASYNC"]

ORDERS = ("virtual", "arrival")  # replay on the virtual clock | mix live replies as they are pulled


class FedAsyncStrategy(HistoryMixin):
    """Asynchronous PMA (FedAsync) driven over Flower's Grid on the virtual clock.

    Parameters
    ----------
    budget : int
        Samples of one round-equivalent; each node's job is its equal share of it.
    alpha : float (default: 0.6)
        Mixing weight α of a fresh update.
    staleness : str (default: "polynomial")
        ``"constant"``, ``"polynomial"`` or ``"hinge"``.
    a, b : float, optional
        Staleness-function parameters (see :class:`~flwr_adaptive.fedasync_mixer.FedAsyncMixer`).
    allow_cycling : bool (default: False)
        Sent to clients as ``keys.ALLOW_CYCLING`` (a share above the local data cycles it).
    min_nodes : int (default: 1)
        Wait until this many nodes are connected before the first wave.
    max_failures : int (default: 2)
        Consecutive failed jobs after which a node is dropped for the rest of the run.
    wait_s : float (default: 600)
        Longest wait for ``min_nodes`` nodes to connect.
    order : str (default: "virtual")
        ``"virtual"``: replay arrivals on the virtual clock, one job in flight after the first
        wave (the emulated comparison). ``"arrival"``: every node always has a job in flight and
        replies are mixed in the order the Grid delivers them, timed on the server's wall clock
        (a real deployment).
    trust : CostTrust or bool (default: True)
        What the server believes of each claimed duration on the virtual clock (see
        ``flwr_adaptive.strategies.trust``): ``True`` the default rules, a ``CostTrust(...)`` to
        tune them, ``False`` to believe every claim (clients you control). ``order="arrival"``
        times every job by the server's wall clock, so no claim is weighed there.
    max_update_ratio : float (default: 100)
        A job whose update ``‖x_new − x_sent‖`` is longer than this × the lower median of the
        arriving updates and the other nodes' latest accepted ones fails like an invalid reply
        (``update_size.LatestUpdates``; ``math.inf``: off): a model multiplied by 1e30 would
        otherwise stay in the mix for the rest of the run.
    """

    #: What the server believes of each claimed duration (``flwr_adaptive.strategies.trust``; ``None``
    #: believes every claim; set later as ``trust=``).
    trust = TrustSetting()

    #: Seconds between two ``pull_messages`` polls that returned nothing (``order="arrival"``).
    poll_interval_s: float = 0.2

    @property
    def max_update_ratio(self) -> float:
        """An update longer than this × the lower median is an invalid reply (``math.inf``: not screened)."""
        return self.updates.ratio

    @max_update_ratio.setter
    def max_update_ratio(self, value: float) -> None:
        self.updates.ratio = checked_update_ratio(value)

    def __init__(
        self,
        *,
        budget: int,
        alpha: float = 0.6,
        staleness: str = "polynomial",
        a: float | None = None,
        b: float = 4.0,
        allow_cycling: bool = False,
        min_nodes: int = 1,
        max_failures: int = 2,
        wait_s: float = 600.0,
        order: str = "virtual",
        trust: CostTrust | bool = True,
        max_update_ratio: float = MAX_UPDATE_RATIO,
    ) -> None:
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
            raise ValueError(f"budget must be a positive int (samples per round-equivalent), got {budget!r}")
        if staleness not in STALENESS_FUNCTIONS:
            raise ValueError(
                f"unknown staleness function {staleness!r}; choose one of {', '.join(STALENESS_FUNCTIONS)}"
            )
        if order not in ORDERS:
            raise ValueError(
                f"unknown order {order!r}; choose 'virtual' (replay on the virtual clock, emulated "
                f"testbed) or 'arrival' (mix replies as they arrive, real deployment)"
            )
        for name, value in (("min_nodes", min_nodes), ("max_failures", max_failures)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.budget = int(budget)
        self.order = order
        self.policy = FEDASYNC
        self.mixer = FedAsyncMixer(alpha=alpha, staleness=staleness, a=a, b=b)  # validates alpha
        self.allow_cycling = bool(allow_cycling)
        self.min_nodes = min_nodes
        self.max_failures = max_failures
        self.wait_s = float(wait_s)
        self._round_rows: list[dict[str, Any]] = []
        self._client_rows: list[dict[str, Any]] = []
        self.trust = trust
        self.updates = LatestUpdates(checked_update_ratio(max_update_ratio))

    # ------------------------------------------------------------------ Flower-like surface
    def summary(self) -> None:
        """Log the settings."""
        m = self.mixer
        mode = "virtual-clock replay" if self.order == "virtual" else "live, mixed in arrival order"
        log(
            INFO,
            "\t├──> FedAsync (%s): alpha=%g, staleness=%s (a=%g, b=%g), "
            "budget=%d samples per round-equivalent, allow_cycling=%s",
            mode,
            m.alpha,
            m.staleness,
            m.a,
            m.b,
            self.budget,
            self.allow_cycling,
        )

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run ``num_rounds`` round-equivalents (``num_rounds × budget`` samples) of FedAsync.

        Parameters
        ----------
        grid : Grid
            The ServerApp's grid.
        initial_arrays : ArrayRecord
            The initial model.
        num_rounds : int
            Round-equivalents to run.
        timeout : float
            Seconds to wait for one job's reply.
        train_config : ConfigRecord, optional
            Entries sent with every job (besides quota, cycling and the node's job number).
        evaluate_config : ConfigRecord, optional
            Unused (no federated evaluation); accepted for ``Strategy.start`` compatibility.
        evaluate_fn : callable, optional
            ``(round_equivalent, arrays) -> MetricRecord | None``: centralized evaluation at 0 and
            at the end of every round-equivalent.

        Returns
        -------
        Result
            Final arrays and the centralized evaluations by round-equivalent.
        """
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise ValueError(f"num_rounds must be an int >= 1, got {num_rounds!r}")
        log(INFO, "Starting FedAsyncStrategy:")
        self.summary()
        self._grid, self._timeout = grid, float(timeout)
        self._config = dict(train_config or {})
        self._names = list(initial_arrays.keys())
        self._model = [initial_arrays[k].numpy() for k in self._names]
        self._layout = {k: (tuple(m.shape), str(m.dtype)) for k, m in zip(self._names, self._model)}
        self._queue = VirtualClockQueue()
        self._jobs: list[Job] = []
        self._inflight: dict[int, Job] = {}
        self._jobs_of: dict[int, int] = {}
        self._failures: dict[int, int] = {}
        self._dropped: set[int] = set()
        self._done_at: dict[int, float] = {}  # node -> virtual time it ran out of work
        self._idle_w: dict[int, float | None] = {}
        self._idle_s: dict[int, float] = {}  # node -> seconds of its idle spans that ended (it worked again)
        # a run's history, version and model are its own: a second start() begins again at round-equivalent 1
        self._round_rows, self._client_rows = [], []
        self.mixer.version = 0
        self._total = num_rounds * self.budget
        self._assigned = 0  # samples in flight or processed
        self._mixed_samples = 0
        self._segment_start = 0.0
        self._cum = (0.0, 0.0)  # (active J, idle J) up to the last boundary
        self._evaluate_fn = evaluate_fn
        self._belief = FedAsyncBelief(self.trust)  # what the server believes of each claimed duration
        self.updates = LatestUpdates(self.max_update_ratio)  # a second start() judges by its own run only
        result = Result()
        self._result = result
        if evaluate_fn is not None:
            res = evaluate_fn(0, initial_arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[0] = res

        nodes = self._wait_for_nodes()
        if len(nodes) < 3 and math.isfinite(self.updates.ratio):
            log(
                WARNING,
                "[adaptive] fedasync: %d node(s): the update-size screen judges an update against the median of "
                "3 or more, so every update is mixed unjudged (connect 3 or more nodes and wait for them: "
                "min_nodes=3, in an app's run config min-nodes=3)",
                len(nodes),
            )
        self._share = dict(
            zip(
                nodes,
                AllocationController(self.budget, w_time=0.0, w_energy=0.0, deadband=0.0, min_quota=0)
                .allocate(nodes)
                .values(),
            )
        )
        boundary = self._run_arrival(nodes, num_rounds) if self.order == "arrival" else self._replay(nodes, num_rounds)
        if boundary <= num_rounds:
            log(
                WARNING,
                "[adaptive] fedasync: stopped after %d of %d round-equivalents: %d of %d samples "
                "processed (every node failed or was dropped)",
                boundary - 1,
                num_rounds,
                self._mixed_samples,
                self._total,
            )
        result.arrays = self._record(self._model)
        return result

    def _replay(self, nodes: list[int], num_rounds: int) -> int:
        """The virtual-clock replay; returns the first round-equivalent not closed."""
        first = [j for j in (self._new_job(n, 0.0) for n in nodes) if j is not None]
        self._send(first)
        boundary = 1
        while len(self._queue):
            _, finish, job = self._queue.pop()
            node = job.node  # the queue's key (see _send)
            self._inflight.pop(node, None)
            self._mix(job, boundary)
            while boundary <= num_rounds and self._mixed_samples >= boundary * self.budget:
                self._close(boundary, finish)
                boundary += 1
            nxt = self._new_job(node, finish)
            if nxt is not None:
                self._send([nxt])
            else:
                self._done_at.setdefault(node, finish)
        return boundary

    def _run_arrival(self, nodes: list[int], num_rounds: int) -> int:
        """Live FedAsync: mix every reply as it is pulled, push that node's next job at once.

        The first wave's accepted replies wait unmixed, then are judged as one group
        (:class:`~flwr_adaptive.strategies.fedasync_first_wave.FirstWave`). Times are wall-clock
        seconds since the first wave. Returns the first round-equivalent not closed.
        """
        started = time.monotonic()
        pending: dict[str, Job] = {}  # message id -> job in flight
        wave = FirstWave(nodes, self.updates)
        boundary = 1

        def push(job: Job | None) -> None:
            while job is not None:
                ids = list(self._grid.push_messages([self._message(job)]))
                if ids:
                    pending[str(ids[0])] = job
                    return
                wave.answered(job.node)
                job = self._fail(job, "push-failed", time.monotonic() - started)

        def release(now: float) -> None:
            """Judge and mix the replies the first wave no longer holds."""
            nonlocal boundary
            ready = wave.release(self._dropped, len(pending))
            far = self._outsized(ready)
            for job in ready:  # each node idled from its reply until now
                self._idle_w[job.node] = job.accepted.idle_w
                self._idle_s[job.node] = self._idle_s.get(job.node, 0.0) + max(now - job.finish_s, 0.0)
            for job in ready:
                if job.node in far:
                    push(self._fail(job, far[job.node], now))
                    continue
                self._take(job)
                self._failures[job.node] = 0
                self._mix(job, boundary)
                while boundary <= num_rounds and self._mixed_samples >= boundary * self.budget:
                    self._close(boundary, now)
                    boundary += 1
                nxt = self._new_job(job.node, now)
                if nxt is None:
                    self._done_at.setdefault(job.node, now)
                push(nxt)

        for node in nodes:
            if (first := self._new_job(node, 0.0)) is None:
                wave.answered(node)  # no samples left for it (budget × rounds < nodes): nothing to wait for
            push(first)
        if wave.screened:
            log(
                INFO,
                "[adaptive] fedasync: the first wave's replies are mixed once all %d nodes' first jobs replied or "
                "failed (the update-size screen judges them as one group); then every reply at once",
                len(nodes),
            )
        while pending or wave.held:
            replies = list(self._grid.pull_messages(list(pending))) if pending else []
            now = time.monotonic() - started
            for reply in replies:
                job = pending.pop(str(reply.metadata.reply_to_message_id), None)
                if job is None:  # not one of ours, or already timed out
                    continue
                wave.answered(job.node)
                if (reason := self._accept(job, reply)) is not None:
                    push(self._fail(job, reason, now))
                    continue
                job.finish_s = now  # the wall clock orders and times the run, not the claimed duration
                wave.hold(job)
            for message_id, job in list(pending.items()):
                if now - job.start_s > self._timeout:
                    del pending[message_id]
                    wave.answered(job.node)
                    push(self._fail(job, f"no reply within timeout={self._timeout:g} s", now))
            release(now)
            if self._total > self._assigned:  # a dropped node's samples: give them to nodes that ran out of work
                for node in [n for n in self._done_at if n not in self._dropped]:
                    self._work_again(node, now)
                    push(self._new_job(node, now))
            if pending and not replies:
                time.sleep(self.poll_interval_s)
        return boundary

    # ------------------------------------------------------------------ jobs
    #: What the operator should pass to get ``min_nodes`` nodes (progress lines and the error).
    node_wait_hint: str = "start more SuperNodes or lower min_nodes"

    def _wait_for_nodes(self) -> list[int]:
        nodes = wait_for_nodes(
            self._grid, self.min_nodes, timeout_s=self.wait_s, hint=self.node_wait_hint, what="fedasync"
        )
        return sorted(nodes)

    def _new_job(self, node: int, start_s: float) -> Job | None:
        """The node's next job starting at ``start_s``, or ``None`` when no samples are left."""
        left = self._total - self._assigned
        if left <= 0 or node in self._dropped:
            return None
        quota = min(max(self._share[node], 1), left)
        self._assigned += quota
        self._jobs_of[node] = self._jobs_of.get(node, 0) + 1
        return Job(node, self._jobs_of[node], quota, start_s, self.mixer.version)

    def _message(self, job: Job) -> Message:
        job.sent = self._model  # mix() makes a new list: this one stays the model the job was sent
        config = ConfigRecord(
            {
                **self._config,
                keys.QUOTA: int(job.quota),
                keys.ALLOW_CYCLING: self.allow_cycling,
                keys.ROUND: int(job.index),
            }
        )
        return Message(
            RecordDict({"arrays": self._record(self._model), "config": config}),
            dst_node_id=job.node,
            message_type=MessageType.TRAIN,
        )

    def _send(self, jobs: list[Job]) -> None:
        """Send jobs, wait for their replies, queue the good ones; failed ones are retried or dropped."""
        while jobs:
            replies = {
                m.metadata.src_node_id: m
                for m in self._grid.send_and_receive([self._message(j) for j in jobs], timeout=self._timeout)
            }
            retry, accepted = [], []
            reasons = {job.node: self._accept(job, replies.get(job.node)) for job in jobs}
            reasons.update(self._outsized([job for job in jobs if reasons[job.node] is None]))
            for job in jobs:
                if reasons[job.node] is None:
                    accepted.append(self._take(job))
                elif (again := self._fail(job, str(reasons[job.node]), job.start_s)) is not None:
                    retry.append(again)  # same start, job number and model
            # The wave is judged as one group: judged one by one, a fast node's claim would be
            # measured against whichever nodes happened to come before it in the wave.
            believed = self._belief.judge(max((j.index for j in accepted), default=0), [j.accepted for j in accepted])
            for job in accepted:
                job.finish_s = job.start_s + believed[job.node]
                self._failures[job.node] = 0
                self._inflight[job.node] = job
                self._queue.push(job.node, job.finish_s, job)
            jobs = retry

    def _work_again(self, node: int, now: float) -> None:
        """``node`` is given work again at ``now``: its idle span since ``_done_at`` ends (its seconds are kept)."""
        done = self._done_at.pop(node, None)
        if done is not None:
            self._idle_s[node] = self._idle_s.get(node, 0.0) + max(now - done, 0.0)

    def _fail(self, job: Job, reason: str, retry_at: float) -> Job | None:
        """Record a failed job; returns its retry starting at ``retry_at``, or ``None`` (node dropped, no work left)."""
        self._assigned -= job.quota  # its samples go back to the pool
        self._failures[job.node] = self._failures.get(job.node, 0) + 1
        job.mixed_in = len(self._round_rows) + 1  # not mixed: its row is in the open round-equivalent's
        self._client_rows.append(client_row(job, reason))
        if self._failures[job.node] >= self.max_failures:
            self._dropped.add(job.node)  # its latest update length still judges the others (LatestUpdates)
            log(
                WARNING,
                "[adaptive] fedasync: node %s failed %d jobs in a row (%s); dropped for the rest of the run",
                job.node,
                self._failures[job.node],
                reason,
            )
            return None
        log(WARNING, "[adaptive] fedasync: node %s job %d failed (%s); retrying", job.node, job.index, reason)
        self._jobs_of[job.node] -= 1
        return self._new_job(job.node, retry_at)

    def _accept(self, job: Job, reply: Message | None) -> str | None:
        """Fill ``job`` from its reply; returns why the reply is unusable, or ``None``."""
        if reply is None:
            return "no-reply"
        if reply.has_error():
            return f"error: {reply.error.reason}"
        content = reply.content
        if len(content.array_records) != 1 or len(content.metric_records) != 1:
            return "invalid: expected one ArrayRecord and one MetricRecord"
        metrics = next(iter(content.metric_records.values()))
        if reason := size_reason(metrics, record_sizes(next(iter(content.array_records.values()))), self._layout):
            return f"invalid: {reason}"
        try:
            report = parse_report(job.node, metrics, job.quota)
        except ValueError as err:
            return f"invalid: {err}"
        record = next(iter(content.array_records.values()))
        # names, shapes, dtypes and finite values, as the synchronous strategies screen them: one NaN
        # mixed into the model would stay in it for the rest of the run
        if reason := check_arrays(record, self._layout):
            return f"invalid: {reason}"
        job.report, job.arrays = report, [record[k].numpy() for k in self._names]
        job.length = update_length(zip(job.arrays, job.sent or []))
        return None

    def _outsized(self, jobs: list[Job]) -> dict[int, str]:
        """``{node: why}`` for the accepted ``jobs`` whose update is outsized (``LatestUpdates.judge``)."""
        far = self.updates.judge({job.node: job.length_per_sample for job in jobs})
        return {
            job.node: f"invalid: its update per sample is {far[job.node]:.3g}× the median of the arriving and latest "
            f"judged ones, beyond max_update_ratio {self.updates.ratio:g} (a scaled or far-off model)"
            for job in jobs
            if job.node in far
        }

    def _take(self, job: Job) -> Job:
        """Count an accepted job's samples (a capped job processed fewer) and its node's idle power."""
        self._assigned += job.accepted.samples - job.quota
        self._idle_w[job.node] = job.accepted.idle_w
        return job

    def _mix(self, job: Job, boundary: int) -> None:
        job.staleness = self.mixer.version - job.base_version
        job.alpha_t = self.mixer.weight(job.base_version)
        if job.arrays is None:
            raise RuntimeError(f"fedasync: job {job.index} of node {job.node} is mixed twice or before its reply")
        self._model = self.mixer.mix(self._model, job.arrays, job.base_version)
        job.arrays = job.sent = None  # mixed: free them
        job.mixed_in = boundary
        self._mixed_samples += job.accepted.samples
        self._jobs.append(job)
        self._client_rows.append(client_row(job, "ok"))

    def _record(self, arrays: Sequence[np.ndarray]) -> ArrayRecord:
        record = ArrayRecord()
        for name, a in zip(self._names, arrays):
            record[name] = Array.from_numpy_ndarray(np.ascontiguousarray(a))
        return record

    # ------------------------------------------------------------------ accounting
    def _close(self, r: int, t: float) -> None:
        """Close round-equivalent ``r`` at virtual time ``t``: one history row, evaluate, one log line.

        The row is in ``history`` before ``evaluate_fn`` runs (an app's evaluation may append the
        round's rows to its CSV, as it does after a synchronous round)."""
        active, idle = energy_until(
            [*self._jobs, *self._inflight.values()], self._done_at, self._idle_w, t, self._idle_s
        )
        mixed = [j for j in self._jobs if j.mixed_in == r]
        joules = (active - self._cum[0], idle - self._cum[1])
        row = segment_row(
            r,
            (self._segment_start, t),
            mixed,
            [*self._jobs, *self._inflight.values()],
            joules,
            self.order,
            self.mixer.version,
        )
        self._cum = (active, idle)
        self._round_rows.append(row)
        if self._evaluate_fn is not None:
            res = self._evaluate_fn(r, self._record(self._model))
            if res is not None:
                self._result.evaluate_metrics_serverapp[r] = res
        self._segment_start = t
        self._belief.close_round()  # the growth cap counts per round-equivalent
        energy = f"energy {row['energy_j']:.1f} J" if math.isfinite(row["energy_j"]) else "energy unmeasured"
        log(
            INFO,
            "[adaptive] round %s (fedasync, %s order, %s clock; round-equivalent of %d samples): makespan %.3f s | %s "
            "| CV busy %.3f | %d updates mixed, staleness mean %.2f max %d",
            r,
            self.order,
            row["timeline"],
            self.budget,
            row["makespan_s"],
            energy,
            row["cv_busy"],
            len(mixed),
            row["staleness_mean"],
            row["staleness_max"],
        )
