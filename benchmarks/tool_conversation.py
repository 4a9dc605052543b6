"""A tool-using conversation through the Responses API, stored against resent (benchmarks/conversations.py runs it).

Turns alternate: a question the model answers with a call of ``get_weather`` (tool_choice names it; the arguments
held to their schema by the engine's grammar), then the function's output, which the model answers in text. Both ways
send the same turns with the same tools and are rendered alike by the gateway (the same prompt, the same grammar,
the same KV reuse): the stored chain sends each turn's new item with ``previous_response_id``; the resent one sends
every item so far with ``store: false`` (what an agent framework does without server state). What differs is what
crosses the wire and the store's read and write.
"""

from __future__ import annotations

import time
from typing import Any

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city", "strict": True,
           "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                          "properties": {"city": {"type": "string", "enum": ["Lisbon", "Oslo", "Lima", "Perth"]}}}}
CALL = {"type": "function", "name": "get_weather"}


def ask(conversation: int, turn: int) -> str:
    opening = f"Conversation {conversation:02d}. " if turn == 0 else ""
    return f"{opening}Question {turn // 2 + 1}: what is the weather like where the ferry goes today?"


def tool_turns(client, counter, conversation: int, turns: int, max_tokens: int, uploads, store,  # type: ignore[no-untyped-def]
               *, stored: bool) -> list[dict[str, Any]]:
    """One conversation's turns, streamed; per turn its billed and cached prompt, TTFT (request sent to the first
    delta: text or a call's arguments), the upload (tokens of the items' text, the body's bytes) and, stored, the
    store's rows and milliseconds (the gateway's own metrics, read around the turn)."""
    every: list[dict[str, Any]] = []  # the items so far, as a client that keeps them resends them
    previous, call, rows = None, None, []
    for turn in range(turns):
        if turn % 2 == 0:
            new = [{"role": "user", "content": ask(conversation, turn)}]
            choice: Any = CALL
        else:
            new = [{"type": "function_call_output", "call_id": call["call_id"], "output": f"Sunny, {18 + turn} C"}]
            choice = "none"
        sent = new if stored else every + new
        before = store.read() if stored else {}
        started, ttft, final = time.perf_counter(), None, None
        with client.responses.create(model="tiny-llama", input=sent, previous_response_id=previous, store=stored,
                                     tools=[WEATHER], tool_choice=choice, max_output_tokens=max_tokens, temperature=0,
                                     stream=True) as events:
            for event in events:
                if event.type in ("response.output_text.delta", "response.function_call_arguments.delta"):
                    ttft = ttft or time.perf_counter() - started
                if event.type in ("response.completed", "response.incomplete"):
                    final = event.response
        after = store.read() if stored else {}
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        item = final.output[0]
        if item.type == "function_call":
            call = {"type": "function_call", "call_id": item.call_id, "name": item.name, "arguments": item.arguments}
            every += [*new, call]
        else:
            every += [*new, {"role": "assistant", "content": item.content[0].text}]
        previous = final.id if stored else None
        rows.append({"prompt_tokens": final.usage.input_tokens,
                     "cached_tokens": final.usage.input_tokens_details.cached_tokens, "ttft_ms": ttft * 1e3,
                     "upload_bytes": uploads.last, "upload_tokens": sum(counter.count(_text(i)) for i in sent),
                     "store_rows_read": delta.get("trtkit_gateway_conversation_rows_total:read", 0.0),
                     "store_rows_written": delta.get("trtkit_gateway_conversation_rows_total:write", 0.0),
                     "store_read_ms": delta.get("trtkit_gateway_conversation_store_seconds_sum:read", 0.0) * 1e3,
                     "store_write_ms": delta.get("trtkit_gateway_conversation_store_seconds_sum:write", 0.0) * 1e3})
    return rows


def _text(item: dict[str, Any]) -> str:
    return str(item.get("content") or item.get("output") or item.get("arguments") or "")


def verdict(resent: list[dict[str, Any]], stored: list[dict[str, Any]], ratio_max: float) -> dict[str, Any]:
    """The targets: turn N's TTFT stored at most ``ratio_max`` x resent; the stored upload of each kind of turn
    (questions, tool outputs) flat while the resent one grows with the conversation."""
    ratio = stored[-1]["ttft_ms"] / resent[-1]["ttft_ms"]
    flat = all(max(u) <= 1.25 * min(u) for u in ([s["upload_bytes"] for s in stored[k::2]] for k in (2, 1)))
    grows = resent[-1]["upload_bytes"] >= len(resent) / 3 * resent[1]["upload_bytes"]
    return {"ratio": ratio, "met": {"tools_ttft_turn_last_le_1.1x": bool(ratio <= ratio_max),
                                    "tools_upload_o_new_input": bool(flat),
                                    "tools_resent_upload_o_history": bool(grows)}}


def table(resent: list[dict[str, Any]], stored: list[dict[str, Any]]) -> None:
    print(f"{'turn':>4} {'kind':>6} | {'billed prompt':>13} {'cached':>13} | {'TTFT ms':>15} | {'upload tokens':>13} "
          f"{'upload bytes':>13} | {'store rows r/w':>14} {'store ms r/w':>13}")
    print(f"{'':>11} | {'sent / strd':>13} {'sent / strd':>13} | {'sent / strd':>15} | {'sent / strd':>13} "
          f"{'sent / strd':>13} | {'stored':>14} {'stored':>13}")
    for t, (r, s) in enumerate(zip(resent, stored, strict=True), start=1):
        kind = "call" if t % 2 else "answer"
        print(f"{t:>4} {kind:>6} | {r['prompt_tokens']:>5.0f} / {s['prompt_tokens']:<5.0f} {r['cached_tokens']:>5.0f} / "
              f"{s['cached_tokens']:<5.0f} | {r['ttft_ms']:>6.1f} / {s['ttft_ms']:<6.1f} | "
              f"{r['upload_tokens']:>5.0f} / {s['upload_tokens']:<5.0f} {r['upload_bytes']:>5.0f} / "
              f"{s['upload_bytes']:<5.0f} | {s['store_rows_read']:>5.0f} / {s['store_rows_written']:<5.0f} "
              f"{s['store_read_ms']:>5.2f} / {s['store_write_ms']:<5.2f}")
