"""The model tokenizer shared by the client, the gateway and the Triton models (no transformers import)."""
