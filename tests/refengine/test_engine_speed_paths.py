"""The speed-related paths: length-grouped decode attention (the torch path), the forward pass outside the loop
lock, bf16. The native attention kernel and packed projections: test_paged_attention.py."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.refengine.conftest import EngineFactory, random_prompts
from trtkit.config import parse_config
from trtkit.errors import ConfigError
from trtkit.refengine import EngineConfig, EngineLoop, LLMEngine, RequestOutput, SamplingParams
from trtkit.refengine.cpu_features import native_bf16_flags
from trtkit.refengine.model_runner import MAX_GROUP_PADDING, group_sizes


def test_decode_groups_bound_padding_and_cover_every_row() -> None:
    rng = random.Random(3)
    for _ in range(200):
        lengths = sorted(rng.randint(1, 200) for _ in range(rng.randint(1, 40)))
        sizes = group_sizes(lengths)
        assert sum(sizes) == len(lengths) and all(size > 0 for size in sizes)
        start = 0
        for size in sizes:
            group = lengths[start:start + size]
            assert size == 1 or group[-1] * size <= (1 + MAX_GROUP_PADDING) * sum(group)
            start += size
    assert group_sizes([4, 4, 4, 128]) == [3, 1]  # the long sequence does not pad the short ones


@pytest.mark.parametrize("attention", ["native", "torch"])
def test_mixed_lengths_decode_like_one_at_a_time(make_engine: EngineFactory, attention: str) -> None:
    prompts = [p[:n] for p, n in zip(random_prompts(4, 100, 100, seed=11), (3, 9, 40, 100), strict=True)]
    params = SamplingParams(max_tokens=12, end_id=-1)
    batched = make_engine(tokens_per_block=4, attention=attention).generate(prompts, params)
    single = [make_engine(tokens_per_block=4, attention=attention).generate([p], params)[0] for p in prompts]
    assert [o.output_token_ids for o in batched] == [o.output_token_ids for o in single]


def test_submit_cancel_and_stats_do_not_wait_for_the_forward_pass(make_engine: EngineFactory) -> None:
    engine = make_engine(max_queue_size=8)
    in_forward, release = threading.Event(), threading.Event()
    real_forward = engine.runner.forward

    def held_forward(prepared):  # type: ignore[no-untyped-def]
        in_forward.set()
        assert release.wait(60), "the test never released the forward pass"
        return real_forward(prepared)

    engine.runner.forward = held_forward  # type: ignore[method-assign]
    loop = EngineLoop(engine)
    outputs: list[RequestOutput] = []
    try:
        first = loop.submit(random_prompts(1, 20, 20)[0], SamplingParams(max_tokens=4, end_id=-1), outputs.append)
        assert in_forward.wait(60)
        done = threading.Event()

        def calls_while_held() -> None:
            loop.stats()
            second = loop.submit(random_prompts(1, 10, 10, seed=2)[0], SamplingParams(max_tokens=2), outputs.append)
            assert loop.cancel(second) and loop.cancel(first)
            done.set()

        caller = threading.Thread(target=calls_while_held)
        caller.start()
        assert done.wait(60), "submit/cancel/stats waited behind the forward pass"
        assert not release.is_set()
        release.set()
        caller.join(60)
        deadline = threading.Event()
        for _ in range(600):
            if loop.stats().active_requests == 0 and any(o.finish_reason == "cancelled" for o in outputs):
                break
            deadline.wait(0.1)
        assert loop.stats().used_kv_blocks == 0
        assert [o.finish_reason for o in outputs if o.request_id == first] == ["cancelled"]
    finally:
        release.set()
        loop.shutdown()


def test_cpu_dtype_and_threads_map_from_the_config() -> None:
    config = parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"},
                           "serve": {"cpu_dtype": "bf16", "cpu_threads": 3, "cpu_attention": "torch"}})
    engine_config = EngineConfig.from_model_config(config)
    assert (engine_config.dtype, engine_config.num_threads, engine_config.attention) == ("bfloat16", 3, "torch")
    with pytest.raises(ConfigError, match="serve.cpu_dtype"):
        parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"}, "serve": {"cpu_dtype": "fp16"}})
    with pytest.raises(ConfigError, match="serve.cpu_attention"):
        parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"}, "serve": {"cpu_attention": "flash"}})


@pytest.mark.skipif(not native_bf16_flags(), reason="bf16 mode needs AVX512-BF16 or AMX")
def test_bf16_agrees_with_fp32_on_most_next_tokens(make_engine: EngineFactory, tiny_llama_dir: Path) -> None:
    text = random_prompts(1, 120, 120, seed=4)[0]
    fp32 = make_engine().prompt_logits(text)
    config = make_engine().config
    config.dtype = "bfloat16"
    bf16 = LLMEngine.from_pretrained(tiny_llama_dir, config).prompt_logits(text)
    agreement = (fp32.argmax(-1) == bf16.argmax(-1)).float().mean().item()
    assert agreement >= 0.9, agreement
    assert torch.isfinite(bf16).all()


def test_the_triton_engine_model_gets_the_threads_and_dtype(tmp_path: Path, tiny_llama_dir: Path) -> None:
    from dataclasses import replace

    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.repository.pbtxt import read
    from trtkit.triton_models.engine_host import engine_config

    config = load_config(Path(__file__).resolve().parents[2] / "model_configs" / "tiny-llama.yaml")
    config = replace(config, serve=replace(config.serve, cpu_dtype="bf16", cpu_threads=2, cpu_attention="native"))
    deploy_repository(config, tiny_llama_dir, tmp_path / "repo")
    engine = read(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    params = {k: v.string_value for k, v in engine.parameters.items()}
    assert (params["cpu_dtype"], params["cpu_threads"], params["cpu_attention"]) == ("bf16", "2", "native")
    started = engine_config(params)
    assert (started.dtype, started.num_threads, started.attention) == ("bfloat16", 2, "native")
    assert (engine_config({}).dtype, engine_config({}).num_threads, engine_config({}).attention) == ("float32", 0, "auto")


def test_a_paced_loop_takes_at_least_its_floor_per_step(make_engine: EngineFactory) -> None:
    """The min_step_s test switch (tests' paced servers): a generation of N tokens takes at least N floors, on any
    machine, and its outputs are those of an unpaced loop (greedy): it slows the engine, it changes nothing else."""
    prompt, params = random_prompts(1, 8, 8, seed=3)[0], SamplingParams(max_tokens=12, min_tokens=12, end_id=-1)
    outputs: dict[float, list[int]] = {}
    for floor in (0.0, 0.03):
        loop = EngineLoop(make_engine(), min_step_s=floor)
        done, tokens = threading.Event(), []

        def on_output(out: RequestOutput, tokens: list[int] = tokens, done: threading.Event = done) -> None:
            tokens.extend(out.new_token_ids)
            if out.finished:
                done.set()

        started = time.monotonic()
        try:
            loop.submit(prompt, params, on_output)
            assert done.wait(60)
        finally:
            loop.shutdown()
        if floor:
            assert time.monotonic() - started >= 12 * floor
        outputs[floor] = tokens
    assert outputs[0.0] == outputs[0.03] and len(outputs[0.0]) == 12
