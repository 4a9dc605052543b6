"""A tokenizer straight from ``tokenizer.json`` (the ``tokenizers`` library), without transformers.

Importing transformers' AutoTokenizer pulls in torch: seconds per Triton stub, four stubs at start.
This wrapper offers the few calls the models use, with the same results as the transformers fast
tokenizer (which wraps the very same ``tokenizers`` object): encode, decode, length, end and pad
ids, and the chat template rendered with jinja2 the way transformers renders it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class FastTokenizer:
    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.pad_token = _token_text(config.get("pad_token"))
        template_file = folder / "chat_template.jinja"
        template = config.get("chat_template")
        self.chat_template = template_file.read_text(encoding="utf-8") if template_file.is_file() else template
        self.eos_token_id = self._id(self.eos_token)
        self.pad_token_id = self._id(self.pad_token)

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True, **_: object) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False,
               **_: object) -> str:
        # clean-up is never used by the models: it rewrites spacing differently per window
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tokenize: bool = False, tools: list[Any] | None = None, **_: object) -> str:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        rendered = env.from_string(self.chat_template or "").render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token=self.bos_token or "",
            eos_token=self.eos_token or "", tools=tools)
        return rendered


def load_fast_tokenizer(folder: str | Path) -> Any:
    """The light tokenizer when the folder has a tokenizer.json, else transformers' AutoTokenizer."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        return FastTokenizer(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
