"""The synthetic store's tables: rows with the schema's columns, built from a ``Planted``; and
``write_store``, which writes them as a store."""


from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from interventions import CONTROL
from model.qk_init import DEFAULT_INIT
from sweep.store.schema import SCHEMA_VERSION, SCHEMAS, run_id
from sweep.synthetic.planted import (
    CHECKPOINT_SERIES,
    CONDITIONS,
    COUPLED,
    HEAD_OFFSETS,
    INITS,
    IV_SEEDS,
    Planted,
)


def _conform(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """Exactly the schema's columns and dtypes (as the store would return them); absent nullable
    columns (e.g. ``weights_sha256``) are null."""
    absent = {f.name: pd.Series([None] * len(df), index=df.index, dtype=object)
              for f in SCHEMAS[table] if f.name not in df.columns and f.nullable}
    return pa.Table.from_pandas(df.assign(**absent), schema=SCHEMAS[table], preserve_index=False).to_pandas()


def _identity(sweep, preset, init, depth, seed, condition) -> dict:
    return {
        "sweep": sweep,
        "run_id": run_id(sweep, preset, init, depth, seed, condition),
        "preset": preset,
        "init": init,
        "depth": depth,
        "seed": seed,
        "condition": condition,
    }


def _epochs_rows(
    runs: list[dict], n_epochs: int, rng, final_val: np.ndarray | None = None
) -> pd.DataFrame:
    """Run-level rows for each run at epochs 0..n_epochs."""
    e = np.arange(n_epochs + 1)
    nr = len(runs)
    ee = np.tile(e, nr)
    idx = np.repeat(np.arange(nr), n_epochs + 1)
    fv = np.full(nr, 1.21) if final_val is None else final_val
    tau = max(n_epochs / 5.0, 1.0)
    val = fv[idx] + 3.5 * np.exp(-ee / tau) - 3.5 * np.exp(-n_epochs / tau) * (ee == n_epochs)
    val = val + rng.normal(0, 0.002, ee.size) * (ee != n_epochs)
    train = np.where(ee == 0, np.nan, val - 0.02)
    grad = np.where(ee == 0, np.nan, 0.5 + 0.1 * rng.random(ee.size))
    status = np.where(ee == n_epochs, "completed", "running")
    frame = (
        pd.DataFrame([runs[i] for i in idx])
        if nr
        else pd.DataFrame(columns=list(_identity(*"abcdef")))
    )
    frame = frame.assign(
        epoch=ee,
        train_loss=train,
        val_loss=val,
        grad_norm=grad,
        wall_s=ee * 10.0,
        tokens_per_s=np.where(ee == 0, np.nan, 1e5),
        tokens_seen=ee * 64 * 128 * 100,
        status=status,
        schema_version=SCHEMA_VERSION,
    )
    return _conform(frame, "epochs")


def _baseline(
    n_seeds, depths, epochs, planted: Planted, inits, preset, rng
) -> tuple[pd.DataFrame, pd.DataFrame]:
    seeds = [1000 + i for i in range(n_seeds)]
    cells = [(i, d, layer) for i in inits for d in depths for layer in range(d)]
    cell_ix = {c: k for k, c in enumerate(cells)}
    z = rng.uniform(-1, 1, len(cells))  # bridge latent per cell
    eps = rng.uniform(-1, 1, (len(cells), 3))
    q_slope = np.array([planted.cell_signs(*c)["pr_q"] for c in cells])
    k_slope = np.array([planted.cell_signs(*c)["pr_k"] for c in cells])
    unc_final = dict(planted.uncoupled_final)

    runs, run_cell, run_layer, run_of_traj = [], [], [], []
    final_align = []
    for init in inits:
        for d in depths:
            for s in seeds:
                runs.append(_identity("baseline", preset, init, d, s, CONTROL))
                if init in COUPLED:
                    fa = planted.coupled_final + planted.coupled_final_per_layer * d
                else:
                    fa = unc_final.get(init, 0.2)
                final_align.append(fa + rng.normal(0, planted.alignment_run_sd))
                for layer in range(d):
                    run_cell.append(cell_ix[(init, d, layer)])
                    run_layer.append(layer)
                    run_of_traj.append(len(runs) - 1)
    run_cell = np.array(run_cell)
    run_layer = np.array(run_layer)
    run_of_traj = np.array(run_of_traj)
    nt = len(run_cell)
    ne = epochs + 1
    # per trajectory quantities, then broadcast over epochs
    t_cell = np.repeat(run_cell, ne)
    t_run = np.repeat(run_of_traj, ne)
    t_layer = np.repeat(run_layer, ne)
    t_traj = np.repeat(np.arange(nt), ne)
    e = np.tile(np.arange(ne), nt).astype(float)
    mult = rng.uniform(0.8, 1.2, nt)[t_traj]  # per-run slope factor
    rescale = 45.0 / max(epochs, 1)
    zc = z[t_cell]
    noise = lambda: rng.normal(0, planted.noise_sd, e.size)  # noqa: E731
    base_depth = np.array([runs[r]["depth"] for r in range(len(runs))])[t_run]
    rel = t_layer / np.maximum(base_depth - 1, 1)  # 0 at the embedding side, 1 at the top

    lat = 1.0 + 0.5 * zc
    pr_q0 = 8.0 + 6.0 * rel
    pr_k0 = 14.0 + 2.0 * rel
    pr_q = pr_q0 + q_slope[t_cell] * (1 + 0.3 * zc) * mult * rescale * e + noise()
    pr_k = pr_k0 + k_slope[t_cell] * lat * mult * rescale * e + noise()
    qk_erank = (
        16.0
        - 6.0 * np.sin(np.pi * rel)
        - 0.05 * (lat + 0.15 * eps[t_cell, 0]) * mult * rescale * e
        + noise()
    )
    attn_entropy = (
        3.0
        - 1.0 * np.sin(np.pi * rel)
        - 0.01 * (lat + 0.25 * eps[t_cell, 1]) * mult * rescale * e
        + noise() * 0.2
    )
    attn_top1 = (
        0.30
        + 0.15 * np.sin(np.pi * rel)
        + 0.002 * (lat + 0.2 * eps[t_cell, 2]) * mult * rescale * e
        + noise() * 0.01
    )
    logit_std = 2.0 + 0.03 * mult * rescale * e + noise()
    # alignment: exponential relaxation from the init value to the run's final value
    init_val = np.array(
        [1.0 if r["init"] in COUPLED else dict(planted.uncoupled_initial).get(r["init"], 0.0499)
         for r in runs]
    )[t_run]
    fa = np.array(final_align)[t_run]
    tau = max(epochs / 6.0, 1.0)
    wt = np.exp(-e / tau)
    align = fa + (init_val - fa) * wt + rng.normal(0, 0.003, e.size) * (e > 0)

    ident = pd.DataFrame(runs).iloc[t_run].reset_index(drop=True)
    layers = ident.assign(
        epoch=e.astype(int),
        layer=t_layer,
        pr_q=pr_q,
        pr_k=pr_k,
        pr_q_minus_pr_k=pr_q - pr_k,
        qk_erank=qk_erank,
        attn_entropy=attn_entropy,
        attn_top1=attn_top1,
        attn_erank=qk_erank * 0.8,
        logit_std=logit_std,
        wq_erank=200.0 + e * 0.1,
        wk_erank=200.0 - e * 0.1,
        wq_erank_head=50.0,
        wk_erank_head=50.0,
        qk_alignment=align,
        # per head: the run's alignment plus fixed offsets that average to zero over heads
        qk_alignment_head=list(align[:, None] + np.array(HEAD_OFFSETS)[None, :]),
        wq_norm=10.0 + 0.01 * e,
        wk_norm=10.0 + 0.01 * e,
        grad_norm_q=np.where(e == 0, np.nan, 0.1),
        grad_norm_k=np.where(e == 0, np.nan, 0.1),
        schema_version=SCHEMA_VERSION,
    )
    return _conform(layers, "layers"), _epochs_rows(runs, epochs, rng)


def _interventions(seeds, epochs, planted: Planted, inits, preset, rng, depth=8):
    metrics = ("attn_entropy", "logit_std", "qk_erank", "pr_k", "val_loss")
    start = {"attn_entropy": 3.5, "logit_std": 1.5, "qk_erank": 14.0, "pr_k": 16.0}
    flips = {(c, i, m) for c, i, m in planted.violations}
    runs, finals = [], []
    for init in inits:
        for si, s in enumerate(seeds):
            none = {
                "attn_entropy": 2.40 + 0.02 * rng.standard_normal(),
                "logit_std": 4.00 + 0.05 * rng.standard_normal(),
                "qk_erank": 8.0 + 0.1 * rng.standard_normal(),
                "pr_k": 10.0 + 0.1 * rng.standard_normal(),
                "val_loss": 1.210 + 0.002 * rng.standard_normal(),
            }
            for c in CONDITIONS:
                eff = planted.effects.get(c, {})
                f = {}
                for m in metrics:
                    d = eff.get(m, 0.0)
                    if (c, si, m) in flips:
                        d = -d
                    f[m] = none[m] + d
                runs.append(_identity("interventions", preset, init, depth, s, c))
                finals.append(f)
    nr = len(runs)
    ne = epochs + 1
    t_run = np.repeat(np.arange(nr), depth * ne)
    t_layer = np.tile(np.repeat(np.arange(depth), ne), nr)
    e = np.tile(np.arange(ne), nr * depth).astype(float)
    frac = e / max(epochs, 1)
    # per-layer offsets with zero mean over layers, so the layer-mean equals the target
    offs = np.linspace(-1, 1, depth)[t_layer]
    cols = {}
    for m in ("attn_entropy", "logit_std", "qk_erank", "pr_k"):
        target = np.array([f[m] for f in finals])[t_run]
        val = start[m] + (target - start[m]) * frac
        cols[m] = val + 0.1 * offs * np.abs(start[m]) / 10 + rng.normal(0, 1e-4, e.size) * (e > 0)
    # exact layer-mean at the final epoch: remove the noise there
    last = e == epochs
    for m in cols:
        target = np.array([f[m] for f in finals])[t_run]
        cols[m] = np.where(last, target + 0.1 * offs * np.abs(start[m]) / 10, cols[m])
    ident = pd.DataFrame(runs).iloc[t_run].reset_index(drop=True)
    layers = ident.assign(
        epoch=e.astype(int),
        layer=t_layer,
        pr_q=cols["pr_k"] + 2.0 + frac,
        pr_k=cols["pr_k"],
        pr_q_minus_pr_k=2.0 + frac,
        qk_erank=cols["qk_erank"],
        attn_entropy=cols["attn_entropy"],
        attn_top1=0.4,
        attn_erank=cols["qk_erank"] * 0.8,
        logit_std=cols["logit_std"],
        wq_erank=200.0,
        wk_erank=200.0,
        wq_erank_head=50.0,
        wk_erank_head=50.0,
        qk_alignment=0.05 + 0.1 * frac,
        wq_norm=10.0,
        wk_norm=10.0,
        grad_norm_q=np.where(e == 0, np.nan, 0.1),
        grad_norm_k=np.where(e == 0, np.nan, 0.1),
        schema_version=SCHEMA_VERSION,
    )
    final_val = np.array([f["val_loss"] for f in finals])
    return _conform(layers, "layers"), _epochs_rows(runs, epochs, rng, final_val=final_val)


def _checkpoints(rng) -> pd.DataFrame:
    rows = []
    for series, (nl, nrev, sign, link) in CHECKPOINT_SERIES.items():
        total = 300_000_000_000
        for r in range(nrev):
            tokens = total if nrev == 1 else int(total * (r + 1) / nrev)
            step = tokens // 2_000_000
            rev = "main" if nrev == 1 else f"step{step}"
            p = tokens / total
            for layer in range(nl):
                rel = layer / max(nl - 1, 1)
                pr_k = 20.0 + 10.0 * np.sin(np.pi * rel) + 3.0 * p + rng.normal(0, 0.3)
                qk = 2.0 + 0.5 * pr_k + rng.normal(0, 0.3)
                ent = (0.5 + 0.1 * qk if link else 6.0 - 0.2 * qk) + rng.normal(0, 0.05)
                pr_q = pr_k + 5.0 + sign * 8.0 * p + rng.normal(0, 0.1)
                rows.append(
                    {
                        "series": series,
                        "repo": f"org/{series}",
                        "revision": rev,
                        "step": step,
                        "tokens": tokens,
                        "progress": p,
                        "layer": layer,
                        "pr_q": pr_q,
                        "pr_k": pr_k,
                        "pr_q_minus_pr_k": pr_q - pr_k,
                        "qk_erank": qk,
                        "attn_entropy": ent,
                        "attn_top1": 0.3,
                        "attn_erank": qk * 0.8,
                        "logit_std": 3.0,
                        "status": "ok",
                        "reason": None,
                        "schema_version": SCHEMA_VERSION,
                    }
                )
    rows.append(
        {
            "series": "pythia-70m",
            "repo": "org/pythia-70m",
            "revision": "step999999",
            "status": "failed",
            "reason": "synthetic failure",
            "schema_version": SCHEMA_VERSION,
        }
    )
    return _conform(pd.DataFrame(rows), "checkpoints")


def make_synthetic_store(
    n_seeds: int = 4,
    depths: tuple[int, ...] = (4, 6, 8),
    epochs: int = 45,
    planted: Planted | None = None,
    scale: int = 1,
    *,
    inits: tuple[str, ...] = INITS,
    baseline: bool = True,
    interventions: bool = True,
    checkpoints: bool = True,
    iv_seeds: tuple[int, ...] = IV_SEEDS,
    iv_epochs: int = 15,
    iv_inits: tuple[str, ...] = (DEFAULT_INIT,),
    preset: str = "paper",
    rng_seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """Synthetic ``layers``/``epochs``/``checkpoints`` tables with planted structure.

    ``scale`` multiplies the number of seeds of the baseline and the intervention sweep.
    """
    planted = planted or Planted()
    rng = np.random.default_rng(rng_seed)
    lay, ep = [], []
    if baseline:
        bl, be = _baseline(n_seeds * scale, depths, epochs, planted, inits, preset, rng)
        lay.append(bl)
        ep.append(be)
    if interventions:
        seeds = list(iv_seeds) + [s + 1000 * k for k in range(1, scale) for s in iv_seeds]
        il, ie = _interventions(seeds, iv_epochs, planted, iv_inits, preset, rng)
        lay.append(il)
        ep.append(ie)
    empty = {t: SCHEMAS[t].empty_table().to_pandas() for t in SCHEMAS}
    return {
        "layers": pd.concat(lay, ignore_index=True) if lay else empty["layers"],
        "epochs": pd.concat(ep, ignore_index=True) if ep else empty["epochs"],
        "checkpoints": _checkpoints(rng) if checkpoints else empty["checkpoints"],
    }


def write_store(tables: dict[str, pd.DataFrame], root) -> None:
    """Write tables as ``root/<table>/<run_id or series>/epoch-0000.parquet`` (one file per run)."""
    from pathlib import Path

    root = Path(root)
    for table, df in tables.items():
        if df.empty:
            continue
        key = "series" if table == "checkpoints" else "run_id"
        for name, part in df.groupby(key, sort=False):
            d = root / table / str(name)
            d.mkdir(parents=True, exist_ok=True)
            part.to_parquet(d / "epoch-0000.parquet", schema=SCHEMAS[table], index=False)
