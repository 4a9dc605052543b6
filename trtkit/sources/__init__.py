"""Model sources: where the Hugging Face folder that every stage reads comes from."""

from trtkit.sources.resolve import resolve_model_dir, resolve_tokenizer_dir

__all__ = ["resolve_model_dir", "resolve_tokenizer_dir"]
