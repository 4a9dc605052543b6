"""logit_bias from the library client: the token path sends it as the engine's embedding_bias (one float per
vocabulary entry, as the C++ backend requires); the text path refuses it by name (the ensemble and the BLS take
embedding_bias_words, which the CPU engine does not support)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.governance.conftest import client_config
from trtkit.errors import ClientError
from trtkit.governance import SamplingParams
from trtkit.upstreams import connect
from trtkit.wire.stop_request import ENGINE_MODEL

pytestmark = pytest.mark.slow


def test_token_path_biases_and_text_path_refuses(live_server, tiny_config) -> None:  # type: ignore[no-untyped-def]
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))
    with connect(live_server.grpc_url, config=config, model_name=ENGINE_MODEL, ledger=False) as client:
        forced = client.governor.counter.encode(" river")[0]
        result = client.generate("Water:", SamplingParams(max_tokens=3, logit_bias=((forced, 100.0),)))
        assert result.text == client.governor.counter.decode([forced] * 3) and result.usage.completion_tokens == 3
        with pytest.raises(ClientError, match="outside the model's vocabulary"):
            client.generate("Water:", SamplingParams(max_tokens=3, logit_bias=((10**7, 1.0),)))
    with connect(live_server.grpc_url, config=config, model_name="ensemble", ledger=False) as client:
        with pytest.raises(ClientError, match="logit_bias needs the token path"):
            client.generate("Water:", SamplingParams(max_tokens=3, logit_bias=((forced, 100.0),)))
