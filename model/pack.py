"""Packed trials (SPEC §5.1): K runs of one shape trained as one batched computation. No Ray.

Members share the shape, the condition and its strengths, and the schedule; init regime,
weight seed and batch seed may differ. Each member is exactly its unpacked ``Trainer`` run:
the same initial weights (``build_model``), its own batch order (``BatchSampler``), AdamW
state, gradient clipping (the global norm of its own gradients), losses, probe
(``metrics.probe`` on that member alone) and ``EpochReport`` rows. A member whose loss turns
non-finite is marked diverged at the same check as its unpacked run, reported once and no
more; the others go on. Its weights (non-finite from that step on) still ride along in the
batched step: nothing crosses between members, and dropping it would not shorten the step.

How: the members' weights are stacked with a leading member dimension
(``torch.func.stack_module_state``) and become the parameters of one packed ``GPT`` (the one
model definition, ``model.gpt``: each layer runs all members in one batched kernel, and
attention folds the members into SDPA's batch, so flash attention serves the whole pack; no
``vmap``). It returns each member's loss [K]; ordinary autograd on ``loss.sum()`` gives every
member the gradient of its own loss (members share no computation). AdamW is elementwise, so
one optimiser over the stacked tensors keeps per-member state. Each member also has a plain
``GPT`` whose parameters are views of its slice: the probe runs on it, and so do its
intervention's per-member hooks (``interventions.base``: ``pack_aware``).

Equal means equal to rounding (reports after 20 steps: ~1e-13 relative in float64, < 1e-4 in
float32), not bit-identical, even for a pack of one: batched kernels sum in another order. So an
unpacked run (``--pack 1``) stays a ``Trainer``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.func import stack_module_state

from model import graphs as graphs_mod
from model.corpus import VAL_SEED, BatchSampler, Corpus, fixed_windows, probe_batch
from model.gpt import GPT, GPTConfig
from model.qk_init import build_model
from model.train import (
    EpochReport,
    Status,
    TrainConfig,
    compile_model,
    diverged_report,
    epoch_report,
    load_optimizer,
    make_adamw,
    resolve_amp,
    resolve_device,
    split_params,
)

if TYPE_CHECKING:
    from interventions.base import Intervention


@dataclass(frozen=True)
class Member:
    """One run of a pack: init regime, weight seed and recipe (``train.seed``: its batch order)."""

    qk_init: str
    model_seed: int
    train: TrainConfig  # members' TrainConfigs may differ only in .seed


def _differences(a: Any, b: Any, skip: tuple[str, ...] = ()) -> str:
    """'field a vs b, …' for the dataclass fields in which ``a`` and ``b`` differ."""
    return ", ".join(f"{f.name} {getattr(b, f.name)!r} vs {getattr(a, f.name)!r}" for f in fields(a)
                     if f.name not in skip and getattr(a, f.name) != getattr(b, f.name))


def check_packable(members: Sequence[Member], model_cfgs: Sequence[GPTConfig] | None = None,
                   conditions: Sequence[Intervention] | None = None) -> None:
    """Raise ValueError naming what differs when ``members`` cannot train as one pack.

    Their TrainConfigs may differ only in ``seed`` (the schedule is shared). ``model_cfgs`` and
    ``conditions``, when given, hold one entry per member and must all be equal (the shape; the
    condition's name and strengths), and the condition must declare itself ``pack_aware``.
    """
    if not members:
        raise ValueError("a pack needs at least one member")
    first = members[0].train
    for i, m in enumerate(members[1:], 1):
        diff = _differences(first, m.train, skip=("seed",))
        if diff:
            raise ValueError(f"pack member {i} has another schedule than member 0 ({diff}); members may "
                             "differ only in init, weight seed and TrainConfig.seed")
    for what, items in (("shape", model_cfgs), ("condition", conditions)):
        if items is not None and len(items) != len(members):
            raise ValueError(f"{len(items)} {what}s given for {len(members)} pack members")
    for i, cfg in enumerate(model_cfgs or ()):
        diff = _differences(model_cfgs[0], cfg)
        if diff:
            raise ValueError(f"pack member {i} has another shape than member 0 ({diff})")
    if conditions:
        named = [(iv.name, iv.config()) for iv in conditions]
        for i, cond in enumerate(named):
            if cond != named[0]:
                raise ValueError(f"pack member {i} has another condition than member 0: {cond[0]} {cond[1]} vs "
                                 f"{named[0][0]} {named[0][1]}")
        if not type(conditions[0]).pack_aware:
            raise ValueError(f"condition {named[0][0]!r} does not declare itself pack_aware "
                             "(interventions.base); train it unpacked")


def _copy_with(model: GPT, tensors: dict[str, Tensor], requires_grad: bool = False) -> GPT:
    """A copy of ``model`` whose parameters are ``tensors[name]`` (named as in ``named_parameters``;
    ties kept), neither initialised nor copied: deepcopy takes them from its memo."""
    memo = {id(p): nn.Parameter(tensors[name], requires_grad=requires_grad) for name, p in model.named_parameters()}
    return copy.deepcopy(model, memo)


class PackedTrainer:
    """K runs of one shape: stacked weights, one batched step, per-member everything else.

    ``on_epoch(i, report)`` receives, per epoch, each member's report in member order
    (``reporting``: the members reported for ``epoch``); the report equals what the member's
    unpacked ``Trainer`` gives. ``state_dict()`` taken during the last of them holds the whole
    pack after the epoch (as Trainer's, resuming is bit-identical on the CPU).
    """

    def __init__(self, model_cfg: GPTConfig, members: Sequence[Member], corpus: Corpus,
                 intervention: Callable[[], Intervention] | None = None, graphs: bool = True) -> None:
        from interventions.base import Intervention  # the loop sees only the hook interface

        factory = intervention or Intervention
        self.members = list(members)
        self.interventions = [factory() for _ in self.members]
        check_packable(self.members, conditions=self.interventions)
        if model_cfg.vocab_size != corpus.vocab_size:
            raise ValueError(f"model vocab_size {model_cfg.vocab_size} != corpus vocabulary {corpus.vocab_size}")
        self.model_cfg, self.corpus = model_cfg, corpus
        cfg = self.cfg = self.members[0].train  # the shared schedule (each member's own seed aside)
        K = len(self.members)
        self.device = resolve_device(cfg.device)
        self.amp_dtype = resolve_amp(cfg.amp, self.device)
        if self.amp_dtype == torch.float16 and K > 1:
            raise ValueError("fp16 autocast: the GradScaler would skip the step of the whole pack when one member "
                             "overflows; use amp bf16 or off, or train unpacked")
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        condition = self.interventions[0]
        refused = graphs_mod.refusal(self.device, self.amp_dtype, condition) if graphs else "graphs=False"
        self._graphs = self._val_graphs = refused is None
        #: "on" (recorded, or to be recorded at the first epoch), or "off: why"
        self.graph_status = "on" if self._graphs else f"off: {refused}"
        if graphs and refused is not None and self.device.type == "cuda":
            graphs_mod.announce(f"pack of {K}", refused)
        self._step_graph: graphs_mod.StepGraph | None = None
        self._val_graph: graphs_mod.ForwardGraph | None = None
        self.steps_per_epoch = cfg.steps_per_epoch or len(corpus.train) // (cfg.batch_size * model_cfg.context)
        if self.steps_per_epoch <= 0:
            raise ValueError(
                f"corpus {corpus.name!r} has {len(corpus.train)} training tokens, fewer than one batch "
                f"of {cfg.batch_size}×{model_cfg.context}; set steps_per_epoch or use a larger corpus"
            )

        built = [build_model(model_cfg, m.qk_init, m.model_seed).to(self.device) for m in self.members]
        self._skeleton = built[0]  # never hooked: what the packed and per-member GPTs are copied from
        stacked, _ = stack_module_state(built)  # name → [K, ...] (the tied head once)
        #: the pack as one GPT: its parameters are the stacked weights [K, ...]
        self.model = _copy_with(self._skeleton, {n: t.detach() for n, t in stacked.items()}, requires_grad=True)
        self.params: dict[str, Tensor] = dict(self.model.named_parameters())  # name → [K, ...] leaves
        #: member i's plain GPT: its parameters are views of params[name][i]
        self.models = [_copy_with(self._skeleton, {n: t.detach()[i] for n, t in self.params.items()})
                       for i in range(K)]
        for iv, model in zip(self.interventions, self.models, strict=True):
            iv.setup(model)
        # the step runs the packed model with an instance whose extra_loss and capture hooks act on
        # all members at once (the pack_aware contract)
        self._graph_intervention = factory()
        self._graph_intervention.setup(self.model)
        self._forward = compile_model(self.model) if cfg.compile and self.device.type == "cuda" else self.model
        self._qk_names = [f"blocks.{b}.attn.{p}.weight" for b in range(model_cfg.n_layer) for p in ("q_proj", "k_proj")]
        #: the epoch's running sums per member (loss, pre-clip grad norm, [K, 2L] q/k grad norms), float64:
        #: made once, so that a recorded step keeps writing into the same tensors
        self._sums = tuple(torch.zeros(shape, device=self.device, dtype=torch.float64)
                           for shape in ((K,), (K,), (K, len(self._qk_names))))

        splits = [split_params(m, iv.trainable) for m, iv in zip(self.models, self.interventions, strict=True)]
        if any(s != splits[0] for s in splits):
            raise ValueError(f"{self.interventions[0].name}: trainable() differs between pack members")
        decay, no_decay, frozen = splits[0]
        for name in frozen:
            self.params[name].requires_grad_(False)
        self.optimizer = make_adamw([self.params[n] for n in decay], [self.params[n] for n in no_decay],
                                    cfg, self.device, capturable=self._graphs and self.device.type == "cuda")
        self.samplers = [BatchSampler(corpus.train, cfg.batch_size, model_cfg.context, m.train.seed, self.device)
                         for m in self.members]
        self.val_x, self.val_y = (t.to(self.device) for t in fixed_windows(
            corpus.val, cfg.eval_batches * cfg.batch_size, model_cfg.context, VAL_SEED))
        self.probe_x = probe_batch(corpus, cfg.probe_seqs, model_cfg.context).to(self.device)
        self.epoch, self.step = 0, 0
        self.tokens_seen = [0] * K
        self.wall_s = [0.0] * K
        self.statuses: list[Status] = ["running"] * K
        self.reporting: list[int] = []

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The whole pack: weights, optimiser, scaler, every member's sampler and intervention, counters."""
        return {
            "params": {n: t.detach() for n, t in self.params.items()},
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "samplers": [s.state_dict() for s in self.samplers],
            "torch_rng": torch.get_rng_state(),
            "interventions": [iv.state_dict() for iv in self.interventions],
            "epoch": self.epoch, "step": self.step, "tokens_seen": list(self.tokens_seen),
            "wall_s": list(self.wall_s), "statuses": list(self.statuses),
            "model_cfg": asdict(self.model_cfg), "members": [asdict(m) for m in self.members],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["statuses"]) != len(self.members):
            raise ValueError(f"state of a pack of {len(state['statuses'])}, this pack has {len(self.members)}")
        with torch.no_grad():
            for name, t in self.params.items():
                t.copy_(state["params"][name])
        load_optimizer(self.optimizer, state["optimizer"])
        self._step_graph = None  # the loaded optimiser state is new tensors: record again
        self.scaler.load_state_dict(state["scaler"])
        for sampler, s in zip(self.samplers, state["samplers"], strict=True):
            sampler.load_state_dict(s)
        torch.set_rng_state(state["torch_rng"])
        for iv, s in zip(self.interventions, state["interventions"], strict=True):
            iv.load_state_dict(s)
        self.epoch, self.step = state["epoch"], state["step"]
        self.tokens_seen, self.wall_s = list(state["tokens_seen"]), list(state["wall_s"])
        self.statuses = list(state["statuses"])
        for i, status in enumerate(self.statuses):
            if status == "completed" and self.epoch < self.cfg.epochs:
                self.statuses[i] = "running"  # a finished pack extended to more epochs continues

    def member_model(self, i: int) -> GPT:
        """A plain GPT holding a copy of member i's current weights."""
        return _copy_with(self._skeleton, {n: t.detach()[i].clone() for n, t in self.params.items()},
                          requires_grad=True)

    # -- measurement ------------------------------------------------------------

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        # a CUDA graph must cast the weights on every replay, not once into autocast's cache
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=not self._graphs)

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Every member's plain ``GPT.forward``, batched: x, y [K, B, T] (or [B, T], one batch for
        all) → logits [K, B, T, vocab], mean cross-entropy [K]."""
        return self._forward(x, y)

    @torch.no_grad()
    def _val_total(self) -> Tensor:
        """Σ over the fixed validation batches of each member's mean loss, float64 [K]."""
        total = torch.zeros(len(self.members), device=self.device, dtype=torch.float64)
        bs = self.cfg.batch_size
        for i in range(0, len(self.val_x), bs):
            with self._autocast():
                _, loss = self.forward(self.val_x[i:i + bs], self.val_y[i:i + bs])  # (K,)
            total += loss.double()
        return total

    @torch.no_grad()
    def val_losses(self) -> list[float]:
        """Each member's mean validation loss, as ``Trainer.val_loss`` computes it."""
        self.model.eval()
        total = self._val_replay() if self._val_graphs else self._val_total()
        self.model.train()
        return (total / math.ceil(len(self.val_x) / self.cfg.batch_size)).tolist()

    def _val_replay(self) -> Tensor:
        if self._val_graph is None:
            try:
                self._val_graph = graphs_mod.ForwardGraph(self._val_total)
            except graphs_mod.GraphUnavailable as exc:
                self._fall_back(exc)
                return self._val_total()
        return self._val_graph.replay()

    def _report(self, i: int, result: tuple[float, float, Tensor] | None, val_loss: float,
                epoch_wall: float | None) -> EpochReport:
        train_loss, grad_norm, grad_qk = result if result is not None else (None, None, None)
        tokens_epoch = self.steps_per_epoch * self.cfg.batch_size * self.model_cfg.context
        return epoch_report(self.models[i], self.probe_x, self.epoch, self.statuses[i], train_loss=train_loss,
                            val_loss=val_loss, grad_norm=grad_norm, grad_qk=grad_qk,
                            tokens_seen=self.tokens_seen[i], wall_s=self.wall_s[i], tokens_epoch=tokens_epoch,
                            epoch_wall=epoch_wall)

    # -- the loop ---------------------------------------------------------------

    def _losses(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """x, y [K, B, T] → each member's loss and loss + extra loss, [K] each."""
        _, loss = self._forward(x, y)
        extra = self._graph_intervention.extra_loss(self.model)
        return loss, loss if extra is None else loss + extra

    def _clip(self, grads: list[Tensor]) -> Tensor:
        """Clip each member's gradients to its own global norm (as ``clip_grad_norm_`` does for one
        run); grads: [K, ...] each. Returns the pre-clip norms [K]."""
        norms = torch.stack([torch.linalg.vector_norm(g, dim=tuple(range(1, g.dim()))) for g in grads], dim=1)
        total = torch.linalg.vector_norm(norms, dim=1)  # (K,)
        coef = (self.cfg.grad_clip / (total + 1e-6)).clamp(max=1.0)
        by_ndim = {n: coef.view(-1, *([1] * (n - 1))) for n in {g.dim() for g in grads}}
        torch._foreach_mul_(grads, [by_ndim[g.dim()] for g in grads])
        return total

    def _body(self, x: Tensor, y: Tensor) -> None:
        """One step's device work for every member (forward, extra loss, backward, norms, clip,
        AdamW, running sums); x, y: [K, B, T]. The gradients are left for the caller to drop."""
        loss_sum, norm_sum, qk_sum = self._sums
        with self._autocast():
            loss, total = self._losses(x, y)  # (K,), (K,)
        self.scaler.scale(total.sum()).backward()  # members share nothing: each gets its own gradient
        self.scaler.unscale_(self.optimizer)
        zero = torch.zeros(len(self.members), device=self.device)
        qk_sum += torch.stack([torch.linalg.vector_norm(self.params[n].grad.flatten(1), dim=1)
                               if self.params[n].grad is not None else zero for n in self._qk_names], dim=1).double()
        norm_sum += self._clip([p.grad for g in self.optimizer.param_groups for p in g["params"]]).double()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        loss_sum += loss.detach().double()

    def _fall_back(self, exc: Exception) -> None:
        """A recording failed: one line, and whatever is not recorded yet runs eagerly."""
        graphs_mod.announce(f"pack of {len(self.members)}", str(exc))
        self._graphs, self._val_graphs = False, self._val_graph is not None
        self.graph_status = f"off: {exc}"

    def _record(self, x: Tensor, y: Tensor) -> None:
        """Record the step as a CUDA graph, or fall back to eager with one line."""
        trainable = [p for g in self.optimizer.param_groups for p in g["params"]]
        try:
            self._step_graph = graphs_mod.StepGraph(self._body, x, y, trainable, self.optimizer)
        except graphs_mod.GraphUnavailable as exc:
            self._fall_back(exc)

    def _next_batch(self) -> tuple[Tensor, Tensor]:
        batches = [s.next() for s in self.samplers]
        return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])  # (K, B, T) each

    def train_epoch(self) -> dict[int, tuple[float, float, Tensor] | None]:
        """One epoch of steps for the running members: member → (mean loss, mean pre-clip grad
        norm, [L, 2] mean q/k grad norms), or None for a member whose loss turned non-finite."""
        running = [i for i, s in enumerate(self.statuses) if s == "running"]
        live = set(running)
        self.model.train()
        batch = self._next_batch()
        if self._graphs and self._step_graph is None:
            self._record(*batch)
        loss_sum, norm_sum, qk_sum = self._sums
        for t in self._sums:
            t.zero_()
        results: dict[int, tuple[float, float, Tensor] | None] = {}
        for step in range(self.steps_per_epoch):
            x, y = batch if step == 0 else self._next_batch()
            if self._step_graph is not None:
                self._step_graph.replay(x, y)
            else:
                self._body(x, y)
                self.optimizer.zero_grad(set_to_none=True)
            self.interventions[0].after_step_packed(self.interventions, self.params, self.models)
            self.step += 1
            for i in live:
                self.tokens_seen[i] += x.shape[1] * x.shape[2]
            if (step + 1) % self.cfg.check_every == 0 or step + 1 == self.steps_per_epoch:
                finite = torch.isfinite(loss_sum).tolist()
                for i in [i for i in live if not finite[i]]:
                    results[i] = None
                    live.discard(i)
                if not live:
                    break
        means = (torch.cat([loss_sum[:, None], norm_sum[:, None], qk_sum], dim=1) / self.steps_per_epoch).cpu()
        for i in live:
            results[i] = (means[i, 0].item(), means[i, 1].item(), means[i, 2:].view(-1, 2))
        return {i: results[i] for i in running}

    def run(self, on_epoch: Callable[[int, EpochReport], None] | None = None) -> list[Status]:
        """Train to ``cfg.epochs`` from wherever the state is; returns every member's final status."""
        on_epoch = on_epoch or (lambda i, report: None)
        if self.epoch == 0 and self.step == 0:
            val = self.val_losses()
            self.reporting = list(range(len(self.members)))
            for i in self.reporting:
                on_epoch(i, self._report(i, None, val[i], None))
        while self.epoch < self.cfg.epochs and "running" in self.statuses:
            t0 = time.perf_counter()
            results = self.train_epoch()
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            self.epoch += 1
            for i, result in results.items():
                self.wall_s[i] += dt
                if result is None:
                    self.statuses[i] = "diverged"
                elif self.epoch == self.cfg.epochs:
                    self.statuses[i] = "completed"
            val = self.val_losses() if any(r is not None for r in results.values()) else None
            self.reporting = list(results)
            for i, result in results.items():
                if result is None:
                    on_epoch(i, diverged_report(self.epoch, self.tokens_seen[i], self.wall_s[i]))
                else:
                    on_epoch(i, self._report(i, result, val[i], dt))
        return list(self.statuses)
