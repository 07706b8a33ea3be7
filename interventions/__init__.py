"""Interventions on the key pathway (SPEC §5), each acting only through the loop's hooks.

Importing this package registers every condition: ``none`` (base),
``forced_k_contraction`` and ``qk_align_reg`` (extra loss), ``k_spectrum_clamp``
(projection after the step), ``freeze_k`` and ``freeze_q`` (not trained).
"""

from interventions.base import (
    CONTROL,
    REGISTRY,
    Intervention,
    default_strengths,
    make_intervention,
    packable_condition,
    register,
)
from interventions.freeze import FreezeK, FreezeQ
from interventions.regularisers import (
    ForcedKContraction,
    QKAlignReg,
    participation_ratio_f32,
    qk_cos_loss,
)
from interventions.spectrum import KSpectrumClamp

#: The paper's six conditions (the presets' grid), in SPEC §5's order.
PAPER_CONDITIONS: tuple[str, ...] = (CONTROL, ForcedKContraction.name, KSpectrumClamp.name,
                                     FreezeK.name, FreezeQ.name, QKAlignReg.name)

__all__ = [
    "CONTROL",
    "PAPER_CONDITIONS",
    "REGISTRY",
    "ForcedKContraction",
    "FreezeK",
    "FreezeQ",
    "Intervention",
    "default_strengths",
    "KSpectrumClamp",
    "QKAlignReg",
    "make_intervention",
    "packable_condition",
    "participation_ratio_f32",
    "qk_cos_loss",
    "register",
]
