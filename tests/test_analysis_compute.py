"""analysis/compute.py: ``compute_all``'s stats are JSON scalars. (That the registry is not imported
by what it registers, no import circle, is test_imports.py's, for every package.)"""

from __future__ import annotations


def test_stats_are_json_scalars(paper_analysis):
    import json

    json.dumps(paper_analysis.stats, allow_nan=False)  # raises on NaN / numpy types
