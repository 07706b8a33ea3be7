"""The hooks through which an intervention acts on the training loop (SPEC §5).

The loop calls, in order:

1. ``setup(model)`` once, after the model is built and before the optimiser
   exists (record σ⁽⁰⁾, register capture hooks on ``attn.hook_q/hook_k``);
2. ``trainable(name, param)`` for each parameter: ``False`` keeps it out of
   the optimiser entirely (no update, no weight decay);
3. per step: ``extra_loss(model)`` after the forward pass (a differentiable
   scalar added to the loss, or ``None``), then ``after_step(model)`` after
   the optimiser step (e.g. a projection, under ``torch.no_grad``);
4. ``state_dict()`` / ``load_state_dict()`` with the run's checkpoint.

The loop knows no intervention by name; the registry maps names to classes.

On CUDA the loop records its whole step (forward, ``extra_loss``, backward, clipping, AdamW) once
as a CUDA graph and replays it (``model.graphs``); ``after_step`` runs after each replay, eagerly.
A condition may be recorded only if its class declares ``graph_safe = True`` (not inherited, like
``pack_aware``), promising that ``extra_loss`` and its hooks launch the same device work every step,
never read a tensor's value on the host (no ``.item()``, no data-dependent Python branch) and keep
no Python-side state that changes from step to step. Others train eagerly, with one line saying so.

Packed trials (``model/trainer.py`` with M members, SPEC §5.1) train M runs of one condition as one
batched computation. A condition runs packed only if its class declares
``pack_aware = True`` (not inherited: a subclass that does not say so itself runs
unpacked). Declaring it promises:

- ``trainable`` gives the same answer for every member;
- ``extra_loss`` and the forward hooks ``setup`` registers work on the packed model: the pack
  calls them on one extra instance set up on the ``GPT`` whose parameters are the stacked
  weights ([M, ...], ``model.gpt``), so hooks see activations [M, B, T, d] and ``extra_loss``
  returns one term per member, [M] (members must not mix: a term of member k reads only
  member k's slice); that instance must not read state that differs between members;
- per-member state (what ``setup`` records, ``after_step``, ``state_dict``) lives in each
  member's own instance, set up on a plain GPT whose parameters are views of that member's
  weights; ``after_step_packed`` runs them, and may be overridden to batch over members.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # annotations only: importing the registry does not import torch (a parser reads it)
    from torch import Tensor, nn


@dataclass
class Intervention:
    """Base class and the ``none`` condition: every hook is a no-op."""

    name: ClassVar[str] = "none"
    #: How tables and report.md name the condition ("" = its ``name``).
    label: ClassVar[str] = ""
    #: metric → +1 / −1: the direction SPEC §5 predicts against the matched ``none`` run.
    #: The only copy: the reducer's confidence scores read it from here.
    predicted: ClassVar[dict[str, int]] = {}
    #: Whether a packed trial may train this condition (module docstring); each class declares
    #: it for itself, a subclass that does not is False.
    pack_aware: ClassVar[bool] = True
    #: Whether its ``extra_loss`` and hooks may be recorded in a CUDA graph (module docstring);
    #: each class declares it for itself, a subclass that does not is False.
    graph_safe: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for flag in ("pack_aware", "graph_safe"):
            if flag not in cls.__dict__:
                setattr(cls, flag, False)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and value < 0:
                raise ValueError(f"{self.name}: {f.name} must be >= 0, got {value!r}")

    def setup(self, model: nn.Module) -> None:
        """Called once before the optimiser is built."""

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        """Whether ``param`` (named as in ``model.named_parameters()``) is optimised."""
        return True

    def extra_loss(self, model: nn.Module) -> Tensor | None:
        """A differentiable term added to this step's loss, or None."""
        return None

    def after_step(self, model: nn.Module) -> None:
        """Called after each optimiser step."""

    @classmethod
    def after_step_packed(cls, members: Sequence[Intervention], params: dict[str, Tensor],
                          models: Sequence[nn.Module]) -> None:
        """``after_step`` for a whole pack of M members, after its optimiser step.

        members[i]: member i's instance; models[i]: a plain GPT whose parameters are views
        of ``params[name][i]`` (params: name → [M, ...] stacked weights, as in
        ``named_parameters``); in-place writes to either reach the pack. The default calls
        each member's ``after_step``; override to batch over members. A member whose weights
        turned non-finite must not raise: the pack marks it diverged at its next check.
        """
        for iv, model in zip(members, models, strict=True):
            iv.after_step(model)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    def config(self) -> dict[str, Any]:
        """The strengths, for logs and the store."""
        return asdict(self)


#: The control condition every other one is paired with (the base class's name).
CONTROL: str = Intervention.name

REGISTRY: dict[str, type[Intervention]] = {CONTROL: Intervention}


def register(cls: type[Intervention]) -> type[Intervention]:
    """Class decorator adding an intervention to the registry under ``cls.name``.

    Registering a name twice is an error unless it is the same class again (a re-imported module).
    """
    old = REGISTRY.get(cls.name)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"intervention {cls.name!r} is already registered by {old.__module__}.{old.__qualname__}")
    REGISTRY[cls.name] = cls
    return cls


def packable_condition(name: str) -> bool:
    """Whether condition ``name`` may run in a packed trial (its class declares ``pack_aware``).

    A sweep trains a condition for which this is False unpacked, one run per trial, and
    prints one line saying so.
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown intervention {name!r}; valid: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name].pack_aware


def make_intervention(name: str, **strengths: float) -> Intervention:
    """Build a registered intervention; unknown names or strengths are clear errors."""
    if name not in REGISTRY:
        raise ValueError(f"unknown intervention {name!r}; valid: {', '.join(sorted(REGISTRY))}")
    cls = REGISTRY[name]
    allowed = {f.name for f in fields(cls)}
    unknown = set(strengths) - allowed
    if unknown:
        raise ValueError(
            f"{name}: unknown parameter(s) {sorted(unknown)}; valid: {sorted(allowed) or 'none'}"
        )
    return cls(**strengths)


def default_strengths(name: str) -> dict[str, float]:
    """A registered condition's strengths (its dataclass fields) and their defaults, in field order;
    ``{}`` for a condition without strengths (SPEC §5)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown intervention {name!r}; valid: {', '.join(sorted(REGISTRY))}")
    return {f.name: f.default for f in fields(REGISTRY[name]) if f.default is not MISSING}
