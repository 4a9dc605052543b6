"""Plain, importable cores of the Triton Python models (no ``triton_python_backend_utils`` here).

The thin adapters under ``adapters/`` are the only files that import ``triton_python_backend_utils``;
``trtkit deploy`` copies them into ``<repo>/<model>/1/model.py``. Everything they do is here, unit
tested directly: tokenization, request validation, incremental detokenization, stop strings, the CPU
engine model, the BLS logic and the metrics published under TensorRT-LLM's names.
"""
