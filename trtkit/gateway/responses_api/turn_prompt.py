"""What the engine sees on a Responses API turn: the stored chain, then the new input, within ``max_input_len``.

``truncation: "disabled"`` (OpenAI's default): the whole chain, or a 400 naming the limit. ``"auto"``: the model
config's context strategy (``client.context.strategy``, trtkit.context: the client's own implementation) picks the
history: ``tail`` the newest turns that fit, ``summary`` older turns folded into a summary the served model writes
(a nested request, run by the caller's ``summarize``: governed, billed to the same key and conversation),
``retrieval`` the latest exchange plus the earlier turns most relevant to the new input. The instructions and the
new input are never cut. The report says what was kept, dropped, summarized or retrieved, so a bill can be explained.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from trtkit.config.schema import ModelConfig
from trtkit.context import (
    ChainHistory,
    Selection,
    SummaryStrategy,
    Turn,
    as_messages,
    fit_messages,
    history_room,
    make_strategy,
)
from trtkit.context.base import BuiltPrompt
from trtkit.errors import InputTooLongError
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.responses_api.items import chat_messages
from trtkit.gateway.tool_format import FunctionSpec
from trtkit.gateway.tool_prompt import render
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import GenerationResult

# (prompt, max_tokens) -> the summarizing request's result, run as a governed request of the same key and conversation
Summarize = Callable[[str, int], Awaitable[GenerationResult]]


@dataclass(slots=True)
class TurnPrompt:
    prompt: BuiltPrompt
    history: ChainHistory  # the chain's turns and its summary state after this turn (a fold updates it)
    report: dict[str, Any]  # the response's trtkit.context


async def turn_prompt(counter: TokenCounter, config: ModelConfig, max_input_tokens: int, *, truncation: str,
                      instructions: str | None, chain: ChainHistory, new: list[dict[str, Any]],
                      summarize: Summarize, functions: tuple[FunctionSpec, ...] = ()) -> TurnPrompt:
    """``new``: the turn's input as chat messages; ``functions``: the tools offered (rendered by the template, or
    in the gateway's tool note: ``tool_prompt``)."""
    system = [{"role": "system", "content": instructions}] if instructions else []
    if truncation != "auto":
        return TurnPrompt(_whole(counter, max_input_tokens, system, chain, new, functions), chain,
                          _report("disabled", None, chain, None, 0))
    strategy = make_strategy(config.client.context.strategy, counter, config.client.context, max_input_tokens,
                             _never_blocking)
    question = "\n".join(m["content"] for m in [*system, *new])
    room = history_room(counter, question, max_input_tokens, config.client.context.max_context_tokens)
    summary = None
    if isinstance(strategy, SummaryStrategy):
        fold = strategy.pending_fold(chain, room)
        if fold is not None:
            result = await summarize(fold.prompt, strategy.summary_max_tokens)
            strategy.apply_fold(chain, fold, result.text)
            summary = {"request_id": result.request_id, "input_tokens": result.usage.prompt_tokens,
                       "output_tokens": result.usage.completion_tokens,
                       "cached_tokens": result.usage.cached_tokens}
    selection = strategy.select(chain, question, room)
    try:
        fitted = fit_messages(counter, system, selection, new, max_input_tokens,
                              render=lambda messages: render(counter, messages, functions))
    except InputTooLongError as exc:
        raise _too_long(str(exc)) from None
    report = _report("auto", strategy.name, chain, selection, fitted.dropped_messages)
    report["summary_request"] = summary
    return TurnPrompt(fitted, chain, report)


def chain_history(items: list[dict[str, Any]], summary: str, summarized_turns: int) -> ChainHistory:
    """A stored chain's items as the context strategies' turns (a call or an output rides in ``Turn.extra``)."""
    turns = [Turn(m["role"], m["content"], {k: v for k, v in m.items() if k not in ("role", "content")} or None)
             for m in chat_messages(items)]
    return ChainHistory(turns, summary, summarized_turns)


def _whole(counter: TokenCounter, max_input_tokens: int, system: list[dict[str, str]], chain: ChainHistory,
           new: list[dict[str, Any]], functions: tuple[FunctionSpec, ...]) -> BuiltPrompt:
    messages = [*system, *as_messages(chain.turns), *new]
    text = render(counter, messages, functions)
    num_tokens = counter.count_prompt(text)
    if num_tokens > max_input_tokens:
        raise _too_long(f"the conversation with the new input is {num_tokens} tokens (chat template included), over "
                        f"the input limit of {max_input_tokens} tokens (build.max_input_len, or client.max_input_tokens)"
                        f"; send truncation: \"auto\" to let the gateway fit it with its context strategy, or start a "
                        f"new conversation")
    return BuiltPrompt(text, num_tokens, messages, 0)


def _too_long(message: str) -> RequestValidationError:
    return RequestValidationError(message, param="input", code="context_length_exceeded")


def _report(truncation: str, strategy: str | None, chain: ChainHistory, selection: Selection | None,
            fit_dropped: int) -> dict[str, Any]:
    """What became of the history: kept verbatim (the newest), dropped, folded into the summary, quoted by
    retrieval (``retrieved``: their indices in the chain's messages, oldest first)."""
    total = len(chain.turns)
    if selection is None:
        return {"truncation": truncation, "strategy": strategy, "history_messages": total, "kept_messages": total,
                "dropped_messages": 0, "summarized_messages": 0, "retrieved_messages": 0, "retrieved": []}
    notes = len(selection) - selection.verbatim  # the strategy's own system notes, first in the selection
    kept = min(selection.verbatim, len(selection) - fit_dropped)
    note_kept = fit_dropped < notes
    summarized = selection.summarized if note_kept else 0
    retrieved = list(selection.retrieved) if note_kept else []
    return {"truncation": truncation, "strategy": strategy, "history_messages": total, "kept_messages": kept,
            "dropped_messages": total - kept - summarized - len(retrieved), "summarized_messages": summarized,
            "retrieved_messages": len(retrieved), "retrieved": retrieved}


def _never_blocking(prompt: str, max_tokens: int) -> str:
    raise AssertionError("the gateway folds summaries itself (pending_fold -> apply_fold), never through select")
