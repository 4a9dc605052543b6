"""One parser for where a server is (issue 38 item 6): `generate --url`, `gateway --backend` and `bench --endpoint`
all take HOST:PORT and grpc://HOST:PORT, through trtkit.config.upstream_url, which also reads the http://.../v1
form of an OpenAI-compatible server for the callers that take one."""

from __future__ import annotations

import pytest
from cli_helpers import TINY

from trtkit.config.upstream_url import UpstreamUrl, parse_upstream_url
from trtkit.errors import ConfigError


@pytest.mark.parametrize("text,parsed", [
    ("127.0.0.1:8001", UpstreamUrl("grpc", "127.0.0.1:8001", "127.0.0.1")),
    ("grpc://127.0.0.1:8001", UpstreamUrl("grpc", "127.0.0.1:8001", "127.0.0.1")),
    ("grpc://triton.llm.svc:8001/", UpstreamUrl("grpc", "triton.llm.svc:8001", "triton.llm.svc")),
    ("[::1]:8001", UpstreamUrl("grpc", "[::1]:8001", "::1")),
    ("http://127.0.0.1:9000/v1", UpstreamUrl("http", "http://127.0.0.1:9000/v1", "127.0.0.1")),
    ("https://gw.example/v1/", UpstreamUrl("http", "https://gw.example/v1", "gw.example")),
])
def test_both_forms_parse_to_a_scheme_and_an_address(text: str, parsed: UpstreamUrl) -> None:
    assert parse_upstream_url(text, "--x", ("grpc", "http")) == parsed


@pytest.mark.parametrize("text", ["127.0.0.1", "grpc//127.0.0.1:8001", "grpc://127.0.0.1", "127.0.0.1:0",
                                  "127.0.0.1:99999", "http://127.0.0.1:9000", "ftp://h:1", ""])
def test_malformed_addresses_name_the_option_and_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--url .*: expected HOST:PORT or grpc://HOST:PORT"):
        parse_upstream_url(text, "--url")


def test_a_caller_takes_only_its_schemes() -> None:
    with pytest.raises(ConfigError, match="expected HOST:PORT or grpc://HOST:PORT"):
        parse_upstream_url("http://127.0.0.1:9000/v1", "--backend", ("grpc",))


def test_generate_accepts_grpc_urls_like_bench_does(trtkit, tiny_llama_dir) -> None:  # type: ignore[no-untyped-def]
    """Port 1 has no server: both forms reach the connection step (exit 1, the server named), not a parse error."""
    for url in ("127.0.0.1:1", "grpc://127.0.0.1:1"):
        ran = trtkit("generate", TINY, "hi", "--url", url, "--max-tokens", "1")
        assert ran.code == 1 and "127.0.0.1:1" in ran.err and "Misformatted" not in ran.err, ran.err


def test_bench_accepts_a_bare_host_port(trtkit, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from trtkit.bench.spec import parse_endpoint

    assert parse_endpoint("127.0.0.1:8001").label == "grpc://127.0.0.1:8001"
    ran = trtkit("bench", TINY, "--endpoint", "127.0.0.1:8001", "--out", str(tmp_path / "run"))
    assert ran.code == 2 and "--concurrency" in ran.err  # past the endpoint, stopped at the missing load


def test_gateway_refuses_a_malformed_backend_before_starting(trtkit) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit("gateway", TINY, "--backend", "grpc//127.0.0.1:8001")
    assert ran.code == 2 and "--backend 'grpc//127.0.0.1:8001': expected HOST:PORT or grpc://HOST:PORT" in ran.err
