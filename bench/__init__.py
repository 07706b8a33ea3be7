"""Benchmarks of qkgeom's fast paths. Each module has ``main(argv) -> dict`` and prints a ratio last.

CPU benchmarks (``python -m bench.run_all``): ``train_step``, ``probe_cost``,
``sweep_overhead``, ``reducer_scaling``. GPU: ``bash bench/gpu.sh``.
"""
