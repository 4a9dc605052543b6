"""An agent framework on the Responses API through the gateway: the openai-agents SDK's run loop with a function tool
and a typed final output, against the real tritonserver. Turn one is held to a call of the tool (tool_choice
"required"; the tiny engine has random weights, so the test asks for the call it needs); the framework runs the
function and sends its output back; turn two, with the tool spent, answers in the output type's JSON schema
(text.format, which also ends the random engine's answer: the framework takes an answer cut by the length limit as a
failure). Three ways the framework keeps the conversation: resending every item, chaining with previous_response_id,
and a Conversations API conversation. Every turn is one ledger row with the engine's counts."""

from __future__ import annotations

import asyncio
from typing import Literal

import openai
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from pydantic import BaseModel

from trtkit.gateway.tool_prompt import render

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"


class Forecast(BaseModel):
    sky: Literal["sunny", "rainy", "cloudy"]


def weather_agent(client: openai.AsyncOpenAI, calls: list[str]) -> Agent:
    """An agent whose one tool may be called once (then it is disabled: the next turn must answer)."""

    @function_tool(is_enabled=lambda ctx, agent: not calls)
    def get_weather(city: Literal["Paris", "Oslo", "Lima"]) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"Sunny in {city}, 21 C"

    return Agent(name="weather", instructions="Answer briefly.", tools=[get_weather], output_type=Forecast,
                 model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                 model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=120))


@pytest.mark.parametrize("keeping", ["resent", "chained", "conversation"])
def test_an_agent_calls_a_function_tool_and_answers(gateway, keeping: str) -> None:
    set_tracing_disabled(True)
    key, secret = gateway.key()

    async def run() -> tuple[object, list[str], str | None]:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
        try:
            calls: list[str] = []
            kept: dict[str, object] = {}
            if keeping == "chained":
                kept["auto_previous_response_id"] = True
            if keeping == "conversation":
                kept["conversation_id"] = (await client.conversations.create()).id
            result = await Runner.run(weather_agent(client, calls), "What is the weather in Paris?", max_turns=4,
                                      **kept)  # type: ignore[arg-type]
            return result, calls, kept.get("conversation_id")  # type: ignore[return-value]
        finally:
            await client.close()

    result, calls, conversation = asyncio.run(run())
    assert len(calls) == 1 and calls[0] in ("Paris", "Oslo", "Lima")  # the framework ran the function once
    first, second = result.raw_responses  # type: ignore[attr-defined]
    assert [item.type for item in first.output] == ["function_call"]
    assert isinstance(result.final_output, Forecast)  # type: ignore[attr-defined]
    call = first.output[0]
    chain = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is the weather in Paris?"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": call.call_id, "name": "get_weather", "arguments": call.arguments}]},
             {"role": "tool", "tool_call_id": call.call_id, "content": f"Sunny in {calls[0]}, 21 C"}]
    counter = gateway.gateway.client.governor.counter
    assert second.usage.input_tokens == counter.count_prompt(render(counter, chain))  # the call and its output, replayed
    rows = gateway.rows(key, "prompt_tokens, completion_tokens")
    assert rows == [(r.usage.input_tokens, r.usage.output_tokens) for r in (first, second)]
    if conversation is not None:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
        kinds = [i.type for i in client.conversations.items.list(conversation, order="asc")]
        assert kinds == ["message", "function_call", "function_call_output", "message"]
