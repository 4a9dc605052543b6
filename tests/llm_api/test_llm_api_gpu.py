"""The LLM-API engine model over the real tensorrt_llm.LLM (PyTorch backend) on a GPU host with TensorRT-LLM 1.2.x;
skipped elsewhere with the reason shown. The CPU tests beside it run the same adapter, port and options file over
the reference engine's facade (test_live_llm_api.py, test_llm_api_mapping.py) and hold its use of the LLM API to
the contract (test_llm_api_contract.py); scripts/gpu_smoke.sh runs it through tritonserver on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.llm_api.engine_calls import Sink, engine_tensors

pytestmark = pytest.mark.gpu  # skipped, with the reason, off a GPU host with TensorRT-LLM 1.2.x (tests/gpu_host.py)


@pytest.fixture(scope="module")
def engine(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.tokenizer.detokenizer import find_anchor
    from trtkit.tokenizer.fast_tokenizer import FastTokenizer
    from trtkit.triton_models.engine_model import EngineModel
    from trtkit.triton_models.llm_api_host import start_llm_api

    repo = tmp_path_factory.mktemp("gpu-llm-api") / "repo"
    config = load_config(REPO_ROOT / "model_configs" / "smollm2-135m-pytorch.yaml")
    deploy_repository(config, smollm2_dir, repo, target="gpu")
    port = start_llm_api({"llm_api_engine": "tensorrt_llm", "llm_api_options": str(repo / "tensorrt_llm" /
                                                                                    "llm_api_options.yaml")})
    tokenizer = FastTokenizer(smollm2_dir)
    yield EngineModel(port, tokenizer, find_anchor(tokenizer), tokens_per_block=32, exclude_input_default=True,
                      decoupled=True), tokenizer
    port.shutdown()


def _run(model, tensors: dict) -> list[dict]:  # type: ignore[no-untyped-def]
    sink = Sink()
    model.submit(tensors, sink)
    assert sink.done.wait(300)
    assert "error" not in sink.outputs[-1], sink.outputs[-1]
    return sink.outputs


def test_exact_counts_finish_reasons_and_cached_tokens_on_tensorrt_llm(engine) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = engine
    ids = tokenizer.encode("The capital of France is Paris. " * 12, add_special_tokens=False)
    for n in (1, 7, 32):
        outputs = _run(model, engine_tensors(ids, n, min_tokens=n, runtime_top_k=1))
        final = outputs[-1]
        assert int(final["num_output_tokens"].item()) == n and int(final["num_input_tokens"].item()) == len(ids)
        assert final["finish_reason"].item() == b"length"
        assert sum(o["output_ids"].size for o in outputs) <= n  # deltas, never more tokens than generated
    again = _run(model, engine_tensors(ids, 4, runtime_top_k=1))[-1]
    assert int(again["num_cached_tokens"].item()) > 0  # the repeated prompt came from the KV cache


def test_a_stop_aborts_the_request_on_tensorrt_llm(engine) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = engine
    sink = Sink()
    model.submit(engine_tensors(tokenizer.encode("Count to a thousand:", add_special_tokens=False), 1000, min_tokens=1000),
                 sink)
    rid = next(iter(model.engine_ids))
    model.stop(rid)
    assert sink.done.wait(120) and sink.outputs[-1]["finish_reason"].item() == b"cancelled"
    assert int(sink.outputs[-1]["num_output_tokens"].item()) < 1000
