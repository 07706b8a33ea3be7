"""The reducer's statistics (SPEC §8): pure functions of the store's tables (pandas/scipy, no Ray).

One module per idea: ``primitives`` (generic statistics, typed leaves, the one NaN -> null
conversion), ``frames`` (which rows count, finals, slopes), ``section`` (the ``Section`` a
statistic is, and ``Analysis``), one module per §8 section (``alignment``, ``slopes``,
``categories``, ``bridge``, ``interventions``, ``dose_response`` (SPEC §5), ``checkpoints``,
``layer_metrics`` (every per-layer column of ``metrics.columns``):
each its typed result, compute, tables, sentences, heading, figure names and scorecard
claims), ``compute`` (the section registry, ``register_section``, and ``compute_all``),
``provenance``, ``claims`` and ``scorecard``, ``reference`` (the paper's values) and ``vocabulary`` (names from the registries).

Every function here takes pandas DataFrames with the columns of
``sweep.store.schema`` (``layers``, ``epochs``, ``checkpoints``) and returns typed results,
numbers or DataFrames: no I/O and no plotting (a section names its figures' drawing
functions; ``sweep.report`` imports them). ``compute_all`` runs every registered section
and returns an ``Analysis``: the typed result per section, ``missing``, ``notes`` and the
frames; ``Analysis.stats`` is their JSON (``Result.to_json``), which ``sweep.report``
writes to ``stats.json``.

Adding a statistic: one module with a ``Section`` subclass and its ``Result`` dataclass,
registered with ``analysis.compute.register_section`` (at import: load it with
``--plugin MODULE``), or listed in ``analysis.compute.BUILTIN_SECTIONS``; see
``tests/test_analysis_section.py``.

Conventions
-----------
* Baseline sections use rows with ``sweep == "baseline"``, intervention
  sections rows with ``sweep == "interventions"``.
* "Final" is each run's last epoch present in ``layers`` (the epoch used is
  recorded under ``provenance``); "initial" is each run's first epoch
  (epoch 0 = at initialisation when the run logged it).
* "Layer-mean" is the mean over a run's layers at one epoch.
* Standard deviations are sample standard deviations (ddof = 1); with one
  observation the sd is ``None``.
* Slopes are closed-form OLS slopes computed for all groups at once with
  ``np.bincount`` (no Python loop per trajectory).
* Runs whose ``epochs`` status is ``diverged``, and runs whose last epoch
  differs from their preset's (``incomplete_runs``), are dropped before any
  statistic and listed with the reason under ``provenance.excluded_runs``.
* Counts of seeds count runs (one per seed within a preset), not distinct
  seed numbers. ``compute_all`` is meant for one preset at a time
  (``sweep.report`` never pools presets).
* A value a result cannot define is ``None`` in it; ``to_json`` also turns any NaN/inf
  into ``null``; dict keys are strings (depths are written ``"4"``, ``"6"``, ...).

Shape of ``compute_all(...).stats`` (= stats.json; the fields of each section's result
dataclass; a section without data is ``None`` and its reason is under ``missing``)::

    provenance      {sweeps: {sweep: {presets, n_runs, inits, depths, seeds, conditions,
                     final_epoch: {min, max}, n_layer_rows}}, presets, n_runs, paper_scale,
                     checkpoint_series, checkpoint_revisions, excluded_runs}
    alignment       {initial|final: {init: {mean, sd, n}}, initial_epoch, final_epoch,
                     welch_t, welch_p, hedges_g, n_coupled, n_uncoupled,
                     gap_by_depth: {depth: gap}, final_by_depth: {depth: {init: mean}},
                     final_by_head: {init: [mean per head]}}
    slopes          {uncoupled|coupled|pooled: {pr_q|pr_k|pr_q_minus_pr_k:
                     {mean, sd, n, positive, negative}}}      over seed-averaged traces
    slopes_per_run  the same over every per-run layer trajectory
    layer_categories {early|mid|late: {attn_entropy, attn_top1, qk_erank, pr_q, n}}
    layer_categories_by_depth {depth: {k, early|mid|late: {...}}}
    bridge          {seed_averaged|per_seed: {key_spec__qk_compression|
                     qk_compression__entropy_sharpening|qk_compression__top1_sharpening:
                     {r, p, n[, note]}}}
    interventions   {condition: {attn_entropy|logit_std|qk_erank|pr_k|val_loss:
                     {mean, sd, n, delta, delta_sd, n_pairs}, n_seeds, n_pairs, predicted,
                     confidence, confidence_by_metric[, n_confidence]}}
    interventions_init      the init ``interventions`` describes
    interventions_by_init   {init: {condition: ...}}   only when several inits are present
    dose_response   {condition: {field, default, init, strengths, n_runs, claim, metrics: {metric:
                     {predicted, expected, rho, p, ci_low, ci_high, n_pairs, n_seeds, verdict,
                     reason, points: [{strength, mean, sd, low, high, n}]}}}}   swept conditions only
    checkpoints     {series: {name: {n_revisions, slope_pr_q_minus_pr_k, link_recurs,
                     r_pr_k__qk_erank, r_qk_erank__attn_entropy, n_rows}},
                     positive_series, n_fitted_series, link_recurs_series[, failed_revisions]}
    layer_metrics   {final_epoch: {min, max}, by_init: {init: {metric: {mean, sd, n}}},
                     by_layer: {init: {depth: {layer: {n_runs, metric...}}}},
                     by_head: {init: {per-head metric: [mean per head]}}}   every vocabulary column
    missing         {section[.part]: reason}
    notes           [str]
    reference       PAPER_REFERENCE (SPEC §9 and the paper's Appendix A)
"""

