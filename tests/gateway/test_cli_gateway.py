"""`trtkit keys create` + `trtkit gateway` as a user runs them: subprocesses, curl-like requests."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from trtkit.gateway.server import free_port

pytestmark = pytest.mark.slow

CONFIG = "model_configs/tiny-llama.yaml"



def wait_ready(process: subprocess.Popen, url: str, timeout_s: float) -> None:
    """Poll /health/ready under a generous deadline; fail at once if the process died."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/health/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, f"{url} did not become ready"
        time.sleep(0.2)


def test_gateway_command_with_a_created_key(live_server, isolated_home) -> None:
    created = subprocess.run([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                              "keys", "create", "--name", "cli-team", "--rpm", "100"],
                             capture_output=True, text=True, env=os.environ.copy(), timeout=120)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    port = free_port("127.0.0.1")
    process = subprocess.Popen([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                                "-v", "gateway", CONFIG, "--backend", live_server.grpc_url, "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(process, url, 120)
        reply = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"}, timeout=60,
                           json={"model": "tiny-llama", "max_tokens": 5, "temperature": 0,
                                 "messages": [{"role": "user", "content": "Say hi"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 5
        assert reply.headers["x-ratelimit-limit-requests"] == "100"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert "on http://127.0.0.1" in stderr and secret not in stderr
    usage = subprocess.run([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                            "usage", "--by", "key"], capture_output=True, text=True, env=os.environ.copy(),
                           timeout=120)
    assert usage.returncode == 0 and "cli-team" in usage.stdout and secret not in usage.stdout


def test_serve_with_gateway_answers_the_openai_sdk_and_curl_then_stops(live_server, isolated_home) -> None:
    """`trtkit serve REPO --config C --gateway --no-auth` as the README runs it: its own tritonserver, the gateway
    in front, an `openai` SDK call (which always sends some API key) and a plain HTTP call, then Ctrl-C."""
    import signal

    import openai

    port = free_port("127.0.0.1")
    process = subprocess.Popen([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                                "serve", str(live_server.repo_dir), "--config", CONFIG, "--gateway", "--no-auth",
                                "--gateway-port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, url, 180)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="any-key-keys-are-off", max_retries=0)
        chunks = list(sdk.chat.completions.create(model="tiny-llama", max_tokens=4, temperature=0, stream=True,
                                                  messages=[{"role": "user", "content": "Hi"}],
                                                  stream_options={"include_usage": True}))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
        curl = httpx.post(f"{url}/v1/completions", timeout=60, json={"model": "tiny-llama", "prompt": "Hello",
                                                                     "max_tokens": 3, "temperature": 0})
        assert curl.status_code == 200, curl.text
        assert curl.json()["usage"]["completion_tokens"] == 3
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert f"gateway {url}/v1" in stdout and "API keys are OFF" in stderr
