"""sweep/extension/disk.py: the disk ledger on a hub-cache layout made by hand (blobs, snapshot
symlinks, as huggingface_hub lays them out), and the budget end to end: ``python -m sweep.extension``
against the local Hub (tests/hub_server.py) with a GPT-NeoX-shaped and a Llama-shaped series.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import transformers as tf
from extension_helpers import N_SEQS, SEQ_LEN, TEXT, extension_env, tiny_tokenizer
from hub_server import HubRepo, commit_of, content_sha256, hub_server

from metrics.hf_arch import tiny_config
from sweep.extension import disk
from sweep.extension.disk import (
    LEDGER,
    DiskBudgetError,
    DiskLedger,
    format_size,
    parse_size,
    repo_cache,
)
from sweep.extension.listing import HubFile

ROOT = Path(__file__).resolve().parents[1]
REPO = "org/model"


def fake_download(cache: Path, commit: str, f: HubFile) -> Path:
    """What hf_hub_download leaves: blobs/<blob> and snapshots/<commit>/<path> -> ../../blobs/<blob>."""
    root = repo_cache(cache, REPO)
    blob = root / "blobs" / f.blob
    blob.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():
        blob.write_bytes(b"x" * f.size)
    link = root / "snapshots" / commit / f.path
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def files(prefix: str, sizes: list[int]) -> list[HubFile]:
    return [HubFile(f"{prefix}{i}.safetensors", n, f"{prefix}{i}".ljust(64, "0")) for i, n in enumerate(sizes)]


def test_parse_size() -> None:
    assert parse_size("40GB") == 40 * 10**9 and parse_size("1.5 GiB") == 3 * 2**29 and parse_size("1e3") == 1000
    for bad in ("12XB", "", "-1GB", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_hold_deletes_what_it_downloaded_and_keeps_what_was_there(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    old = fake_download(cache, "a" * 40, HubFile("tokenizer.json", 50, "t" * 40))  # in the cache before
    ledger = DiskLedger(cache, budget=1000)
    want = [("b" * 40, f) for f in files("w", [300, 400])] + [("b" * 40, HubFile("tokenizer.json", 50, "t" * 40))]
    with ledger.hold(REPO, want, "org/model@step1"):
        assert ledger.used() == 700  # the tokenizer blob is there already: it costs nothing
        made = [fake_download(cache, c, f) for c, f in want]
        assert all(p.exists() for p in made)
    assert not any(p.exists() or p.is_symlink() for p in made[:2])  # the weights and their blobs are gone
    assert old.exists() and not made[2].is_symlink()  # the snapshot entry it made goes, the blob stays
    assert (repo_cache(cache, REPO) / "blobs" / ("t" * 40)).exists()  # a blob found there is never deleted
    state = ledger.state()
    assert state["ours"] == {} and state["holders"] == {} and state["high_water"] == 700


def test_a_revision_larger_than_the_budget_fails_at_once(tmp_path: Path) -> None:
    ledger = DiskLedger(tmp_path, budget=500)
    with pytest.raises(DiskBudgetError, match=r"^org/model@big needs 600 B of new files, more than --disk-budget "
                                              r"500 B: not downloaded$"):
        with ledger.hold(REPO, [("c" * 40, f) for f in files("big", [600])], "org/model@big"):
            pass
    assert ledger.state()["holders"] == {}


def test_holders_share_the_budget_and_a_shared_blob_outlives_its_first_holder(tmp_path: Path) -> None:
    """Two holders of one cache: the second waits until the first releases; a blob both need
    stays until the last of them releases."""
    ledger = DiskLedger(tmp_path, budget=1000, poll=0.02)
    shared = HubFile("tokenizer.json", 100, "s" * 40)
    first = [("a" * 40, f) for f in files("a", [600])] + [("a" * 40, shared)]
    second = [("b" * 40, f) for f in files("b", [600])] + [("b" * 40, shared)]
    events: list[str] = []
    released = threading.Event()

    def run_second() -> None:
        with ledger.hold(REPO, second, "b"):
            events.append(f"second in, first released: {released.is_set()}")
            for c, f in second:
                fake_download(tmp_path, c, f)
            events.append(f"used {ledger.used()}")

    with ledger.hold(REPO, first, "a"):
        links = [fake_download(tmp_path, c, f) for c, f in first]
        thread = threading.Thread(target=run_second)
        thread.start()
        time.sleep(0.3)
        assert events == []  # 700 + 600 > 1000: it waits
        released.set()
    thread.join(timeout=10)
    assert events[0] == "second in, first released: True" and events[1] == "used 700"
    assert not links[0].exists() and not (repo_cache(tmp_path, REPO) / "blobs" / ("s" * 40)).exists()
    assert ledger.state()["high_water"] <= 1000 and ledger.used() == 0


def test_a_killed_holder_is_released_by_the_next_process(tmp_path: Path) -> None:
    """A process that reserved, downloaded half a file and was killed: its reservation and files
    (the partial ``.incomplete`` one too) go at the next ledger access."""
    def killed_mid_download() -> None:  # in a forked child: no imports to pay for
        want = [("d" * 40, f) for f in files("k", [300, 200])]
        with DiskLedger(tmp_path, 1000).hold(REPO, want, "k"):
            fake_download(tmp_path, *want[0])
            (repo_cache(tmp_path, REPO) / "blobs" / (want[1][1].blob + ".incomplete")).write_bytes(b"x")
            os.kill(os.getpid(), signal.SIGKILL)

    child = multiprocessing.get_context("fork").Process(target=killed_mid_download)
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    assert len(json.loads((tmp_path / LEDGER).read_text())["holders"]) == 1
    ledger = DiskLedger(tmp_path, 1000)
    assert ledger.used() == 0 and ledger.state()["holders"] == {}
    assert list((repo_cache(tmp_path, REPO) / "blobs").iterdir()) == []
    assert not list((repo_cache(tmp_path, REPO) / "snapshots").rglob("*.safetensors"))


def test_overlapping_holders_of_mains_borrowed_files_leave_nothing_behind(tmp_path: Path) -> None:
    """Two revisions without tokenizers borrow ``main``'s config and tokenizer (1,100 B): the first
    downloads them, the second finds them there and holds them too. When both have released, main's
    entries and blobs are gone and nothing is counted against the budget."""
    ledger = DiskLedger(tmp_path, budget=10_000)
    main = [("m" * 40, HubFile("config.json", 400, "c" * 40)), ("m" * 40, HubFile("tokenizer.json", 700, "t" * 40))]
    a = [("a" * 40, f) for f in files("a", [500])] + main
    b = [("b" * 40, f) for f in files("b", [500])] + main
    first, second = ledger.hold(REPO, a, "org/model@step1"), ledger.hold(REPO, b, "org/model@step2")
    first.__enter__()
    for c, f in a:
        fake_download(tmp_path, c, f)
    second.__enter__()  # main's files are in the cache now: they cost the second holder nothing
    for c, f in b:
        fake_download(tmp_path, c, f)
    assert ledger.used() == 2100
    first.__exit__(None, None, None)
    assert ledger.used() == 1600 and all(fake_download(tmp_path, c, f).exists() for c, f in b)  # still needed
    second.__exit__(None, None, None)
    assert ledger.used() == 0
    root = repo_cache(tmp_path, REPO)
    assert list((root / "blobs").iterdir()) == [] and not list((root / "snapshots").rglob("*"))
    assert ledger.state()["entries"] == [] and ledger.state()["dirs"] == []


def hold_as(host: str, cache: Path, want: list, what: str, seconds: float | None, release_log: Path | None = None
            ) -> None:
    """In a forked child: hold ``want`` as a process of ``host`` (its hostname faked), download it, then
    die (``seconds`` None: SIGKILL, no release) or release after ``seconds``, writing when to ``release_log``."""
    import socket

    socket.gethostname = lambda: host  # this process is on another host as far as the ledger can tell
    with DiskLedger(cache, 1000).hold(REPO, want, what):
        for c, f in want:
            fake_download(cache, c, f)
        if seconds is None:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(seconds)
        if release_log is not None:
            release_log.write_text(str(time.time()))


def start_child(*args) -> multiprocessing.Process:
    child = multiprocessing.get_context("fork").Process(target=hold_as, args=args)
    child.start()
    return child


def wait_for_holder(cache: Path, host: str) -> None:
    for _ in range(400):
        if (cache / LEDGER).is_file() and any(h["host"] == host for h in
                                               json.loads((cache / LEDGER).read_text())["holders"].values()):
            return
        time.sleep(0.05)
    raise AssertionError(f"no holder of {host} appeared")


def test_a_dead_holder_on_another_host_is_released_when_its_lease_runs_out(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    """A holder on node-b reserved 600 B of a 1,000 B budget and died without releasing: no process
    here can see its pid. Its lease runs out and a waiter here releases it (and its files) and gets
    in; while it waits it says who holds the space."""
    monkeypatch.setattr(disk, "LEASE", 0.6, raising=False)
    theirs = [("d" * 40, f) for f in files("k", [600])]
    child = start_child("node-b", tmp_path, theirs, "org/model@step7", None)
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    (holder,) = json.loads((tmp_path / LEDGER).read_text())["holders"].values()
    assert holder["host"] == "node-b"
    got = threading.Event()

    def wait_here() -> None:
        with DiskLedger(tmp_path, 1000, poll=0.05).hold(REPO, [("e" * 40, f) for f in files("w", [600])], "mine"):
            got.set()

    thread = threading.Thread(target=wait_here, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert got.is_set(), "the dead holder of node-b was never released"
    err = capsys.readouterr().err
    assert re.search(r"\[disk\] mine waits for 600 B of --disk-budget 1.0 KB, 600 B held: held by "
                     rf"node-b:{child.pid} \(org/model@step7, 600 B, lease renewed \d+ s ago\)", err), err
    assert not (repo_cache(tmp_path, REPO) / "blobs" / theirs[0][1].blob).exists()  # its download went too


def test_a_live_holder_on_another_host_keeps_its_lease_and_a_wait_has_a_timeout(tmp_path: Path, monkeypatch,
                                                                               capsys) -> None:
    """node-b holds for 2 s with a 0.4 s lease, renewed while it lives: a waiter with a 0.5 s limit
    fails naming it; one without gets in only after node-b released."""
    monkeypatch.setattr(disk, "LEASE", 0.4, raising=False)
    released = tmp_path / "released"
    child = start_child("node-b", tmp_path, [("d" * 40, f) for f in files("k", [600])], "org/model@step7", 2.0,
                        released)
    wait_for_holder(tmp_path, "node-b")
    want = [("e" * 40, f) for f in files("w", [600])]
    with pytest.raises(DiskBudgetError, match=r"^mine waited \d+ s \(--disk-wait\) for 600 B of --disk-budget "
                                              rf"1.0 KB, 600 B held: held by node-b:{child.pid} \(org/model@step7"):
        with DiskLedger(tmp_path, 1000, poll=0.05, wait=0.5).hold(REPO, want, "mine"):
            pass
    with DiskLedger(tmp_path, 1000, poll=0.05, report_every=0.3).hold(REPO, want, "mine"):
        got_in = time.time()
    child.join(timeout=30)
    assert child.exitcode == 0 and got_in >= float(released.read_text())  # never reaped while it lived
    assert capsys.readouterr().err.count("[disk] mine waits for 600 B") >= 3  # said so while it waited


# --- end to end: python -m sweep.extension against the local Hub ------------------------------


def revisions_on_disk(root: Path, kind: str, seeds: list[int], **overrides) -> dict[str, dict[str, Path | bytes]]:
    """Tiny random models of ``kind`` saved as sharded safetensors, one per seed: {branch: files}."""
    out = {}
    tokenizer = tiny_tokenizer()
    for seed in seeds:
        folder = root / kind / f"step{seed}"
        torch.manual_seed(seed)
        model = tf.AutoModelForCausalLM.from_config(tiny_config(kind, **overrides))
        model.save_pretrained(folder, max_shard_size="40KB")
        tokenizer.save_pretrained(folder)
        out[f"step{seed}"] = {p.name: p for p in folder.iterdir() if p.is_file()}
    return out


@pytest.fixture(scope="module")
def hub_series(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[HubRepo], dict]:
    """A GPT-NeoX-shaped and a Llama-shaped series of 4 revisions each (step2000 a byte copy of
    step1000), and a larger one-revision series."""
    root = tmp_path_factory.mktemp("hub_disk")
    repos, folders = [], {}
    for kind, name in (("gpt_neox", "org/neox-series"), ("llama", "org/llama-series")):
        branches = revisions_on_disk(root, kind, [0, 1000, 3000])
        branches["step2000"] = dict(branches["step1000"])  # the same bytes under another branch
        repos.append(HubRepo(name, branches))
        folders[name] = {rev: root / kind / f"step{1000 if rev == 'step2000' else rev[4:]}" for rev in branches}
    big = revisions_on_disk(root / "big", "llama", [7], hidden_size=64, intermediate_size=256, num_hidden_layers=4)
    repos.append(HubRepo("org/big", big))
    return repos, folders


def revision_bytes(repo: HubRepo, rev: str) -> int:
    return sum(p.stat().st_size for p in repo.branches[rev].values())


@pytest.mark.ray
def test_budgeted_streamed_run_of_two_hub_series(hub_series, tmp_path: Path) -> None:
    """Two actors, a budget that holds one revision and a half: every revision probed layer-streamed
    with rows equal to the whole-model probe's; the byte copy found without a download; the larger
    revision refused in one line before its download; the ledger's high-water mark under the budget;
    nothing this run downloaded left in the cache, and a file that was there before kept."""
    from huggingface_hub.file_download import repo_folder_name

    from metrics.hf_probe import probe_hf_model
    from sweep.extension.revision_probe import probe_windows
    from sweep.store import Store

    repos, folders = hub_series
    neox, llama, big = repos
    budget = int(1.5 * max(revision_bytes(r, "step1000") for r in (neox, llama)))
    assert revision_bytes(big, "step7") > budget
    manifest = {"series": [
        {"name": "neox", "revisions": [{"revision": f"step{s}", "repo": neox.repo_id, "tokens": s}
                                       for s in (0, 1000, 2000, 3000)]},
        {"name": "llama", "revisions": [{"revision": f"step{s}", "repo": llama.repo_id, "tokens": s}
                                        for s in (0, 1000, 2000, 3000)]},
        {"name": "big", "revisions": [{"revision": "step7", "repo": big.repo_id, "tokens": 7}]}]}
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    (tmp_path / "probe.txt").write_text(TEXT)
    cache, store = tmp_path / "cache", tmp_path / "store"
    # a file in the cache before the run: the neox tokenizer (every revision's tokenizer.json is this blob)
    seed = cache / repo_folder_name(repo_id=neox.repo_id, repo_type="model") / "blobs"
    seed.mkdir(parents=True)
    kept = seed / content_sha256(neox.branches["step0"]["tokenizer.json"].read_bytes())
    kept.write_bytes(neox.branches["step0"]["tokenizer.json"].read_bytes())
    argv = ["--manifest", str(tmp_path / "m.json"), "--store", str(store), "--hf-cache", str(cache),
            "--text", str(tmp_path / "probe.txt"), "--n-seqs", str(N_SEQS), "--seq-len", str(SEQ_LEN),
            "--actors", "2", "--num-cpus", "2", "--disk-budget", str(budget), "--probe-mode", "streamed"]
    with hub_server(repos) as hub:
        proc = subprocess.run([sys.executable, "-m", "sweep.extension", *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env=extension_env(hub.url, tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # the big revision failed
    assert "probed 8" in proc.stdout and "failed 1, duplicates 2" in proc.stdout, out
    (line,) = [x for x in proc.stdout.splitlines() if "failed big@step7" in x]
    assert line.startswith("  failed big@step7: RevisionError: org/big@step7 needs ") and line.endswith(
        f"of files, more than --disk-budget {format_size(budget)}: not downloaded"), line

    df = Store(str(store)).read("checkpoints")
    status = df.groupby(["series", "revision"])["status"].agg(set).to_dict()
    for series in ("neox", "llama"):
        assert status[(series, "step1000")] == {"duplicate_of:step2000"}  # copied from step2000, rows equal
        assert {status[(series, f"step{s}")].pop() for s in (0, 2000, 3000)} == {"ok"}
    # neither the copy's files nor the big revision's were ever asked for (but their config and the
    # index of their shards, a few kB read when they were listed and planned, outside the cache)
    resolved = {p for m, p, s in hub.requests if "/resolve/" in p}
    for repo, rev in ((neox, "step1000"), (llama, "step1000"), (big, "step7")):
        assert not [p for p in resolved if commit_of(repo.repo_id, rev) in p
                    and not p.endswith(("/config.json", "/model.safetensors.index.json"))], rev
    # streamed rows equal the whole-model probe's on the same weights
    tokenizer = tf.AutoTokenizer.from_pretrained(folders[llama.repo_id]["step3000"])
    ids = probe_windows(tokenizer, TEXT, N_SEQS, SEQ_LEN)
    for series, repo in (("neox", neox), ("llama", llama)):
        model = tf.AutoModelForCausalLM.from_pretrained(folders[repo.repo_id]["step3000"], dtype=torch.float32)
        want = probe_hf_model(model, ids)
        got = df[(df["series"] == series) & (df["revision"] == "step3000")].sort_values("layer")
        for row, ref in zip(got.to_dict("records"), want, strict=True):
            assert row["pr_k"] == pytest.approx(ref["pr_k"], rel=1e-6)
            assert row["attn_entropy"] == pytest.approx(ref["attn_entropy"], rel=1e-6)
    # the budget held; what the run downloaded is gone, what was there is kept
    state = json.loads((cache / LEDGER).read_text())
    assert 0 < state["high_water"] <= budget and state["ours"] == {} and state["holders"] == {}
    left = [p for p in cache.rglob("*") if p.is_file() and ".locks" not in p.parts and p.name != "CACHEDIR.TAG"]
    assert left == [kept], left
