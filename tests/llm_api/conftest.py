"""Live servers whose engine slot is the LLM-API engine model (build.backend: pytorch) over the CPU reference
engine: the adapter, the port and the options file that run tensorrt_llm.LLM on a GPU, here for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PYTORCH_CONFIG = REPO_ROOT / "model_configs" / "tiny-llama-pytorch.yaml"


def _serve(model_dir: Path, folder: Path, min_step_ms: float = 0.0):  # type: ignore[no-untyped-def]
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    result = deploy_repository(load_config(PYTORCH_CONFIG), model_dir, folder / "repo", target="cpu",
                               min_step_ms=min_step_ms)
    assert result.settings.llm_api_engine == "reference"
    return TritonServer(folder / "repo", start_timeout_s=150, log_path=folder / "tritonserver.log").start()


@pytest.fixture(scope="session")
def pytorch_config():  # type: ignore[no-untyped-def]
    from trtkit.config import load_config

    return load_config(PYTORCH_CONFIG)


@pytest.fixture(scope="session")
def llm_api_echo(echo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """The echo model (its output known token for token, CJK split over byte tokens) behind the LLM-API adapter."""
    from tests.helpers.live_client import Live

    server = _serve(echo_model_dir, tmp_path_factory.mktemp("llm-api-echo"))
    stopped_together.append(server)
    yield Live(server, echo_model_dir)


@pytest.fixture(scope="session")
def llm_api_paced_echo(echo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """The echo model behind the LLM-API adapter, every engine step at least MIN_STEP_MS long (tests/conftest.py):
    a 400-token generation lasts at least 8 s on any machine, so a test cancels or stops it while it surely runs."""
    from tests.conftest import MIN_STEP_MS
    from tests.helpers.live_client import Live

    server = _serve(echo_model_dir, tmp_path_factory.mktemp("llm-api-paced"), min_step_ms=MIN_STEP_MS)
    stopped_together.append(server)
    yield Live(server, echo_model_dir)


@pytest.fixture(scope="session")
def llm_api_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """The tiny random model behind the LLM-API adapter: the same model as the shared `live_server` (CPU engine
    model), so the two engine models can be compared answer for answer."""
    server = _serve(tiny_llama_dir, tmp_path_factory.mktemp("llm-api-random"))
    stopped_together.append(server)
    yield server
