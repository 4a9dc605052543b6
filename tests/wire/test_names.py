"""Every tensor name is a constant of trtkit/wire/names.py, held to the 1.2 template; no other module spells one.

The scan reads the modules that speak the tensor contract (the wire package, the Triton models and their adapters,
the clients' token and text paths) and finds any string that is a tensor's name.
"""

from __future__ import annotations

import ast
import json
from importlib import resources
from pathlib import Path

from trtkit.wire import names

ROOT = Path(__file__).resolve().parents[2] / "trtkit"
SPEAKERS = [*sorted((ROOT / "wire").glob("*.py")), *sorted((ROOT / "triton_models").rglob("*.py")),
            *sorted((ROOT / "transport" / "triton").glob("*.py"))]
# modules whose strings name something else that happens to share a tensor's name, and what
OTHER_NAMES = {
    "wire/names.py": "the names themselves",
    "wire/sampling_ranges.py": "the range table, keyed by the values' names (the gateway's OpenAI fields too)",
    "triton_models/llm_api_sampling.py": "TensorRT-LLM's SamplingParams keywords (max_tokens, end_id, top_k, ...)",
    "triton_models/llm_api_port.py": "TensorRT-LLM's SamplingParams keywords (embedding_bias)",
}
# tensor names that are also finish reasons (the finish_reason tensor's values: end_id, stop, length, ...)
ALSO_VALUES = {names.END_ID, names.STOP}
TENSOR_NAMES = {value for key, value in vars(names).items()
                if key.isupper() and isinstance(value, str) and value.islower()}


def template() -> dict:
    text = resources.files("trtkit.contracts").joinpath("tensorrtllm_backend_1.2.json").read_text(encoding="utf-8")
    return json.loads(text)["models"]


def spelled_names(source: str) -> list[str]:
    return [f"{node.lineno} {node.value!r}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in TENSOR_NAMES - ALSO_VALUES]


def test_no_module_spells_a_tensor_name() -> None:
    found = {}
    for path in SPEAKERS:
        where = str(path.relative_to(ROOT))
        if where not in OTHER_NAMES and (hits := spelled_names(path.read_text(encoding="utf-8"))):
            found[where] = hits
    assert found == {}


def test_the_scan_finds_a_spelled_name() -> None:
    assert spelled_names('x = inputs["request_output_len"]\ny = {"output_ids": 1}\nz = "stop"') == [
        "1 'request_output_len'", "2 'output_ids'"]


def test_the_engine_names_are_the_templates() -> None:
    """The engine model's inputs and outputs, and their datatypes, as the 1.2 template declares them; trtkit's own
    outputs are the three it documents."""
    models = template()
    engine = {t["name"]: t["data_type"].removeprefix("TYPE_")
              for t in models["tensorrt_llm"]["inputs"] + models["tensorrt_llm"]["outputs"]}
    front = {t["name"] for model in ("ensemble", "tensorrt_llm_bls") for t in models[model]["inputs"]
             + models[model]["outputs"]}
    trtkit_own = {names.NUM_CACHED_TOKENS, names.FINISH_REASON, names.CPU_REQUEST_KEY, names.MIN_LENGTH,
                  names.PROMPT_FORM}
    assert TENSOR_NAMES - set(engine) - front == trtkit_own
    for name, datatype in names.ENGINE_SCALAR_TYPES.items():  # what an EngineRequest writes, in its datatype
        assert engine[name] == datatype, name
