"""One flat all-reduce that averages a rank's gradients and sums a small tail of numbers.

Contract
--------
:class:`GradientAllReduce` copies the gradients of the trainable parameters into one flat
buffer (a parameter without a gradient, e.g. on a rank with an empty batch, contributes zeros),
all-reduces it over the default process group, divides by ``world`` and writes the average back
into every ``p.grad``: afterwards every rank holds the same averaged gradient. ``extra`` numbers
ride along and are **summed**, not averaged, so each rank can publish its own slot of a field
(its compute time, its batch size) without a second collective. The tail shares the gradient
buffer when the parameters are float32/float64 (its numbers survive the dtype), else it goes
in a second float64 all-reduce. Parameters of more than one dtype are refused (``ValueError``).
Why not ``DistributedDataParallel``: see :mod:`flwr_adaptive.clients.ddp.worker`.

Cost
----
One all-reduce of ``P + extra`` numbers per call (two with a low-precision model: ``P`` and
``extra``), two copies of the gradient into and out of the flat buffer; memory: one buffer of
``P + extra`` numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["GradientAllReduce"]


class GradientAllReduce:
    """Average the gradients of ``params`` over the process group with one flat all-reduce.

    Parameters absent from this step's graph (or all of them, on a rank with an empty batch)
    contribute zeros. ``extra`` numbers ride along in the same collective and are **summed**,
    not averaged (rank ``i`` writes slot ``i`` of a field, the others zero, so every rank learns
    every rank's value without a second collective).

    Parameters
    ----------
    params : iterable of Parameter
        The trainable parameters (all of one floating dtype and device).
    world : int
        Ranks in the group.
    extra : int
        Length of the summed tail.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], world: int, extra: int = 0) -> None:
        self.params = [p for p in params if p.requires_grad]
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) > 1:
            raise ValueError(
                f"trainable parameters have dtypes {sorted(map(str, dtypes))}; the DDP worker "
                "all-reduces one flat buffer: cast the model to one dtype"
            )
        dtype = dtypes.pop() if dtypes else torch.float32
        device = self.params[0].device if self.params else torch.device("cpu")
        self.world = world
        self.numel = sum(p.numel() for p in self.params)
        # The tail shares the buffer only where its numbers survive the dtype (times, batch sizes).
        self._tail_inline = dtype in (torch.float32, torch.float64)
        self.buffer = torch.zeros(self.numel + (extra if self._tail_inline else 0), dtype=dtype, device=device)
        self.tail = torch.zeros(0 if self._tail_inline else extra, dtype=torch.float64, device=device)
        self.extra = extra

    def __call__(self, extra: Sequence[float] | np.ndarray = ()) -> np.ndarray:
        """All-reduce; afterwards every ``p.grad`` holds the average. Returns the summed tail."""
        offset = 0
        for p in self.params:
            n = p.numel()
            view = self.buffer[offset : offset + n]
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad.reshape(-1))
            offset += n
        values = torch.as_tensor(np.asarray(extra, dtype=np.float64))
        if self._tail_inline:
            self.buffer[self.numel :] = values.to(self.buffer.dtype)
            dist.all_reduce(self.buffer, op=dist.ReduceOp.SUM)
            summed = self.buffer[self.numel :].double().cpu().numpy()
        else:
            self.tail.copy_(values)
            dist.all_reduce(self.buffer, op=dist.ReduceOp.SUM)
            dist.all_reduce(self.tail, op=dist.ReduceOp.SUM)
            summed = self.tail.cpu().numpy()
        grads = self.buffer[: self.numel]
        grads.div_(self.world)
        offset = 0
        for p in self.params:
            n = p.numel()
            avg = grads[offset : offset + n].view_as(p)
            if p.grad is None:
                p.grad = avg.clone()
            else:
                p.grad.copy_(avg)
            offset += n
        return summed
