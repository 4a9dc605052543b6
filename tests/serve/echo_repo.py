"""Tiny Python-backend repositories for launcher tests, with config.pbtxt written from Triton's protobuf."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ECHO_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            reply = np.array([b"echo: " + item for item in text.reshape(-1)], dtype=object).reshape(text.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", reply)]))
        return responses
'''

FAILING_MODEL = '''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom: this model refuses to initialize")

    def execute(self, requests):
        return []
'''


def _config(name: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    config.input.add(name="text_input", data_type=mc.TYPE_STRING, dims=[-1])
    config.output.add(name="text_output", data_type=mc.TYPE_STRING, dims=[-1])
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    return config


def write_model(repo: Path, name: str, source: str) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text(source)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(_config(name)))
    return model_dir


def echo_repository(repo: Path) -> Path:
    write_model(repo, "echo", ECHO_MODEL)
    return repo


def failing_repository(repo: Path) -> Path:
    write_model(repo, "echo", ECHO_MODEL)
    write_model(repo, "broken", FAILING_MODEL)
    return repo

SLOW_MODEL = '''
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(600)  # never becomes ready within a test's deadline

    def execute(self, requests):
        return []
'''


def stuck_repository(repo: Path) -> Path:
    write_model(repo, "stuck", SLOW_MODEL)
    return repo


def invalid_config_repository(repo: Path) -> Path:
    model_dir = write_model(repo, "echo", ECHO_MODEL)
    (model_dir / "config.pbtxt").write_text('name: "echo"\nbackend: "python"\nno_such_field: 3\n')
    return repo
