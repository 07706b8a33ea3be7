"""Members and their stacked weights (SPEC §5.1). No Ray.

A trainer holds M >= 1 members: runs of one shape, condition and schedule whose init regime,
weight seed and batch seed may differ. With M > 1 their weights are stacked along a leading
member dimension (``torch.func.stack_module_state``) and become the parameters of one ``GPT``
(``model.gpt``: each layer then runs all members in one batched kernel). Each member also gets a
plain ``GPT`` whose parameters are views of its slice, for its intervention's per-member hooks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.func import stack_module_state

from model.gpt import GPT, GPTConfig
from model.recipe import TrainConfig

if TYPE_CHECKING:
    from interventions.base import Intervention


@dataclass(frozen=True)
class Member:
    """One run of a trainer: init regime, weight seed and recipe (``train.seed``: its batch order)."""

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
    condition's name and strengths); a pack of more than one needs a ``pack_aware`` condition.
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
        if len(members) > 1 and not type(conditions[0]).pack_aware:
            raise ValueError(f"condition {named[0][0]!r} does not declare itself pack_aware "
                             "(interventions.base); train it unpacked")


def plain(cfg: GPTConfig, tensors: Mapping[str, Tensor], requires_grad: bool = False) -> GPT:
    """A ``GPT(cfg)`` whose parameters are ``tensors[name]`` (named as in ``named_parameters``, the tied
    head once), used as they are: neither initialised nor copied (the modules are built on the meta
    device, which draws no random numbers, and deep-copied with the tensors in the memo)."""
    with torch.device("meta"):
        skeleton = GPT(cfg)
    memo = {id(p): nn.Parameter(tensors[name], requires_grad=requires_grad)
            for name, p in skeleton.named_parameters()}
    return copy.deepcopy(skeleton, memo)


def stack(models: Sequence[GPT]) -> tuple[GPT, list[GPT]]:
    """(the pack, the members' views) for M >= 2 plain GPTs of one shape: the pack is a GPT whose
    parameters are the stacked weights [M, ...] (trainable leaves, copies); member i's view is a
    plain GPT whose parameters are views of the pack's slice i."""
    stacked, _ = stack_module_state(list(models))  # name → [M, ...] (the tied head once)
    cfg = models[0].cfg
    pack = plain(cfg, {n: t.detach() for n, t in stacked.items()}, requires_grad=True)
    params = dict(pack.named_parameters())
    return pack, [plain(cfg, {n: t.detach()[i] for n, t in params.items()}) for i in range(len(models))]
