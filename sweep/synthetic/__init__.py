"""A synthetic store with planted, known structure (shared by tests and benchmarks).

It lives in the ``sweep`` package (not under ``tests/``) so that ``bench/``, the
tests and a Ray worker can all import it as ``sweep.synthetic``: ``planted`` (what
is planted, and what follows) and ``tables`` (the rows, and ``write_store``).

``make_synthetic_store()`` returns ``{"layers", "epochs", "checkpoints"}``
DataFrames with exactly the columns and dtypes of ``sweep.store.schema``. The
default is the paper grid: 3 inits x depths 4/6/8 x 4 seeds x 45 epochs
(36 runs, 216 run-layer trajectories), 6 intervention conditions x 5 seeds x
8 layers x 15 epochs, and four checkpoint series.

Planted structure (``Planted``; defaults give the counts in ``expected_slope_counts``):

* slopes per (init, depth, layer) cell: pr_q rises, pr_k falls, except
  - qk_identical cells at ``coupled_pr_k_reversal_layers`` whose pr_k rises,
  - ``inverted_cells`` where pr_q falls steeply and pr_k barely, so pr_q − pr_k falls;
  every run multiplies its cell's slopes by a factor in [0.8, 1.2] (signs kept).
* bridge: a latent z per cell drives −slope(pr_k), −slope(qk_erank), −slope(attn_entropy)
  and slope(attn_top1) together, so all three bridge correlations are positive.
* alignment: qk_identical starts at 1 and ends near ``coupled_final + coupled_final_per_layer * depth``,
  the uncoupled inits end near ``uncoupled_final``; the gap grows with depth.
* interventions: the final layer-mean of every condition is the matched ``none``
  run plus ``effects[condition][metric]``; each ``(condition, seed index, metric)``
  in ``violations`` flips that effect's sign for that seed.
* checkpoints: series with a known sign of the pr_q − pr_k slope on progress and
  a link (pr_k -> qk_erank -> attn_entropy) that holds or is broken.

``scale`` multiplies the number of seeds of both sweeps (rows grow linearly).
"""

from sweep.synthetic.planted import Planted, expected_checkpoints, expected_slope_counts
from sweep.synthetic.tables import make_synthetic_store, write_store

__all__ = ["Planted", "expected_checkpoints", "expected_slope_counts", "make_synthetic_store", "write_store"]
