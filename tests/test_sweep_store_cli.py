"""sweep/store/cli.py: ``python -m sweep.store validate|compact`` exit codes and output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from store_helpers import data_files, epoch_row, fill

from sweep.store import Store

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep.store", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=1, epochs=2)
    good = run_cli("validate", "--store", str(tmp_path))
    assert good.returncode == 0 and "OK" in good.stdout
    store.write_epoch(epoch_row(1, val_loss=float("nan")))
    bad = run_cli("validate", "--store", tmp_path.as_uri())
    assert bad.returncode == 1 and "NaN in epochs.val_loss" in bad.stdout
    done = run_cli("compact", "--store", str(tmp_path), "--table", "layers")
    assert done.returncode == 0 and "compacted 1 directories" in done.stdout
    assert len(data_files(tmp_path, "layers")) == 1 and len(data_files(tmp_path, "epochs")) == 2
