"""Guided decoding on the CPU engine: every guide type holds the output to its grammar, a guide that does not
compile fails only its own request, and guided rows batch with free ones exactly as they run alone.

The tiny model has random weights, so what it writes unguided is noise: any output that matches the grammar
is the mask's doing. Guides here are ones that end (an enum, a bounded number, a regex), so the request
finishes on the grammar's stop token rather than at max_tokens."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.refengine.conftest import EngineFactory
from trtkit.errors import EngineError
from trtkit.refengine import SamplingParams
from trtkit.tokenizer.fast_tokenizer import load_fast_tokenizer
from trtkit.tokenizer.grammar_vocab import write_tokenizer_info

ENUM = json.dumps({"type": "string", "enum": ["sunny", "rainy", "windy"]})
NUMBER = json.dumps({"type": "integer", "minimum": 10, "maximum": 99})
PATTERN = r"[0-9]{3}-[a-z]{2}"
GRAMMAR = 'root ::= "It is " ("warm" | "cold") "."'


@pytest.fixture(scope="module")
def info_file(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tokenizer_info(tiny_llama_dir, tmp_path_factory.mktemp("grammar") / "info.json"))


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir: Path):  # type: ignore[no-untyped-def]
    return load_fast_tokenizer(tiny_llama_dir)


def _guided(guide_type: str, guide: str | None = None, **more: object) -> SamplingParams:
    settings: dict[str, object] = {"max_tokens": 40, **more}
    return SamplingParams(guided_decoding_guide_type=guide_type, guided_decoding_guide=guide,
                          **settings)  # type: ignore[arg-type]


def test_each_guide_type_holds_the_output_to_its_grammar(make_engine: EngineFactory, info_file: str,
                                                         tokenizer) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    prompt = tokenizer.encode("The weather today is", add_special_tokens=False)
    free, enum, number, pattern, grammar = engine.generate(
        [prompt] * 5, [SamplingParams(max_tokens=12), _guided("json_schema", ENUM), _guided("json_schema", NUMBER),
                       _guided("regex", PATTERN), _guided("ebnf_grammar", GRAMMAR)])
    assert free.finish_reason == "length"  # unguided, the random model never stops on its own
    text = {name: tokenizer.decode(out.output_token_ids) for name, out in
            (("enum", enum), ("number", number), ("pattern", pattern), ("grammar", grammar))}
    assert json.loads(text["enum"]) in ("sunny", "rainy", "windy")
    assert 10 <= json.loads(text["number"]) <= 99
    assert re.fullmatch(PATTERN, text["pattern"]) and re.fullmatch(r"It is (warm|cold)\.", text["grammar"])
    assert {enum.finish_reason, number.finish_reason, pattern.finish_reason, grammar.finish_reason} == {"end_id"}


def test_guided_rows_batch_with_free_ones_as_they_run_alone(make_engine: EngineFactory, info_file: str,
                                                           tokenizer) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    prompts = [tokenizer.encode(text, add_special_tokens=False) for text in ("A day", "Tomorrow will be", "Code:")]
    params = [_guided("json_schema", ENUM), SamplingParams(max_tokens=9), _guided("regex", PATTERN)]
    batched = [out.output_token_ids for out in engine.generate(prompts, params)]
    alone = [engine.generate([prompt], p)[0].output_token_ids for prompt, p in zip(prompts, params, strict=True)]
    assert batched == alone


def test_sampling_stays_inside_the_grammar(make_engine: EngineFactory, info_file: str,
                                           tokenizer) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    prompt = tokenizer.encode("Weather:", add_special_tokens=False)
    outs = engine.generate([prompt] * 6, [_guided("json_schema", ENUM, temperature=1.5, seed=s) for s in range(6)])
    assert all(json.loads(tokenizer.decode(o.output_token_ids)) in ("sunny", "rainy", "windy") for o in outs)
    with_log_probs = engine.generate([prompt], _guided("regex", PATTERN, return_log_probs=True))[0]
    assert with_log_probs.cum_log_prob is not None and with_log_probs.cum_log_prob <= 0.0


@pytest.mark.parametrize(("guide_type", "guide", "named"), [
    ("json_schema", "{not json", "does not compile as json_schema"),
    ("regex", "(unclosed", "does not compile as regex"),
    ("ebnf_grammar", "root ::= missing_rule", "does not compile as ebnf_grammar"),
])
def test_a_guide_that_does_not_compile_fails_only_its_request(make_engine: EngineFactory, info_file: str,
                                                              guide_type: str, guide: str, named: str) -> None:
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    with pytest.raises(EngineError, match=named) as refused:
        engine.add_request([5, 6, 7], _guided(guide_type, guide))
    assert "guided_decoding_guide" in str(refused.value)
    assert not engine.has_unfinished()  # nothing was queued
    assert engine.generate([[5, 6, 7]], _guided("regex", PATTERN))[0].finish_reason == "end_id"


def test_request_side_rules_name_the_input() -> None:
    with pytest.raises(EngineError, match="is not one of json, json_schema, regex, ebnf_grammar"):
        _guided("yaml", "x")
    with pytest.raises(EngineError, match="json_schema needs guided_decoding_guide"):
        _guided("json_schema")
    with pytest.raises(EngineError, match="without guided_decoding_guide_type"):
        SamplingParams(guided_decoding_guide="{}")
    _guided("json")  # any JSON: no guide needed


def test_without_guided_decoding_a_guide_is_refused_with_the_fix(make_engine: EngineFactory) -> None:
    engine = make_engine()
    with pytest.raises(EngineError, match="serve.guided_decoding: xgrammar"):
        engine.add_request([5, 6, 7], _guided("json"))
    assert engine.generate([[5, 6, 7]], SamplingParams(max_tokens=3))[0].finish_reason == "length"


def test_a_grammar_that_must_end_ends_despite_min_tokens(make_engine: EngineFactory, info_file: str,
                                                        tokenizer) -> None:  # type: ignore[no-untyped-def]
    """min_tokens bans the end id; once the enum is written the grammar allows nothing else: the request ends
    with the enum (not an error, not a token the grammar forbids)."""
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    prompt = tokenizer.encode("Weather:", add_special_tokens=False)
    out = engine.generate([prompt], _guided("json_schema", ENUM, min_tokens=30))[0]
    assert out.finish_reason == "end_id" and json.loads(tokenizer.decode(out.output_token_ids)) in (
        "sunny", "rainy", "windy")


def test_the_bitmask_is_applied_as_xgrammar_applies_it() -> None:
    """apply_bitmask is the engine's own (faster) form of xgrammar's apply_token_bitmask_inplace: the same logits
    out, for every row or for some (bitmask row k masks logits row rows[k]), on a vocabulary of 1,000 tokens (not a
    multiple of 32)."""
    import torch
    import xgrammar as xgr

    from trtkit.refengine.guided_decoding import apply_bitmask

    vocab, generator = 1000, torch.Generator().manual_seed(0)
    bitmask = torch.randint(-2**31, 2**31 - 1, (3, (vocab + 31) // 32), dtype=torch.int32, generator=generator)
    every = torch.randn(3, vocab, generator=generator)
    expected, ours = every.clone(), every.clone()
    xgr.apply_token_bitmask_inplace(expected, bitmask, vocab_size=vocab)
    apply_bitmask(ours, bitmask, [0, 1, 2])
    assert torch.equal(ours, expected) and torch.isneginf(ours).any() and not torch.isneginf(ours).all()
    some = torch.randn(5, vocab, generator=generator)
    ours = some.clone()
    apply_bitmask(ours, bitmask, [1, 3, 4])
    for slot, row in enumerate([1, 3, 4]):
        one = some[row:row + 1].clone()
        xgr.apply_token_bitmask_inplace(one, bitmask[slot:slot + 1], vocab_size=vocab)
        assert torch.equal(ours[row], one[0]), row
    assert torch.equal(ours[[0, 2]], some[[0, 2]])  # rows without a grammar are untouched


@pytest.mark.parametrize("settings", [
    dict(scheduler_policy="max_utilization", max_tokens_in_paged_kv_cache=88, max_seq_len=80, max_input_len=64,
         enable_kv_cache_reuse=False),
    dict(enable_chunked_context=True, max_num_tokens=16),
], ids=["preempting", "chunked"])
def test_preemption_and_chunking_keep_each_grammar_where_it_was(make_engine: EngineFactory, info_file: str,
                                                                settings: dict) -> None:
    """A preempted request recomputes its tokens but must not feed them to its matcher again: its output equals a
    roomy engine's, and still matches the grammar."""
    from tests.refengine.conftest import random_prompts

    prompts = random_prompts(6, 20, 40, seed=3)
    params = _guided("regex", "[a-z]{1,12}( [a-z]{1,12}){0,40}", max_tokens=30)
    roomy = [o.output_token_ids for o in make_engine(xgrammar_tokenizer_info=info_file).generate(prompts, params)]
    engine = make_engine(xgrammar_tokenizer_info=info_file, **settings)
    squeezed = engine.generate(prompts, params)
    assert [o.output_token_ids for o in squeezed] == roomy
    assert all(o.finish_reason in ("length", "end_id") for o in squeezed)
    if settings.get("scheduler_policy") == "max_utilization":
        assert engine.stats().preempted_requests > 0
