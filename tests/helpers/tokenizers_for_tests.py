"""Tokenizers for tests, built offline: the bundled SmolLM2 one (byte-level BPE) and a small
Llama-2-style SentencePiece BPE with byte fallback, trained here on a few sentences."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog", "hello world, hello there", "a stop word and another one",
    "numbers 0123456789 and punctuation: ; , . ! ?", "The capital of France is Paris.",
]


def sentencepiece_tokenizer(workdir: Path):
    """Metaspace pre-tokenizer, byte fallback for everything not in the vocabulary (CJK, emoji)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    base.train_from_iterator(CORPUS * 4, trainer)
    workdir.mkdir(parents=True, exist_ok=True)
    vocab_file, merges_file = base.model.save(str(workdir))
    vocab = json.loads(Path(vocab_file).read_text())
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    Path(vocab_file).write_text(json.dumps(vocab))
    tok = Tokenizer(models.BPE.from_file(vocab_file, merges_file, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = base.pre_tokenizer
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
