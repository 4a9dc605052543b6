"""The raw UTF-8 bytes each token id stands for, as OpenAI's log-probabilities report them (``bytes``).

A token may hold part of a character (a CJK character or an emoji split over two byte-level tokens), so its
text alone cannot be shown: decoding it gives U+FFFD. Its bytes are exact, and the bytes of a sequence's
tokens, joined, are the sequence's text. Two vocabularies cover the models here:
- byte-level BPE (GPT-2, Llama 3, SmolLM2: decoder ``ByteLevel``): every byte is written as one printable
  character of a fixed table; the table read backwards gives the bytes;
- SentencePiece-style (Llama 2, Mistral: ``Metaspace`` / ``Replace`` of U+2581 with byte fallback): U+2581 is a
  space and ``<0xNN>`` tokens are single bytes.
Added tokens (``<|im_start|>``) are their own text. Anything else falls back to decoding the token alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte -> character table, read backwards: printable bytes stand for themselves, the others are
    shifted past 255 in order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, shift = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + shift)] = byte
            shift += 1
    return chars


def _decoder_types(decoder: Any) -> set[str]:
    if not isinstance(decoder, dict):
        return set()
    found = {str(decoder.get("type"))}
    for inner in decoder.get("decoders") or ():
        found |= _decoder_types(inner)
    return found


def token_bytes_reader(tokenizer: Any) -> Callable[[int], bytes]:
    """``read(token_id) -> bytes`` for a ``tokenizers.Tokenizer``."""
    spec = json.loads(tokenizer.to_str())
    types = _decoder_types(spec.get("decoder"))
    added = {int(t["id"]): str(t["content"]).encode("utf-8") for t in spec.get("added_tokens") or ()}
    alphabet = _byte_level_alphabet() if "ByteLevel" in types else None
    metaspace = bool({"Metaspace", "Replace", "ByteFallback"} & types)

    def read(token_id: int) -> bytes:
        if token_id in added:
            return added[token_id]
        piece = tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if alphabet is not None and all(c in alphabet for c in piece):
            return bytes(alphabet[c] for c in piece)
        if metaspace:
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                return bytes([int(piece[3:5], 16)])
            return piece.replace("\u2581", " ").encode("utf-8")
        return str(tokenizer.decode([token_id], skip_special_tokens=False)).encode("utf-8")

    return read
