"""Context strategies keep every prompt within the input limit, counted with the real tokenizer."""

from __future__ import annotations

import pytest

from trtkit.context import RetrievalStrategy, SummaryStrategy, TailStrategy, fit_prompt
from trtkit.conversation.sessions import SessionStore
from trtkit.governance.tokens import RawPrompt, TokenCounter, prompt_form

LIMIT = 120
TOPICS = ["the red bicycle in the garage", "our trip to Lisbon in May", "the invoice number 4471",
          "grandmother's apple pie recipe", "the broken dishwasher", "learning to play the cello"]


def long_chat(store: SessionStore, turns: int = 30):
    session = store.create()
    for i in range(turns):
        topic = TOPICS[i % len(TOPICS)]
        session.add("user", f"Turn {i}: tell me more about {topic}, with all the details you remember.")
        session.add("assistant", f"About {topic}: " + "it was memorable and " * (3 + i % 4) + "that is all.")
    return session


def strategies(counter: TokenCounter, calls: list[int]):
    def summarize(prompt: str, max_tokens: int) -> str:
        calls.append(counter.count_prompt(prompt))
        return "a summary that rambles on far longer than it was allowed to " * 10  # clipped to max_tokens

    return [TailStrategy(counter), SummaryStrategy(counter, 24, LIMIT, summarize),
            RetrievalStrategy(counter, 3, ["The invoice number 4471 was paid on 3 March."])]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["tail", "summary", "retrieval"])
def test_every_strategy_fits_the_limit_across_30_turns(tiny_counter: TokenCounter, index: int) -> None:
    calls: list[int] = []
    strategy = strategies(tiny_counter, calls)[index]
    store = SessionStore(ttl_seconds=60)
    session = store.create()
    for i in range(30):
        question = f"Question {i}: what about {TOPICS[i % len(TOPICS)]}?"
        history = strategy.select(session, question, LIMIT - tiny_counter.count(question) - 16)
        prompt = fit_prompt(tiny_counter, history, question, LIMIT)
        assert prompt.num_tokens == tiny_counter.count_prompt(prompt.text) <= LIMIT
        assert question in prompt.text
        session.add("user", question)
        session.add("assistant", f"Answer {i}: " + "words " * 15)
    assert all(n <= LIMIT for n in calls)
    if strategy.name == "summary":
        assert calls and session.summary and tiny_counter.count(session.summary) <= 24
        assert session.summarized_turns > 0


def test_retrieval_picks_the_relevant_earlier_turn(tiny_counter: TokenCounter) -> None:
    session = long_chat(SessionStore(60))
    strategy = RetrievalStrategy(tiny_counter, 2, ["The invoice number 4471 was paid on 3 March."])
    history = strategy.select(session, "When was invoice 4471 paid?", 200)
    notes = history[0]["content"]
    assert history[0]["role"] == "system" and "4471" in notes and "paid on 3 March" in notes


def test_tail_keeps_the_newest_turns(tiny_counter: TokenCounter) -> None:
    session = long_chat(SessionStore(60))
    history = TailStrategy(tiny_counter).select(session, "and then?", 80)
    assert history and history[-1]["content"] == session.turns[-1].content
    assert "Turn 0:" not in " ".join(m["content"] for m in history)


def test_a_question_over_the_limit_is_cut_to_fit(tiny_counter: TokenCounter) -> None:
    prompt = fit_prompt(tiny_counter, [{"role": "user", "content": "old"}], "why " * 400 + "the end?", LIMIT)
    assert prompt.num_tokens <= LIMIT and prompt.text.endswith("<|im_start|>assistant\n") and "the end?" in prompt.text
    assert prompt.dropped_messages == 1


def test_the_conversation_is_rendered_by_the_template_each_turn_in_its_role(tiny_counter: TokenCounter) -> None:
    """Before 2026-12-06 a Conversation sent "Role: text" lines, which the server wrapped as one user turn."""
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello."}]
    prompt = fit_prompt(tiny_counter, history, "Bye?", LIMIT)
    assert isinstance(prompt.text, RawPrompt) and prompt_form(prompt.text) == "rendered"
    for message in [*history, {"role": "user", "content": "Bye?"}]:
        assert f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>" in prompt.text
    assert prompt.text.count("<|im_start|>system") == 1 and "User:" not in prompt.text
    assert prompt.num_tokens == len(tiny_counter.text_ids(prompt.text))  # nothing added around it


def test_chinese_costs_more_tokens_than_characters_suggest(tiny_counter: TokenCounter) -> None:
    chinese = tiny_counter.measure("我们今天下午去公园散步，天气很好，心情也很好。")
    english = tiny_counter.measure("We went for a walk in the park this afternoon; the weather was lovely.")
    assert chinese.tokens > chinese.characters  # more than one token per character
    assert english.chars_per_token > 3 * chinese.chars_per_token


@pytest.mark.parametrize("chat_template", [False, True])
def test_prompt_count_matches_the_servers_preprocessing(tiny_llama_dir, chat_template: bool) -> None:
    """Contract with trtkit.triton_models: the client counts exactly the ids the server will make."""
    from trtkit.triton_models.preprocessing import Limits, Preprocessor, load_tokenizer

    counter = TokenCounter(tiny_llama_dir, chat_template=chat_template)
    server = Preprocessor(load_tokenizer(tiny_llama_dir), Limits(4096, 8192), chat_template=chat_template)
    assert counter.wraps_in_chat_template == chat_template
    for text in ["Hello", "我们今天下午去公园散步。", "User: hi\nAssistant: hello\nUser: and?\nAssistant:",
                 "<|im_start|>odd text with a special token", "  spaces  and\ttabs "]:
        assert counter.prompt_ids(text) == server.encode_prompt(text), text
        for prompt in (RawPrompt(text), RawPrompt(text, special_tokens=False)):  # every form the wire carries
            assert counter.prompt_ids(prompt) == server.encode_prompt(text, prompt_form(prompt)), (text, prompt_form(prompt))
    conversation = counter.chat_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert counter.prompt_ids(conversation) == server.encode_prompt(conversation, prompt_form(conversation))
