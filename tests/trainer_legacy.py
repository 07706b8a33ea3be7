"""Today's one-run ``Trainer`` (model/train.py at 4caa309), verbatim but for this docstring and the
command line: the reference that the one ``Trainer`` for M >= 1 members (model/trainer.py) is
tested against, bit for bit, with one member (``--pack 1`` writes exactly these values).
Do not edit; it is what the store's values were before the trainers became one.
"""
# ruff: noqa
from __future__ import annotations

import argparse
import math
import numbers
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from metrics.probe import probe_layers
from model import graphs as graphs_mod
from model.corpus import VAL_SEED, BatchSampler, Corpus, fixed_windows, load_corpus, probe_batch
from model.gpt import GPTConfig
from model.plugins import add_plugin_flag, preload
from model.qk_init import DEFAULT_INIT, QK_INITS, build_model

Status = Literal["running", "completed", "diverged"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation recipe. Defaults are the paper's (SPEC §3)."""

    lr: float = 1e-4  # constant learning rate
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1  # on matrices and embeddings only
    grad_clip: float = 1.0  # max global grad norm
    batch_size: int = 64  # sequences per step
    epochs: int = 45  # epochs after epoch 0
    steps_per_epoch: int | None = None  # None: one pass, len(train) // (batch · context)
    eval_batches: int = 8  # fixed validation batches for val_loss
    probe_seqs: int = 16  # sequences in the fixed probe batch (× context positions)
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"  # auto: bf16/fp16 on CUDA, off on CPU
    device: str = "auto"  # auto: cuda if available
    seed: int = 0  # batch order (weights are seeded by build_model)
    compile: bool = False  # torch.compile the forward pass (CUDA only)
    check_every: int = 25  # steps between non-finite-loss checks (each one syncs the device)

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs", "eval_batches", "probe_seqs", "check_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"TrainConfig.{name} must be an integer, got {value!r}")
        for name in ("lr", "beta1", "beta2", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"TrainConfig.{name} must be a number, got {value!r}")
        if self.steps_per_epoch is not None and (isinstance(self.steps_per_epoch, bool)
                                                 or not isinstance(self.steps_per_epoch, numbers.Integral)):
            raise ValueError(f"TrainConfig.steps_per_epoch must be an integer or None, got {self.steps_per_epoch!r}")
        for name in ("lr", "batch_size", "eval_batches", "probe_seqs", "check_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TrainConfig.{name} must be positive, got {getattr(self, name)!r}")
        if self.epochs < 0:
            raise ValueError(f"TrainConfig.epochs must be >= 0, got {self.epochs}")
        if self.steps_per_epoch is not None and self.steps_per_epoch <= 0:
            raise ValueError(f"TrainConfig.steps_per_epoch must be positive or None, got {self.steps_per_epoch}")
        if self.weight_decay < 0 or self.grad_clip <= 0:
            raise ValueError("TrainConfig.weight_decay must be >= 0 and grad_clip > 0")
        if self.amp not in ("auto", "off", "bf16", "fp16"):
            raise ValueError(f"TrainConfig.amp must be auto, off, bf16 or fp16, got {self.amp!r}")


@dataclass
class EpochReport:
    """What ``on_epoch`` receives: run-level columns and one row per layer."""

    epoch: int
    run: dict[str, Any]  # train_loss, val_loss, grad_norm, tokens_seen, wall_s, tokens_per_s, status
    layers: list[dict[str, Any]] = field(default_factory=list)  # §4.1 columns incl. grad norms


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype ``TrainConfig.amp`` means on ``device`` (None: full precision).

    On CUDA it also allows TF32 matmuls, as every run there does."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if amp == "bf16" else torch.float16


def split_params(model: nn.Module, trainable: Callable[[str, nn.Parameter], bool]
                 ) -> tuple[list[str], list[str], list[str]]:
    """Parameter names (``named_parameters`` order, the tied head once): (decayed, not decayed, frozen).

    AdamW decays matrices and embeddings, not biases or LayerNorm gains (SPEC §3); a parameter
    for which ``trainable`` (the intervention's hook) says False is frozen: kept out of both."""
    decay, no_decay, frozen = [], [], []
    for name, p in model.named_parameters():
        if not trainable(name, p):
            frozen.append(name)
        else:
            (decay if p.dim() >= 2 else no_decay).append(name)
    return decay, no_decay, frozen


def make_adamw(decay: list[Tensor], no_decay: list[Tensor], cfg: TrainConfig,
               device: torch.device, capturable: bool = False) -> torch.optim.Optimizer:
    """The recipe's AdamW: weight decay on ``decay`` only; fused on CUDA (``capturable`` there
    when its step is recorded in a CUDA graph: the step count lives on the device)."""
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=device.type == "cuda",
                             capturable=capturable)


def compile_model(model: nn.Module, backend: str = "inductor") -> Callable[..., Any]:
    """``torch.compile(model)``, guarding on module hooks. Dynamo's default skips those guards, so a
    worker that compiled a run without an intervention's capture hooks (``Trainer`` objects come and
    go in one Ray worker) would replay that graph for a run with them: without the hooks."""
    import torch._dynamo

    torch._dynamo.config.skip_nnmodule_hook_guards = False
    return torch.compile(model, backend=backend)


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)`` keeping this optimiser's own ``fused`` and
    ``capturable`` (the saved groups carry those of the device that saved them)."""
    own = [{k: g[k] for k in ("fused", "capturable") if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, flags in zip(optimizer.param_groups, own, strict=True):
        group.update(flags)


def epoch_report(model: nn.Module, probe_x: Tensor, epoch: int, status: Status, *,
                 train_loss: float | None, val_loss: float, grad_norm: float | None, grad_qk: Tensor | None,
                 tokens_seen: int, wall_s: float, tokens_epoch: int, epoch_wall: float | None) -> EpochReport:
    """One run's report after an epoch (or at initialisation): the probe of ``model`` on
    ``probe_x`` [B, T] plus the run-level columns. grad_qk: [L, 2] mean q/k gradient norms."""
    layers = probe_layers(model, probe_x)
    for i, row in enumerate(layers):
        row["grad_norm_q"] = None if grad_qk is None else grad_qk[i, 0].item()
        row["grad_norm_k"] = None if grad_qk is None else grad_qk[i, 1].item()
    run = {
        "train_loss": train_loss, "val_loss": val_loss, "grad_norm": grad_norm,
        "tokens_seen": tokens_seen, "wall_s": wall_s,
        "tokens_per_s": None if not epoch_wall else tokens_epoch / epoch_wall,
        "status": status,
    }
    return EpochReport(epoch, run, layers)


def diverged_report(epoch: int, tokens_seen: int, wall_s: float) -> EpochReport:
    """The one report of the epoch in which a run's loss turned non-finite (no probe)."""
    run = {"train_loss": float("nan"), "val_loss": None, "grad_norm": None,
           "tokens_seen": tokens_seen, "wall_s": wall_s, "tokens_per_s": None, "status": "diverged"}
    return EpochReport(epoch, run, [])


class Trainer:
    """A single run: model, optimiser, data order and the per-epoch probe.

    On CUDA (``graphs``, the default) each step's body is replayed from a CUDA graph
    (``model.graphs``) and so is the validation loss; a run that cannot be recorded trains
    eagerly and says why in one line (``graph_status``).
    """

    def __init__(self, model_cfg: GPTConfig, cfg: TrainConfig, corpus: Corpus, qk_init: str,
                 model_seed: int, intervention: Any | None = None, graphs: bool = True) -> None:
        from interventions.base import Intervention  # the loop sees only the hook interface

        if model_cfg.vocab_size != corpus.vocab_size:
            raise ValueError(f"model vocab_size {model_cfg.vocab_size} != corpus vocabulary {corpus.vocab_size}")
        self.model_cfg, self.cfg, self.corpus = model_cfg, cfg, corpus
        self.device = resolve_device(cfg.device)
        self.intervention = intervention if intervention is not None else Intervention()
        self.steps_per_epoch = cfg.steps_per_epoch or len(corpus.train) // (cfg.batch_size * model_cfg.context)
        if self.steps_per_epoch <= 0:
            raise ValueError(
                f"corpus {corpus.name!r} has {len(corpus.train)} training tokens, fewer than one batch "
                f"of {cfg.batch_size}×{model_cfg.context}; set steps_per_epoch or use a larger corpus"
            )
        self.model = build_model(model_cfg, qk_init, model_seed).to(self.device)
        self.intervention.setup(self.model)
        self._setup_precision()
        refused = graphs_mod.refusal(self.device, self.amp_dtype, self.intervention) if graphs else "graphs=False"
        self._graphs = self._val_graphs = refused is None
        #: "on" (recorded, or to be recorded at the first epoch), or "off: why"
        self.graph_status = "on" if self._graphs else f"off: {refused}"
        if graphs and refused is not None and self.device.type == "cuda":
            graphs_mod.announce(f"{qk_init} seed {model_seed}", refused)
        self._step_graph: graphs_mod.StepGraph | None = None
        self._val_graph: graphs_mod.ForwardGraph | None = None
        self.optimizer = self._make_optimizer()
        self.sampler = BatchSampler(corpus.train, cfg.batch_size, model_cfg.context, cfg.seed, self.device)
        self.val_x, self.val_y = (t.to(self.device) for t in fixed_windows(
            corpus.val, cfg.eval_batches * cfg.batch_size, model_cfg.context, VAL_SEED))
        self.probe_x = probe_batch(corpus, cfg.probe_seqs, model_cfg.context).to(self.device)
        self.forward = compile_model(self.model) if cfg.compile and self.device.type == "cuda" else self.model
        #: the epoch's running sums (loss, pre-clip grad norm, [2L] q/k grad norms), float64: made once,
        #: so that a recorded step keeps writing into the same tensors
        self._sums = tuple(torch.zeros(n, device=self.device, dtype=torch.float64)
                           for n in ((), (), (2 * model_cfg.n_layer,)))
        self.epoch, self.step, self.tokens_seen, self.wall_s = 0, 0, 0, 0.0
        self.status: Status = "running"

    # -- set-up -----------------------------------------------------------------

    def _setup_precision(self) -> None:
        self.amp_dtype = resolve_amp(self.cfg.amp, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        # a CUDA graph must cast the weights on every replay, not once into autocast's cache
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=not self._graphs)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        decay, no_decay, frozen = split_params(self.model, self.intervention.trainable)
        named = dict(self.model.named_parameters())
        for name in frozen:
            named[name].requires_grad_(False)
        return make_adamw([named[n] for n in decay], [named[n] for n in no_decay], self.cfg, self.device,
                          capturable=self._graphs and self.device.type == "cuda")

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically (model, optimiser, scaler, RNGs, counters)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "sampler": self.sampler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "intervention": self.intervention.state_dict(),
            "epoch": self.epoch, "step": self.step, "tokens_seen": self.tokens_seen,
            "wall_s": self.wall_s, "status": self.status,
            "model_cfg": asdict(self.model_cfg), "train_cfg": asdict(self.cfg),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer(self.optimizer, state["optimizer"])
        self._step_graph = None  # the loaded optimiser state is new tensors: record again
        self.scaler.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        torch.set_rng_state(state["torch_rng"])
        self.intervention.load_state_dict(state["intervention"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.tokens_seen, self.wall_s, self.status = state["tokens_seen"], state["wall_s"], state["status"]
        if self.status == "completed" and self.epoch < self.cfg.epochs:
            self.status = "running"  # a finished run extended to more epochs continues

    # -- measurement ------------------------------------------------------------

    @torch.no_grad()
    def _val_total(self) -> Tensor:
        """Σ over the fixed validation batches of each batch's mean loss, float64 scalar."""
        total = torch.zeros((), device=self.device, dtype=torch.float64)
        bs = self.cfg.batch_size
        for i in range(0, len(self.val_x), bs):
            with self._autocast():
                _, loss = self.forward(self.val_x[i:i + bs], self.val_y[i:i + bs])
            total += loss.double()
        return total

    @torch.no_grad()
    def val_loss(self) -> float:
        was_training = self.model.training
        self.model.eval()
        total = self._val_replay() if self._val_graphs else self._val_total()
        self.model.train(was_training)
        return (total / math.ceil(len(self.val_x) / self.cfg.batch_size)).item()

    def _val_replay(self) -> Tensor:
        if self._val_graph is None:
            try:
                self._val_graph = graphs_mod.ForwardGraph(self._val_total)
            except graphs_mod.GraphUnavailable as exc:
                self._fall_back(exc)
                return self._val_total()
        return self._val_graph.replay()

    def _report(self, train_loss: float | None, grad_norm: float | None,
                grad_qk: Tensor | None, epoch_wall: float | None) -> EpochReport:
        tokens_epoch = self.steps_per_epoch * self.cfg.batch_size * self.model_cfg.context
        return epoch_report(self.model, self.probe_x, self.epoch, self.status, train_loss=train_loss,
                            val_loss=self.val_loss(), grad_norm=grad_norm, grad_qk=grad_qk,
                            tokens_seen=self.tokens_seen, wall_s=self.wall_s, tokens_epoch=tokens_epoch,
                            epoch_wall=epoch_wall)

    # -- the loop ---------------------------------------------------------------

    def _body(self, x: Tensor, y: Tensor) -> None:
        """One step's device work (forward, extra loss, backward, norms, clip, AdamW, running sums);
        the gradients are left for the caller to drop."""
        model, opt = self.model, self.optimizer
        loss_sum, norm_sum, qk_sum = self._sums
        qk_params = [p for b in model.blocks for p in (b.attn.q_proj.weight, b.attn.k_proj.weight)]
        with self._autocast():
            _, loss = self.forward(x, y)
            extra = self.intervention.extra_loss(model)
        total = loss if extra is None else loss + extra
        self.scaler.scale(total).backward()
        self.scaler.unscale_(opt)
        zero = torch.zeros((), device=self.device)
        qk_sum += torch.stack([p.grad.norm() if p.grad is not None else zero for p in qk_params]).double()
        trainable = [p for g in opt.param_groups for p in g["params"]]
        norm_sum += torch.nn.utils.clip_grad_norm_(trainable, self.cfg.grad_clip).double()
        self.scaler.step(opt)
        self.scaler.update()
        loss_sum += loss.detach().double()

    def _fall_back(self, exc: Exception) -> None:
        """A recording failed: one line, and whatever is not recorded yet runs eagerly."""
        graphs_mod.announce("run", str(exc))
        self._graphs, self._val_graphs = False, self._val_graph is not None
        self.graph_status = f"off: {exc}"

    def _record(self, x: Tensor, y: Tensor) -> None:
        """Record the step as a CUDA graph, or fall back to eager with one line."""
        trainable = [p for g in self.optimizer.param_groups for p in g["params"]]
        try:
            self._step_graph = graphs_mod.StepGraph(self._body, x, y, trainable, self.optimizer)
        except graphs_mod.GraphUnavailable as exc:
            self._fall_back(exc)

    def train_epoch(self) -> tuple[float, float, Tensor] | None:
        """One epoch of steps; returns (mean loss, mean pre-clip grad norm, [L, 2] mean q/k grad
        norms), or None when the loss turned non-finite."""
        self.model.train()
        batch = self.sampler.next()
        if self._graphs and self._step_graph is None:
            self._record(*batch)
        loss_sum, norm_sum, qk_sum = self._sums
        for t in (loss_sum, norm_sum, qk_sum):
            t.zero_()
        for i in range(self.steps_per_epoch):
            x, y = batch if i == 0 else self.sampler.next()
            if self._step_graph is not None:
                self._step_graph.replay(x, y)
            else:
                self._body(x, y)
                self.optimizer.zero_grad(set_to_none=True)
            self.intervention.after_step(self.model)
            self.step += 1
            self.tokens_seen += x.numel()
            if (i + 1) % self.cfg.check_every == 0 and not torch.isfinite(loss_sum):
                return None
        if not torch.isfinite(loss_sum):
            return None
        n = self.steps_per_epoch
        return (loss_sum / n).item(), (norm_sum / n).item(), (qk_sum / n).view(-1, 2).cpu()

    def run(self, on_epoch: Callable[[EpochReport], None] | None = None) -> Status:
        """Train to ``cfg.epochs`` from wherever the state is; returns the final status."""
        on_epoch = on_epoch or (lambda report: None)
        if self.epoch == 0 and self.step == 0:
            on_epoch(self._report(None, None, None, None))
        while self.epoch < self.cfg.epochs and self.status == "running":
            t0 = time.perf_counter()
            result = self.train_epoch()
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            self.wall_s += dt
            self.epoch += 1
            if result is None:
                self.status = "diverged"
                on_epoch(diverged_report(self.epoch, self.tokens_seen, self.wall_s))
                break
            if self.epoch == self.cfg.epochs:
                self.status = "completed"
            on_epoch(self._report(result[0], result[1], result[2], dt))
        return self.status


