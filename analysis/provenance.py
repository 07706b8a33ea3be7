"""Provenance: which sweeps, presets, runs, epochs and checkpoint series the statistics rest on."""

from __future__ import annotations

import pandas as pd

from analysis.frames import RUN_ID_COLS, ordered_inits


def provenance(layers: pd.DataFrame, epochs: pd.DataFrame, checkpoints: pd.DataFrame) -> dict:
    """Which sweeps/presets the data came from, run counts and the epochs used."""
    out: dict = {"sweeps": {}}
    ids = pd.concat(
        [df[list(RUN_ID_COLS)] for df in (layers, epochs) if not df.empty and "run_id" in df]
        or [pd.DataFrame(columns=list(RUN_ID_COLS))]
    ).drop_duplicates("run_id")
    for sweep in sorted(ids["sweep"].unique().tolist()):
        ri = ids[ids["sweep"] == sweep]
        lr = layers[layers["sweep"] == sweep] if not layers.empty else layers
        last = lr.groupby("run_id")["epoch"].max() if not lr.empty else pd.Series(dtype=int)
        out["sweeps"][sweep] = {
            "presets": sorted(ri["preset"].unique().tolist()),
            "n_runs": int(len(ri)),
            "inits": ordered_inits(ri["init"]),
            "depths": sorted(int(d) for d in ri["depth"].unique()),
            "seeds": sorted(int(s) for s in ri["seed"].unique()),
            "conditions": sorted(ri["condition"].unique().tolist()),
            "final_epoch": {
                "min": int(last.min()) if len(last) else None,
                "max": int(last.max()) if len(last) else None,
            },
            "n_layer_rows": int(len(lr)),
        }
    out["presets"] = sorted(ids["preset"].unique().tolist())
    out["n_runs"] = int(len(ids))
    out["paper_scale"] = out["presets"] == ["paper"]
    if not checkpoints.empty:
        ok = checkpoints[checkpoints["status"] == "ok"]
        out["checkpoint_series"] = sorted(ok["series"].unique().tolist())
        out["checkpoint_revisions"] = int(ok[["series", "revision"]].drop_duplicates().shape[0])
    else:
        out["checkpoint_series"] = []
        out["checkpoint_revisions"] = 0
    return out
