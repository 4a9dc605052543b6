"""Cross-field rules, checked up front, before any heavy work.

Each rule returns a message naming both fields, both values and the fix, or None.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from trtkit.config.dynamo_schema import DYNAMO_RULES
from trtkit.config.k8s_schema import K8S_RULES
from trtkit.config.loader import ConfigProblems
from trtkit.config.schema import ModelConfig
from trtkit.config.store_url import parse_store_url
from trtkit.config.upstream_url import parse_upstream_url
from trtkit.errors import ConfigError

Rule = Callable[[ModelConfig], "str | None"]


def _prices_whole(c: ModelConfig) -> str | None:
    p = c.client.pricing
    given = {"input_per_million": p.input_per_million, "output_per_million": p.output_per_million,
             "cached_input_per_million": p.cached_input_per_million}
    if any(v is not None for v in given.values()) and (p.input_per_million is None or p.output_per_million is None):
        missing = [k for k in ("input_per_million", "output_per_million") if given[k] is None]
        return (f"client.pricing.{missing[0]}: is required once a price is given (a model is priced whole); set "
                f"it, 0 for free, or remove client.pricing for a model with no price")
    return None


def _alerts_signed(c: ModelConfig) -> str | None:
    a = c.gateway.alerts
    if a.webhook_url and not a.secret_env:
        return ("gateway.alerts.secret_env: is required with gateway.alerts.webhook_url (every alert is signed); name "
                "the environment variable that holds the secret, e.g. TRTKIT_ALERTS_SECRET")
    if a.webhook_url and not a.webhook_url.startswith(("http://", "https://")):
        return f"gateway.alerts.webhook_url: {a.webhook_url!r} is no http(s) URL; e.g. https://hooks.example/trtkit"
    return None


def _input_below_seq(c: ModelConfig) -> str | None:
    b = c.build
    if b.max_input_len >= b.max_seq_len:
        return (f"build.max_input_len ({b.max_input_len}) must be below build.max_seq_len ({b.max_seq_len}); "
                f"raise max_seq_len or lower max_input_len so there is room to generate")
    return None


def _num_tokens_cover_input(c: ModelConfig) -> str | None:
    b, s = c.build, c.serve
    if s.enable_chunked_context:
        return None
    if b.max_num_tokens < b.max_input_len:
        return (f"build.max_num_tokens ({b.max_num_tokens}) must be at least build.max_input_len "
                f"({b.max_input_len}) unless serve.enable_chunked_context is true; raise max_num_tokens "
                f"or turn chunked context on")
    return None


def _opt_tokens_within_max(c: ModelConfig) -> str | None:
    b = c.build
    if b.opt_num_tokens is not None and b.opt_num_tokens > b.max_num_tokens:
        return (f"build.opt_num_tokens ({b.opt_num_tokens}) must not exceed build.max_num_tokens "
                f"({b.max_num_tokens}); lower it or leave it unset")
    return None


def _tokens_per_block_power_of_two(c: ModelConfig) -> str | None:
    n = c.build.tokens_per_block
    if n & (n - 1):
        return f"build.tokens_per_block ({n}) must be a power of two, e.g. 32 or 64"
    return None


def _serve_batch_within_build(c: ModelConfig) -> str | None:
    s, b = c.serve, c.build
    if s.max_batch_size is not None and s.max_batch_size > b.max_batch_size:
        return (f"serve.max_batch_size ({s.max_batch_size}) must not exceed build.max_batch_size "
                f"({b.max_batch_size}); the engine cannot batch more than it was built for")
    return None


def _distinct_ports(c: ModelConfig) -> str | None:
    s = c.serve
    ports = {"serve.http_port": s.http_port, "serve.grpc_port": s.grpc_port, "serve.metrics_port": s.metrics_port}
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port and port in seen:
            return f"{name} ({port}) is the same as {seen[port]} ({port}); give each its own port, or 0 for a free one"
        seen[port] = name
    return None


def _client_input_within_engine(c: ModelConfig) -> str | None:
    limit, engine = c.client.max_input_tokens, c.build.max_input_len
    if limit is not None and limit > engine:
        return (f"client.max_input_tokens ({limit}) must not exceed build.max_input_len ({engine}); "
                f"the engine would reject longer prompts")
    return None


def _client_max_tokens_fit(c: ModelConfig) -> str | None:
    if c.client.default_max_tokens >= c.build.max_seq_len:
        return (f"client.default_max_tokens ({c.client.default_max_tokens}) must be below build.max_seq_len "
                f"({c.build.max_seq_len}); lower it")
    return None


def _summary_fits_context(c: ModelConfig) -> str | None:
    ctx, limit = c.client.context, c.client.max_input_tokens or c.build.max_input_len
    if ctx.summary_max_tokens >= limit:
        return (f"client.context.summary_max_tokens ({ctx.summary_max_tokens}) must be below the input limit "
                f"({limit}); lower it")
    if ctx.max_context_tokens is not None and ctx.max_context_tokens >= limit:
        return (f"client.context.max_context_tokens ({ctx.max_context_tokens}) must be below the input limit "
                f"({limit}); leave room for the new question")
    return None


def _budget_has_limit(c: ModelConfig) -> str | None:
    for i, rule in enumerate(c.client.budgets):
        if rule.max_tokens is None and rule.max_cost is None:
            return f"client.budgets[{i}]: set max_tokens or max_cost (or both); a budget with neither limits nothing"
    return None


def _kv_quant_needs_quantization_backend(c: ModelConfig) -> str | None:
    q = c.quantization
    if q.kv_cache_dtype == "int8" and q.format in ("fp8", "nvfp4"):
        return (f"quantization.kv_cache_dtype (int8) does not combine with quantization.format ({q.format}); "
                f"use kv_cache_dtype: fp8")
    return None


def _beam_search_no_streaming_reuse(c: ModelConfig) -> str | None:
    if c.build.max_beam_width > 1 and c.serve.streaming:
        return (f"build.max_beam_width ({c.build.max_beam_width}) > 1 does not stream deltas; "
                f"set serve.streaming: false or max_beam_width: 1")
    return None


def _store_urls_parse(c: ModelConfig) -> str | None:
    for field, value in (("gateway.store", c.gateway.store), ("client.store", c.client.store)):
        if value is not None:
            try:
                parse_store_url(value, field)
            except ConfigError as exc:
                return str(exc)
    return None


def _upstream_url_parses(c: ModelConfig) -> str | None:
    if c.gateway.upstream.url is not None:
        try:
            parse_upstream_url(c.gateway.upstream.url, "gateway.upstream.url", ("grpc", "http"))
        except ConfigError as exc:
            return str(exc)
    return None


RULES: list[Rule] = [
    _prices_whole, _alerts_signed, _input_below_seq, _num_tokens_cover_input, _opt_tokens_within_max, _tokens_per_block_power_of_two,
    _serve_batch_within_build, _distinct_ports, _client_input_within_engine, _client_max_tokens_fit,
    _summary_fits_context, _budget_has_limit, _kv_quant_needs_quantization_backend, _beam_search_no_streaming_reuse,
    _store_urls_parse, _upstream_url_parses,
]


def broken_rules(config: ModelConfig) -> list[str]:
    """The message of every broken rule (rules run on the resolved config)."""
    messages = itertools.chain((rule(config) for rule in RULES), (rule(config.k8s) for rule in K8S_RULES),
                               (rule(config.dynamo) for rule in DYNAMO_RULES))
    return [message for message in messages if message]


def check_rules(config: ModelConfig) -> None:
    """Raise ConfigProblems naming every broken rule."""
    problems = broken_rules(config)
    if problems:
        raise ConfigProblems(problems)
