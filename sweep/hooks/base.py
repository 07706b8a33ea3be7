"""Trial hooks: the one way a test or a benchmark reaches into a running trial (``sweep.trial.trainable``).

The trainable trains, writes rows and reports; anything a test or a benchmark needs from inside it
(a crash at a chosen epoch, where the trial ran, when it started) is a hook. A hook is named in the
Tune config beside the run spec, ``config["hooks"] = {name: settings}``, and is built in the trial
from ``HOOKS[name](**settings)``. No user flag sets one: the sweep commands take hidden flags
(``--fail-after-epoch``, ``--trial-hook NAME``) that tests and ``bench/`` pass, and
``SweepSettings.hooks`` carries them to ``run_sweep`` (``sweep.hooks.config``: the flags, the
config and the hooks a trial builds from it).

The trainable calls, in order: ``built()`` once its trainer is built, and ``before_report(epoch)``
for each epoch, after that epoch's rows are written and before its result (and checkpoint) goes to
Tune; what it returns is added to the result. The built-in hooks:

===============  ============================================================  ==========================
name             what it does                                                  who uses it
===============  ============================================================  ==========================
``fault``        SIGKILLs the worker once at epoch K (``sweep.hooks.faults``)  crash and retry tests
``placement``    adds ``node_id`` and ``gpu_ids`` to every result              placement tests
``start_clock``  adds ``start``: when the worker process started, entered      ``bench/gpu_sweep.py``
                 the trainable, built its trainer and reported epoch 0
===============  ============================================================  ==========================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: name -> hook class; ``register_hook`` adds one
HOOKS: dict[str, Callable[..., TrialHook]] = {}


class TrialHook:
    """A seam of the trainable; the defaults do nothing."""

    def built(self) -> None:
        """The trial's trainer is built (and restored, if a checkpoint was)."""

    def before_report(self, epoch: int) -> dict[str, Any]:
        """Epoch ``epoch``'s rows are written; returns what to add to its Tune result."""
        return {}


def register_hook(name: str) -> Callable[[type[TrialHook]], type[TrialHook]]:
    def add(cls: type[TrialHook]) -> type[TrialHook]:
        HOOKS[name] = cls
        return cls

    return add


@register_hook("placement")
class Placement(TrialHook):
    """Where the trial ran: its node and the GPUs Ray gave it (tests check placement and packing)."""

    def before_report(self, epoch: int) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": ",".join(map(str, ray.get_gpu_ids()))}


@register_hook("start_clock")
class StartClock(TrialHook):
    """When this trial's worker process started, entered the trainable, had its trainer built and had
    reported epoch 0 (unix seconds), as ``start`` in the epoch-0 result, so that a sweep can say where
    the time before its first step went (``bench/gpu_sweep.py``). Built as the trainable starts."""

    def __init__(self) -> None:
        from sweep.placement.ray_env import bundled_psutil

        psutil = bundled_psutil()

        self.marks = {"process": psutil.Process().create_time(), "trainable": time.time()}

    def built(self) -> None:
        self.marks.setdefault("built", time.time())

    def before_report(self, epoch: int) -> dict[str, Any]:
        if epoch != 0:
            return {}
        self.marks.setdefault("epoch0", time.time())
        return {"start": dict(self.marks)}
