"""The Triton tensor contract that both sides speak: what the clients and the gateway send, and what the
Triton models (``trtkit.triton_models``) and the CPU engine read and answer.

Imports only numpy, ``trtkit.errors`` and ``trtkit.tokenizer``, so the Triton adapters, the engine and the
clients all import the same definitions (vLLM's ``v1/engine/__init__.py``, TensorRT-LLM's BLS
``lib/decode.py``)."""
