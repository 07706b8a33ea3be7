"""analysis/compute.py: ``compute_all``'s stats are JSON scalars."""

from __future__ import annotations


def test_stats_are_json_scalars(paper_analysis):
    import json

    json.dumps(paper_analysis.stats, allow_nan=False)  # raises on NaN / numpy types
