"""The limits of a ``--seeds auto`` design (SPEC §8): its first look and its most seeds.

Plain constants, no numpy or scipy: ``analysis.sequential`` builds its designs with them (and
re-exports them), and the sweep commands' ``--max-seeds`` (``sweep.sequential.flags``) is checked
against them while the flags are parsed.
"""

#: The first look: the first 3 seeds (t with 2 degrees of freedom).
FIRST_LOOK = 3
#: The most seeds a design may have: 24 looks; the calibration holds 400,000 paths of 50 seeds in
#: ≈ 1 s and ≈ 10 MB per look, and a sweep runs a round per look.
MAX_SEEDS = 50
