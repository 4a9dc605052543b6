"""ONE local Dynamo cluster per session (trtkit/dynamo/cluster.py): Dynamo's own frontend with the KV router and
two trtkit workers (the CPU reference engine inside Dynamo's Python) serving tests/conftest.py's tiny Llama.

Dynamo comes from PyPI into .venv-dynamo (scripts/setup_dynamo_env.sh, which scripts/test.sh runs). Without it the
live tests skip, saying what to run; under CI=true a skip fails the run (tests/ci_skips.py: marker ``dynamo``).
Each engine step lasts at least 20 ms (the EngineLoop's test switch), so a test that must act while a request still
runs (disconnect, kill a worker) acts on a condition it sees, never on how fast this machine is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.dynamo import ClusterSpec, DynamoCluster
from trtkit.errors import ConfigError
from trtkit.refengine.config import EngineConfig

MODEL = "tiny-llama"
BLOCK = 16
ENGINE = EngineConfig(max_batch_size=8, max_input_len=512, max_seq_len=1024, max_num_tokens=1024,
                      tokens_per_block=BLOCK, kv_cache_bytes=16 << 20, num_threads=1)
MIN_STEP_MS = 20.0


def dynamo_python_or_skip() -> Path:
    from background_setup import wait_for

    from trtkit.dynamo.environment import dynamo_python

    wait_for("dynamo")  # scripts/test.sh builds .venv-dynamo while the other tests run
    try:
        return dynamo_python()
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def dynamo_cluster(tiny_llama_dir: Path):  # type: ignore[no-untyped-def]
    python = dynamo_python_or_skip()
    spec = ClusterSpec(MODEL, tiny_llama_dir, num_workers=2, router_mode="kv", engine_config=ENGINE,
                       min_step_ms=MIN_STEP_MS)
    cluster = DynamoCluster(spec, python=python).start()
    yield cluster
    cluster.stop()
