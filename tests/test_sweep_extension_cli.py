"""sweep/extension/cli.py: the extension's flags."""

from __future__ import annotations

import pytest

from sweep.extension import parse_args


def test_cli_arguments() -> None:
    args = parse_args(["--series", "pythia-70m", "olmo-1b", "--revisions", "3", "--force"])
    assert args.series == ["pythia-70m", "olmo-1b"] and args.revisions == 3 and args.force
    assert args.store == "runs/store" and args.n_seqs == 16 and args.seq_len == 128
    with pytest.raises(SystemExit):
        parse_args(["--series", "no-such-series"])


def test_extension_flag_reaches_the_settings() -> None:
    from sweep.extension import parse_args

    assert not parse_args([]).allow_pickle_weights
    assert parse_args(["--allow-pickle-weights"]).allow_pickle_weights


def test_exit_status_and_fit_warnings_without_ray() -> None:
    """Exit 0 only when nothing failed (skipped = probed before, duplicates were probed); the
    Appendix A warning names each series short of three revisions, endpoint-only ones as by design."""
    from sweep.extension.checkpoint_series import Series, parse_manifest
    from sweep.extension.cli import exit_status, fit_warnings
    from sweep.extension.pool import JobResult

    ok = [JobResult("s", "a", "ok"), JobResult("s", "b", "skipped"), JobResult("s", "c", "duplicate", "duplicate_of:b")]
    assert exit_status(ok) == 0 and exit_status([*ok, JobResult("s", "d", "failed", "boom")]) == 1
    manifest = parse_manifest({"series": [
        {"name": "short", "revisions": [{"revision": f"step{i}", "repo": "a/b"} for i in range(2)]},
        {"name": "long", "revisions": [{"revision": f"step{i}", "repo": "a/b"} for i in range(3)]},
        {"name": "olmo-1b", "revisions": [{"revision": "main", "repo": "allenai/OLMo-1B-hf"}]}]})
    up_front = fit_warnings(manifest)
    assert len(up_front) == 2
    assert up_front[0].startswith("[extension] warning: series short has 2 revision(s) in the manifest")
    assert "olmo-1b has 1 revision(s)" in up_front[1] and "endpoint-only series: by design" in up_front[1]
    after = fit_warnings(manifest, [JobResult("long", "step0", "ok"), JobResult("long", "step1", "duplicate"),
                                    JobResult("long", "step2", "failed", "x")])
    assert after == [after[0]] and "series long has 1 ok revision(s) after this run" in after[0]
    with pytest.raises(ValueError, match="architecture 'gemma2' has no probe adapter; supported: gpt2"):
        Series("x", "a/b", "gemma2", r"step\d+", 1)


def test_large_series_flags_and_their_bad_values(capsys) -> None:
    """--disk-budget and --memory-per-actor take sizes, --probe-mode a mode, --disk-wait seconds; a bad value is one line and
    exit 2; the large series are there by name and not in the default selection."""
    from sweep.extension.checkpoint_series import SERIES, default_series
    from sweep.extension.cli import main, settings_from_args

    args = parse_args(["--disk-budget", "40GB", "--memory-per-actor", "12GiB", "--probe-mode", "streamed"])
    probe = settings_from_args(args).probe
    assert (probe.disk_budget, probe.memory_per_actor, probe.probe_mode) == (40 * 10**9, 12 * 2**30, "streamed")
    assert parse_args([]).probe_mode == "auto" and parse_args([]).disk_budget is None
    from sweep.extension import disk

    assert parse_args([]).disk_wait == disk.DISK_WAIT  # the parser's copy of the ledger's default
    assert settings_from_args(parse_args(["--disk-wait", "90"])).probe.disk_wait == 90
    for argv, flag in ((["--disk-budget", "12XB"], "--disk-budget"), (["--probe-mode", "half"], "--probe-mode"),
                       (["--memory-per-actor", "0GB"], "--memory-per-actor"), (["--disk-wait", "0"], "--disk-wait")):
        with pytest.raises(SystemExit) as bad:
            main(argv)
        assert bad.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and flag in err, err
    assert "pythia-12b" in SERIES and "pythia-12b" not in default_series() and "pythia-70m" in default_series()


def test_dry_run_plans_without_ray_or_downloads(revisions, tmp_path, capsys) -> None:
    """--dry-run prints each revision's plan (local folders: no listing) and starts no Ray (an unmarked
    test that started Ray would fail, tests/conftest.py); nothing is written to the store."""
    import json

    from extension_helpers import manifest_for

    from sweep.extension.cli import main

    (tmp_path / "m.json").write_text(json.dumps(manifest_for(revisions, ["llama"], prefix="dry")))
    assert main(["--manifest", str(tmp_path / "m.json"), "--store", str(tmp_path / "store"), "--dry-run",
                 "--probe-mode", "streamed", "--disk-budget", "1GB", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "dry-llama@local-step1000: local folder, probe streamed, task memory" in out
    assert "[extension] 2 revisions: 2 to probe (0 B of weights to download), 0 duplicate(s) found before download, 0 refused" in out
    assert "[extension] projected: 2 revisions on this machine (1 node(s), " in out
    assert not (tmp_path / "store").exists()
