"""Issue 36: the adapter's use of the LLM API against the names recorded from the TensorRT-LLM 1.2 sources.

``import tensorrt_llm`` needs a GPU driver, so on CPU the contract file (trtkit/contracts/llm_api_1.2.json) is
the only check. The port runs here over the reference engine's facade wrapped in recorders: every attribute the
adapter reads on the LLM, on a RequestOutput and on a CompletionOutput, and every SamplingParams /
GuidedDecodingParams keyword it passes, must be one the contract records (and the facade must implement exactly
those, so that it stands in for tensorrt_llm.LLM honestly).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.llm_api.engine_calls import Sink, engine_tensors
from trtkit.config.llm_api import llm_api_contract
from trtkit.refengine import llm_api
from trtkit.triton_models.engine_model import EngineModel
from trtkit.triton_models.llm_api_port import LlmApiPort
from trtkit.wire.request_tensors import InvalidRequest

CONTRACT = llm_api_contract()
LLM_NAMES = {"generate_async", "get_stats_async", "shutdown"}
REQUEST_NAMES = set(CONTRACT["request_output"]["fields_used"]) | {"abort", "__aiter__", "__anext__"}
COMPLETION_NAMES = set(CONTRACT["completion_output"]["fields_used"])


class Recorder:
    """A transparent stand-in that notes every attribute read on the real object (the facade's)."""

    def __init__(self, target: Any, seen: set[str], wrap: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_seen", seen)
        object.__setattr__(self, "_wrap", wrap or {})

    def __getattr__(self, name: str) -> Any:
        self._seen.add(name)
        value = getattr(self._target, name)
        return self._wrap[name](value) if name in self._wrap else value


class RecordedOutput(Recorder):
    def __aiter__(self) -> RecordedOutput:
        self._seen.add("__aiter__")
        return self

    async def __anext__(self) -> Any:
        self._seen.add("__anext__")
        await self._target.__anext__()
        return self


@dataclasses.dataclass
class Seen:
    llm: set[str] = dataclasses.field(default_factory=set)
    request: set[str] = dataclasses.field(default_factory=set)
    completion: set[str] = dataclasses.field(default_factory=set)
    sampling: set[str] = dataclasses.field(default_factory=set)
    guided: set[str] = dataclasses.field(default_factory=set)


@pytest.fixture(scope="module")
def recorded(tiny_llama_dir: Path):  # type: ignore[no-untyped-def]
    seen = Seen()
    llm = llm_api.LLM(str(tiny_llama_dir), max_batch_size=4, max_num_tokens=256, max_input_len=128, max_seq_len=256,
                      kv_cache_config={"tokens_per_block": 16}, guided_decoding_backend="xgrammar",
                      cpu=llm_api.CpuOptions(kv_cache_bytes=4 << 20))

    def completions(outputs: list) -> list:
        return [Recorder(o, seen.completion) for o in outputs]

    def generate(method: Any) -> Any:
        return lambda *a, **k: RecordedOutput(method(*a, **k), seen.request, {"outputs": completions})

    def sampling(**kwargs: Any) -> Any:
        seen.sampling.update(kwargs)
        return llm_api.SamplingParams(**kwargs)

    def guided(**kwargs: Any) -> Any:
        seen.guided.update(kwargs)
        return llm_api.GuidedDecodingParams(**kwargs)

    port = LlmApiPort(Recorder(llm, seen.llm, {"generate_async": generate}), sampling, guided,
                      vocab_size=llm.vocab_size)
    yield port, seen
    port.shutdown()


def test_the_adapter_uses_only_recorded_llm_api_names(recorded, tiny_llama_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from trtkit.tokenizer.detokenizer import find_anchor
    from trtkit.tokenizer.fast_tokenizer import FastTokenizer

    port, seen = recorded
    tokenizer = FastTokenizer(tiny_llama_dir)
    engine = EngineModel(port, tokenizer, find_anchor(tokenizer), tokens_per_block=16, exclude_input_default=True,
                         decoupled=True)
    requests = [engine_tensors([1, 2, 3, 4, 5], 6, runtime_top_k=1, return_log_probs=True),
                engine_tensors([7, 8, 9], 5, temperature=0.8, runtime_top_p=0.9, seed=3, min_tokens=2, end_id=0, pad_id=0),
                engine_tensors([1, 2, 3], 8, guided_decoding_guide_type=b"json"),
                engine_tensors([1, 2, 3], 4, stop_words_list=np.array([[[5, 6], [1, 2]]], dtype=np.int32)[0])]
    for tensors in requests:
        sink = Sink()
        engine.submit(tensors, sink)
        assert sink.done.wait(60), tensors
        assert "error" not in sink.outputs[-1], sink.outputs[-1]
    # what the 1.2 PyTorch sampler would ignore is refused by name, before anything reaches the LLM API
    for extra, name in ((dict(presence_penalty=0.2), "presence_penalty"), (dict(repetition_penalty=1.1),
                        "repetition_penalty"), (dict(frequency_penalty=0.1), "frequency_penalty"),
                        (dict(bad_words_list=np.array([[[5], [1]]], dtype=np.int32)[0]), "bad_words_list")):
        with pytest.raises(InvalidRequest, match=f"^{name}.*PyTorch sampler ignores it"):
            engine.submit(engine_tensors([1, 2, 3], 4, **extra), Sink())
    sink = Sink()
    engine.submit(engine_tensors([1, 2, 3], 200, min_tokens=200), sink)
    engine.stop(next(iter(engine.engine_ids)))  # the stop request: abort()
    assert sink.done.wait(60) and sink.outputs[-1]["finish_reason"].item() == b"cancelled"
    assert seen.llm <= LLM_NAMES | {"vocab_size"}, seen.llm - LLM_NAMES
    assert seen.request <= REQUEST_NAMES and {"abort", "outputs", "finished", "cached_tokens"} <= seen.request
    assert seen.completion <= COMPLETION_NAMES, seen.completion - COMPLETION_NAMES
    assert seen.sampling <= set(CONTRACT["sampling_params"]["fields_used"]), seen.sampling
    assert {"top_k", "temperature", "top_p", "seed", "logprobs", "stop_token_ids", "min_tokens"} <= seen.sampling
    assert seen.guided <= {"json", "regex", "grammar", "json_object"} and seen.guided


def test_the_facade_implements_the_recorded_fields_and_no_others() -> None:
    sampling = {f.name for f in dataclasses.fields(llm_api.SamplingParams)}
    assert sampling == set(CONTRACT["sampling_params"]["fields_used"])
    completion = {f.name for f in dataclasses.fields(llm_api.CompletionOutput)} | {"token_ids_diff", "logprobs_diff"}
    assert COMPLETION_NAMES <= completion
    request = llm_api.RequestOutput([1], llm_api.SamplingParams(), True)
    assert all(hasattr(request, name) for name in REQUEST_NAMES)
    assert LLM_NAMES <= set(dir(llm_api.LLM))
    guided = {f.name for f in dataclasses.fields(llm_api.GuidedDecodingParams)}
    assert guided == {"json", "regex", "grammar", "json_object"}


def test_every_contract_fact_names_read_sources() -> None:
    names = set(CONTRACT["sources"])
    for section in ("llm", "sampling_params", "request_output", "completion_output", "llm_args", "quantization",
                    "trtllm_serve", "triton"):
        facts = CONTRACT[section]
        entries = facts.values() if section == "llm" else [facts]
        for entry in entries:
            assert entry["read_in"] and set(entry["read_in"]) <= names, (section, entry.get("read_in"))
    for source in CONTRACT["sources"].values():
        assert source["wanted"] == "v1.2.1" and source["why_not_wanted"] and source["read"]
