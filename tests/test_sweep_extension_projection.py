"""sweep/extension/projection.py: a run's projected time, by hand."""

from __future__ import annotations

import json

import pytest

from sweep.extension.projection import BANDWIDTH, Costs, concurrency, load_costs, project


def test_seconds_follow_the_power_law_through_the_measured_sizes() -> None:
    costs = Costs(((10**6, 1.0), (10**8, 100.0)), 16, 128, "by hand")
    assert costs.seconds(10**7, 16, 128) == pytest.approx(10.0)  # slope 1 in log-log
    assert costs.seconds(10**9, 16, 128) == pytest.approx(1000.0)  # beyond: the same law
    assert costs.seconds(10**7, 32, 128) == pytest.approx(20.0)  # linear in tokens
    assert costs.seconds(10**7, 16, 128, threads=4) == pytest.approx(2.5)
    square = Costs(((10, 1.0), (1000, 10_000.0)), 1, 2, "")
    assert square.seconds(100, 1, 2) == pytest.approx(100.0)


def test_probes_at_once_are_bounded_by_actors_cpus_and_memory() -> None:
    assert concurrency(16, 1.0, 100) == 16 and concurrency(16, 2.0, 100) == 8 and concurrency(16, 1.0, 3) == 3
    assert concurrency(16, 1.0, 100, node_memory=10 * 2**30, task_memory=3 * 2**30) == 3
    assert concurrency(1, 4.0, 2) == 1


def test_the_projection_by_hand(tmp_path) -> None:
    costs = Costs(((10**6, 2.0), (10**8, 200.0)), 16, 128, "by hand")
    revisions = [(10**6, 10**9)] * 40 + [(10**8, 10**9)] * 2
    one = project(revisions, costs, 16, 128, [(16.0, 0)])
    work = 40 * 2.0 + 2 * 200.0
    assert (one.concurrency, one.probe_s, one.download_s) == (16, pytest.approx(work / 16), pytest.approx(42e9 / BANDWIDTH))
    four = project(revisions, costs, 16, 128, [(16.0, 0)] * 4, actors=32)
    assert four.concurrency == 32 and four.probe_s == pytest.approx(work / 32)
    assert four.download_s == pytest.approx(one.download_s / 4) and four.total_s == max(four.probe_s, four.download_s)
    assert "42 revisions on here (4 node(s), 64 CPUs, 32 probe(s) at once)" in four.text("here")
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"n_seqs": 16, "seq_len": 128, "measured": "m",
                                "points": [{"params": 10**8, "seconds": 200.0}, {"params": 10**6, "seconds": 2.0}]}))
    assert load_costs(path) == costs.__class__(((10**6, 2.0), (10**8, 200.0)), 16, 128, "m")
    assert load_costs().points[0][0] < load_costs().points[-1][0]  # the committed file reads


def test_the_dry_run_projects_for_the_cluster_at_hand(monkeypatch) -> None:
    """This machine (``--num-cpus``), or the alive nodes of ``--address``'s cluster, read from Ray (a stand-in
    here: the Ray tests start clusters; this one only reads what ``ray.nodes()`` answers)."""
    import ray

    from sweep.extension.cli import cluster_nodes, parse_args, settings_from_args

    local = settings_from_args(parse_args(["--num-cpus", "3"]))
    assert cluster_nodes(local, 5 * 2**30) == ([(3.0, 5 * 2**30)], "this machine")
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(("init", kw["address"])))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown",)))
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 16.0, "memory": 6.4e10}},
                                               {"Alive": False, "Resources": {"CPU": 16.0, "memory": 6.4e10}},
                                               {"Alive": True, "Resources": {"CPU": 8.0}}])
    remote = settings_from_args(parse_args(["--address", "10.0.0.1:6379"]))
    assert cluster_nodes(remote, 0) == ([(16.0, 64_000_000_000), (8.0, 0)], "the cluster at 10.0.0.1:6379")
    assert calls == [("init", "10.0.0.1:6379"), ("shutdown",)]
