"""Sets of seeds end to end, on tiny GPT-NeoX checkpoints built here (nothing downloaded):

* the dry run of ``--series polypythias-14m`` against the local test Hub (tests/hub_server.py): its
  listing decides the seeds, every seed is planned at the same revisions (from the steps all have),
  duplicates are found from the listing, and the projected time is printed;
* a manifest of two sets probed through the pool: in the *planted* set every seed's key projection
  loses rank over its revisions (pr_k falls, pr_q − pr_k rises), in the *null* set it does not; one
  planted seed has a revision that cannot be read. The scorecard decides the planted slope positive
  across seeds, leaves the null one undecided, pairs the revisions and says what it left out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from extension_helpers import CONFIGS, N_SEQS, SEQ_LEN, TEXT, extension_env, tiny_tokenizer
from hub_server import HubRepo, hub_server

ROOT = Path(__file__).resolve().parents[1]
#: The planted set's K rank per revision (d_model 32: full rank first).
RANKS = {0: 32, 100: 6, 1000: 3, 3000: 1}


def save_neox(folder: Path, seed: int, k_rank: int | None = None) -> None:
    """A tiny GPT-NeoX with its tokenizer; ``k_rank``: every layer's K projection (the K rows of each
    head in the fused, per-head interleaved ``query_key_value``) made a random rank-``k_rank`` map, its
    bias 0."""
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(CONFIGS["gpt_neox"]())
    cfg = model.config
    heads, d = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    if k_rank is not None:
        with torch.no_grad():
            for layer in model.gpt_neox.layers:
                qkv = layer.attention.query_key_value
                k = torch.randn(heads * d, k_rank) @ torch.randn(k_rank, cfg.hidden_size) * 0.3
                for h in range(heads):
                    rows = slice(h * 3 * d + d, h * 3 * d + 2 * d)
                    qkv.weight[rows] = k[h * d:(h + 1) * d]
                    qkv.bias[rows] = 0.0
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_dry_run_of_a_set_plans_every_seed_at_the_same_revisions(tmp_path: Path) -> None:
    """The Hub lists the original and two seeds (of the nine the model cards name); seed 2 lacks
    step3000, so the pick is from steps 0, 1000 and 2000 for all three; seed 1's step2000 serves its
    step1000's files: found from the listing, not downloaded."""
    revs = {}
    for k, step in enumerate((0, 1000, 2000, 3000)):
        save_neox(tmp_path / f"w{step}", k)
        revs[f"step{step}"] = folder_files(tmp_path / f"w{step}")
    seed1 = dict(revs) | {"step2000": revs["step1000"]}
    repos = [HubRepo("EleutherAI/pythia-14m", revs | {"main": revs["step3000"]}),
             HubRepo("EleutherAI/pythia-14m-seed1", seed1),
             HubRepo("EleutherAI/pythia-14m-seed2", {k: v for k, v in revs.items() if k != "step3000"}),
             HubRepo("EleutherAI/pythia-160m-seed1", revs)]
    argv = ["--series", "polypythias-14m", "--revisions", "3", "--dry-run", "--n-seqs", str(N_SEQS),
            "--seq-len", str(SEQ_LEN), "--store", str(tmp_path / "store")]
    with hub_server(repos) as hub:
        proc = subprocess.run([sys.executable, "-m", "sweep.extension", *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=180, env=extension_env(hub.url, tmp_path))
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, out + err
    assert "the Hub lists no seed 3, 4, 5, 6, 7, 8, 9 (the sources name seeds 1, 2, 3, 4, 5, 6, 7, 8, 9)" in err
    assert "pythia-14m-seed2 (seed 2) lacks step 3000: only steps every seed has are picked" in err
    for series, seed in (("pythia-14m", 0), ("pythia-14m-seed2", 2)):
        for step in (0, 1000, 2000):
            assert f"  {series}@step{step} (set polypythias-14m, seed {seed}): " in out, out
    assert "  pythia-14m-seed1@step1000: same weight files as step2000: not downloaded, rows copied" in out
    assert "step3000" not in out and "pythia-160m" not in out
    assert "[extension] 9 revisions: 8 to probe (" in out and "1 duplicate(s) found before download, 0 refused" in out
    assert "[extension] projected: 8 revisions on this machine (1 node(s), " in out
    assert "probe seconds per revision from bench.checkpoint_scale --suite" in out
    assert not (tmp_path / "store").exists()


def test_a_large_plan_prints_one_line_per_series_with_its_set(tmp_path: Path, monkeypatch) -> None:
    from sweep.extension import plan as plan_mod
    from sweep.extension.checkpoint_series import parse_manifest
    from sweep.extension.revision_probe import ProbeSettings, jobs_from_manifest

    for step in (0, 1000):
        save_neox(tmp_path / f"step{step}", step)
    manifest = parse_manifest({"series": [
        {"name": f"toy-{k}", "group": "toy", "seed": k, "revisions": [
            {"revision": f"step{s}", "path": str(tmp_path / f"step{s}"), "tokens": s} for s in (0, 1000)]}
        for k in range(2)]})
    settings = ProbeSettings(str(tmp_path / "store"), n_seqs=N_SEQS, seq_len=SEQ_LEN)
    plan = plan_mod.plan_jobs(jobs_from_manifest(manifest), settings, 2**33, 2**34)
    monkeypatch.setattr(plan_mod, "PLAN_LINES", 3)
    lines = plan_mod.format_plan(plan, settings, 2**33).splitlines()
    assert lines[1].startswith("  toy-0 (set toy, seed 0): 2 to probe, 0 B of weights, probe whole, task memory up to")
    assert lines[2].startswith("  toy-1 (set toy, seed 1): 2 to probe") and len(lines) == 4


@pytest.mark.ray
def test_planted_and_null_sets_probed_then_decided_across_seeds(tmp_path: Path, ray_env, capsys) -> None:
    import ray

    from analysis import scorecard as sc
    from analysis.compute import compute_all
    from analysis.inference import FOUND_POSITIVE, UNDECIDED
    from sweep.extension import main
    from sweep.store import Store
    from sweep.store.schema import SCHEMAS

    series = []
    for group, seeds in (("planted", 4), ("null", 4)):
        for seed in range(seeds):
            revisions = []
            for step, rank in RANKS.items():
                folder = tmp_path / group / str(seed) / f"step{step}"
                if (group, seed, step) == ("planted", 2, 1000):
                    folder.mkdir(parents=True)  # exists, holds nothing: a failed revision
                else:
                    save_neox(folder, 100 * seed + step, rank if group == "planted" else None)
                revisions.append({"revision": f"step{step}", "path": str(folder), "tokens": step * 1024})
            series.append({"name": f"{group}-{seed}", "group": group, "seed": seed, "revisions": revisions})
    (tmp_path / "m.json").write_text(json.dumps({"series": series}))
    (tmp_path / "probe.txt").write_text(TEXT)
    store = tmp_path / "store"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        argv = ["--manifest", str(tmp_path / "m.json"), "--store", str(store), "--text", str(tmp_path / "probe.txt"),
                "--n-seqs", str(N_SEQS), "--seq-len", str(SEQ_LEN), "--actors", "2"]
        assert main(argv) == 1  # one revision failed
        out = capsys.readouterr().out
        assert "failed planted-2@step1000: RevisionError: no config.json" in out
        assert main(argv) == 1  # resumed: nothing stored is probed again, the failed one is retried
        assert "probed 31 (0 now, 31 already in the store), failed 1" in capsys.readouterr().out
    finally:
        ray.shutdown()

    ck = Store(str(store)).read("checkpoints")
    assert set(zip(ck["series"], ck["group"], ck["seed"], ck["varies"], strict=True)) == {
        (f"{g}-{k}", g, str(k), "seed") for g in ("planted", "null") for k in range(4)}
    tables = {t: SCHEMAS[t].empty_table().to_pandas() for t in ("layers", "epochs")} | {"checkpoints": ck}
    an = compute_all(tables)
    fits = an.results["checkpoint_sets"].sets
    assert fits["planted"].revisions == ["step 0", "step 100", "step 3000"]  # paired: step 1000 left out of all
    assert fits["planted"].left_out_revisions == {"step 1000": "seed 2"}
    assert fits["null"].revisions == ["step 0", "step 100", "step 1000", "step 3000"]
    pr_k = ck[ck["group"] == "planted"].groupby("step")["pr_k"].mean()
    assert pr_k[0] > pr_k[100] > pr_k[1000] > pr_k[3000] and pr_k[3000] == pytest.approx(1.0, abs=1e-3)
    rows = {r.id: r for r in sc.build_scorecard(an, None, False)}
    planted = rows["checkpoints.seeds.planted.slope_pr_q_minus_pr_k"]
    assert planted.verdict == FOUND_POSITIVE and planted.n == 4, planted
    assert "revisions left out of every seed: step 1000 (lacked by seed 2)" in planted.reason
    assert rows["checkpoints.seeds.null.slope_pr_q_minus_pr_k"].verdict == UNDECIDED
