"""sweep/extension/record.py: every checkpoint row carries its probe settings, and a rerun of a store
under other settings is refused at the start (one line, exit 2, before Ray), unless it writes to
another store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from extension_helpers import N_SEQS, SEQ_LEN, TEXT

from metrics.columns import CHECKPOINT_SETTINGS
from sweep.cli import UsageError
from sweep.extension.record import ProbeRecord, check_store, text_sha256, transformers_version
from sweep.extension.revision_probe import Job, ProbeSettings, checkpoint_rows
from sweep.store import Store
from sweep.store.schema import CHECKPOINT_METRICS, CHECKPOINTS


def layers(value: float = 1.0) -> list[dict]:
    return [{"layer": i, **dict.fromkeys(CHECKPOINT_METRICS, value), "dtype": "float32", "weights_sha256": "ab"}
            for i in range(2)]


def job(series: str, revision: str) -> Job:
    return Job(series, revision, None, "/x", 0, 0, 0.0)


def record(n_seqs: int = N_SEQS, seq_len: int = SEQ_LEN) -> ProbeRecord:
    return ProbeRecord.of(ProbeSettings("unused", n_seqs=n_seqs, seq_len=seq_len), TEXT)


def test_every_row_carries_the_probe_settings(tmp_path: Path) -> None:
    rec = record()
    assert rec == ProbeRecord(N_SEQS, SEQ_LEN, text_sha256(TEXT), transformers_version())
    import transformers

    assert rec.transformers == transformers.__version__
    store = Store(str(tmp_path / "store"))
    store.write_checkpoint(checkpoint_rows(job("s", "step1"), layers(), record=rec))
    store.write_checkpoint(checkpoint_rows(job("s", "step2"), None, "RevisionError: boom", rec))
    df = store.read("checkpoints")
    assert list(df.columns) == CHECKPOINTS.names and df.columns[-7:-3].tolist() == list(CHECKPOINT_SETTINGS)
    assert (df["probe_n_seqs"] == N_SEQS).all() and (df["probe_seq_len"] == SEQ_LEN).all()
    assert (df["probe_text_sha256"] == rec.text_sha256).all() and (df["transformers_version"] == rec.transformers).all()


def test_a_store_probed_under_other_settings_is_refused(tmp_path: Path) -> None:
    """Measured rows (ok, duplicate_of) fix the store's settings; failed rows measure nothing; the
    revisions a --force run redoes do not count; another store is free."""
    store = Store(str(tmp_path / "store"))
    store.write_checkpoint(checkpoint_rows(job("pythia", "step1"), layers(), record=record()))
    store.write_checkpoint(checkpoint_rows(job("other", "step1"), None, "boom", record(n_seqs=9)))  # failed
    assert check_store(store, record(), [("pythia", "step2")]) == []
    with pytest.raises(UsageError) as refused:
        check_store(store, record(n_seqs=4, seq_len=32), [("other", "step1")])
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--store {store.root} holds checkpoint rows probed with "
                                                f"--n-seqs {N_SEQS} --seq-len {SEQ_LEN}, probe text sha256 "
                                                f"{text_sha256(TEXT)[:12]}…, transformers {transformers_version()} "
                                                "(series pythia); this run would probe with --n-seqs 4 --seq-len 32")
    assert "write to another --store" in line
    check_store(store, record(n_seqs=4), [("pythia", "step1")], force=True)  # --force over every stored revision
    with pytest.raises(UsageError):
        check_store(store, record(n_seqs=4), [("pythia", "step1")])  # without --force the old rows stay
    check_store(Store(str(tmp_path / "another")), record(n_seqs=4))
    other_text = ProbeRecord.of(ProbeSettings("unused", n_seqs=N_SEQS, seq_len=SEQ_LEN), TEXT + " more")
    with pytest.raises(UsageError, match="probe text sha256"):
        check_store(store, other_text)


def test_rows_of_unknown_settings_are_never_mixed_into_a_series(tmp_path: Path) -> None:
    """Rows written before the settings were stored: a run adding rows to their series is refused;
    one that only skips them (the demo's rerun on an older store) or writes other series is warned."""
    legacy = Store(str(tmp_path / "legacy"))
    legacy.write_checkpoint(checkpoint_rows(job("old", "step1"), layers()))  # no record: an older store's rows
    with pytest.raises(UsageError, match=r"holds rows of series old probed before probe settings were recorded; "
                                         r"this run would add rows probed with --n-seqs"):
        check_store(legacy, record(), [("old", "step1"), ("old", "step2")])
    (warning,) = check_store(legacy, record(), [("old", "step1")])  # already ok: skipped, nothing added
    assert warning.startswith("[extension] warning:") and "series old probed before" in warning
    assert check_store(legacy, record(), [("new", "step1")]) == [warning]
    assert check_store(legacy, record(), [("old", "step1"), ("old", "step2")], force=True) == []


def test_a_rerun_under_other_settings_exits_2_before_ray(tmp_path: Path, capsys) -> None:
    """The command: a store whose rows were probed at 2 × 16 tokens, rerun at 4 × 32: one line on
    stderr naming the stored settings, exit 2, nothing probed (an unmarked test: Ray must not start)."""
    from sweep.extension.cli import main

    store = Store(str(tmp_path / "store"))
    store.write_checkpoint(checkpoint_rows(job("tiny", "step1"), layers(), record=record()))
    before = store.read("checkpoints")
    (tmp_path / "rev").mkdir()
    (tmp_path / "m.json").write_text(json.dumps({"series": [{"name": "tiny", "revisions": [
        {"revision": "step1", "path": str(tmp_path / "rev")}, {"revision": "step2", "path": str(tmp_path / "rev")}]}]}))
    (tmp_path / "probe.txt").write_text(TEXT)
    argv = ["--manifest", str(tmp_path / "m.json"), "--store", store.root, "--text", str(tmp_path / "probe.txt"),
            "--n-seqs", "4", "--seq-len", "32", "--actors", "1", "--num-cpus", "1"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--n-seqs {N_SEQS} --seq-len {SEQ_LEN}" in err, err
    assert "this run would probe with --n-seqs 4 --seq-len 32" in err
    assert store.read("checkpoints").equals(before)
