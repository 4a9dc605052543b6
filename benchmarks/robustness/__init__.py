"""Shared code of the robustness benchmarks (``benchmarks/fuzz.py``, ``benchmarks/soak.py``) and of the
test that runs a fuzz subset: case generation, the Triton target, server start and process watching.

Importable by tests with ``benchmarks/`` on ``sys.path``; nothing here is part of the trtkit package.
"""
