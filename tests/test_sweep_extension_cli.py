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
