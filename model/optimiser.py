"""AdamW with one step count per pack member, and the step that skips overflowed members (SPEC §3).
No Ray, no files.

A pack's weights are stacked [M, ...]; AdamW is elementwise, so its moments are per member already,
but ``torch.optim.AdamW`` keeps one 0-d step count per tensor: a member whose fp16 step was skipped
would still advance the pack's count, and its later bias correction would not be its own run's.
``MemberAdamW`` keeps ``state["step"]`` of shape [M] and runs PyTorch's own AdamW arithmetic
(``torch.optim.adam.adam``, the functional every ``AdamW`` calls) on each member's slices with that
member's count: its ``state_steps`` must be one-element tensors, so member i gets the 0-d view
``step[i]``, and the library's ``step += 1`` lands in the [M] tensor. Elementwise kernels on a
slice compute what they compute on the whole tensor, so with equal counts this is bit for bit the
plain ``AdamW`` over the stacked tensors (tests/test_model_optimiser.py).

A skipped member (``skip`` [M] bool, from ``model.scaler.MemberScaler``) is masked on the device,
without a host read: the fused AdamW (CUDA, and the CPU when asked) takes the library's own
``found_inf`` per member (what ``GradScaler`` hands a fused optimiser: the kernel leaves that
member's weights and moments alone and its count is taken back); the other implementations have
no ``found_inf``, so the member's weights, moments and count are put back with ``torch.where``.
Either way the member ends where its own run, which took no step there, ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adam import adam


class MemberAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` over tensors stacked [M, ...] along the member dimension: one step count
    per member (``state["step"]`` [M], float32), a member's step skipped on its own (``step(skip=)``).
    Built with AdamW's arguments plus ``members``; amsgrad, maximize and differentiable are not used
    by the recipe and not supported."""

    def __init__(self, params: Iterable[Any], members: int, **kwargs: Any) -> None:
        if kwargs.get("amsgrad") or kwargs.get("maximize") or kwargs.get("differentiable"):
            raise ValueError("MemberAdamW: amsgrad, maximize and differentiable are not supported")
        self.members = members
        super().__init__(params, **kwargs)

    def _state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """p's state, made on first use: zero moments like p, the step count [M] (on p's device for a
        fused or capturable group, on the CPU otherwise, as ``AdamW`` keeps its 0-d count)."""
        state = self.state[p]
        if not state:
            on_device = group["fused"] or group["capturable"]
            state["step"] = torch.zeros(self.members, dtype=torch.float32, device=p.device if on_device else "cpu")
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``AdamW.load_state_dict``; a plain AdamW's state (one 0-d count a tensor: a pack's checkpoint
        of before the per-member count) gets that count for every member, as it counted them."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            if "step" in state and state["step"].dim() == 0:
                state["step"] = state["step"].expand(self.members).clone()

    @torch.no_grad()
    def step(self, closure: Any = None, skip: Tensor | None = None) -> None:  # type: ignore[override]
        """One AdamW step for every member not in ``skip`` ([M] bool on the weights' device; None:
        every member steps). No host read of ``skip``."""
        if closure is not None:
            raise ValueError("MemberAdamW.step takes no closure")
        self._accelerator_graph_capture_health_check()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self._state(p, group) for p in params]
            if group["fused"]:
                self._fused(group, params, states, skip)
            else:
                self._unfused(group, params, states, skip)

    def _call(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor],
              exp_avg_sqs: list[Tensor], steps: list[Tensor], found_inf: Tensor | None = None) -> None:
        beta1, beta2 = group["betas"]
        adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=group["foreach"],
             capturable=group["capturable"], differentiable=False, fused=group["fused"], found_inf=found_inf,
             decoupled_weight_decay=True, amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"],
             weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)

    def _fused(self, group: dict[str, Any], params: list[Tensor], states: list[dict[str, Tensor]],
               skip: Tensor | None) -> None:
        """The fused kernel, member i on the slices [i] with the count view step[i]: every member in one
        call, or one call each with its own ``found_inf`` (0-d float: 1 skips it) when there is a skip."""
        members = [range(self.members)] if skip is None else [[i] for i in range(self.members)]
        found = None if skip is None else skip.to(torch.float32)
        for chunk in members:
            self._call(group, [p[i] for i in chunk for p in params], [p.grad[i] for i in chunk for p in params],
                       [s["exp_avg"][i] for i in chunk for s in states],
                       [s["exp_avg_sq"][i] for i in chunk for s in states],
                       [s["step"][i] for i in chunk for s in states],
                       None if found is None else found[chunk[0]])

    def _unfused(self, group: dict[str, Any], params: list[Tensor], states: list[dict[str, Tensor]],
                 skip: Tensor | None) -> None:
        """The single-tensor or foreach AdamW: while every member has taken the same steps (the count
        lives on the CPU here: no device read), the whole stacked tensors in one call with one shared
        count, as a plain ``AdamW``; else each member on its slices. A skip is put back with
        ``torch.where`` (these implementations take no ``found_inf``)."""
        saved = None
        if skip is not None:
            saved = [(p.clone(), s["exp_avg"].clone(), s["exp_avg_sq"].clone(), s["step"].clone())
                     for p, s in zip(params, states, strict=True)]
        counts = [s["step"] for s in states]
        stacked = torch.stack(counts) if all(c.device.type == "cpu" for c in counts) else None  # [P, M]
        if stacked is not None and bool((stacked == stacked[0, 0]).all()):
            shared = list(stacked[:, 0].clone().unbind())  # 0-d each: what AdamW's own state would hold
            self._call(group, params, [p.grad for p in params], [s["exp_avg"] for s in states],
                       [s["exp_avg_sq"] for s in states], shared)
            torch._foreach_add_(counts, 1.0)
        else:
            for i in range(self.members):
                self._call(group, [p[i] for p in params], [p.grad[i] for p in params],
                           [s["exp_avg"][i] for s in states], [s["exp_avg_sq"][i] for s in states],
                           [c[i] for c in counts])
        if saved is None:
            return
        for p, s, (p0, m0, v0, c0) in zip(params, states, saved, strict=True):
            back = skip.view(-1, *([1] * (p.dim() - 1)))
            p.copy_(torch.where(back, p0, p))
            s["exp_avg"].copy_(torch.where(back, m0, s["exp_avg"]))
            s["exp_avg_sq"].copy_(torch.where(back, v0, s["exp_avg_sq"]))
            s["step"].copy_(torch.where(skip.to(c0.device), c0, s["step"]))


@torch.no_grad()
def optimiser_step(optimizer: torch.optim.Optimizer, skip: Tensor | None) -> None:
    """The trainer's AdamW step: every member but those in ``skip`` ([M] bool; None: all step).

    A pack (``MemberAdamW``): its own masked step. One run (a plain ``AdamW``) skips as GradScaler
    does: fused, through the library's ``found_inf`` (no host read, so it can be recorded in a CUDA
    graph); otherwise by reading the flag on the host (the CPU: nothing to wait for)."""
    if isinstance(optimizer, MemberAdamW):
        optimizer.step(skip=skip)
    elif skip is None:
        optimizer.step()
    elif all(g["fused"] for g in optimizer.param_groups):
        optimizer.found_inf = skip.to(torch.float32).reshape(())  # what GradScaler hands a fused optimiser
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not bool(skip.item()):
        optimizer.step()
