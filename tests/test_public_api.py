"""The public Python API (docs/python-api.md): every name of ``trtkit.__all__`` imports, ``import trtkit`` loads
nothing else, the README's example runs against the tiny model's live server, one governed client runs over an
OpenAI-compatible server too (blocking and asyncio), and the old client paths still work for one release with a
DeprecationWarning naming the new one."""

from __future__ import annotations

import asyncio
import importlib
import re
import subprocess
import sys
import warnings

import pytest

import trtkit
from tests.conftest import REPO_ROOT, TINY_CONFIG
from trtkit.governance.client import AsyncClient, Client
from trtkit.testing.hostile_upstream import HostileUpstream


def test_every_public_name_imports() -> None:
    assert {"Client", "AsyncClient", "connect", "connect_async", "SamplingParams", "Usage", "budget_scope",
            "Ledger"} <= set(trtkit.__all__)
    for name in trtkit.__all__:
        assert getattr(trtkit, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from trtkit import *", namespace)  # noqa: S102 - the star import a user may write
    assert set(trtkit.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        trtkit.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_import_trtkit_loads_nothing_else() -> None:
    """The CLI's start-up does not grow: the names are imported on first use."""
    code = "import sys, trtkit; print(sorted(m for m in sys.modules if m.startswith('trtkit.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def readme_example() -> str:
    section = (REPO_ROOT / "README.md").read_text(encoding="utf-8").split("\n## Python API", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)
    return code


def test_the_readme_example_runs_against_the_live_server(live_server, capsys) -> None:  # type: ignore[no-untyped-def]
    code = readme_example()
    assert '"127.0.0.1:8001"' in code and '"model_configs/smollm2-135m.yaml"' in code
    code = code.replace('"127.0.0.1:8001"', repr(live_server.grpc_url))
    code = code.replace('"model_configs/smollm2-135m.yaml"', repr(str(TINY_CONFIG)))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    result = namespace["chunk"].result  # type: ignore[attr-defined]
    assert 0 < result.usage.completion_tokens <= 32 and result.usage.prompt_tokens > 0
    printed = capsys.readouterr().out
    assert result.text in printed and f"completion_tokens={result.usage.completion_tokens}" in printed
    assert re.search(r"\n\['.*', '.*'\]\n$", printed), printed  # the batch: two answers, in order
    with trtkit.open_ledger(create=False) as ledger:  # each call governed: one ledger row per request
        assert ledger.count() == 3


def test_one_client_over_an_openai_compatible_server(tiny_config) -> None:  # type: ignore[no-untyped-def]
    params = trtkit.SamplingParams(max_tokens=5)
    with HostileUpstream() as server:
        with trtkit.connect(server.url, config=tiny_config, ledger=False) as client:
            assert isinstance(client, Client) and client.is_ready()
            streamed = list(client.stream("Hello", params))
            batch = client.generate_batch(["a", "b"], params)
        assert streamed[-1].result is not None and streamed[-1].result.usage.completion_tokens == 5
        assert [r.usage.completion_tokens for r in batch] == [5, 5]

        async def run() -> list[int]:
            async with trtkit.connect_async(server.url, config=tiny_config, ledger=False) as aclient:
                assert isinstance(aclient, AsyncClient) and await aclient.is_ready()
                return [r.usage.completion_tokens for r in await aclient.generate_batch(["a", "b", "c"], params)]

        assert asyncio.run(run()) == [5, 5, 5]


OLD_PATHS = [("trtkit.transport", "TritonLLMClient", "trtkit.connect("),
             ("trtkit.transport", "AsyncTritonLLMClient", "trtkit.connect_async("),
             ("trtkit.transport", "ServerUnavailableError", "trtkit.ServerUnavailableError"),
             ("trtkit.transport.grpc_client", "TritonLLMClient", "trtkit.connect("),
             ("trtkit.transport.aio_client", "AsyncTritonLLMClient", "trtkit.connect_async("),
             ("trtkit.transport.openai_client", "AsyncOpenAIUpstreamClient", "trtkit.connect_async('http"),
             ("trtkit.client", "TritonLLMClient", "trtkit.connect("),
             ("trtkit.client", "AsyncTritonLLMClient", "trtkit.connect_async(")]


@pytest.mark.parametrize("module, name, new", OLD_PATHS, ids=[f"{m}.{n}" for m, n, _ in OLD_PATHS])
def test_old_paths_warn_and_still_work(module: str, name: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.{name} is deprecated")) as caught:
        value = getattr(importlib.import_module(module), name)
    assert new in str(caught[0].message)
    assert value is trtkit.ServerUnavailableError or issubclass(value, (Client, AsyncClient))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            importlib.import_module(module).NoSuchName  # noqa: B018


def test_an_old_constructor_still_governs(live_server, tiny_config) -> None:  # type: ignore[no-untyped-def]
    with pytest.warns(DeprecationWarning):
        from trtkit.transport import TritonLLMClient
    with TritonLLMClient(live_server.grpc_url, config=tiny_config, ledger=False) as client:
        result = client.generate("Hello", trtkit.SamplingParams(max_tokens=3))
    assert result.usage.completion_tokens == 3 and isinstance(client, Client)
