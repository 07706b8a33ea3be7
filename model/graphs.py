"""CUDA graphs for the training loop (SPEC §3): a step recorded once and replayed. No Ray.

A trainer splits its optimiser step into an eager batch draw, a *body* (forward, extra loss,
backward, gradient norms, clipping, AdamW and the epoch's running sums: device work only, no
host reads) and an eager ``after_step``. ``StepGraph`` records the body once and replays it with
each step's batch copied into static buffers, so the CPU launches one graph a step instead of
hundreds of kernels. Recording needs a few warm-up calls (cuBLAS workspaces, autograd's lazy
state, AdamW's state, ``torch.compile``'s first call); they would train the model, so the
weights and the optimiser state are copied before and put back after, in place: the first
replayed step starts from exactly the state the eager loop would have had.

``ForwardGraph`` does the same for a no-grad computation over fixed inputs (the validation
loss). Anything that cannot be recorded raises ``GraphUnavailable`` with the reason; the
trainers then train eagerly and say why in one line (``announce``).

A trainer records both graphs into one memory pool (``backend.pool()``): each graph's
temporaries die inside it (the step's gradients are dropped in the graph, the validation keeps
only its output tensor), so the validation's temporaries reuse the step's memory instead of
holding a second pool (``model.memory`` counts one).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

WARMUP = 3  # eager calls on a side stream before recording (PyTorch's whole-network recipe)


class GraphUnavailable(RuntimeError):
    """The step cannot run as a CUDA graph; the message says why."""


def announce(what: str, reason: str) -> None:
    """The one line a trainer prints when it falls back to eager."""
    print(f"[qkgeom] {what}: CUDA graphs off, training eagerly: {reason}", file=sys.stderr, flush=True)


def refusal(device: torch.device, amp_dtype: torch.dtype | None, condition: object) -> str | None:
    """Why this run cannot be recorded before trying (None: it may be). ``condition``: the
    intervention instance (its class's ``graph_safe``). fp16 is recorded too: the loss scaler and the
    skipped member's step stay on the device (``model.scaler``, ``model.optimiser``). ``amp_dtype``
    is kept for the callers: no dtype is refused today."""
    if device.type != "cuda":
        return "not a CUDA device"
    if not type(condition).graph_safe:
        return (f"condition {type(condition).name!r} does not declare itself graph_safe "
                "(interventions.base)")
    return None


class _Snapshot:
    """Copies of the trained tensors, of any other state the step writes (the loss scaler's) and of
    the optimiser state, put back in place by ``restore``."""

    def __init__(self, params: Sequence[Tensor], optimizer: torch.optim.Optimizer) -> None:
        self.params = [(p, p.detach().clone()) for p in params]
        self.optimizer = optimizer
        self.state = {id(p): {k: v.clone() if isinstance(v, Tensor) else v for k, v in s.items()}
                      for p, s in optimizer.state.items()}

    @torch.no_grad()
    def restore(self) -> None:
        for p, saved in self.params:
            p.copy_(saved)
        for p, state in self.optimizer.state.items():
            saved = self.state.get(id(p))
            for key, value in state.items():
                if not isinstance(value, Tensor):
                    continue
                if saved is None:
                    value.zero_()  # state the warm-up created: zeros are what AdamW starts from
                else:
                    value.copy_(saved[key])


class CudaGraphs:
    """How graphs are made: warm-up calls on a side stream, then one recording.
    (``tests/helpers.py`` has a CPU stand-in that checks the bookkeeping around them.)"""

    @staticmethod
    def warm_up(fn: Callable[[], object], calls: int) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(calls):
                fn()
        torch.cuda.current_stream().wait_stream(side)

    @staticmethod
    def pool() -> object:
        """A new graph memory pool's token, for the graphs of one trainer to share."""
        return torch.cuda.graph_pool_handle()

    @staticmethod
    def record(fn: Callable[[], Tensor | None], pool: object = None) -> Callable[[], Tensor | None]:
        """``replay()``: launch the recorded kernels and return the tensor ``fn`` returned while
        recording (the same tensor every time, rewritten by the replay). ``pool``: ``pool()``'s
        token (None: a private pool)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()

        def replay() -> Tensor | None:
            graph.replay()
            return out

        return replay

    @staticmethod
    def synchronize() -> None:
        torch.cuda.synchronize()


#: the maker every trainer uses
backend: CudaGraphs = CudaGraphs()


class StepGraph:
    """An optimiser step recorded as a CUDA graph.

    body(x, y): one step on the batch x, y [..., B, T] int64 (a pack: [M, B, T]) that reads and
    writes only device tensors, gradients included; ``params``: the trained tensors;
    ``optimizer``: their AdamW, built with ``capturable=True``; ``pool``: the trainer's graph memory
    pool (``CudaGraphs.pool``); ``state``: any other tensor the body writes that the warm-up must
    leave as it was (the loss scaler's scales and growth trackers). What is recorded is the body
    followed by dropping the gradients (``zero_grad(set_to_none=True)``), as in the eager loop:
    each replay writes fresh gradients into the graph's own memory. ``replay`` copies the batch
    into the static buffers and launches the graph.
    """

    def __init__(self, body: Callable[[Tensor, Tensor], None], x: Tensor, y: Tensor,
                 params: Sequence[Tensor], optimizer: torch.optim.Optimizer, pool: object = None,
                 state: Sequence[Tensor] = ()) -> None:
        self.x, self.y = x.clone(), y.clone()
        snapshot = _Snapshot([*params, *state], optimizer)

        def step() -> None:
            body(self.x, self.y)
            optimizer.zero_grad(set_to_none=True)

        try:
            backend.warm_up(step, WARMUP)
            snapshot.restore()
            self._replay = backend.record(step, pool)
        except Exception as exc:  # noqa: BLE001 - any failure to record means: train eagerly
            backend.synchronize()
            snapshot.restore()
            optimizer.zero_grad(set_to_none=True)
            raise GraphUnavailable(_reason("recording the step", exc)) from exc

    def replay(self, x: Tensor, y: Tensor) -> None:
        self.x.copy_(x)
        self.y.copy_(y)
        self._replay()


class ForwardGraph:
    """A no-grad computation over fixed inputs recorded as a CUDA graph; ``replay()`` returns its
    output tensor (the same tensor each time, rewritten)."""

    def __init__(self, fn: Callable[[], Tensor], pool: object = None) -> None:
        try:
            with torch.no_grad():
                backend.warm_up(fn, WARMUP)
                self._replay = backend.record(fn, pool)
        except Exception as exc:  # noqa: BLE001
            backend.synchronize()
            raise GraphUnavailable(_reason("recording the validation loss", exc)) from exc

    def replay(self) -> Tensor:
        with torch.no_grad():
            return self._replay()


def _reason(what: str, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{what} failed: {type(exc).__name__}: {first}"
