"""``truncation: "auto"``: a chain longer than max_input_len (256 tokens here) goes on with the model config's context
strategy, the client's own (trtkit.context). The engine's input fits, the bill is what the engine got, and the
response's ``trtkit.context`` says what was kept, dropped, summarized or retrieved."""

from __future__ import annotations

from dataclasses import replace

import openai
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
LIMIT = 256  # build.max_input_len of tiny-llama.yaml
FACT = "The invoice number 4471 was paid on the third of March by Ingrid."
FILLER = ["Tell me about the lighthouse keeper and his long winter nights by the sea.",
          "What did the fishermen bring back from the northern banks that year?",
          "Describe the harbour market on a rainy Saturday morning in detail.",
          "How did the village celebrate the end of the herring season?"]


@pytest.fixture(scope="module", params=["tail", "summary", "retrieval"])
def strategy_gateway(request, live_server, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    base = gateway_config(tiny_config, cache=False)
    context = replace(base.client.context, strategy=request.param, summary_max_tokens=24, retrieval_top_k=2)
    running = RunningGateway(replace(base, client=replace(base.client, context=context)), live_server.grpc_url,
                             tmp_path_factory.mktemp(f"gw-{request.param}"))
    yield running
    running.stop()


def chain_past_the_limit(client: openai.OpenAI) -> list[openai.types.responses.Response]:
    turns, previous = [], None
    for text in [FACT, *FILLER, *FILLER, "When was invoice 4471 paid, and by whom?"]:
        response = client.responses.create(model=MODEL, input=text, previous_response_id=previous,
                                           max_output_tokens=8, temperature=0, truncation="auto")
        turns.append(response)
        previous = response.id
    return turns


def test_auto_truncation_fits_the_chain_and_says_what_it_did(strategy_gateway) -> None:
    gateway = strategy_gateway
    strategy = gateway.config.client.context.strategy
    key, secret = gateway.key()
    turns = chain_past_the_limit(openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0))
    reports = [t.model_extra["trtkit"]["context"] for t in turns]
    assert all(t.usage.input_tokens <= LIMIT for t in turns)
    assert sum(len(t.output_text) for t in turns) and reports[-1]["history_messages"] == 2 * (len(turns) - 1)
    assert all(r["strategy"] == strategy and r["truncation"] == "auto" for r in reports)
    last = reports[-1]
    assert last["kept_messages"] + last["dropped_messages"] + last["summarized_messages"] + \
        last["retrieved_messages"] == last["history_messages"]
    rows = gateway.rows(key, "request_id, prompt_tokens, session")
    turn_rows = {r[0]: r for r in rows}
    for turn in turns:  # billed what the engine got, on a ledger row naming the conversation
        row = turn_rows[turn.model_extra["trtkit"]["request_id"]]
        assert row[1] == turn.usage.input_tokens and row[2] == turn.model_extra["trtkit"]["conversation"]
    if strategy == "tail":
        assert last["dropped_messages"] > 0 and last["summarized_messages"] == last["retrieved_messages"] == 0
        counter = gateway.gateway.client.governor.counter
        history = [m for t, text in zip(turns[:-1], [FACT, *FILLER, *FILLER], strict=True)
                   for m in ({"role": "user", "content": text}, {"role": "assistant", "content": t.output_text})]
        engine_input = [*history[len(history) - last["kept_messages"]:],
                        {"role": "user", "content": "When was invoice 4471 paid, and by whom?"}]
        assert turns[-1].usage.input_tokens == counter.count_prompt(counter.chat_prompt(engine_input))
    if strategy == "summary":  # the served model wrote the summary: a governed request of this key and conversation
        assert last["summarized_messages"] > 0 and last["dropped_messages"] == 0
        folds = [r["summary_request"] for r in reports if r["summary_request"]]
        assert folds and all(turn_rows[f["request_id"]][2] == turns[0].model_extra["trtkit"]["conversation"]
                             for f in folds)
        assert len(rows) == len(turns) + len(folds)
    if strategy == "retrieval":  # the fact from the first turn comes back for the question about it
        assert 0 in last["retrieved"] and last["kept_messages"] == 2  # message 0: the user's FACT
