"""Stored conversations on both backends: chains, forks, keys, TTL through the store's clock (never slept),
heartbeats, sweeps by any number of sweepers, delete."""

from __future__ import annotations

import pytest

from tests.helpers.stores import StoreClock
from trtkit.gateway.responses_api.items import message_item, stored_items
from trtkit.store import BudgetLimit, open_gateway_store
from trtkit.store.conversations import (
    TOMBSTONE_SECONDS,
    ConversationExpired,
    ResponseNotFound,
    StoredResponse,
    budget_account,
)

TTL = 60.0


@pytest.fixture
def store(store_url: str):  # type: ignore[no-untyped-def]
    opened = open_gateway_store(store_url, keep_leases=False)
    opened.conversations.clock = StoreClock()
    yield opened
    opened.close()


def turn(response_id: str, previous: str | None, question: str, answer: str, conversation: str = "conv_1",
         summary: str = "") -> StoredResponse:
    return StoredResponse(response_id, conversation, previous, [message_item("user", question)],
                          [message_item("assistant", answer)], summary, 2 if summary else 0, f'{{"id": "{response_id}"}}')


def texts(items: list[dict]) -> list[str]:
    return [item["content"][0]["text"] for item in items]


def count(store, table: str) -> int:  # type: ignore[no-untyped-def]
    return int(store.db.read(lambda s: s.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]))


def test_a_chain_continues_from_any_response_and_forks(store) -> None:  # type: ignore[no-untyped-def]
    conversations = store.conversations
    assert conversations.save(turn("r1", None, "一", "one"), "k", start_ttl_seconds=TTL) == 1_000_000.0 + TTL
    conversations.save(turn("r2", "r1", "二", "two", summary="s2"), "k")
    conversations.save(turn("r3", "r2", "三", "three"), "k")
    conversations.save(turn("r2b", "r1", "fork", "forked"), "k")  # a second turn continuing r1
    chain = conversations.continue_chain("r3", "k")
    assert chain.conversation_id == "conv_1" and chain.responses == 3
    assert texts(chain.items) == ["一", "one", "二", "two", "三", "three"]
    fork = conversations.continue_chain("r2b", "k")
    assert texts(fork.items) == ["一", "one", "fork", "forked"]
    assert texts(conversations.input_items("r3", "k")) == ["一", "one", "二", "two", "三"]  # its own answer left out
    assert conversations.continue_chain("r2", "k").summary == "s2" and fork.summary == ""
    assert conversations.body("r2", "k") == '{"id": "r2"}'


def test_another_keys_response_is_not_found_as_an_unknown_one(store) -> None:  # type: ignore[no-untyped-def]
    store.conversations.save(turn("r1", None, "q", "a"), "owner", start_ttl_seconds=TTL)
    for call in (lambda: store.conversations.continue_chain("r1", "thief"), lambda: store.conversations.body("r1", "thief"),
                 lambda: store.conversations.heartbeat("r1", "thief"), lambda: store.conversations.delete("r1", "thief"),
                 lambda: store.conversations.continue_chain("nope", "owner")):
        with pytest.raises(ResponseNotFound, match="no stored response"):
            call()
    assert count(store, "stored_responses") == 1  # the thief deleted nothing


def test_an_idle_conversation_expires_and_its_rows_are_swept_on_access(store) -> None:  # type: ignore[no-untyped-def]
    conversations, clock = store.conversations, store.conversations.clock
    conversations.save(turn("r1", None, "q", "a"), "k", start_ttl_seconds=TTL, budget_tokens=500)
    conversations.save(turn("r2", "r1", "q", "a"), "k")
    store.reserve(10, 0.0, [BudgetLimit(budget_account("conv_1"), 0.0, 500, None)], None)
    clock.now += TTL - 1
    conversations.continue_chain("r2", "k")  # a turn touches it: alive for another TTL from now
    clock.now += TTL - 1
    conversations.heartbeat("r1", "k")  # so does a heartbeat
    clock.now += TTL + 1
    with pytest.raises(ConversationExpired, match="expired .*idle more than 60 s"):
        conversations.continue_chain("r2", "k")
    assert count(store, "stored_responses") == count(store, "conversations") == 0
    assert store.account(budget_account("conv_1"), 0.0) is None  # its budget account is gone too
    with pytest.raises(ConversationExpired):  # swept, but its tombstone still says why
        conversations.body("r1", "k")
    with pytest.raises(ResponseNotFound):  # to its own key only
        conversations.body("r1", "another key")


def test_a_conversation_swept_in_the_background_still_says_it_expired(store) -> None:  # type: ignore[no-untyped-def]
    conversations, clock = store.conversations, store.conversations.clock
    conversations.save(turn("r1", None, "q", "a"), "k", start_ttl_seconds=TTL)
    clock.now += TTL + 1
    assert store.expire_conversations() == 1 and count(store, "stored_responses") == count(store, "conversations") == 0
    with pytest.raises(ConversationExpired, match="expired"):
        conversations.continue_chain("r1", "k")
    clock.now += TOMBSTONE_SECONDS + 1
    conversations.expire()  # tombstones are leased rows too: gone a day later
    assert count(store, "expired_responses") == 0
    with pytest.raises(ResponseNotFound):
        conversations.continue_chain("r1", "k")


def test_sweepers_claim_each_expired_conversation_once(store_url: str, store) -> None:  # type: ignore[no-untyped-def]
    store.conversations.save(turn("a1", None, "q", "a", conversation="conv_a"), "k", start_ttl_seconds=TTL)
    store.conversations.save(turn("b1", None, "q", "a", conversation="conv_b"), "k", start_ttl_seconds=3 * TTL)
    other = open_gateway_store(store_url, keep_leases=False)  # a second replica's store
    try:
        later = store.conversations.clock.now + 2 * TTL
        assert other.conversations.expire(now=later) == 1 and store.conversations.expire(now=later) == 0
    finally:
        other.close()
    assert [r[0] for r in store.db.read(lambda s: s.execute("SELECT id FROM conversations").fetchall())] == ["conv_b"]
    assert store.conversations.continue_chain("b1", "k").conversation_id == "conv_b"


def test_a_turn_that_outlives_its_conversation_is_not_stored(store) -> None:  # type: ignore[no-untyped-def]
    store.conversations.save(turn("r1", None, "q", "a"), "k", start_ttl_seconds=TTL)
    store.conversations.clock.now += TTL + 1
    assert store.conversations.save(turn("r2", "r1", "q", "a"), "k") is None
    assert count(store, "stored_responses") == 1


def test_delete_removes_the_whole_chain(store) -> None:  # type: ignore[no-untyped-def]
    store.conversations.save(turn("r1", None, "q", "a"), "k", start_ttl_seconds=TTL)
    store.conversations.save(turn("r2", "r1", "q", "a"), "k")
    assert store.conversations.delete("r2", "k") == "conv_1"
    assert count(store, "stored_responses") == count(store, "conversations") == 0
    with pytest.raises(ResponseNotFound):
        store.conversations.continue_chain("r1", "k")


def test_a_keys_conversation_budget_right_round_trips(store) -> None:  # type: ignore[no-untyped-def]
    from trtkit.store import ApiKey

    store.add_key(ApiKey("abcdefabcdef", "app", can_budget_conversations=True), "hash")
    store.add_key(ApiKey("123456123456", "user"), "hash")
    assert store.find_key("abcdefabcdef")[0].can_budget_conversations
    assert not store.find_key("123456123456")[0].can_budget_conversations


def test_a_row_stored_before_items_existed_reads_as_message_items(store) -> None:  # type: ignore[no-untyped-def]
    store.conversations.save(turn("r1", None, "q", "a"), "k", start_ttl_seconds=TTL)
    legacy = '[{"role": "user", "content": "old question"}, {"role": "assistant", "content": "old answer"}]'
    store.db.transact(lambda s: s.execute("INSERT INTO stored_responses (id, conversation_id, key_id, previous_id, "
                                          "created_at, messages, summary, summarized_turns, body) VALUES "
                                          "('r0', 'conv_1', 'k', NULL, 0, ?, '', 0, '{}')", (legacy,)))
    store.db.transact(lambda s: s.execute("UPDATE stored_responses SET previous_id = 'r0' WHERE id = 'r1'"))
    items = stored_items(store.conversations.continue_chain("r1", "k").items)
    assert [(i["role"], i["content"][0]["text"]) for i in items] == [
        ("user", "old question"), ("assistant", "old answer"), ("user", "q"), ("assistant", "a")]
    assert [i["content"] for i in store.conversations.input_items("r0", "k")] == ["old question"]
