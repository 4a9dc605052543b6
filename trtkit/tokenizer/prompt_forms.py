"""How a prompt's text becomes the engine's input ids: the forms a client may send it in.

The optional ``prompt_form`` input of the ensemble and the BLS (and the client's ``RawPrompt``) says which:
- ``plain`` (the default): the text as one user turn; wrapped in the chat template when ``model.chat_template``
  is on and the tokenizer has one, else encoded with the tokenizer's special tokens (a BOS) added;
- ``raw``: the text as written, never wrapped, with the tokenizer's special tokens added (OpenAI's completions);
- ``rendered``: a conversation the chat template already rendered (every turn in its own role): as written,
  nothing added, since the rendering holds the special tokens.

``prompt_ids`` is the one definition of the three: the server's preprocessing and the client's token counter
both call it, so the client counts what the engine will get by construction.
"""

from __future__ import annotations

from collections.abc import Callable

PLAIN, RAW, RENDERED = "plain", "raw", "rendered"
PROMPT_FORMS = (PLAIN, RAW, RENDERED)


def is_prompt_form(value: str) -> bool:
    return value in PROMPT_FORMS


def unknown_form_message(value: str) -> str:
    return f"prompt_form: {value!r} is not one of {', '.join(PROMPT_FORMS)}; leave it out for plain text"


def prompt_ids(text: str, form: str, *, encode: Callable[[str, bool], list[int]],
               render_user_turn: Callable[[str], str] | None, add_special_tokens: bool) -> list[int]:
    """The engine's input ids for ``text`` sent in ``form``. ``encode(text, add_special_tokens)`` is the
    tokenizer; ``render_user_turn`` wraps text as one user turn in the chat template (None: no wrapping)."""
    if form == PLAIN and render_user_turn is not None:
        return encode(render_user_turn(text), False)
    return encode(text, add_special_tokens and form != RENDERED)
