"""What the serving benchmarks share: a bundled config deployed to a CPU repository, and one streaming
request over a tritonclient gRPC client the caller owns (so a channel can be reused or not, on purpose).

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NUMPY_TYPES = {"BYTES": np.object_, "INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_}


def deploy_cpu(config_name: str, work: Path, *, chat_template: bool | None = None) -> tuple[Any, Path]:
    """(config, repository folder) for ``model_configs/<config_name>.yaml`` on free ports."""
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.sources.resolve import resolve_model_dir

    config = load_config(ROOT / "model_configs" / f"{config_name}.yaml")
    model = config.model if chat_template is None else replace(config.model, chat_template=chat_template)
    config = replace(config, model=model, serve=replace(config.serve, http_port=0, grpc_port=0, metrics_port=0))
    repo = deploy_repository(config, resolve_model_dir(config.model.source), work / "repo", target="cpu").out_dir
    return config, repo


def infer_inputs(values: dict[str, tuple[object, str]]) -> list[Any]:
    """{name: (value, Triton datatype)} -> [1, 1] tritonclient inputs."""
    import tritonclient.grpc as grpcclient

    inputs = []
    for name, (value, dtype) in values.items():
        array = np.array([[value]], dtype=NUMPY_TYPES[dtype])
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def stream_once(client: Any, model: str, inputs: list[Any], *, before_send: Callable[[], object] | None = None,
                on_response: Callable[[Any], None] | None = None, timeout_s: float = 600) -> int:
    """One streaming request on ``client`` (opened and closed here, the channel stays the caller's).
    Returns the number of responses, the empty final one included."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: inbox.put((result, error)))
    try:
        if before_send is not None:
            before_send()
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        responses = 0
        while True:
            result, error = inbox.get(timeout=timeout_s)
            if error is not None:
                raise RuntimeError(f"stream failed: {error}")
            responses += 1
            if on_response is not None:
                on_response(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return responses
    finally:
        client.stop_stream()
