"""A stored conversation shared by two gateway replicas (separate OS processes) on one PostgreSQL database: a chain
started on one replica continues on the other, turn after turn, streamed or not; either replica reads, heart-beats
or deletes it; another key's id is a 404 on both."""

from __future__ import annotations

import openai
import pytest

from tests.helpers.replicas import sdks
from tests.helpers.stores import add_key, query

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
QUESTIONS = ["Bonjour !", "春天来了吗？", "And then?", "東京は晴れですか。", "One more?", "Merci."]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_chain_alternates_between_two_replicas(two_replicas, stream: bool) -> None:
    replicas, store_url = two_replicas
    clients = sdks(replicas, add_key(store_url)[1])
    previous, conversations, counted = None, set(), []
    for index, question in enumerate(QUESTIONS):
        client = clients[index % 2]  # turn 1 on replica 0, turn 2 on replica 1, ...
        kwargs = dict(model=MODEL, input=question, previous_response_id=previous, max_output_tokens=4, temperature=0)
        if stream:
            with client.responses.create(stream=True, **kwargs) as events:
                response = [e for e in events][-1].response
        else:
            response = client.responses.create(**kwargs)
        conversations.add(response.model_extra["trtkit"]["conversation"])
        counted.append(response.usage.input_tokens)
        previous = response.id
    assert len(conversations) == 1 and counted == sorted(counted) and counted[0] < counted[-1]  # one growing chain
    assert clients[0].responses.retrieve(previous).output_text == clients[1].responses.retrieve(previous).output_text
    (conversation,) = conversations
    rows = query(store_url, "SELECT session, COUNT(*) FROM requests WHERE session = ? GROUP BY session", (conversation,))
    assert rows == [(conversation, len(QUESTIONS))]  # one ledger row per turn, naming it


def test_either_replica_reads_beats_and_deletes_a_chain_and_guards_it_from_other_keys(two_replicas) -> None:
    replicas, store_url = two_replicas
    first, second = sdks(replicas, add_key(store_url)[1])
    thieves = sdks(replicas, add_key(store_url)[1])
    started = first.responses.create(model=MODEL, input="Start here", max_output_tokens=3)
    beat = second.post(f"/responses/{started.id}/heartbeat", cast_to=object, body={})
    assert beat["conversation"] == started.model_extra["trtkit"]["conversation"]
    for thief in thieves:
        with pytest.raises(openai.NotFoundError):
            thief.responses.retrieve(started.id)
    second.responses.delete(started.id)
    with pytest.raises(openai.NotFoundError):
        first.responses.create(model=MODEL, input="Gone?", previous_response_id=started.id)
