"""Guided decoding (structured output) on the CPU engine: what it costs per token, and what it buys.

    python benchmarks/guided_decoding.py [--rounds 4] [--batch 8] [--tokens 64] [--threads N]

SmolLM2-135M-Instruct (bundled) runs in-process on ``trtkit.refengine.LLMEngine`` with guided decoding from the
tokenizer-info file ``trtkit deploy`` writes (trtkit.tokenizer.grammar_vocab), 16 chat prompts that ask for a
person as JSON.

Part 1, the cost. Alternating rounds run all 16 prompts free, then held to a grammar of JSON lines (person objects,
one per line, as many as fit). Like with like: the same prompts, precision (fp32), threads, batch and number of
tokens (every request makes exactly --tokens tokens: min_tokens = max_tokens, so the end id is banned on both
sides, and a JSON-lines grammar never has to end, where a single object would); the guided side does the grammar
work on top (xgrammar's bitmask fill, the mask applied to the logits, the token accepted). Target: guided >= 90% of free
tokens/s (the median of per-round ratios, 95% bootstrap interval over rounds). Where the time goes: the grammar
work is timed inside the engine's calls and shown per token and as a share of the guided step, a figure the VM's
swings between rounds do not move.

Part 2, what it buys. The same prompts run to their own end (--answer-tokens, default 192), greedy, free and
guided: how many answers hold JSON that validates against the schema. Both sides are read the same lenient way
(``extract_json``): the text inside a Markdown code fence (```json ... ```) when there is one, else the whole
text, stripped; a free answer that wraps valid JSON in a fence counts as valid, as a user reading it would.

Also the schema's compile time, fresh and cached. Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from figures import bootstrap_interval, machine, print_bench, straddle_note, verdict_at_least  # noqa: E402

from trtkit.refengine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from trtkit.refengine.cpu_features import usable_cores  # noqa: E402
from trtkit.refengine.guided_decoding import GuidedDecoder  # noqa: E402
from trtkit.sources.resolve import resolve_model_dir  # noqa: E402
from trtkit.tokenizer.fast_tokenizer import load_fast_tokenizer  # noqa: E402
from trtkit.tokenizer.grammar_vocab import write_tokenizer_info  # noqa: E402

TARGET_RATIO = 0.90
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
          "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0,
                                                                              "maximum": 120},
                         "city": {"type": "string", "maxLength": 40}}}
# the cost part's guide: JSON objects, one per line, as many as the token budget holds (never forced to end)
JSON_LINES = r'''root ::= person ("\n" person)*
person ::= "{\"name\": " text ", \"age\": " [0-9]{1,3} ", \"city\": " text "}"
text ::= "\"" [A-Za-z .,'-]{1,40} "\""
'''
PEOPLE = ["a retired sailor", "a young pianist", "a baker from Lyon", "a marathon runner", "a museum guard",
          "a beekeeper", "a taxi driver in Seoul", "a chess champion", "a lighthouse keeper", "a nurse on night shift",
          "a street photographer", "a farmer in Kenya", "a software tester", "a circus acrobat", "a librarian",
          "a mountain guide"]


class TimedMatcher:
    """A matcher whose calls add their time to a shared clock (the grammar work of the guided side)."""

    def __init__(self, matcher: Any, clock: dict[str, float]) -> None:
        self.matcher, self.clock = matcher, clock
        self._terminated = False

    def fill_next_token_bitmask(self, bitmask: Any, row: int) -> None:
        start = time.perf_counter()
        self.matcher.fill_next_token_bitmask(bitmask, row)
        self.clock["fill_s"] += time.perf_counter() - start

    def accept_token(self, token: int) -> bool:
        start = time.perf_counter()
        accepted = self.matcher.accept_token(token)
        terminated = self.matcher.is_terminated()
        self.clock["accept_s"] += time.perf_counter() - start
        self._terminated = terminated
        return accepted

    def is_terminated(self) -> bool:
        return self._terminated


def instrument(engine: LLMEngine, clock: dict[str, float]) -> None:
    """Time the engine's grammar work: each matcher's calls, and the whole mask step (fill + apply)."""
    guided = engine.guided
    assert guided is not None
    compile_matcher, mask = guided.matcher, guided.mask

    def timed_matcher(guide_type: str, guide: str | None) -> TimedMatcher:
        return TimedMatcher(compile_matcher(guide_type, guide), clock)

    def timed_mask(matchers: list[Any], logits: Any) -> None:
        start = time.perf_counter()
        mask(matchers, logits)
        clock["mask_s"] += time.perf_counter() - start

    guided.matcher = timed_matcher  # type: ignore[method-assign]
    guided.mask = timed_mask  # type: ignore[method-assign]


def prompts(tokenizer: Any) -> list[list[int]]:
    return [tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": f"Describe {who} as a JSON object with the keys name, age and city."}]),
        add_special_tokens=False) for who in PEOPLE]


def cost_round(engine: LLMEngine, work: list[list[int]], tokens: int, guided: bool) -> tuple[float, int]:
    extra = {"guided_decoding_guide_type": "ebnf_grammar", "guided_decoding_guide": JSON_LINES} if guided else {}
    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, **extra)  # type: ignore[arg-type]
    start = time.perf_counter()
    outs = engine.generate(work, params)
    seconds = time.perf_counter() - start
    made = sum(len(o.output_token_ids) for o in outs)
    assert made == tokens * len(work), f"forced lengths: {made} tokens, expected {tokens * len(work)}"
    return seconds, made


FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)```", re.S)


def extract_json(text: str) -> str:
    """What a reader takes as the answer's JSON, the same for both sides: the first Markdown code fence's content
    (```json ... ``` or a bare ```), else the whole text; stripped."""
    fenced = FENCE.search(text)
    return (fenced.group(1) if fenced else text).strip()


def valid_for_schema(text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(extract_json(text)), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def answers(engine: LLMEngine, tokenizer: Any, work: list[list[int]], tokens: int, guided: bool) -> dict[str, Any]:
    extra = {"guided_decoding_guide_type": "json_schema", "guided_decoding_guide": json.dumps(SCHEMA)} if guided else {}
    outs = engine.generate(work, SamplingParams(max_tokens=tokens, **extra))  # type: ignore[arg-type]
    texts = [tokenizer.decode(out.output_token_ids, skip_special_tokens=True) for out in outs]
    return {"valid": sum(map(valid_for_schema, texts)), "of": len(outs),
            "fenced": sum(FENCE.search(t) is not None for t in texts),
            "ended": sum(o.finish_reason == "end_id" for o in outs), "example": texts[0]}


def compile_times(decoder: GuidedDecoder) -> tuple[float, float]:
    fresh = dict(SCHEMA, title=f"fresh-{time.time_ns()}")  # a schema the compiler has not cached
    start = time.perf_counter()
    decoder.matcher("json_schema", json.dumps(fresh))
    first = time.perf_counter() - start
    start = time.perf_counter()
    decoder.matcher("json_schema", json.dumps(fresh))
    return first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--answer-tokens", type=int, default=192)
    parser.add_argument("--threads", type=int, default=usable_cores())
    args = parser.parse_args()

    model_dir = resolve_model_dir("bundled:smollm2-135m")
    tokenizer = load_fast_tokenizer(model_dir)
    info = write_tokenizer_info(model_dir, Path(tempfile.mkdtemp()) / "xgrammar_tokenizer_info.json")
    engine = LLMEngine.from_pretrained(model_dir, EngineConfig(
        max_batch_size=args.batch, max_num_tokens=2048, max_input_len=256, max_seq_len=512, num_threads=args.threads,
        kv_cache_bytes=128 << 20, xgrammar_tokenizer_info=str(info)))
    work = prompts(tokenizer)
    assert engine.guided is not None
    first_compile, cached_compile = compile_times(engine.guided)
    clock = {"fill_s": 0.0, "accept_s": 0.0, "mask_s": 0.0}
    instrument(engine, clock)
    cost_round(engine, work[:2], 8, True)  # warm-up: both paths, the schema compiled
    cost_round(engine, work[:2], 8, False)
    clock.update(fill_s=0.0, accept_s=0.0, mask_s=0.0)

    free_s, guided_s, tokens_per_round = [], [], 0
    for _ in range(args.rounds):
        seconds, tokens_per_round = cost_round(engine, work, args.tokens, False)
        free_s.append(seconds)
        seconds, _ = cost_round(engine, work, args.tokens, True)
        guided_s.append(seconds)
    ratios = [f / g for f, g in zip(free_s, guided_s, strict=True)]  # guided tok/s over free tok/s, per round
    ratio = statistics.median(ratios)
    interval = bootstrap_interval(lambda idx: float(statistics.median([ratios[i] for i in idx])), len(ratios))
    verdict = verdict_at_least(ratio, interval, TARGET_RATIO)
    guided_tokens = tokens_per_round * args.rounds
    per_token_ms = {name: clock[name] / guided_tokens * 1e3 for name in ("mask_s", "fill_s", "accept_s")}
    step_ms = statistics.median(guided_s) / (tokens_per_round / min(args.batch, len(work))) * 1e3
    # the measured cost itself, free of the VM's swings between rounds: the grammar's share of a guided step
    grammar_share = (per_token_ms["mask_s"] + per_token_ms["accept_s"]) * min(args.batch, len(work)) / step_ms

    free_answers = answers(engine, tokenizer, work, args.answer_tokens, False)
    guided_answers = answers(engine, tokenizer, work, args.answer_tokens, True)

    print(f"guided decoding on the CPU engine: SmolLM2-135M fp32, {args.threads} threads, batch {args.batch}, "
          f"{len(work)} prompts x {args.tokens} forced tokens, {args.rounds} alternating rounds; {machine()}")
    print(f"{'':28}{'free':>12}{'guided':>12}")
    print(f"{'tokens/s (median round)':28}{tokens_per_round / statistics.median(free_s):>12.1f}"
          f"{tokens_per_round / statistics.median(guided_s):>12.1f}")
    print(f"{'guided / free':28}{'':>12}{ratio:>12.3f}")
    print(f"{'valid JSON for the schema':28}{free_answers['valid']:>9}/{free_answers['of']:<2}"
          f"{guided_answers['valid']:>9}/{guided_answers['of']:<2}  (a ``` fence's content, else the text)")
    print(f"{'answers in a code fence':28}{free_answers['fenced']:>9}/{free_answers['of']:<2}"
          f"{guided_answers['fenced']:>9}/{guided_answers['of']:<2}")
    print(f"{'ended on their own':28}{free_answers['ended']:>9}/{free_answers['of']:<2}"
          f"{guided_answers['ended']:>9}/{guided_answers['of']:<2}")
    print(f"grammar work per guided token: {per_token_ms['mask_s']:.3f} ms masking (fill "
          f"{per_token_ms['fill_s']:.3f} ms, the rest applying the bitmask), {per_token_ms['accept_s']:.3f} ms "
          f"accepting; a guided batch step takes {step_ms:.1f} ms, {grammar_share:.1%} of it grammar work")
    print(f"schema compile: {first_compile * 1e3:.1f} ms fresh, {cached_compile * 1e3:.2f} ms cached")
    print(f"example guided answer: {guided_answers['example']!r}")
    print(f"example free answer: {free_answers['example']!r}")
    print(straddle_note(f"guided >= {TARGET_RATIO:.0%} of free tokens/s", verdict, lambda v: f"{v:.3f}"))
    print_bench({
        "figures": {"guided_over_free_tokens_per_s": round(ratio, 4), "per_round_ratios": [round(r, 4) for r in ratios],
                    "free_tokens_per_s": round(tokens_per_round / statistics.median(free_s), 2),
                    "guided_tokens_per_s": round(tokens_per_round / statistics.median(guided_s), 2),
                    "mask_ms_per_token": round(per_token_ms["mask_s"], 4),
                    "fill_ms_per_token": round(per_token_ms["fill_s"], 4),
                    "accept_ms_per_token": round(per_token_ms["accept_s"], 4),
                    "guided_step_ms": round(step_ms, 2), "grammar_share_of_step": round(grammar_share, 4),
                    "schema_compile_ms": round(first_compile * 1e3, 2),
                    "schema_compile_cached_ms": round(cached_compile * 1e3, 3),
                    "valid_json_free": [free_answers["valid"], free_answers["of"]],
                    "valid_json_guided": [guided_answers["valid"], guided_answers["of"]],
                    "fenced_answers_free": free_answers["fenced"], "fenced_answers_guided": guided_answers["fenced"],
                    "json_extraction": "the first Markdown code fence's content, else the whole text (both sides)"},
        "targets": {"guided_over_free_tokens_per_s_min": TARGET_RATIO},
        "met": {"guided_over_free_tokens_per_s": verdict["met"]},
        "verdicts": {"guided_over_free_tokens_per_s": verdict},
        "settings": {"threads": args.threads, "batch": args.batch, "tokens": args.tokens, "rounds": args.rounds,
                     "answer_tokens": args.answer_tokens, "dtype": "fp32"}})


if __name__ == "__main__":
    main()
