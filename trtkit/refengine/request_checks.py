"""A request checked before the engine takes it: every id it names indexes the vocabulary, and it fits."""

from __future__ import annotations

from trtkit.errors import EngineError, InvalidInputError
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.outputs import SamplingParams
from trtkit.wire.sampling_ranges import check_token_id


def check_request(prompt_ids: list[int], params: SamplingParams, config: EngineConfig, vocab: int) -> None:
    if not prompt_ids:
        raise EngineError("the prompt is empty; send at least one token")
    if len(prompt_ids) > config.max_input_len:
        raise EngineError(f"prompt has {len(prompt_ids)} tokens, more than max_input_len={config.max_input_len}; "
                          "shorten it or rebuild with a larger build.max_input_len")
    if len(prompt_ids) + params.max_tokens > config.max_seq_len:
        raise EngineError(f"prompt ({len(prompt_ids)}) + max_tokens ({params.max_tokens}) exceeds max_seq_len="
                          f"{config.max_seq_len}; lower max_tokens")
    if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
        raise EngineError(f"prompt token ids must be in [0, {vocab}); check the tokenizer matches the model")
    check_named_ids(params, vocab)


def check_named_ids(params: SamplingParams, vocab: int) -> None:
    """Every id a request names must index the vocabulary, or sampling would fail mid-step."""
    named = [("end_id", params.end_id)] if params.end_id is not None and params.end_id >= 0 else []
    named += [("pad_id", params.pad_id)] if params.pad_id is not None else []
    named += [(f"{name}[{i}]", token) for name, words in (("stop_words", params.stop_token_ids),
                                                           ("bad_words", params.bad_token_ids))
              for i, word in enumerate(words) for token in word]
    named += [("embedding_bias", token) for token in params.embedding_bias]
    for name, token in named:
        try:
            check_token_id(name, int(token), vocab)
        except InvalidInputError as exc:
            raise EngineError(str(exc)) from exc
