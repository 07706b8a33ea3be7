"""The download path end to end: ``python -m sweep.extension --series pythia-70m`` against a local
Hugging Face Hub (tests/hub_server.py) on 127.0.0.1, with no monkeypatches; and the retry rules.

The local hub serves ``EleutherAI/pythia-70m`` as a tiny GPT-NeoX series: step0 (one safetensors
file), step1000 (sharded safetensors), step2000 (step1000's weights again, as a pickled ``.bin``),
main (= step2000), and step3000, listed but answering 404. It answers 503 once to the branch
listing, once to step1000's model info and once to a weight download.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import torch
import transformers as tf
from extension_helpers import CONFIGS, N_SEQS, SEQ_LEN, TEXT, extension_env, tiny_tokenizer
from hub_server import HubRepo, commit_of, hub_server
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RevisionNotFoundError,
)
from safetensors.torch import load_file

from sweep.extension.hub import transient_hub_error, with_hub_retries
from sweep.extension.integrity import weights_sha256
from sweep.store import Store

REPO = "EleutherAI/pythia-70m"
ROOT = Path(__file__).resolve().parents[1]


def http_error(status: int, cls: type[HfHubHTTPError] = HfHubHTTPError) -> HfHubHTTPError:
    return cls(f"{status}", response=httpx2.Response(status, request=httpx2.Request("GET", "http://hub/x")))


def caused(exc: Exception, cause: BaseException) -> Exception:
    exc.__cause__ = cause
    return exc


def test_which_hub_errors_are_tried_again() -> None:
    assert transient_hub_error(http_error(503)) and transient_hub_error(http_error(429))
    assert transient_hub_error(httpx2.ConnectError("refused"))
    # what snapshot_download raises when the hub answered 503 and nothing is cached
    assert transient_hub_error(caused(LocalEntryNotFoundError("no snapshot"), http_error(503)))
    assert not transient_hub_error(caused(LocalEntryNotFoundError("offline"), OfflineModeIsEnabled("off")))
    assert not transient_hub_error(http_error(404, RevisionNotFoundError))
    assert not transient_hub_error(http_error(401)) and not transient_hub_error(ValueError("bad"))


def test_retries_are_bounded_and_only_for_transient_errors() -> None:
    calls: list[int] = []

    def flaky(failures: int, error: Exception):
        def call() -> str:
            calls.append(1)
            if len(calls) <= failures:
                raise error
            return "ok"
        return call

    assert with_hub_retries(flaky(2, http_error(503)), tries=3, wait=0) == "ok" and len(calls) == 3
    calls.clear()
    with pytest.raises(HfHubHTTPError):
        with_hub_retries(flaky(5, http_error(503)), tries=3, wait=0)
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(RevisionNotFoundError):
        with_hub_retries(flaky(1, http_error(404, RevisionNotFoundError)), tries=3, wait=0)
    assert len(calls) == 1


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def pythia_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[HubRepo, dict[str, str]]:
    """The tiny series as hub files, and the value digest each revision's weights should get."""
    root = tmp_path_factory.mktemp("hub_files")
    tokenizer = tiny_tokenizer()
    models = {}
    for step in (0, 1000):
        torch.manual_seed(step)
        models[step] = tf.AutoModelForCausalLM.from_config(CONFIGS["gpt_neox"]())
    models[0].save_pretrained(root / "step0")
    models[1000].save_pretrained(root / "step1000", max_shard_size="20KB")  # sharded + index
    (root / "step2000").mkdir()
    models[1000].config.save_pretrained(root / "step2000")
    state = {}  # the checkpoint's own tensor names (transformers 5 renames some in memory: embed_out -> lm_head)
    for shard in (root / "step1000").glob("*.safetensors"):
        state |= load_file(shard)
    torch.save(state, root / "step2000" / "pytorch_model.bin")
    for rev in ("step0", "step1000", "step2000"):
        tokenizer.save_pretrained(root / rev)
    assert len(list((root / "step1000").glob("*.safetensors"))) > 2
    branches = {rev: folder_bytes(root / rev) for rev in ("step0", "step1000", "step2000")}
    branches["main"] = branches["step2000"]
    branches["step3000"] = branches["step0"]
    digests = {"step0": weights_sha256([root / "step0" / "model.safetensors"]),
               "step1000": weights_sha256((root / "step1000").glob("*.safetensors"))}
    assert digests["step1000"] == weights_sha256([root / "step2000" / "pytorch_model.bin"], allow_pickle=True)
    return HubRepo(REPO, branches, missing={"step3000"}), digests


@pytest.mark.ray
def test_extension_lists_downloads_and_probes_a_hub_series(pythia_repo, tmp_path) -> None:
    repo, digests = pythia_repo
    text = tmp_path / "probe.txt"
    text.write_text(TEXT)
    store, cache, manifest = tmp_path / "store", tmp_path / "hf_cache", tmp_path / "used.json"
    faults = [("GET", rf"^/api/models/{REPO}/refs$"),  # the driver's branch listing
              ("GET", rf"^/api/models/{REPO}/revision/step1000$"),  # snapshot_download's model info
              ("GET", rf"^/{REPO}/resolve/{commit_of(REPO, 'step0')}/model\.safetensors$")]  # a weight file
    argv = ["--series", "pythia-70m", "--revisions", "4", "--store", str(store), "--hf-cache", str(cache),
            "--text", str(text), "--n-seqs", str(N_SEQS), "--seq-len", str(SEQ_LEN), "--actors", "1",
            "--num-cpus", "1", "--allow-pickle-weights", "--write-manifest", str(manifest)]
    with hub_server([repo], fail_once=faults) as hub:
        proc = subprocess.run([sys.executable, "-m", "sweep.extension", *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=180, env=extension_env(hub.url, tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # a failed revision: exit 1 (0 only when every revision was probed)
    assert "probed 3" in proc.stdout and "failed 1" in proc.stdout, out  # the closing summary

    # the branches were listed (main is no step branch), the selection covers all four
    used = json.loads(manifest.read_text())["series"][0]["revisions"]
    assert [(r["revision"], r["repo"], r["tokens"]) for r in used] == [
        (f"step{s}", REPO, s * 2_097_152) for s in (0, 1000, 2000, 3000)]

    df = Store(str(store)).read("checkpoints")
    status = df.groupby("revision")["status"].agg(set).to_dict()
    assert status == {"step0": {"ok"}, "step1000": {"duplicate_of:step2000"}, "step2000": {"ok"},
                      "step3000": {"failed"}}, out
    failed = df[df["revision"] == "step3000"]
    assert len(failed) == 1 and failed["layer"].isna().all()
    assert failed["reason"].item() == f"RevisionError: revision 'step3000' does not exist in {REPO}"
    assert "failed pythia-70m@step3000: RevisionError: revision 'step3000' does not exist" in proc.stdout
    ok = df[df["status"] != "failed"]
    assert len(ok) == 3 * 2 and ok["pr_q"].notna().all() and (ok["repo"] == REPO).all()
    sha = ok.groupby("revision")["weights_sha256"].first()
    assert sha["step0"] == digests["step0"] and sha["step1000"] == sha["step2000"] == digests["step1000"]

    # every fault was met once and the call tried again; the 404 revision was asked for, not retried
    for method, pattern in faults:
        hits = [s for m, p, s in hub.requests if m == method and re.search(pattern, p)]
        assert hits[:2] == [503, 200], (pattern, hits)
    missing = [(m, p, s) for m, p, s in hub.requests if "step3000" in p]
    assert missing == [("GET", f"/api/models/{REPO}/revision/step3000", 404)]  # listed once, before download
    # downloaded into the given cache: one snapshot per fetched revision, pickles only where no safetensors
    snapshots = cache / f"models--{REPO.replace('/', '--')}" / "snapshots"
    assert {p.name for p in snapshots.iterdir()} == {commit_of(REPO, f"step{s}") for s in (0, 1000, 2000)}
    assert not list((snapshots / commit_of(REPO, "step1000")).glob("*.bin"))


def test_an_unsupported_hub_revision_is_refused_from_its_config_alone(pythia_repo, tmp_path) -> None:
    """fetch_revision downloads config.json first: a model_type without an adapter is refused,
    naming the supported ones, before any weight file is asked for."""
    repo, _ = pythia_repo
    odd = dict(repo.branches["step0"])
    odd["config.json"] = json.dumps({**json.loads(odd["config.json"]), "model_type": "bert"}).encode()
    other = HubRepo("someone/bert-series", {"step0": odd})
    code = ("import sys; from sweep.extension.revision_probe import RevisionError, fetch_revision\n"
            "try:\n    fetch_revision('someone/bert-series', 'step0', sys.argv[1])\n"
            "except RevisionError as exc:\n    print(exc)\n")
    with hub_server([other]) as hub:
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache")], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env=extension_env(hub.url, tmp_path))
    assert "bert" in proc.stdout and "llama" in proc.stdout, proc.stdout + proc.stderr  # names the supported
    fetched = [p for m, p, s in hub.requests if "/resolve/" in p]
    assert fetched and all(p.endswith("/config.json") for p in fetched), fetched


def test_only_the_loaders_weight_files_are_listed_and_downloaded(tmp_path) -> None:
    """A Hub revision with model.safetensors beside shards, their index and strays (an adapter, Mistral's
    consolidated.safetensors): only model.safetensors is downloaded; a sharded one gets exactly the
    shards its index names (the index read when listed), never the stray."""
    from extension_helpers import save_revision
    from safetensors.torch import save_file

    save_revision(tmp_path / "single")
    save_revision(tmp_path / "sharded", shard="20KB")
    stray = tmp_path / "stray"
    stray.mkdir()
    save_file({"layers.0.attention.wq.weight": torch.ones(3, 3)}, stray / "consolidated.safetensors")
    save_file({"lora_A.weight": torch.ones(2, 2)}, stray / "adapter_model.safetensors")
    shards = folder_bytes(tmp_path / "sharded")
    both = {**shards, **folder_bytes(tmp_path / "single"), **folder_bytes(stray)}
    repo = HubRepo("org/stray", {"step0": both, "step1": {**shards, **folder_bytes(stray)}})
    code = ("import sys; from sweep.extension.revision_probe import fetch_revision\n"
            "for rev in ('step0', 'step1'):\n    print(fetch_revision('org/stray', rev, sys.argv[1]))\n")
    with hub_server([repo]) as hub:
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache")], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env=extension_env(hub.url, tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {rev: sorted(p.rsplit("/", 1)[1] for m, p, s in hub.requests
                       if m == "GET" and f"/resolve/{commit_of('org/stray', rev)}/" in p and p.endswith(".safetensors"))
           for rev in ("step0", "step1")}
    assert got["step0"] == ["model.safetensors"], got
    assert got["step1"] == sorted(n for n in shards if n.endswith(".safetensors")) and len(got["step1"]) > 2, got
