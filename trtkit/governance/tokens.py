"""Token counting with the model's own tokenizer, the same one the server's preprocessing uses.

Counting uses the ``tokenizers`` library on ``tokenizer.json`` (loads in milliseconds). The chat
template is rendered by the very class the server's preprocessing uses
(``trtkit.tokenizer.fast_tokenizer``), so prompt counts match the engine's by construction.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtkit.config.schema import ModelConfig
from trtkit.errors import ModelSourceError
from trtkit.tokenizer.prompt_forms import PLAIN, RAW, RENDERED, prompt_ids

IDS = "ids"  # a TokenIdsPrompt's form: the client's own, never sent as prompt_form

log = logging.getLogger(__name__)


class RawPrompt(str):
    """Prompt text the engine gets exactly as written: never wrapped in the chat template, whatever
    ``model.chat_template`` says. It travels in its form (``prompt_form``, trtkit.tokenizer.prompt_forms): on
    the text path the ensemble and the BLS take it as their ``prompt_form`` input, on the token path the client
    encodes it itself. Used for OpenAI's completions (raw text, as vLLM's and trtllm-serve's take it) and for a
    conversation the chat template already rendered (``TokenCounter.chat_prompt``: the gateway's chat, the
    library's ``Conversation``).

    ``special_tokens``: the tokenizer adds its own (a BOS) as for any text; False for a rendered template,
    which holds them already. Text cut from a raw prompt stays raw: ``same_form``."""

    special_tokens: bool

    def __new__(cls, text: str, *, special_tokens: bool = True) -> RawPrompt:
        prompt = super().__new__(cls, text)
        prompt.special_tokens = special_tokens
        return prompt


class TokenIdsPrompt(RawPrompt):
    """A prompt given as token ids (OpenAI's completions take ``prompt: list[int]``): the engine gets exactly
    these ids. Its text (the ids decoded) is what logs and the guard see. Only the token path can send it (the
    engine model takes ids; the ensemble and the BLS take text)."""

    ids: tuple[int, ...]

    def __new__(cls, text: str, ids: tuple[int, ...] | list[int] = ()) -> TokenIdsPrompt:
        prompt = str.__new__(cls, text)
        prompt.special_tokens = False
        prompt.ids = tuple(ids)
        return prompt


def same_form(prompt: str, text: str) -> str:
    """``text`` in the form of ``prompt``: raw (with the same special tokens) if ``prompt`` is, else plain."""
    return RawPrompt(text, special_tokens=prompt.special_tokens) if isinstance(prompt, RawPrompt) else text


def prompt_form(prompt: str) -> str:
    """The form ``prompt`` is sent in: plain (the server's wrapping applies), raw, rendered (no special
    tokens added), or ids (a ``TokenIdsPrompt``: the token path only, no text form on the wire)."""
    if not isinstance(prompt, RawPrompt):
        return PLAIN
    if isinstance(prompt, TokenIdsPrompt):
        return IDS
    return RAW if prompt.special_tokens else RENDERED


@dataclass(slots=True, frozen=True)
class TokenCount:
    characters: int
    utf8_bytes: int
    tokens: int

    @property
    def chars_per_token(self) -> float:
        return self.characters / self.tokens if self.tokens else 0.0


class TokenCounter:
    def __init__(self, tokenizer_dir: Path, *, chat_template: bool = False, add_special_tokens: bool = True) -> None:
        from tokenizers import Tokenizer

        self.tokenizer_dir = Path(tokenizer_dir)
        path = self.tokenizer_dir / "tokenizer.json"
        if not path.is_file():
            raise ModelSourceError(f"{self.tokenizer_dir} has no tokenizer.json; point model.tokenizer at a folder "
                                   f"with a fast (tokenizers) tokenizer")
        self._tokenizer = Tokenizer.from_file(str(path))
        self.add_special_tokens = add_special_tokens
        self._chat_renderer: Any = None
        self._anchor: list[int] | None = None
        self._has_template: bool | None = None
        self._token_bytes: Any = None
        # The server's preprocessing wraps text_input in the chat template as one user message when
        # model.chat_template is on and the tokenizer has one; prompt_ids() mirrors that exactly.
        self.wraps_in_chat_template = chat_template and self.has_chat_template()

    @classmethod
    def from_config(cls, config: ModelConfig) -> TokenCounter:
        from trtkit.sources.resolve import resolve_tokenizer_dir

        folder = resolve_tokenizer_dir(config.model.source, config.model.tokenizer)
        return _cached_counter(str(folder), config.model.chat_template)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=self.add_special_tokens).ids)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The token ids the server's preprocessing makes of ``text_input`` (what the engine counts); a
        ``RawPrompt``'s ids as written."""
        if isinstance(prompt, TokenIdsPrompt):
            return list(prompt.ids)
        return prompt_ids(str(prompt), prompt_form(prompt), encode=self._encode,
                          render_user_turn=self._user_turn if self.wraps_in_chat_template else None,
                          add_special_tokens=self.add_special_tokens)

    def _encode(self, text: str, special_tokens: bool) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=special_tokens).ids)

    def _user_turn(self, text: str) -> str:
        return self.render_chat([{"role": "user", "content": text}], use_template=True)

    def content_ids(self, prompt: str) -> list[int]:
        """The prompt's own ids, without what the chat template or the tokenizer adds around them: what input
        truncation may cut."""
        return list(prompt.ids) if isinstance(prompt, TokenIdsPrompt) else self.text_ids(prompt)

    def cut(self, prompt: str, kept: list[int]) -> str:
        """``prompt`` with only ``kept`` of its content ids left, in the same form."""
        if isinstance(prompt, TokenIdsPrompt):
            return TokenIdsPrompt(self.decode(kept), kept)
        return same_form(prompt, self.decode(kept))

    def count_prompt(self, prompt: str) -> int:
        return len(self.prompt_ids(prompt))

    def text_ids(self, text: str) -> list[int]:
        """Ids of a piece of text with no special tokens added (stream deltas, measuring)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    @property
    def vocab_size(self) -> int:
        """Token ids run from 0 to vocab_size - 1 (added tokens included)."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    @functools.cached_property
    def model_vocab_size(self) -> int:
        """The model's vocabulary (its logits' width: what the engine's embedding_bias must match), from the
        config.json beside the tokenizer when there is one, else the tokenizer's."""
        config = self.tokenizer_dir / "config.json"
        if config.is_file():
            import json

            size = json.loads(config.read_text(encoding="utf-8")).get("vocab_size")
            if isinstance(size, int) and size > 0:
                return size
        return self.vocab_size

    def token_bytes(self, token_id: int) -> bytes:
        """The UTF-8 bytes one token stands for (part of a character, maybe): trtkit.tokenizer.token_bytes."""
        if self._token_bytes is None:
            from trtkit.tokenizer.token_bytes import token_bytes_reader

            self._token_bytes = token_bytes_reader(self._tokenizer)
        return self._token_bytes(token_id)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=False))

    def measure(self, text: str) -> TokenCount:
        return TokenCount(len(text), len(text.encode("utf-8")), self.count(text))

    def render_chat(self, messages: list[dict[str, Any]], *, use_template: bool = True,
                    tools: list[Any] | None = None) -> str:
        """The prompt text for a conversation, ending where the assistant's answer starts (``tools`` go to the
        template, which renders them if it knows how)."""
        if use_template and self.has_chat_template():
            return str(self._renderer().apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                             tools=tools))
        lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
        return "\n".join(lines) + "\nAssistant:"

    def chat_prompt(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> RawPrompt:
        """A conversation as the engine should see it: the whole of it rendered by the model's chat template
        (system prompt, every turn), sent raw; "Role: text" lines where the tokenizer has no template."""
        if self.has_chat_template():
            return RawPrompt(self.render_chat(messages, use_template=True, tools=tools), special_tokens=False)
        return RawPrompt(self.render_chat(messages, use_template=False))

    def detokenizing(self) -> tuple[Any, list[int]]:
        """The tokenizer the server's models decode with, and its continuation anchor (the token path's
        incremental detokenizer: trtkit.tokenizer.detokenizer)."""
        if self._anchor is None:
            from trtkit.tokenizer.detokenizer import find_anchor

            self._anchor = find_anchor(self._renderer())
        return self._renderer(), self._anchor

    def has_chat_template(self) -> bool:
        if self._has_template is None:  # read once: the gateway asks per chat request
            config = self.tokenizer_dir / "tokenizer_config.json"
            self._has_template = (self.tokenizer_dir / "chat_template.jinja").is_file() or (
                config.is_file() and '"chat_template"' in config.read_text(encoding="utf-8"))
        return self._has_template

    def _renderer(self) -> Any:
        if self._chat_renderer is None:
            from trtkit.tokenizer.fast_tokenizer import load_fast_tokenizer

            self._chat_renderer = load_fast_tokenizer(self.tokenizer_dir)
        return self._chat_renderer


@functools.lru_cache(maxsize=8)
def _cached_counter(tokenizer_dir: str, chat_template: bool) -> TokenCounter:
    return TokenCounter(Path(tokenizer_dir), chat_template=chat_template)
