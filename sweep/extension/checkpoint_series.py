"""The public checkpoint series of SPEC §7 and the manifest that names revisions.

A **series** is one training run published as branches of a Hugging Face
repository. Revisions are always *listed* (``list_repo_refs(repo).branches``)
and matched against the series' branch pattern; a branch name is never built
from a step number, because some steps are missing on some repositories.

A **manifest** fixes exactly which revisions a probe run covers::

    {"series": [{"name": "pythia-70m", "revisions": [
        {"revision": "step1000", "repo": "EleutherAI/pythia-70m", "tokens": 2097152000},
        {"revision": "local-step0", "path": "/abs/dir", "tokens": 0}]}]}

Each revision has ``revision`` and exactly one of ``repo`` (fetched from the
hub) or ``path`` (a local model directory; a relative path is taken relative
to the manifest file), and optionally ``tokens`` (int or null) and ``step``
(int or null; parsed from the revision name when absent). A series entry may
say where it sits in a **set** of seeds of one model (SPEC §7 "Sets"):
``"group"`` (the set's name) with ``"seed"`` (its label in the set, an int or a
string; "0" is the original series), and optionally ``"varies"`` (what the
set's seeds vary: ``metrics.columns.SET_FACTORS``, default ``"seed"``; one value
per set). ``load_manifest`` rejects anything else with an error naming the field.

Tokens per step: SmolLM2-360M's batch size is not in our sources, so that
series reads it from a nanotron training config (``*.yaml``) in the
repository when one is there (sequence_length × micro_batch_size ×
batch_accumulation_per_replica × dp); otherwise its ``tokens`` are null. The
extension's ``progress`` then falls back to step / max step, which equals
tokens / max tokens whenever tokens per step is constant within the series.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metrics.columns import SET_FACTORS
from metrics.hf_arch import SUPPORTED_MODEL_TYPES

#: A series' ``config.model_type``: one of the probe's adapters (``metrics.hf_arch.ADAPTERS``).
Architecture = str

#: Appendix A fits a slope per series with at least this many ok revisions (SPEC §8).
MIN_FIT_REVISIONS = 3

#: Step number in a revision name: ``step1000``, ``step-240000``, ``step20000-tokens84B``, ``checkpoint-400000``.
STEP_RE = re.compile(r"(?:step|checkpoint)-?(\d+)")

#: Default number of revisions per series for ``--revisions``.
DEFAULT_REVISIONS = 8


@dataclass(frozen=True)
class Series:
    """One public training run and how its revisions are named."""

    name: str
    repo: str
    architecture: Architecture
    #: full-match regex for the step branches of the repository
    branch_pattern: str
    #: tokens per optimiser step; None = read from the repository's training config
    tokens_per_step: int | None
    #: probe only this revision (no branch listing)
    endpoint_only: str | None = None
    doc: str = ""
    #: in the default selection (``--series`` not given): the paper's series; the large ones only by name
    default: bool = True

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"series {self.name}: architecture {self.architecture!r} has no probe adapter; "
                             f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")


SERIES: dict[str, Series] = {
    s.name: s
    for s in (
        Series(
            "gpt2-small", "stanford-crfm/alias-gpt2-small-x21", "gpt2", r"checkpoint-\d+", 524_288,
            doc="Stanford CRFM Mistral GPT-2 small, seed x21; 512 × 1024 tokens per step; "
            "scale_attn_by_inverse_layer_idx and reorder_and_upcast_attn on.",
        ),
        *(
            Series(
                f"pythia-{size}", f"EleutherAI/pythia-{size}", "gpt_neox", r"step\d+", 2_097_152,
                doc=f"Pythia {size.upper()}: step0, log-spaced 1…512, every 1000 to 143000; "
                "1024 × 2048 tokens per step; partial rotary (25 %).",
            )
            for size in ("70m", "160m", "410m")
        ),
        *(
            Series(
                f"pythia-{size}", f"EleutherAI/pythia-{size}", "gpt_neox", r"step\d+", 2_097_152,
                doc=f"Pythia {size.upper()}: 154 revisions like the others; 1024 × 2048 tokens per step. "
                "Not one of the paper's series: the original (seed 0) of the PolyPythias set of its size "
                "(sweep.extension.seed_sets); only by name.",
                default=False,
            )
            for size in ("14m", "31m")
        ),
        *(
            Series(
                f"pythia-{size}", f"EleutherAI/pythia-{size}", "gpt_neox", r"step\d+", 2_097_152,
                doc=f"Pythia {size.upper()}: 154 revisions like the small ones; 1024 × 2048 tokens per step. "
                "Large (docs/checkpoints.md, 'Large series'): only by name.",
                default=False,
            )
            for size in ("1.4b", "2.8b", "6.9b", "12b")
        ),
        Series(
            "smollm2-135m", "HuggingFaceTB/SmolLM2-135M-intermediate-checkpoints", "llama",
            r"step-\d+", 1_048_576,
            doc="SmolLM2 135M: step-240000 and every 240k after; 9 query / 3 KV heads.",
        ),
        Series(
            "smollm2-360m", "HuggingFaceTB/SmolLM2-360M-intermediate-checkpoints", "llama",
            r"step-\d+", None,
            doc="SmolLM2 360M: step-160000 and every 160k after; 15 query / 5 KV heads; "
            "tokens per step read from the repository's training config when present.",
        ),
        Series(
            "olmo-1b", "allenai/OLMo-1B-hf", "olmo", r"step\d+-tokens\d+B", 4_194_304,
            endpoint_only="main",
            doc="OLMo-1B (hf format): the study uses the endpoint (main) only; 2048 × 2048 tokens per step.",
        ),
    )
}


class ManifestError(ValueError):
    """A manifest is malformed; the message names the offending field."""


@dataclass(frozen=True)
class RevisionEntry:
    """One revision to probe: from the hub (``repo``) or a local directory (``path``)."""

    revision: str
    repo: str | None = None
    path: str | None = None
    tokens: int | None = None
    step: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"revision": self.revision}
        if self.repo is not None:
            out["repo"] = self.repo
        if self.path is not None:
            out["path"] = self.path
        out["tokens"] = self.tokens
        if self.step is not None and self.step != parse_step(self.revision):
            out["step"] = self.step
        return out


@dataclass(frozen=True)
class SeriesEntry:
    """One series to probe: its revisions, and its set, seed and what the set's seeds vary (all three
    None for a series in no set)."""

    name: str
    revisions: list[RevisionEntry] = field(default_factory=list)
    group: str | None = None
    seed: str | None = None
    varies: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.group is not None:
            out |= {"group": self.group, "seed": self.seed, "varies": self.varies}
        return out | {"revisions": [r.to_json() for r in self.revisions]}


@dataclass(frozen=True)
class Manifest:
    series: list[SeriesEntry]

    def to_json(self) -> dict[str, Any]:
        return {"series": [s.to_json() for s in self.series]}


def parse_step(revision: str) -> int | None:
    """The training step in a revision name, or None (``main``, a tag, a hash)."""
    m = STEP_RE.search(revision)
    return int(m.group(1)) if m else None


def list_step_revisions(series: Series, branches: Iterable[str]) -> list[tuple[int, str]]:
    """(step, branch) of the branches matching the series' pattern, sorted by step."""
    pattern = re.compile(series.branch_pattern)
    found = {}
    for name in branches:
        if pattern.fullmatch(name):
            step = parse_step(name)
            if step is not None:
                found.setdefault(step, name)
    return sorted(found.items())


def select_log_uniform(steps: list[int], n: int) -> list[int]:
    """``n`` of ``steps`` spread uniformly in log(1 + step), first and last always included.

    Each target log1p point takes the nearest step not chosen yet; returns them sorted.
    """
    steps = sorted(set(steps))
    if n <= 0:
        raise ValueError(f"need at least one revision, got {n}")
    if n >= len(steps):
        return steps
    lo, hi = math.log1p(steps[0]), math.log1p(steps[-1])
    targets = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if n > 1 else [hi]
    chosen: list[int] = []
    for t in targets:
        free = [s for s in steps if s not in chosen]
        chosen.append(min(free, key=lambda s: (abs(math.log1p(s) - t), s)))
    return sorted(chosen)


def nanotron_tokens_per_step(config: dict[str, Any]) -> int | None:
    """Tokens per step of a nanotron training config, or None if it lacks a field."""
    try:
        tokens = config["tokens"]
        dp = config["parallelism"]["dp"]
        return int(tokens["sequence_length"]) * int(tokens["micro_batch_size"]) * int(
            tokens["batch_accumulation_per_replica"]
        ) * int(dp)
    except (KeyError, TypeError, ValueError):
        return None


def hub_tokens_per_step(repo: str, revision: str) -> int | None:
    """Read tokens per step from a nanotron ``*.yaml`` config in ``repo`` at ``revision`` (network)."""
    import yaml
    from huggingface_hub import HfApi, hf_hub_download

    from sweep.extension.hub import with_hub_retries

    for name in with_hub_retries(lambda: HfApi().list_repo_files(repo, revision=revision)):
        if name.endswith((".yaml", ".yml")):
            with open(with_hub_retries(lambda n=name: hf_hub_download(repo, n, revision=revision))) as f:
                found = nanotron_tokens_per_step(yaml.safe_load(f) or {})
            if found:
                return found
    return None


def hub_branches(repo: str) -> list[str]:
    """Branch names of a hub repository (network; transient errors tried again)."""
    from huggingface_hub import list_repo_refs

    from sweep.extension.hub import with_hub_retries

    return [b.name for b in with_hub_retries(lambda: list_repo_refs(repo)).branches]


def series_revisions(
    series: Series,
    n: int = DEFAULT_REVISIONS,
    list_branches: Callable[[str], list[str]] = hub_branches,
    tokens_per_step: Callable[[str, str], int | None] = hub_tokens_per_step,
) -> SeriesEntry:
    """The default selection for one series: ``n`` revisions log-uniform over training.

    Endpoint-only series give their endpoint without listing anything.
    """
    if series.endpoint_only is not None:
        return SeriesEntry(series.name, [RevisionEntry(series.endpoint_only, repo=series.repo)])
    listed = list_step_revisions(series, list_branches(series.repo))
    if not listed:
        raise ValueError(f"{series.repo}: no branch matches {series.branch_pattern!r}")
    by_step = dict(listed)
    picked = select_log_uniform(list(by_step), n)
    per_step = series.tokens_per_step
    if per_step is None:
        try:
            per_step = tokens_per_step(series.repo, by_step[picked[-1]])
        except Exception:  # best effort: without it tokens stay null and progress uses steps
            per_step = None
    return SeriesEntry(
        series.name,
        [
            RevisionEntry(
                by_step[s], repo=series.repo, tokens=None if per_step is None else s * per_step, step=s
            )
            for s in picked
        ],
    )


def build_manifest(
    names: Iterable[str],
    n: int = DEFAULT_REVISIONS,
    list_branches: Callable[[str], list[str]] = hub_branches,
    tokens_per_step: Callable[[str, str], int | None] = hub_tokens_per_step,
) -> Manifest:
    """A manifest of the default selection for the named series (lists the hub)."""
    out = []
    for name in names:
        if name not in SERIES:
            raise ValueError(f"unknown series {name!r}; known: {', '.join(SERIES)}")
        out.append(series_revisions(SERIES[name], n, list_branches, tokens_per_step))
    return Manifest(out)


def write_manifest(manifest: Manifest, path: str | Path) -> None:
    Path(path).write_text(json.dumps(manifest.to_json(), indent=2) + "\n")


def load_manifest(path: str | Path, require_paths: bool = False) -> Manifest:
    """Read and validate a manifest file; relative ``path`` entries resolve against its folder.

    ``require_paths``: every local ``path`` must be an existing folder (what a probe run needs).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"manifest {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"manifest {path} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest {path} is not valid JSON: {exc}") from None
    manifest = parse_manifest(data, base_dir=path.resolve().parent, source=str(path))
    if require_paths:
        for s in manifest.series:
            for r in s.revisions:
                if r.path is not None and not Path(r.path).is_dir():
                    raise ManifestError(f"{path}: series {s.name!r} revision {r.revision!r}: "
                                        f"path {r.path} is not an existing folder")
    return manifest


def parse_manifest(data: Any, base_dir: str | Path | None = None, source: str = "manifest") -> Manifest:
    """Validate a manifest object (see the module docstring) and return it typed."""
    if not isinstance(data, dict) or set(data) != {"series"}:
        raise ManifestError(f"{source}: expected an object with the single key 'series'")
    if not isinstance(data["series"], list) or not data["series"]:
        raise ManifestError(f"{source}: 'series' must be a non-empty list")
    seen: set[str] = set()
    out = []
    for i, s in enumerate(data["series"]):
        where = f"{source}: series[{i}]"
        _check_keys(s, where, required={"name", "revisions"}, optional={"group", "seed", "varies"})
        name = s["name"]
        if not isinstance(name, str) or not name:
            raise ManifestError(f"{where}.name must be a non-empty string, got {name!r}")
        if name in seen:
            raise ManifestError(f"{where}.name {name!r} appears twice")
        seen.add(name)
        revs = s["revisions"]
        if not isinstance(revs, list) or not revs:
            raise ManifestError(f"{where}.revisions must be a non-empty list")
        entries = [_parse_revision(r, f"{where}.revisions[{j}]", base_dir) for j, r in enumerate(revs)]
        dup = {e.revision for e in entries if sum(x.revision == e.revision for x in entries) > 1}
        if dup:
            raise ManifestError(f"{where}.revisions: revision {sorted(dup)[0]!r} appears twice")
        out.append(SeriesEntry(name, entries, *_set_fields(s, where)))
    _check_sets(out, source)
    return Manifest(out)


def _set_fields(s: dict, where: str) -> tuple[str | None, str | None, str | None]:
    """(group, seed, varies) of a series entry; a seed needs a group and a group a seed."""
    if "group" not in s and "seed" not in s:
        if "varies" in s:
            raise ManifestError(f"{where}.varies needs a 'group' (and a 'seed')")
        return None, None, None
    group, seed = s.get("group"), s.get("seed")
    if not isinstance(group, str) or not group:
        raise ManifestError(f"{where}.group must be a non-empty string (with 'seed'), got {group!r}")
    if isinstance(seed, bool) or not (isinstance(seed, int) and seed >= 0 or isinstance(seed, str) and seed):
        raise ManifestError(f"{where}.seed must be a non-negative integer or a non-empty string (with 'group'), "
                            f"got {seed!r}")
    varies = s.get("varies", "seed")
    if varies not in SET_FACTORS:
        raise ManifestError(f"{where}.varies must be one of {', '.join(map(repr, SET_FACTORS))}, got {varies!r}")
    return group, str(seed), varies


def _check_sets(series: list[SeriesEntry], source: str) -> None:
    """Within a set: each seed once, one ``varies``."""
    sets: dict[str, list[SeriesEntry]] = {}
    for s in series:
        if s.group is not None:
            sets.setdefault(s.group, []).append(s)
    for group, members in sets.items():
        seeds = [m.seed for m in members]
        twice = sorted({x for x in seeds if seeds.count(x) > 1})
        if twice:
            raise ManifestError(f"{source}: set {group!r} has seed {twice[0]!r} twice")
        factors = sorted({m.varies for m in members})
        if len(factors) > 1:
            raise ManifestError(f"{source}: set {group!r} says its seeds vary {' and '.join(factors)}: one per set")


def _check_keys(obj: Any, where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where} must be an object, got {type(obj).__name__}")
    missing = required - obj.keys()
    if missing:
        raise ManifestError(f"{where}: missing field {sorted(missing)[0]!r}")
    unknown = obj.keys() - required - optional
    if unknown:
        raise ManifestError(f"{where}: unknown field {sorted(unknown)[0]!r}")


def _optional_count(obj: dict, key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}.{key} must be a non-negative integer or null, got {value!r}")
    return value


def _parse_revision(r: Any, where: str, base_dir: str | Path | None) -> RevisionEntry:
    _check_keys(r, where, required={"revision"}, optional={"repo", "path", "tokens", "step"})
    rev = r["revision"]
    if not isinstance(rev, str) or not rev:
        raise ManifestError(f"{where}.revision must be a non-empty string, got {rev!r}")
    if ("repo" in r) == ("path" in r):
        raise ManifestError(f"{where}: give exactly one of 'repo' or 'path'")
    repo, path = r.get("repo"), r.get("path")
    if repo is not None and (not isinstance(repo, str) or repo.count("/") != 1):
        raise ManifestError(f"{where}.repo must look like 'owner/name', got {repo!r}")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise ManifestError(f"{where}.path must be a non-empty string, got {path!r}")
        if base_dir is not None and not Path(path).is_absolute():
            path = str(Path(base_dir) / path)
    step = _optional_count(r, "step", where)
    return RevisionEntry(
        rev, repo=repo, path=path, tokens=_optional_count(r, "tokens", where),
        step=parse_step(rev) if step is None else step,
    )


def default_series() -> list[str]:
    """The series probed when none is named: the paper's (``Series.default``)."""
    return [name for name, s in SERIES.items() if s.default]
