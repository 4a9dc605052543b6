"""A stored conversation shared by two gateway replicas (separate OS processes) on one PostgreSQL database: a chain
started on one replica continues on the other, turn after turn, streamed or not; either replica reads, heart-beats
or deletes it; another key's id is a 404 on both."""

from __future__ import annotations

import secrets
import time

import openai
import psycopg
import pytest

from tests.fleet.replicas import replica_config, start_replicas
from trtkit.gateway.keys import ApiKey, hash_secret, new_secret
from trtkit.store import open_database, open_gateway_store, parse_store_url

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
QUESTIONS = ["Bonjour !", "春天来了吗？", "And then?", "東京は晴れですか。", "One more?", "Merci."]


@pytest.fixture(scope="module")
def two_replicas(live_server, postgres_cluster, tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("responses-fleet")
    name = f"responses_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_cluster.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    store_url = postgres_cluster.url_for(name)
    replicas = start_replicas(2, replica_config(folder, store_url, store_url, 5.0), live_server.grpc_url, folder)
    yield replicas, store_url
    for replica in replicas:
        replica.stop()


def new_key(store_url: str) -> str:
    key_id, secret = new_secret()
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        store.add_key(ApiKey(key_id, f"fleet-{secrets.token_hex(4)}", created_at=time.time()), hash_secret(secret))
    finally:
        store.close()
    return secret


def sdks(replicas, secret: str) -> list[openai.OpenAI]:  # type: ignore[no-untyped-def]
    return [openai.OpenAI(base_url=f"{r.url}/v1", api_key=secret, max_retries=0) for r in replicas]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_chain_alternates_between_two_replicas(two_replicas, stream: bool) -> None:
    replicas, store_url = two_replicas
    clients = sdks(replicas, new_key(store_url))
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
    db = open_database(parse_store_url(store_url, "gateway.store"))
    try:
        rows = db.read(lambda s: s.execute("SELECT session, COUNT(*) FROM requests WHERE session = ? GROUP BY session",
                                           (conversation,)).fetchall())
    finally:
        db.close()
    assert [tuple(r) for r in rows] == [(conversation, len(QUESTIONS))]  # one ledger row per turn, naming it


def test_either_replica_reads_beats_and_deletes_a_chain_and_guards_it_from_other_keys(two_replicas) -> None:
    replicas, store_url = two_replicas
    first, second = sdks(replicas, new_key(store_url))
    thieves = sdks(replicas, new_key(store_url))
    started = first.responses.create(model=MODEL, input="Start here", max_output_tokens=3)
    beat = second.post(f"/responses/{started.id}/heartbeat", cast_to=object, body={})
    assert beat["conversation"] == started.model_extra["trtkit"]["conversation"]
    for thief in thieves:
        with pytest.raises(openai.NotFoundError):
            thief.responses.retrieve(started.id)
    second.responses.delete(started.id)
    with pytest.raises(openai.NotFoundError):
        first.responses.create(model=MODEL, input="Gone?", previous_response_id=started.id)
