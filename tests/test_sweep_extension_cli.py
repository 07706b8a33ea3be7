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
