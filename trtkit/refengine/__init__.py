"""The CPU reference engine: paged KV cache and in-flight batching with TensorRT-LLM semantics.

    engine = LLMEngine.from_pretrained(path, EngineConfig(...))   # HF folder or TensorRT-LLM checkpoint
    request_id = engine.add_request(prompt_ids, SamplingParams(max_tokens=32))
    while engine.has_unfinished():
        for output in engine.step(): ...

EngineLoop runs step() on a background thread for servers.
"""

from trtkit.refengine.config import EngineConfig
from trtkit.refengine.llm_engine import LLMEngine
from trtkit.refengine.loop import EngineLoop
from trtkit.refengine.outputs import EngineStats, RequestOutput, SamplingParams

__all__ = ["EngineConfig", "EngineLoop", "EngineStats", "LLMEngine", "RequestOutput", "SamplingParams"]
