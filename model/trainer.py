"""The one training loop (SPEC §3): M >= 1 runs of one shape, condition and schedule. No Ray, no files.

``Trainer`` owns the model, optimiser, scaler and batch generators, calls ``on_epoch(i, report)``
for each member i after epoch 0 (at initialisation, before any step) and after every epoch, and
can save and restore its whole state, so that a run stopped after epoch e and resumed is, on the
CPU, bit-identical to one that never stopped. Interventions act only through their hooks
(``interventions.base``).

One member is plain PyTorch: an ordinary ``GPT``, ``clip_grad_norm_``, the condition's hooks on
the model itself. Several members (a pack, SPEC §5.1) train as one batched computation: their
weights are stacked [M, ...] into one ``GPT`` (``model.stack``), every layer runs all members in
one kernel, the loss is one per member [M], autograd on its sum gives each member the gradient of
its own loss, each member's gradients are clipped to their own global norm, and AdamW (elementwise)
keeps per-member state, its step count included (``model.optimiser.MemberAdamW``). Equal means equal to rounding, not bit-identical: batched kernels sum in
another order, so a single run is never packed.

On CUDA (``graphs``, the default) each step's device work is replayed from a CUDA graph
(``model.graphs``) and so is the validation loss, both in one graph memory pool; a trainer that
cannot record trains eagerly and says why in one line (``graph_status``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from metrics.probe import probe_members
from model import graphs as graphs_mod
from model.corpus import VAL_SEED, BatchSampler, Corpus, device_tokens, fixed_windows, probe_batch
from model.gpt import GPTConfig
from model.optimiser import optimiser_step
from model.qk_init import build_model
from model.recipe import (
    compile_model,
    load_optimizer,
    make_adamw,
    resolve_amp,
    resolve_device,
    split_params,
)
from model.report import (
    BEFORE_TRAINING,
    EpochMeans,
    EpochReport,
    Status,
    diverged_report,
    epoch_report,
)
from model.scaler import MemberScaler
from model.stack import Member, check_packable, plain, stack

if TYPE_CHECKING:
    from interventions.base import Intervention

OnEpoch = Callable[[int, EpochReport], None]


class Trainer:
    """M >= 1 runs: one model (plain for one run, stacked for a pack), one optimiser, one loop;
    per member: batch order, gradient clipping, losses, probe, status and reports.

    ``condition`` makes an intervention instance (a class, or ``lambda: make_intervention(...)``):
    one per member holds its per-member state; a pack also sets one up on the stacked model for
    the step's ``extra_loss`` and hooks (the ``pack_aware`` contract). ``state_dict()`` taken
    during the last ``on_epoch`` of an epoch (``reporting[-1]``) holds the whole trainer after it.
    """

    def __init__(self, model_cfg: GPTConfig, members: Sequence[Member], corpus: Corpus,
                 condition: Callable[[], Intervention] | None = None, graphs: bool = True) -> None:
        from interventions.base import Intervention  # the loop sees only the hook interface

        make = condition or Intervention
        self.members = list(members)
        self.interventions = [make() for _ in self.members]
        check_packable(self.members, conditions=self.interventions)
        if model_cfg.vocab_size != corpus.vocab_size:
            raise ValueError(f"model vocab_size {model_cfg.vocab_size} != corpus vocabulary {corpus.vocab_size}")
        self.model_cfg, self.corpus = model_cfg, corpus
        cfg = self.cfg = self.members[0].train  # the shared schedule (each member's own seed aside)
        M = len(self.members)
        self.packed = M > 1
        self.label = f"pack of {M}" if self.packed else f"{members[0].qk_init} seed {members[0].model_seed}"
        self.device = resolve_device(cfg.device)
        self.steps_per_epoch = cfg.steps_per_epoch or len(corpus.train) // (cfg.batch_size * model_cfg.context)
        if self.steps_per_epoch <= 0:
            raise ValueError(
                f"corpus {corpus.name!r} has {len(corpus.train)} training tokens, fewer than one batch "
                f"of {cfg.batch_size}×{model_cfg.context}; set steps_per_epoch or use a larger corpus")

        built = [build_model(model_cfg, m.qk_init, m.model_seed).to(self.device) for m in self.members]
        self.model, self.models = (stack(built) if self.packed else (built[0], built))
        #: name → the trained tensor: [M, ...] in a pack, the plain parameter for one run
        self.params = dict(self.model.named_parameters())
        for iv, model in zip(self.interventions, self.models, strict=True):
            iv.setup(model)
        self._step_condition = make() if self.packed else self.interventions[0]
        if self.packed:
            self._step_condition.setup(self.model)

        self.amp_dtype = resolve_amp(cfg.amp, self.device)
        #: fp16: one loss scale per member, whose overflow skips its own step only (``model.scaler``)
        self.scaler = MemberScaler(M, self.device, enabled=self.amp_dtype == torch.float16)
        refused = graphs_mod.refusal(self.device, self.amp_dtype, self.interventions[0]) if graphs else "graphs=False"
        self._graphs = self._val_graphs = refused is None
        #: "on" (recorded, or to be recorded at the first epoch), or "off: why"
        self.graph_status = "on" if self._graphs else f"off: {refused}"
        if graphs and refused is not None and self.device.type == "cuda":
            graphs_mod.announce(self.label, refused)
        self._step_graph: graphs_mod.StepGraph | None = None
        self._val_graph: graphs_mod.ForwardGraph | None = None
        self._graph_pool: object = None  # one memory pool for both graphs (model.graphs), made at the first recording
        self.optimizer = self._make_optimizer()

        train = device_tokens(corpus.train, self.device)  # one copy on the device, every member's sampler reads it
        self.samplers = [BatchSampler(train, cfg.batch_size, model_cfg.context, m.train.seed, self.device)
                         for m in self.members]
        self.val_x, self.val_y = (t.to(self.device) for t in fixed_windows(
            corpus.val, cfg.eval_batches * cfg.batch_size, model_cfg.context, VAL_SEED))
        self.probe_x = probe_batch(corpus, cfg.probe_seqs, model_cfg.context).to(self.device)
        self._forward = compile_model(self.model) if cfg.compile and self.device.type == "cuda" else self.model
        self._qk_names = [f"blocks.{b}.attn.{p}.weight" for b in range(model_cfg.n_layer) for p in ("q_proj", "k_proj")]
        #: the epoch's running sums per member (loss, pre-clip grad norm, [M, 2L] q/k grad norms, skipped
        #: steps), float64: made once, so that a recorded step keeps writing into the same tensors
        self._sums = tuple(torch.zeros(shape, device=self.device, dtype=torch.float64)
                           for shape in ((M,), (M,), (M, len(self._qk_names)), (M,)))
        self.epoch, self.step = 0, 0
        self.tokens_seen = [0] * M
        self.wall_s = [0.0] * M
        self.statuses: list[Status] = ["running"] * M
        self.reporting: list[int] = []  # the members reported for ``epoch``

    def _make_optimizer(self) -> torch.optim.Optimizer:
        splits = [split_params(m, iv.trainable) for m, iv in zip(self.models, self.interventions, strict=True)]
        if any(s != splits[0] for s in splits):
            raise ValueError(f"{self.interventions[0].name}: trainable() differs between pack members")
        decay, no_decay, frozen = splits[0]
        for name in frozen:
            self.params[name].requires_grad_(False)
        return make_adamw([self.params[n] for n in decay], [self.params[n] for n in no_decay], self.cfg,
                          self.device, capturable=self._graphs and self.device.type == "cuda",
                          members=len(self.members))

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically (weights, optimiser, scaler, every member's
        sampler and intervention, the RNG, counters)."""
        return {
            "model": self.model.state_dict(),
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
        """Load ``state_dict()``'s state (not one of the two trainers before they became one: SPEC §3)."""
        if "statuses" not in state:
            raise ValueError("a checkpoint of the trainers before they became one: it no longer loads "
                             "(no store needs it; SPEC §3), start that experiment again")
        if len(state["statuses"]) != len(self.members):
            raise ValueError(f"state of {len(state['statuses'])} members, this trainer has {len(self.members)}")
        self.model.load_state_dict(state["model"])
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
        self.statuses = [("running" if s == "completed" and self.epoch < self.cfg.epochs else s)  # extended
                         for s in state["statuses"]]

    def member_model(self, i: int) -> torch.nn.Module:
        """A plain GPT holding a copy of member i's current weights."""
        return plain(self.model_cfg, {n: (t[i] if self.packed else t).detach().clone()
                                      for n, t in self.params.items()}, requires_grad=True)

    # -- measurement ------------------------------------------------------------

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        # a CUDA graph must cast the weights on every replay, not once into autocast's cache
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=not self._graphs)

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """The model's forward: x, y [B, T] → logits [B, T, V], loss []; a pack: x, y [M, B, T]
        (or [B, T], one batch for all) → logits [M, B, T, V], each member's loss [M]."""
        return self._forward(x, y)

    @torch.no_grad()
    def _val_total(self) -> Tensor:
        """Σ over the fixed validation batches of each member's mean loss, float64 [M]."""
        total = torch.zeros(len(self.members), device=self.device, dtype=torch.float64)
        bs = self.cfg.batch_size
        for i in range(0, len(self.val_x), bs):
            with self._autocast():
                _, loss = self.forward(self.val_x[i:i + bs], self.val_y[i:i + bs])  # [] or [M]
            total += loss.double()
        return total

    @torch.no_grad()
    def val_losses(self) -> list[float]:
        """Each member's mean validation loss over the fixed batches (the training mode is kept)."""
        was_training = self.model.training
        self.model.eval()
        total = self._val_replay() if self._val_graphs else self._val_total()
        self.model.train(was_training)
        return (total / math.ceil(len(self.val_x) / self.cfg.batch_size)).tolist()

    def _val_replay(self) -> Tensor:
        if self._val_graph is None:
            try:
                self._val_graph = graphs_mod.ForwardGraph(self._val_total, self._pool())
            except graphs_mod.GraphUnavailable as exc:
                self._fall_back(exc)
                return self._val_total()
        return self._val_graph.replay()

    def _reports(self, results: dict[int, EpochMeans | None], epoch_wall: float | None) -> dict[int, EpochReport]:
        """The reports of the members in ``results`` (None: diverged this epoch), with one
        validation pass and one probe call for all the others."""
        live = [i for i, r in results.items() if r is not None]
        val = self.val_losses() if live else []
        probed = probe_members(self.model, self.probe_x, members=live if self.packed else None) if live else []
        layers = dict(zip(live, probed, strict=True))
        tokens_epoch = self.steps_per_epoch * self.cfg.batch_size * self.model_cfg.context
        return {i: diverged_report(self.epoch, self.tokens_seen[i], self.wall_s[i]) if means is None else
                epoch_report(layers[i], means, self.epoch, self.statuses[i], val_loss=val[i],
                             tokens_seen=self.tokens_seen[i], wall_s=self.wall_s[i], tokens_epoch=tokens_epoch,
                             epoch_wall=epoch_wall)
                for i, means in results.items()}

    # -- the loop ---------------------------------------------------------------

    def _qk_grad_norms(self) -> Tensor:
        """[M, 2L] each member's q/k weight gradient norms (0 for a frozen weight)."""
        zero = torch.zeros(len(self.members), device=self.device)
        grads = [self.params[n].grad for n in self._qk_names]
        if not self.packed:
            return torch.stack([g.norm() if g is not None else zero[0] for g in grads]).view(1, -1)
        return torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) if g is not None else zero
                            for g in grads], dim=1)

    def _clip(self, params: list[Tensor]) -> Tensor:
        """Clip each member's gradients to its own global norm; returns the pre-clip norms [M].
        One run: ``clip_grad_norm_``; a pack: the same per member, on gradients [M, ...]."""
        if not self.packed:
            return torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip).view(1)
        grads = [p.grad for p in params]
        norms = torch.stack([torch.linalg.vector_norm(g, dim=tuple(range(1, g.dim()))) for g in grads], dim=1)
        total = torch.linalg.vector_norm(norms, dim=1)  # [M]
        coef = (self.cfg.grad_clip / (total + 1e-6)).clamp(max=1.0)
        by_ndim = {n: coef.view(-1, *([1] * (n - 1))) for n in {g.dim() for g in grads}}
        torch._foreach_mul_(grads, [by_ndim[g.dim()] for g in grads])
        return total

    def _losses(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """(loss, loss + the condition's extra loss): [] each for one run, [M] for a pack."""
        _, loss = self.forward(x, y)
        extra = self._step_condition.extra_loss(self.model)
        return loss, loss if extra is None else loss + extra

    def _body(self, x: Tensor, y: Tensor) -> None:
        """One step's device work for every member (forward, extra loss, backward, norms, clip,
        AdamW, running sums); x, y: [B, T] (a pack: [M, B, T]). The gradients are left for the
        caller to drop. With fp16 loss scaling a member whose gradients overflowed skips its step:
        it is counted, and its norms are not summed."""
        loss_sum, norm_sum, qk_sum, skip_sum = self._sums
        with self._autocast():
            loss, total = self._losses(x, y)
        self.scaler.scale_loss(total).sum().backward()  # members share nothing: each gets its own gradient
        trained = [p for g in self.optimizer.param_groups for p in g["params"]]
        overflow = self.scaler.unscale_([p.grad for p in trained], self.packed)  # [M] bool, None: no scaling
        qk, norms = self._qk_grad_norms(), self._clip(trained)
        if overflow is not None:
            qk, norms = torch.where(overflow[:, None], 0.0, qk), torch.where(overflow, 0.0, norms)
            skip_sum += overflow.double()
        qk_sum += qk.double()
        norm_sum += norms.double()
        optimiser_step(self.optimizer, overflow)
        if overflow is not None:
            self.scaler.update(overflow)
        loss_sum += loss.detach().double()

    def _fall_back(self, exc: Exception) -> None:
        """A recording failed: one line, and whatever is not recorded yet runs eagerly."""
        graphs_mod.announce(self.label, str(exc))
        self._graphs, self._val_graphs = False, self._val_graph is not None
        self.graph_status = f"off: {exc}"

    def _pool(self) -> object:
        """The trainer's one graph memory pool (the step's and the validation's, also after a resume)."""
        if self._graph_pool is None:
            self._graph_pool = graphs_mod.backend.pool()
        return self._graph_pool

    def _record(self, x: Tensor, y: Tensor) -> None:
        """Record the step as a CUDA graph, or fall back to eager with one line."""
        trainable = [p for g in self.optimizer.param_groups for p in g["params"]]
        try:
            self._step_graph = graphs_mod.StepGraph(self._body, x, y, trainable, self.optimizer, self._pool(),
                                                    state=(self.scaler.scale, self.scaler.growth))
        except graphs_mod.GraphUnavailable as exc:
            self._fall_back(exc)

    def _next_batch(self) -> tuple[Tensor, Tensor]:
        """x, y: [B, T] (a pack: [M, B, T], each member's own batch)."""
        if not self.packed:
            return self.samplers[0].next()
        batches = [s.next() for s in self.samplers]
        return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])

    def _after_step(self) -> None:
        """The condition's eager hook after each step: ``after_step`` for one run, ``after_step_packed``
        (every member's, or one batched call) for a pack."""
        if self.packed:
            type(self.interventions[0]).after_step_packed(self.interventions, self.params, self.models)
        else:
            self.interventions[0].after_step(self.model)

    def train_epoch(self) -> dict[int, EpochMeans | None]:
        """One epoch of steps for the running members: member → its epoch means, or None for a
        member whose loss turned non-finite (checked every ``check_every`` steps and at the end)."""
        running = [i for i, s in enumerate(self.statuses) if s == "running"]
        live = set(running)
        self.model.train()
        batch = self._next_batch()
        if self._graphs and self._step_graph is None:
            self._record(*batch)
        loss_sum, norm_sum, qk_sum, skip_sum = self._sums
        for t in self._sums:
            t.zero_()
        results: dict[int, EpochMeans | None] = {}
        step_tokens = self.cfg.batch_size * self.model_cfg.context
        for step in range(self.steps_per_epoch):
            x, y = batch if step == 0 else self._next_batch()
            if self._step_graph is not None:
                self._step_graph.replay(x, y)
            else:
                self._body(x, y)
                self.optimizer.zero_grad(set_to_none=True)
            self._after_step()
            self.step += 1
            for i in live:
                self.tokens_seen[i] += step_tokens
            if (step + 1) % self.cfg.check_every == 0 or step + 1 == self.steps_per_epoch:
                finite = torch.isfinite(loss_sum).tolist()
                for i in [i for i in live if not finite[i]]:
                    results[i] = None
                    live.discard(i)
                if not live:
                    break
        n = self.steps_per_epoch
        skipped = skip_sum.cpu()
        taken = (n - skipped).clamp(min=1)  # the norms' means are over the steps taken
        means = torch.cat([(loss_sum / n).cpu()[:, None], (norm_sum.cpu() / taken)[:, None],
                           qk_sum.cpu() / taken[:, None]], dim=1)
        for i in live:
            none = skipped[i].item() == n  # every step skipped: no norm measured
            results[i] = EpochMeans(means[i, 0].item(), None if none else means[i, 1].item(),
                                    None if none else means[i, 2:].view(-1, 2), int(skipped[i].item()))
        return {i: results[i] for i in running}

    def run(self, on_epoch: OnEpoch | None = None) -> list[Status]:
        """Train to ``cfg.epochs`` from wherever the state is; returns every member's final status."""
        on_epoch = on_epoch or (lambda i, report: None)
        if self.epoch == 0 and self.step == 0:
            self.reporting = list(range(len(self.members)))
            for i, report in self._reports(dict.fromkeys(self.reporting, BEFORE_TRAINING), None).items():
                on_epoch(i, report)
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
            self.reporting = list(results)
            for i, report in self._reports(results, dt).items():
                on_epoch(i, report)
        return list(self.statuses)
