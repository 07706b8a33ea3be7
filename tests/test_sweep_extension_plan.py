"""sweep/extension/plan.py: what each revision needs, decided from hub listings made by hand and tiny
local folders, without a network or Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from metrics.hf_arch import tiny_config
from sweep.extension import plan as plan_module
from sweep.extension.listing import HubFile, Listing
from sweep.extension.plan import PROCESS_BYTES, actor_memory, plan_jobs
from sweep.extension.revision_probe import Job, ProbeSettings

GB = 10**9


def listing(commit: str, weights: dict[str, str], size: int = GB, extra: tuple[HubFile, ...] = ()) -> Listing:
    """Config, tokenizer and ``weights`` ({file: sha}); several safetensors files are an index's shards."""
    files = [HubFile("config.json", 500, "c" * 40), HubFile("tokenizer.json", 900, "t" * 40), *extra]
    files += [HubFile(name, size, sha.ljust(64, "0"), sha.ljust(64, "0")) for name, sha in weights.items()]
    indexes = ()
    if len(weights) > 1:
        files.append(HubFile("model.safetensors.index.json", 300, "i" * 40))
        indexes = (("model.safetensors.index.json", tuple((f"tensor.{n}", n) for n in sorted(weights))),)
    return Listing(commit.ljust(40, "0"), tuple(files), indexes)


LISTINGS = {
    "step0": listing("a", {"model.safetensors": "a1"}),
    "step1000": listing("b", {"model-1.safetensors": "b1", "model-2.safetensors": "b2"}),
    "step2000": listing("c", {"model-2.safetensors": "b2", "model-1.safetensors": "b1"}),  # step1000's bytes
    "step3000": listing("d", {"model-1.safetensors": "b1", "model-2.safetensors": "b2"}),  # and again
    "step4000": listing("e", {"model.safetensors": "b1"}),  # one of those files alone: not the same weights
    "pickled": listing("f", {"pytorch_model.bin": "f1"}),
}


def job(rev: str, series: str = "s", step: int | None = None) -> Job:
    step = int(rev[4:]) if step is None and rev.startswith("step") else step
    return Job(series, rev, "org/m", None, step, step, None)


@pytest.fixture
def hub_config(monkeypatch):
    """config.json of every listed revision: a tiny GPT-NeoX with 4 blocks."""
    config = tiny_config("gpt_neox", num_hidden_layers=4)
    monkeypatch.setattr(plan_module, "_hub_config", lambda repo, listing, seen, scratch: config)
    return config


def settings(**kw) -> ProbeSettings:
    return ProbeSettings("unused", n_seqs=2, seq_len=16, **kw)


def test_same_weight_files_are_one_probe_and_copies(hub_config) -> None:
    """step1000, step2000 and step3000 list the same sha256 set: the highest step is probed, the others
    are its copies; step4000 (a subset) and step0 are probed."""
    jobs = [job(r) for r in ("step0", "step1000", "step2000", "step3000", "step4000")]
    plan = plan_jobs(jobs, settings(), actor_bytes=100 * GB, largest_node=200 * GB, list_fn=lambda r, v: LISTINGS[v])
    assert sorted(j.revision for j in plan.jobs) == ["step0", "step3000", "step4000"]
    assert {k: [j.revision for j in v] for k, v in plan.copies.items()} == {("s", "step3000"): ["step2000", "step1000"]}
    assert not plan.failed and all(j.listing is not None for j in plan.jobs)
    # another series with the same bytes is its own group
    other = plan_jobs([job("step1000", "t"), job("step2000")], settings(), 100 * GB, 200 * GB,
                      lambda r, v: LISTINGS[v])
    assert len(other.jobs) == 2 and not other.copies


def test_refusals_before_download(hub_config) -> None:
    jobs = [job("step0"), job("pickled", step=5), job("step1000")]
    plan = plan_jobs(jobs, settings(disk_budget=int(1.5 * GB)), 100 * GB, 200 * GB, lambda r, v: LISTINGS[v])
    reasons = dict((j.revision, r) for j, r in plan.failed)
    assert reasons["pickled"].startswith("RevisionError: org/m@pickled has no safetensors weights")
    assert reasons["step1000"] == ("RevisionError: org/m@step1000 needs 2.0 GB of files, more than --disk-budget "
                                   "1.5 GB: not downloaded")
    assert [j.revision for j in plan.jobs] == ["step0"]
    tight = plan_jobs([job("step0")], settings(probe_mode="whole"), 100 * GB, largest_node=PROCESS_BYTES,
                      list_fn=lambda r, v: LISTINGS[v])
    (only, reason), = tight.failed
    assert "the whole probe needs" in reason and "more than any node offers Ray" in reason


def test_probe_mode_and_memory_follow_the_actor_memory(hub_config) -> None:
    from metrics.hf_stream import probe_memory

    need = probe_memory(hub_config, 2, 16)
    fits, tight = need.whole + PROCESS_BYTES, need.whole + PROCESS_BYTES - 1
    whole = plan_jobs([job("step0")], settings(), fits, 200 * GB, lambda r, v: LISTINGS[v]).jobs[0]
    streamed = plan_jobs([job("step0")], settings(), tight, 200 * GB, lambda r, v: LISTINGS[v]).jobs[0]
    assert (whole.mode, whole.memory) == ("whole", need.whole + PROCESS_BYTES)
    assert (streamed.mode, streamed.memory) == ("streamed", need.streamed + PROCESS_BYTES)
    forced = plan_jobs([job("step0")], settings(probe_mode="streamed", memory_per_actor=100 * GB), 0, 0,
                       lambda r, v: LISTINGS[v]).jobs[0]
    assert forced.mode == "streamed"
    pickled = plan_jobs([job("pickled", step=1)], settings(allow_pickle=True), 1, 200 * GB,
                        lambda r, v: LISTINGS[v]).jobs[0]
    assert pickled.mode == "whole"  # pickles cannot be streamed: whole even when it does not fit


def test_local_folders_are_planned_from_the_folder(revisions) -> None:
    (step, folder), _ = revisions["llama"]
    planned = plan_jobs([Job("loc", "local", None, folder, step, step, 0.0),
                         Job("loc", "gone", None, str(Path(folder) / "nope"), 1, 1, 1.0)],
                        settings(), 100 * GB, 200 * GB).jobs
    assert [(j.revision, j.mode) for j in planned] == [("local", "whole"), ("gone", "whole")]
    assert planned[0].memory > planned[1].memory == PROCESS_BYTES  # a folder it cannot read: the probe says why


def test_actor_memory_is_the_smallest_share() -> None:
    assert actor_memory([(16, 64 * GB), (4, 32 * GB)], cpus_per_actor=1, actors=8) == 8 * GB  # 64 GB / 8
    assert actor_memory([(16, 64 * GB), (2, 8 * GB)], cpus_per_actor=1, actors=8) == 4 * GB  # 8 GB / 2
    assert actor_memory([(1, 8 * GB)], cpus_per_actor=2, actors=2) == 8 * GB  # at least one probe a node
    assert actor_memory([], 1, 2) == 0
