"""Detokenization of the ``postprocessing`` model: each chunk decoded as a continuation.

The CPU engine model only hands over chunks that end where the text is final (see ``token_gate``),
so decoding them one by one and concatenating gives exactly the text of the whole sequence. Only the
last chunk can end inside a character (the length limit cut it): those bytes are dropped, as the
streaming detokenizer drops them (``without_broken_tail`` is a no-op on every other chunk).
"""

from __future__ import annotations

import numpy as np

from trtkit.tokenizer.detokenizer import (
    DEFAULT_OPTIONS,
    DecodeOptions,
    Tokenizer,
    decode_continuation,
    without_broken_tail,
)
from trtkit.wire.tensors import Tensors


class Postprocessor:
    def __init__(self, tokenizer: Tokenizer, anchor: list[int], options: DecodeOptions = DEFAULT_OPTIONS) -> None:
        self.tokenizer = tokenizer
        self.anchor = anchor
        self.options = options

    def run(self, inputs: Tensors) -> dict[str, np.ndarray]:
        tokens = np.asarray(inputs["TOKENS_BATCH"])
        lengths = inputs.get("SEQUENCE_LENGTH")
        # [batch, beam, tokens] from the engine; a 2-D tensor is one beam per row
        if tokens.ndim == 1:
            tokens = tokens.reshape(1, 1, -1)
        elif tokens.ndim == 2:
            tokens = tokens[:, np.newaxis, :]
        lens = (np.asarray(lengths).reshape(tokens.shape[0], -1) if lengths is not None
                else np.full(tokens.shape[:2], tokens.shape[-1]))
        out = np.empty(tokens.shape[:2], dtype=np.object_)
        for b in range(tokens.shape[0]):
            for beam in range(tokens.shape[1]):
                ids = tokens[b, beam, :int(lens[b, beam])].tolist()
                text = without_broken_tail(decode_continuation(self.tokenizer, self.anchor, ids, self.options))
                out[b, beam] = text.encode("utf-8")
        return {"OUTPUT": out}
