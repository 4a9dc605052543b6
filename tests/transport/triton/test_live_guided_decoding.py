"""Guided decoding through tritonserver: the ensemble, ``tensorrt_llm_bls`` and the token path (the engine model)
pass the guide to the engine, which holds the answer to it, streamed or not. A guide that does not compile is
refused by name, and the next request is served. The shared server runs the tiny random-weights engine, so an
answer that matches its grammar is the mask's doing (unguided it writes noise)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from tests.governance.conftest import client_config
from tests.helpers.live_client import Live, inputs
from trtkit.errors import TrtkitError
from trtkit.governance import SamplingParams
from trtkit.upstreams import connect
from trtkit.wire.stop_request import ENGINE_MODEL

pytestmark = pytest.mark.slow

ENUM = json.dumps({"type": "string", "enum": ["north", "south", "east", "west"]})
PATTERN = r"[A-Z]{2}-[0-9]{4}"


def test_every_path_holds_the_answer_to_the_guide(live_server, tiny_config) -> None:  # type: ignore[no-untyped-def]
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))
    guides = [SamplingParams(max_tokens=24, guided_decoding_guide_type="json_schema", guided_decoding_guide=ENUM),
              SamplingParams(max_tokens=24, guided_decoding_guide_type="regex", guided_decoding_guide=PATTERN)]
    seen = {}
    for model in ("ensemble", "tensorrt_llm_bls", ENGINE_MODEL):
        with connect(live_server.grpc_url, config=config, model_name=model, ledger=False) as client:
            enum = client.generate("Which way is the wind blowing?", guides[0])
            streamed = list(client.stream("Ticket number:", guides[1]))
        final = streamed[-1].result
        assert final is not None and "".join(c.text for c in streamed) == final.text
        assert json.loads(enum.text) in ("north", "south", "east", "west"), (model, enum.text)
        assert re.fullmatch(PATTERN, final.text), (model, final.text)
        assert enum.finish_reason == final.finish_reason == "end_id", model  # the grammar's end, not max_tokens
        seen[model] = (enum.text, final.text)
    assert len(set(seen.values())) == 1, seen


def test_a_guide_that_does_not_compile_is_refused_and_the_next_request_served(live_server, tiny_llama_dir,
                                                                              tiny_config) -> None:  # type: ignore[no-untyped-def]
    live = Live(live_server, tiny_llama_dir)
    for model in ("ensemble", "tensorrt_llm_bls"):
        refused = live.stream(model, inputs("Hello", 4, stream=True, guided_decoding_guide_type="json_schema",
                                            guided_decoding_guide='{"type": "object", "properties": '))
        assert refused.error is not None and "does not compile as json_schema" in str(refused.error), model
        unknown = live.stream(model, inputs("Hello", 4, stream=True, guided_decoding_guide_type="yaml"))
        assert unknown.error is not None and "'yaml' is not one of json, json_schema" in str(unknown.error), model
        answered = live.stream(model, inputs("Hello", 2, stream=True))
        assert answered.error is None and answered.finals[-1]["num_output_tokens"] == 2, model
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))
    with connect(live_server.grpc_url, config=config, model_name=ENGINE_MODEL, ledger=False) as client:
        with pytest.raises(TrtkitError, match="does not compile as regex"):
            client.generate("x", SamplingParams(max_tokens=4, guided_decoding_guide_type="regex",
                                                guided_decoding_guide="(open"))
        assert client.generate("x", SamplingParams(max_tokens=2)).usage.completion_tokens == 2


def test_cli_generate_with_a_schema_file(live_server, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from tests.governance.conftest import TINY_CONFIG
    from trtkit.cli.main import main

    schema = tmp_path / "wind.json"
    schema.write_text(ENUM, encoding="utf-8")
    assert main(["generate", str(TINY_CONFIG), "Wind?", "--url", live_server.grpc_url, "--max-tokens", "20",
                 "--json", "--guide-type", "json_schema", "--guide", f"@{schema}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert json.loads(out["text"]) in ("north", "south", "east", "west") and out["finish_reason"] == "end_id"
    assert main(["generate", str(TINY_CONFIG), "Wind?", "--url", live_server.grpc_url, "--guide-type",
                 "json_schema", "--guide", f"@{tmp_path / 'missing.json'}"]) == 1
    err = capsys.readouterr().err
    assert "--guide @" in err and "no such file" in err and "Traceback" not in err
