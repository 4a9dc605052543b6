"""The pure parts of the Dynamo worker and the gateway's Dynamo handling, without Dynamo: the token protocol, the
KV event relay over the real block manager, the error bodies, the upstream model check."""

from __future__ import annotations

import pytest

from trtkit.dynamo.kv_events import KvEventRelay
from trtkit.dynamo.token_protocol import ChunkWriter, engine_request
from trtkit.errors import ConfigError, InvalidInputError
from trtkit.gateway.upstream_model import checked_upstream_model
from trtkit.refengine.block_manager import BlockManager
from trtkit.refengine.outputs import RequestOutput
from trtkit.refengine.sequence import Sequence
from trtkit.transport.openai.errors import UpstreamBrokenError, UpstreamStatusError, status_error
from trtkit.transport.openai.events import parse_event
from trtkit.transport.openai.upstream import UpstreamSettings

CHAT = {"token_ids": [1, 5, 9], "eos_token_ids": [2],
        "stop_conditions": {"max_tokens": 8, "stop_token_ids_hidden": [2, 7], "min_tokens": 1, "ignore_eos": None},
        "sampling_options": {"temperature": 0.0, "top_p": 0.8999999761581421, "top_k": None, "seed": 3, "n": None},
        "output_options": {"logprobs": None}}


def output(new: list[int], finished: bool = False, reason: str | None = None, reused: int = 0) -> RequestOutput:
    return RequestOutput("r", new, new, finished, reason, 3, reused, None, None, 0.0, None, None, None)  # type: ignore[arg-type]


def test_a_preprocessed_request_becomes_the_engines_request() -> None:
    request = engine_request(CHAT, max_seq_len=64)
    p = request.params
    assert request.prompt_ids == [1, 5, 9] and p.end_id == 2 and p.max_tokens == 8 and p.min_tokens == 1
    assert p.stop_token_ids == [[7]] and request.hidden_stops == {7} and p.seed == 3 and p.temperature == 0.0
    ignoring = engine_request({**CHAT, "stop_conditions": {"ignore_eos": True}, "sampling_options": {}}, max_seq_len=64)
    assert ignoring.params.end_id == -1 and ignoring.params.max_tokens == 61  # the room the prompt leaves
    assert ignoring.params.temperature == 1.0  # no temperature: sampling, as OpenAI's API does


@pytest.mark.parametrize("field,value,named", [
    ("sampling_options", {"n": 2}, "n = 2"), ("sampling_options", {"min_p": 0.1}, "min_p"),
    ("sampling_options", {"use_beam_search": True}, "beam search"),
    ("sampling_options", {"guided_decoding": {"json": {}}}, "guided decoding"),
    ("output_options", {"logprobs": 1}, "logprobs"), ("token_ids", [], "token_ids")])
def test_what_the_engine_cannot_honour_is_refused_by_name(field: str, value: object, named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        engine_request({**CHAT, field: value}, max_seq_len=64)


def test_chunks_carry_exact_finish_reasons_and_usage() -> None:
    writer = ChunkWriter(engine_request(CHAT, max_seq_len=64))
    assert writer.chunk(output([11, 12])) == {"token_ids": [11, 12], "index": 0}
    last = writer.chunk(output([13, 7], finished=True, reason="stop", reused=16))
    assert last["token_ids"] == [13] and last["finish_reason"] == "stop"  # the hidden stop id: neither sent nor billed
    assert last["completion_usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                                        "prompt_tokens_details": {"cached_tokens": 16}}
    for reason, sent in (("end_id", "eos"), ("length", "length"), ("cancelled", "cancelled")):
        w = ChunkWriter(engine_request(CHAT, max_seq_len=64))
        assert w.chunk(output([4], finished=True, reason=reason))["finish_reason"] == sent
    with pytest.raises(RuntimeError, match="boom"):
        failed = output([], finished=True, reason="error")
        failed.error = "boom"
        ChunkWriter(engine_request(CHAT, max_seq_len=64)).chunk(failed)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def publish_stored(self, token_ids, num_block_tokens, block_hashes, parent_hash=None):  # type: ignore[no-untyped-def]
        self.events.append(("stored", tuple(token_ids), tuple(num_block_tokens), block_hashes[0], parent_hash))

    def publish_removed(self, block_hashes):  # type: ignore[no-untyped-def]
        self.events.append(("removed", block_hashes[0]))


def test_the_block_manager_publishes_stored_blocks_chained_and_evictions() -> None:
    manager = BlockManager(num_blocks=3, block_size=2, enable_reuse=True)
    relay = KvEventRelay(Recorder())
    manager.listener = relay
    seq = Sequence("a", [1, 2, 3, 4, 5], 5, None, None, None)  # type: ignore[arg-type]
    manager.append_slots(seq, 5)
    seq.num_computed_tokens = 5
    manager.commit_full_blocks(seq)
    manager.free(seq)
    other = Sequence("b", [9, 9, 9, 9, 9, 9], 6, None, None, None)  # type: ignore[arg-type]
    manager.append_slots(other, 6)  # takes every block: the cached ones are evicted
    relay.close()
    events = relay.publisher.events  # type: ignore[attr-defined]
    first, second = events[0], events[1]
    assert first[:3] == ("stored", (1, 2), (2,)) and first[4] is None
    assert second[:3] == ("stored", (3, 4), (2,)) and second[4] == first[3]  # chained to its parent
    assert sorted(e[1] for e in events[2:]) == sorted([first[3], second[3]]) and all(e[0] == "removed" for e in events[2:])
    assert relay.num_stored == 2 and relay.num_removed == 2


def test_dynamos_error_bodies_read_as_openai_errors() -> None:
    missing = status_error(404, b'{"message":"Model not found","type":"Not Found","code":404}')
    assert missing.status == 404 and missing.type == "invalid_request_error" and missing.code == "model_not_found"
    down = status_error(503, b'{"message":"Service temporarily unavailable","type":"Service Unavailable","code":503}')
    assert down.type == "server_error" and str(down) == "Service temporarily unavailable"
    with pytest.raises(UpstreamStatusError) as refused:  # a streamed refusal: 200, then the error as an event
        parse_event(b'{"error":{"message":"min_p: no","type":"invalid_request_error","code":400}}')
    assert refused.value.status == 400 and refused.value.is_refusal
    with pytest.raises(UpstreamBrokenError, match="temporarily unavailable"):
        parse_event(b'{"error":{"message":"Service temporarily unavailable","type":"service_unavailable","code":503}}')
    with pytest.raises(UpstreamBrokenError, match="worker died"):
        parse_event(b'{"message":"worker died","type":"Internal Server Error","code":500}')


def test_the_model_sent_upstream_is_checked_against_what_it_serves() -> None:
    settings = UpstreamSettings("http://127.0.0.1:1/v1", "my-service")
    served = checked_upstream_model(settings, configured=False, list_models=lambda *a: ["tiny-llama"])
    assert served.model == "tiny-llama"
    same = checked_upstream_model(settings, configured=True, list_models=lambda *a: ["a", "my-service"])
    assert same.model == "my-service"
    assert checked_upstream_model(settings, configured=False, list_models=lambda *a: None).model == "my-service"
    with pytest.raises(ConfigError, match=r"serves 'a', 'b'.*gateway.upstream.model"):
        checked_upstream_model(settings, configured=False, list_models=lambda *a: ["a", "b"])
    with pytest.raises(ConfigError, match="serves 'tiny-llama'"):
        checked_upstream_model(settings, configured=True, list_models=lambda *a: ["tiny-llama"])
