"""sweep/report/figures.py: a figure is written as PNG and PDF and its legend shows the init
registry's label (read here from ``QK_INITS`` itself), or the raw name for an unknown regime."""

from __future__ import annotations

import pytest

from analysis.compute import compute_all
from model.qk_init import QK_INITS
from sweep.report import figures as fg
from sweep.synthetic import make_synthetic_store


@pytest.fixture
def legends(monkeypatch) -> dict[str, list[str]]:
    """Legend texts of every figure saved during the test, by figure name."""
    seen: dict[str, list[str]] = {}
    save = fg._save

    def spy(fig, out, name):
        seen[name] = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        return save(fig, out, name)

    monkeypatch.setattr(fg, "_save", spy)
    return seen


def tiny_store(n_seeds: int = 2) -> dict:
    return make_synthetic_store(n_seeds=n_seeds, depths=(2,), epochs=2, interventions=False, checkpoints=False)


def test_fig1_is_written_with_the_registry_labels(legends, tmp_path) -> None:
    tb = tiny_store()
    paths = fg.fig1_alignment(compute_all(tb), tmp_path)
    assert [p.name for p in paths] == ["fig1_alignment.png", "fig1_alignment.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"
    inits = sorted(tb["layers"]["init"].unique())
    assert sorted(legends["fig1_alignment"]) == sorted(f"{QK_INITS[i].label} (n=2)" for i in inits)


def test_unknown_regime_is_drawn_under_its_raw_name(legends, tmp_path) -> None:
    tb = tiny_store()
    renamed = tb["layers"]["init"].iloc[0]
    for t in ("layers", "epochs"):
        tb[t] = tb[t].assign(init=tb[t]["init"].replace(renamed, "no_such_regime"))
    fg.fig1_alignment(compute_all(tb), tmp_path)
    assert "no_such_regime (n=2)" in legends["fig1_alignment"]
    assert f"{QK_INITS[renamed].label} (n=2)" not in legends["fig1_alignment"]


def test_nothing_to_draw_writes_nothing(tmp_path) -> None:
    tb = make_synthetic_store(n_seeds=1, depths=(2,), epochs=2, baseline=False, checkpoints=False)
    assert fg.fig1_alignment(compute_all(tb), tmp_path / "figs") == []
    assert not (tmp_path / "figs").exists()


def test_figA_sets_draws_each_seed_and_the_original_apart(legends, tmp_path) -> None:
    """Appendix A's figure per set: a panel per set, a line per seed, the original (seed 0) named apart."""
    import numpy as np
    from suite_helpers import frame, seed_rows

    rng = np.random.default_rng(0)
    rows = [r for k in range(3) for r in seed_rows("toy", str(k), 5.0, rng, series="pythia-70m" if k == 0 else None)]
    rows += [r for k in (1, 2) for r in seed_rows("toy-w", str(k), 5.0, rng, varies="weights")]
    tb = tiny_store() | {"checkpoints": frame(rows)}
    paths = fg.figA_sets(compute_all(tb), tmp_path)
    assert [p.name for p in paths] == ["figA_sets.png", "figA_sets.pdf"]
    assert legends["figA_sets"] == ["seed 1", "seed 2", "original: pythia-70m", "seed 1", "seed 2"]
    assert fg.figA_sets(compute_all(tiny_store()), tmp_path / "none") == []
