"""trtkit: Hugging Face model to a production LLM service on NVIDIA GPUs."""

__version__ = "0.1.0"
