"""Request models of the OpenAI endpoints the gateway serves (responses are the ``openai`` package's types).

Unknown fields are rejected (a typo never silently changes nothing); fields OpenAI defines that we do
not support yet are declared, so the error can name them (see ``sampling.UNSUPPORTED``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# A prompt's text and token ids are never empty: an empty prompt gives the engine nothing to continue, and would
# come back as the engine's refusal (a 5xx) instead of a 400 naming the field.
PromptText = Annotated[str, Field(min_length=1)]
PromptIds = Annotated[list[int], Field(min_length=1)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    user: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Extension (as vLLM accepts it): the end token is banned until this many tokens; benchmarks force lengths
    min_tokens: int | None = None
    # The chosen token's log-probability (chat: true; completions: 0); alternatives are refused by name
    # (sampling._wants_log_probs): the engine returns none
    logprobs: Any = None
    top_logprobs: int | None = None
    # token id (as a string) -> bias from -100 to 100, added to the logits (the engine's embedding_bias)
    logit_bias: dict[str, Any] | None = None
    # Declared to be refused with a clear message (sampling.UNSUPPORTED), not accepted:
    n: int | None = None
    best_of: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    # Structured output (gateway.response_format): OpenAI's text / json_object / json_schema, trtllm-serve's
    # json / regex / ebnf
    response_format: Any = None
    # Accepted and ignored: they change nothing about the answer.
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None  # None only beside an assistant's tool_calls
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's earlier calls, passed to the chat template
    tool_call_id: str | None = None  # a tool message: the call it answers


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    # Tool calls the caller asks for (tool_choice a function or "required"), held well-formed by guided decoding
    # (gateway.tool_calls); "auto" is refused by name
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None


class CompletionRequest(_SamplingFields):
    prompt: PromptText | list[PromptText] | PromptIds | list[PromptIds]  # text or token ids; one prompt per request
