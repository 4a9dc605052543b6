"""The Conversations API's store on both backends: a conversation's items in order, pages of them, turns appending,
keys that find only their own, TTL through the store's clock (never slept), concurrent appends."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.stores import StoreClock
from trtkit.gateway.responses_api.items import message_item
from trtkit.store import open_gateway_store
from trtkit.store.conversation_items import ConversationNotFound
from trtkit.store.conversations import ConversationExpired, ConversationFull, InConversation, StoredResponse

TTL = 60.0


@pytest.fixture
def store(store_url: str):  # type: ignore[no-untyped-def]
    opened = open_gateway_store(store_url, keep_leases=False)
    opened.conversations.clock = StoreClock(2_000_000.0)
    yield opened
    opened.close()


def texts(items: list[dict]) -> list[str]:
    return [item["content"][0]["text"] for item in items]


def make(store, conversation: str = "conv_a", key: str = "k", words: str = "abc"):  # type: ignore[no-untyped-def]
    return store.conversation_items.create(conversation, key, ttl_seconds=TTL, metadata={"topic": "t"},
                                           budget_tokens=None, items=[message_item("user", w) for w in words])


def test_items_keep_their_order_and_page_both_ways(store) -> None:  # type: ignore[no-untyped-def]
    items = store.conversation_items
    row = make(store, words="abcde")
    assert row.metadata == {"topic": "t"} and row.expires_at == row.created_at + TTL
    first = items.page("conv_a", "k", after=None, limit=2, ascending=True)
    assert texts(first.items) == ["a", "b"] and first.has_more
    rest = items.page("conv_a", "k", after=first.items[-1]["id"], limit=10, ascending=True)
    assert texts(rest.items) == ["c", "d", "e"] and not rest.has_more
    newest = items.page("conv_a", "k", after=None, limit=3, ascending=False)
    assert texts(newest.items) == ["e", "d", "c"] and newest.has_more
    items.add("conv_a", "k", [message_item("assistant", "f")])
    assert texts(items.page("conv_a", "k", after=rest.items[-1]["id"], limit=5, ascending=True).items) == ["f"]
    middle = first.items[1]["id"]
    assert items.item("conv_a", "k", middle)["content"][0]["text"] == "b"
    items.delete_item("conv_a", "k", middle)
    assert texts(items.page("conv_a", "k", after=None, limit=10, ascending=True).items) == ["a", "c", "d", "e", "f"]
    with pytest.raises(ConversationNotFound):
        items.item("conv_a", "k", middle)
    with pytest.raises(ConversationNotFound):
        items.page("conv_a", "k", after="msg_nope", limit=5, ascending=True)
    updated = items.update("conv_a", "k", {"topic": "u"}, None)
    assert items.get("conv_a", "k").metadata == {"topic": "u"} == updated.metadata


def test_another_keys_conversation_is_not_found_as_an_unknown_one(store) -> None:  # type: ignore[no-untyped-def]
    make(store, key="owner")
    items = store.conversation_items
    item_id = items.page("conv_a", "owner", after=None, limit=1, ascending=True).items[0]["id"]
    for call in (lambda: items.get("conv_a", "thief"), lambda: items.update("conv_a", "thief", {}, 5),
                 lambda: items.delete("conv_a", "thief"), lambda: items.heartbeat("conv_a", "thief"),
                 lambda: items.page("conv_a", "thief", after=None, limit=5, ascending=True),
                 lambda: items.add("conv_a", "thief", [message_item("user", "x")]),
                 lambda: items.item("conv_a", "thief", item_id), lambda: items.delete_item("conv_a", "thief", item_id),
                 lambda: items.turn_context("conv_a", "thief"), lambda: items.get("conv_nope", "owner")):
        with pytest.raises(ConversationNotFound, match="no conversation"):
            call()
    assert len(items.page("conv_a", "owner", after=None, limit=9, ascending=True).items) == 3  # nothing taken


def test_a_turn_appends_its_items_and_reads_the_whole_conversation(store) -> None:  # type: ignore[no-untyped-def]
    make(store, words="ab")
    context = store.conversation_items.turn_context("conv_a", "k")
    assert texts(context.items) == ["a", "b"] and context.conversation_id == "conv_a"
    turn = StoredResponse("resp_1", "conv_a", None, [message_item("user", "q")], [message_item("assistant", "r")],
                          "", 0, "{}", appends=True)
    assert store.conversations.save(turn, "k") is not None
    assert texts(store.conversation_items.turn_context("conv_a", "k").items) == ["a", "b", "q", "r"]
    assert texts(store.conversations.input_items("resp_1", "k")) == ["a", "b", "q"]
    with pytest.raises(InConversation, match='conversation: "conv_a"'):
        store.conversations.continue_chain("resp_1", "k")


def test_an_idle_conversation_expires_and_says_so(store) -> None:  # type: ignore[no-untyped-def]
    items, clock = store.conversation_items, store.conversations.clock
    make(store)
    clock.now += TTL - 1
    items.heartbeat("conv_a", "k")
    clock.now += TTL - 1
    assert items.get("conv_a", "k").id == "conv_a"  # the heartbeat kept it
    clock.now += TTL + 1
    with pytest.raises(ConversationExpired, match="expired"):
        items.get("conv_a", "k")
    assert store.db.read(lambda s: s.execute("SELECT COUNT(*) FROM conversation_items").fetchone()[0]) == 0
    with pytest.raises(ConversationExpired):  # swept, its tombstone still says why, to its key only
        items.page("conv_a", "k", after=None, limit=1, ascending=True)
    with pytest.raises(ConversationNotFound):
        items.get("conv_a", "another key")
    make(store, conversation="conv_b")
    clock.now += TTL + 1
    assert store.expire_conversations() == 1  # swept in the background: the same answer
    with pytest.raises(ConversationExpired):
        items.get("conv_b", "k")


def test_delete_removes_the_conversation_its_items_and_its_turns(store) -> None:  # type: ignore[no-untyped-def]
    make(store)
    store.conversations.save(StoredResponse("resp_1", "conv_a", None, [], [message_item("assistant", "r")], "", 0,
                                            "{}", appends=True), "k")
    store.conversation_items.delete("conv_a", "k")
    for table in ("conversations", "conversation_items", "stored_responses"):
        assert store.db.read(lambda s, t=table: s.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) == 0


def test_concurrent_appends_get_distinct_positions(store_url: str, store) -> None:  # type: ignore[no-untyped-def]
    make(store, words="")
    replicas = [open_gateway_store(store_url, keep_leases=False) for _ in range(3)]
    for replica in replicas:
        replica.conversations.clock = store.conversations.clock
    try:
        def append(replica, n: int) -> None:  # type: ignore[no-untyped-def]
            for i in range(8):
                replica.conversation_items.add("conv_a", "k", [message_item("user", f"{n}-{i}"),
                                                               message_item("assistant", f"{n}-{i}")])

        threads = [threading.Thread(target=append, args=(r, n)) for n, r in enumerate(replicas)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for replica in replicas:
            replica.close()
    listed = texts(store.conversation_items.page("conv_a", "k", after=None, limit=100, ascending=True).items)
    assert len(listed) == 48 and all(listed[i] == listed[i + 1] for i in range(0, 48, 2))  # each pair together


def test_a_conversation_takes_a_bounded_number_of_items(store, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from trtkit.store import conversation_items, conversation_rows

    for module in (conversation_rows, conversation_items):
        monkeypatch.setattr(module, "MAX_CONVERSATION_ITEMS", 4)
    make(store, words="abc")
    with pytest.raises(ConversationFull):  # the whole append is refused: nothing of it lands
        store.conversation_items.add("conv_a", "k", [message_item("user", "d"), message_item("user", "e")])
    store.conversation_items.add("conv_a", "k", [message_item("user", "d")])
    with pytest.raises(ConversationFull):  # a turn is refused before it runs
        store.conversation_items.turn_context("conv_a", "k")
    assert texts(store.conversation_items.page("conv_a", "k", after=None, limit=9, ascending=True).items) == list("abcd")
