"""The gateway in front of an independent OpenAI-compatible server: ONE llama-server per session (tests/helpers/
llama.py) serving SmolLM2 converted to GGUF, and gateways in this process (tests/helpers/gateways.py's
RunningGateway) pointed at it with ``--backend http://.../v1``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import openai
import pytest
from background_setup import wait_for

from tests.conftest import REPO_ROOT, SHARED_CACHE
from tests.helpers.gateways import RunningGateway
from tests.helpers.llama import ALIAS, LlamaServer, convert_to_gguf, llama_server_dir
from trtkit.config.schema import ModelConfig

SMOLLM2_CONFIG = REPO_ROOT / "model_configs" / "smollm2-135m.yaml"
MODEL = "smollm2-135m"  # the name the gateway serves (the config's); llama-server serves it as ALIAS


@pytest.fixture(scope="session")
def llama_tools() -> Path:
    wait_for("llama-server")  # scripts/test.sh builds it while the other tests run (once per machine)
    return llama_server_dir()


@pytest.fixture(scope="session")
def smollm2_gguf(llama_tools: Path, smollm2_dir: Path) -> Path:
    return convert_to_gguf(llama_tools, smollm2_dir, SHARED_CACHE)


@pytest.fixture(scope="session")
def llama(llama_tools: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """ONE llama-server for the session; a test that kills it starts it again on the same port."""
    server = LlamaServer(llama_tools / "llama-server", smollm2_gguf, tmp_path_factory.mktemp("llama") / "server.log")
    server.start()
    yield server
    server.stop()


def relay_config(base: ModelConfig, *, cache: bool = False, guard: bool = False, deadline_s: float | None = None,
                 api_key_env: str | None = None, model: str = ALIAS) -> ModelConfig:
    client = replace(base.client, cache=replace(base.client.cache, enabled=cache),
                     guard=replace(base.client.guard, enabled=guard, max_punctuation_run=8),
                     deadline_seconds=deadline_s or base.client.deadline_seconds, max_retries=1)
    upstream = replace(base.gateway.upstream, model=model, api_key_env=api_key_env, read_timeout_seconds=120.0)
    return replace(base, client=client, gateway=replace(base.gateway, upstream=upstream))


@pytest.fixture(scope="session")
def smollm2_config(smollm2_dir: Path) -> ModelConfig:
    from trtkit.config import load_config

    return load_config(SMOLLM2_CONFIG)


@pytest.fixture(scope="session")
def relay(llama: LlamaServer, smollm2_config: ModelConfig, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A gateway in front of llama-server: no response cache, no guard (every request reaches the upstream)."""
    running = RunningGateway(relay_config(smollm2_config), llama.api, tmp_path_factory.mktemp("relay"))
    yield running
    running.stop()


def sdk(gateway: RunningGateway, secret: str, **options: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0, **options)  # type: ignore[arg-type]
