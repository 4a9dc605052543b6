"""Building and writing ``config.pbtxt`` through Triton's own ``ModelConfig`` protobuf.

``text_format`` writes exactly what tritonserver parses; nothing here pastes strings, so no
``${...}`` placeholder can survive.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

TensorSpec = dict  # one entry of the contract file: name, data_type, dims, optional, reshape_scalar, ragged


@lru_cache(maxsize=1)
def contract() -> dict:
    text = resources.files("trtkit.contracts").joinpath("tensorrtllm_backend_1.2.json").read_text(encoding="utf-8")
    return json.loads(text)


def tensors(model: str, kind: str) -> list[TensorSpec]:
    return list(contract()["models"][model][kind])


LOGITS_OUTPUTS = ("context_logits", "generation_logits")
LOGITS_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16"}  # the C++ backend returns no other


def with_logits_dtype(specs: list[TensorSpec], logits_dtype: str) -> list[TensorSpec]:
    """The logits outputs declared in the engine's logits dtype: the C++ backend refuses a mismatch at load,
    and an ensemble refuses steps whose tensor types differ (the template's ``${logits_datatype}``)."""
    wanted = LOGITS_TYPES.get(logits_dtype)
    if wanted is None:
        from trtkit.errors import RepositoryError

        raise RepositoryError(f"the engine's logits_dtype {logits_dtype!r} is not one of {', '.join(LOGITS_TYPES)}; "
                              f"rebuild with --logits_dtype float32")
    return [{**s, "data_type": wanted} if s["name"] in LOGITS_OUTPUTS else s for s in specs]


def spec(name: str, data_type: str, dims: list[int], *, optional: bool = False) -> TensorSpec:
    return {"name": name, "data_type": data_type, "dims": dims, "optional": optional}


def add_inputs(config: mc.ModelConfig, specs: list[TensorSpec]) -> None:
    for s in specs:
        item = config.input.add(name=s["name"], data_type=mc.DataType.Value(s["data_type"]), dims=s["dims"])
        item.optional = bool(s.get("optional"))
        item.allow_ragged_batch = bool(s.get("ragged"))
        if s.get("reshape_scalar"):
            item.reshape.SetInParent()  # reshape: { shape: [ ] }


def mark_optional(config: mc.ModelConfig, names: tuple[str, ...]) -> None:
    """Triton checks only how many inputs a request has, not which: an ensemble request without a required
    input answers an empty success (the first step never runs). Optional there, the step runs and the
    model refuses the request naming the input."""
    for item in config.input:
        if item.name in names:
            item.optional = True


def add_outputs(config: mc.ModelConfig, specs: list[TensorSpec]) -> None:
    for s in specs:
        config.output.add(name=s["name"], data_type=mc.DataType.Value(s["data_type"]), dims=s["dims"])


def set_parameters(config: mc.ModelConfig, values: dict[str, object]) -> None:
    for key, value in values.items():
        if value is None:
            continue  # unset: the backend uses its default (never an unreplaced placeholder)
        if isinstance(value, bool):
            value = "true" if value else "false"
        config.parameters[key].string_value = str(value)


def instances(config: mc.ModelConfig, count: int) -> None:
    config.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_CPU)


def dynamic_batching(config: mc.ModelConfig, *, max_queue_delay_us: int, max_queue_size: int,
                     preferred: int | None = None) -> None:
    batching = config.dynamic_batching
    batching.SetInParent()
    if preferred:
        batching.preferred_batch_size.append(preferred)
    batching.max_queue_delay_microseconds = max_queue_delay_us
    if max_queue_size > 0:
        batching.default_queue_policy.max_queue_size = max_queue_size


def write(config: mc.ModelConfig, model_dir: Path) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "config.pbtxt"
    path.write_text(text_format.MessageToString(config), encoding="utf-8")
    return path


def read(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(encoding="utf-8"), mc.ModelConfig())
