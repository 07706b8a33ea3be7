"""sweep.extension on a throw-away Ray cluster, with tiny local models standing in for revisions."""

from __future__ import annotations

import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # our own throw-away cluster only

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
import torch
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from sweep.extension import Pool, main, parse_args, run_extension, summarize
from sweep.extension.checkpoint_series import load_manifest, parse_manifest
from sweep.extension.revision_probe import (
    Job,
    ProbeSettings,
    RevisionError,
    fetch_revision,
    jobs_from_manifest,
    probe_windows,
)
from sweep.store import Store
from sweep.store.schema import CHECKPOINT_METRICS, CHECKPOINTS, SCHEMA_VERSION

pytestmark = pytest.mark.ray

TEXT = " ".join(
    f"the {w} of module {i} returns a list of {v} values and raises an error when empty."
    for i, (w, v) in enumerate(zip(["name", "path", "size", "value"] * 20, ["int", "str", "float", "bytes"] * 20, strict=True))
)
N_SEQS, SEQ_LEN = 2, 16
SMALL = dict(vocab_size=100, max_position_embeddings=64, bos_token_id=0, eos_token_id=0)
CONFIGS = {
    "gpt2": lambda: tf.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  scale_attn_by_inverse_layer_idx=True, bos_token_id=0, eos_token_id=0),
    "gpt_neox": lambda: tf.GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, **SMALL),
    "llama": lambda: tf.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=64, **SMALL),
    "olmo": lambda: tf.OlmoConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, pad_token_id=1, **SMALL),
}
STEPS = {"gpt2": [0, 100, 1000], "gpt_neox": [0, 1000], "llama": [0, 1000], "olmo": [0, 1000]}


def tiny_tokenizer() -> tf.PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=100, special_tokens=["[UNK]"]))
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


@pytest.fixture(scope="module")
def revisions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str]]]:
    """Per architecture, (step, directory) of saved tiny random models with a tokenizer."""
    root = tmp_path_factory.mktemp("revisions")
    tokenizer = tiny_tokenizer()
    out = {}
    for kind, steps in STEPS.items():
        out[kind] = []
        for step in steps:
            torch.manual_seed(step)
            model = tf.AutoModelForCausalLM.from_config(CONFIGS[kind]())
            folder = root / kind / f"step{step}"
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            out[kind].append((step, str(folder)))
    return out


def manifest_for(revisions: dict[str, list[tuple[int, str]]], kinds=None, prefix: str = "tiny") -> dict:
    """Series ``{prefix}-{kind}``: tests share one store and keep apart by series name."""
    return {
        "series": [
            {"name": f"{prefix}-{kind}", "revisions": [
                {"revision": f"local-step{step}", "path": path, "tokens": step * 1024}
                for step, path in revisions[kind]]}
            for kind in kinds or revisions
        ]
    }


@pytest.fixture(scope="module")
def cluster():
    # Logical CPUs: the module's 2-actor pool plus one more one-actor pool must fit at once.
    ray.init(num_cpus=3, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


def settings(store: Path) -> ProbeSettings:
    return ProbeSettings(str(store), n_seqs=N_SEQS, seq_len=SEQ_LEN)


@pytest.fixture(scope="module")
def pool(cluster, store):
    """One pool for the module: starting actors (and importing torch in them) is the slow part."""
    with Pool(settings(store), TEXT, n_actors=2) as p:
        yield p


def rows(store: Path, prefix: str):
    df = Store(str(store)).read("checkpoints")
    return df[df["series"].str.startswith(prefix + "-")].reset_index(drop=True)


def test_probe_windows_fixed_shape_and_positions() -> None:
    tok = tiny_tokenizer()
    ids = probe_windows(tok, TEXT, 3, SEQ_LEN)
    assert ids.shape == (3, SEQ_LEN) and ids.dtype == torch.long
    assert torch.equal(ids, probe_windows(tok, TEXT, 3, SEQ_LEN))  # the same text every time
    assert ids[0].tolist() == tok(TEXT[:200], add_special_tokens=False)["input_ids"][:SEQ_LEN]
    with pytest.raises(ValueError, match="too short"):
        probe_windows(tok, TEXT[:50], 2, SEQ_LEN)


def test_progress_is_scaled_within_each_series(revisions) -> None:
    jobs = jobs_from_manifest(parse_manifest(manifest_for(revisions, ["gpt2"])))
    assert [(j.step, j.tokens, j.progress) for j in jobs] == [
        (0, 0, 0.0), (100, 102400, 0.1), (1000, 1024000, 1.0)]
    no_tokens = parse_manifest({"series": [{"name": "s", "revisions": [
        {"revision": "step-10", "repo": "a/b"}, {"revision": "step-40", "repo": "a/b"}]}]})
    assert [j.progress for j in jobs_from_manifest(no_tokens)] == [0.25, 1.0]
    endpoint = parse_manifest({"series": [{"name": "o", "revisions": [{"revision": "main", "repo": "a/b"}]}]})
    assert jobs_from_manifest(endpoint)[0].progress == 1.0


def test_fetch_revision_files_and_errors(monkeypatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import RevisionNotFoundError

    calls = []
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files",
                        lambda self, repo, revision: ["config.json", "model.safetensors", "pytorch_model.bin"])
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo, **kw: calls.append((repo, kw)) or "/cache/snap")
    assert fetch_revision("a/b", "step1", "/cache") == "/cache/snap"
    repo, kw = calls[0]
    assert (repo, kw["revision"], kw["cache_dir"]) == ("a/b", "step1", "/cache")
    assert "*.safetensors" in kw["allow_patterns"] and "*.bin" not in kw["allow_patterns"]

    def missing(self, repo, revision):
        raise RevisionNotFoundError("404", response=SimpleNamespace(headers={}, request=None))

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", missing)
    with pytest.raises(RevisionError, match="revision 'step9' does not exist in a/b"):
        fetch_revision("a/b", "step9", None)

    tries = []
    def flaky(self, repo, revision):
        tries.append(1)
        raise ConnectionError("reset")

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", flaky)
    monkeypatch.setattr("sweep.extension.revision_probe.time.sleep", lambda s: None)
    with pytest.raises(RevisionError, match="after 3 tries: reset"):
        fetch_revision("a/b", "step1", None, retries=3)
    assert len(tries) == 3


def test_cli_arguments() -> None:
    args = parse_args(["--series", "pythia-70m", "olmo-1b", "--revisions", "3", "--force"])
    assert args.series == ["pythia-70m", "olmo-1b"] and args.revisions == 3 and args.force
    assert args.store == "runs/store" and args.n_seqs == 16 and args.seq_len == 128
    with pytest.raises(SystemExit):
        parse_args(["--series", "no-such-series"])


def _check_rows(store: Path, revisions, kinds, prefix: str) -> None:
    df = rows(store, prefix)
    assert list(df.columns) == CHECKPOINTS.names
    expected = {(f"{prefix}-{k}", f"local-step{s}", layer) for k in kinds for s, _ in revisions[k] for layer in (0, 1)}
    assert set(zip(df["series"], df["revision"], df["layer"], strict=True)) == expected
    assert len(df) == len(expected)  # one row per (revision, layer), no duplicates
    assert (df["status"] == "ok").all() and df["reason"].isna().all()
    assert df[list(CHECKPOINT_METRICS)].notna().all().all()
    assert (df["pr_q_minus_pr_k"] - (df["pr_q"] - df["pr_k"])).abs().max() < 1e-9
    assert df["repo"].isna().all() and (df["schema_version"] == SCHEMA_VERSION).all()
    assert (df["tokens"] == df["step"] * 1024).all()
    assert df["progress"].between(0, 1).all()


def test_pool_writes_one_row_per_revision_and_layer_then_skips_and_forces(pool, store, revisions, tmp_path) -> None:
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(json.dumps(manifest_for(revisions)))
    manifest = load_manifest(manifest_path)
    results = run_extension(manifest, settings(store), TEXT, progress=False, pool=pool)
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    _check_rows(store, revisions, list(STEPS), "tiny")
    assert summarize(results)["tiny-gpt2"] == {"done": 3, "skipped": 0, "failed": 0}

    again = run_extension(manifest, settings(store), TEXT, progress=False, pool=pool)
    assert {r.status for r in again} == {"skipped"}
    assert summarize(again)["tiny-gpt2"] == {"done": 0, "skipped": 3, "failed": 0}

    only_gpt2 = parse_manifest(manifest_for(revisions, ["gpt2"]))
    before = Store(str(store)).fs.get_file_info(
        Store(str(store)).group_dir("checkpoints", "tiny-gpt2") + "/local-step0.parquet").mtime_ns
    forced = run_extension(only_gpt2, settings(store), TEXT, force=True, progress=False, pool=pool)
    assert [r.status for r in forced] == ["ok"] * 3
    after = Store(str(store)).fs.get_file_info(
        Store(str(store)).group_dir("checkpoints", "tiny-gpt2") + "/local-step0.parquet").mtime_ns
    assert after > before  # really redone
    _check_rows(store, revisions, list(STEPS), "tiny")


def test_missing_path_is_recorded_as_failed_and_others_complete(pool, store, revisions, tmp_path) -> None:
    data = manifest_for(revisions, ["llama"], prefix="miss")
    data["series"][0]["revisions"].insert(1, {"revision": "local-step500", "path": str(tmp_path / "nope"),
                                              "tokens": 500 * 1024})
    results = run_extension(parse_manifest(data), settings(store), TEXT, progress=False, pool=pool)
    assert summarize(results) == {"miss-llama": {"done": 2, "skipped": 0, "failed": 1}}
    df = rows(store, "miss")
    failed = df[df["status"] == "failed"]
    assert len(failed) == 1 and failed["layer"].isna().all()
    assert failed["revision"].item() == "local-step500" and "does not exist" in failed["reason"].item()
    assert failed[list(CHECKPOINT_METRICS)].isna().all().all()
    assert failed["progress"].item() == pytest.approx(0.5)
    assert (df[df["status"] == "ok"]["layer"].notna()).all() and len(df) == 1 + 2 * 2
    # a rerun retries the failed revision only (and it fails again)
    rerun = run_extension(parse_manifest(data), settings(store), TEXT, progress=False, pool=pool)
    assert sorted(r.status for r in rerun) == ["failed", "skipped", "skipped"]


def test_killed_actor_restarts_and_run_completes_without_duplicates(pool, store, revisions) -> None:
    jobs = jobs_from_manifest(parse_manifest(manifest_for(revisions, prefix="kill")))
    killed = []

    def kill_once(_result) -> None:
        if not killed:  # the other actor is mid-revision now
            for actor in pool.actors:
                ray.kill(actor, no_restart=False)
            killed.append(True)

    results = pool.run(jobs, on_result=kill_once)
    assert killed
    assert sorted((r.series, r.revision) for r in results) == sorted((j.series, j.revision) for j in jobs)
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    assert len({r.pid for r in results}) > 2  # revisions after the kill ran in restarted processes
    _check_rows(store, revisions, list(STEPS), "kill")


def test_jobs_fail_cleanly_when_no_actor_can_run(cluster, revisions, tmp_path) -> None:
    jobs = [Job("dead-olmo", f"local-step{s}", None, path, s, s, 1.0) for s, path in revisions["olmo"]]
    with Pool(settings(tmp_path), TEXT, n_actors=1, max_attempts=2) as lone:
        ray.kill(lone.actors[0], no_restart=True)  # dead for good
        results = lone.run(jobs)
    assert [r.status for r in results] == ["failed", "failed"]
    assert all("no probe actor is alive" in r.reason for r in results)
    assert rows(tmp_path, "dead")["status"].tolist() == ["failed", "failed"]


def test_actor_lost_for_good_after_a_revision_exhausts_attempts(cluster, revisions, tmp_path) -> None:
    jobs = [Job("gone-olmo", f"local-step{s}", None, path, s, s, 1.0) for s, path in revisions["olmo"]]
    with Pool(settings(tmp_path), TEXT, n_actors=1, max_attempts=1) as lone:
        results = lone.run(jobs, on_result=lambda r: ray.kill(lone.actors[0], no_restart=True))
    first, second = results
    assert first.status == "ok"
    assert second.status == "failed" and second.reason.startswith("actor died 1 times")
    assert sorted(rows(tmp_path, "gone")["status"]) == ["failed", "ok", "ok"]  # 2 layers + 1 failed row


def test_cli_runs_a_manifest_then_skips_it(cluster, revisions, tmp_path, capsys) -> None:
    manifest, text = tmp_path / "m.json", tmp_path / "probe.txt"
    manifest.write_text(json.dumps(manifest_for(revisions, ["gpt_neox"], prefix="cli")))
    text.write_text(TEXT)
    argv = ["--manifest", str(manifest), "--store", str(tmp_path / "store"), "--text", str(text),
            "--n-seqs", str(N_SEQS), "--seq-len", str(SEQ_LEN), "--actors", "1",
            "--write-manifest", str(tmp_path / "used.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "cli-gpt_neox" in out and "    2        0       0" in out
    assert load_manifest(tmp_path / "used.json") == load_manifest(manifest)
    assert len(rows(tmp_path / "store", "cli")) == 2 * 2
    assert main(argv) == 0
    assert "    0        2       0" in capsys.readouterr().out
    assert ray.is_initialized()  # main() leaves a Ray it did not start alone
