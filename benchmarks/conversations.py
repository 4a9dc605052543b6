"""A 10-turn conversation two ways through one gateway: resending the history (chat completions) against a stored
chain (the Responses API's previous_response_id), in one run; then a tool-using conversation the same two ways
(``tool_conversation.py``: calls and their outputs, stored against resent with ``store: false``).

    python benchmarks/conversations.py [--turns 10] [--reps 6] [--max-tokens 32] [--quick]

Starts the tiny model's tritonserver (response cache off: every turn reaches the engine; inputs up to 2,048 tokens)
and `trtkit gateway` in front of it with its SQLite store, creates a key, then runs ``--reps`` conversations each
way, alternating (chat, responses, chat, ...), each streamed turn by turn with greedy answers of ``--max-tokens``.
Each conversation opens with its own number, so no conversation reuses another's KV blocks beyond the chat
template's opening; within a conversation, each turn reuses the previous turn's KV on both paths alike.

Per turn (medians over the reps): prompt tokens billed and cached (``usage``), TTFT (request sent to the first text
delta), what the client uploads (the tokens of the message text it sends, and the HTTP body's bytes), and for the
stored chain the store's cost (rows read and written, milliseconds of the read and of the write, from the gateway's
own ``trtkit_gateway_conversation_store_*`` metrics). Targets: the 10th turn's TTFT with the stored chain at most
1.1x the resent one's; the stored chain's upload is exactly the new input (O(new input)) while the resent one grows
with the history; the same two targets for the tool-using conversation's turn 10 (a function's output answered
in text). ``--quick``: 2 conversations each way, 8-token answers (about a minute). Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import print_bench  # noqa: E402
from gateway_overhead import create_key, serving  # noqa: E402
from tool_conversation import table as tool_table  # noqa: E402
from tool_conversation import tool_turns, verdict  # noqa: E402

TTFT_RATIO_MAX = 1.1
TOPICS = ["the ferry timetable to the islands", "a recipe for apple cake", "the history of the lighthouse",
          "planting tomatoes on a balcony", "how tides work", "a weekend in Lisbon", "repairing a bicycle chain",
          "learning the cello as an adult", "the northern lights", "a good book for a long train ride"]


def bench_config(work: Path) -> Path:
    import yaml

    data = yaml.safe_load((ROOT / "model_configs" / "tiny-llama.yaml").read_text())
    data.setdefault("client", {})["cache"] = {"enabled": False}
    data["build"].update(max_input_len=2048, max_seq_len=4096, max_num_tokens=2048)
    data["serve"]["cpu_kv_cache_mb"] = 64
    path = work / "tiny-llama-conversations.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def question(conversation: int, turn: int) -> str:
    opening = f"Conversation {conversation:02d}. " if turn == 0 else ""
    return f"{opening}Turn {turn + 1}: tell me something about {TOPICS[turn % len(TOPICS)]}, in a few sentences."


class Uploads:
    """The bytes of each request body the client sends (an httpx event hook)."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self, request) -> None:  # type: ignore[no-untyped-def]
        self.last = len(request.content)


class StoreMetrics:
    """The gateway's conversation-store counters, read from /metrics around a turn."""

    def __init__(self, url: str) -> None:
        self.url = url

    def read(self) -> dict[str, float]:
        import httpx

        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        found = {}
        for name in ("trtkit_gateway_conversation_store_seconds_sum", "trtkit_gateway_conversation_rows_total"):
            for op, value in re.findall(rf'^{name}{{op="(\w+)"}} ([0-9.e+-]+)$', text, flags=re.M):
                found[f"{name}:{op}"] = float(value)
        return found


def chat_turns(client, counter, conversation: int, turns: int, max_tokens: int, uploads: Uploads) -> list[dict]:  # type: ignore[no-untyped-def]
    messages: list[dict[str, str]] = []
    rows = []
    for turn in range(turns):
        messages.append({"role": "user", "content": question(conversation, turn)})
        started, ttft, text, usage = time.perf_counter(), None, [], None
        for chunk in client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=max_tokens,
                                                    temperature=0, stream=True, stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content:
                ttft = ttft or time.perf_counter() - started
                text.append(chunk.choices[0].delta.content)
            usage = chunk.usage or usage
        messages.append({"role": "assistant", "content": "".join(text)})
        rows.append({"prompt_tokens": usage.prompt_tokens, "cached_tokens": usage.prompt_tokens_details.cached_tokens,
                     "ttft_ms": ttft * 1e3, "upload_bytes": uploads.last,
                     "upload_tokens": sum(counter.count(m["content"]) for m in messages[:-1])})
    return rows


def responses_turns(client, counter, conversation: int, turns: int, max_tokens: int, uploads: Uploads,  # type: ignore[no-untyped-def]
                    store: StoreMetrics) -> list[dict]:
    previous, rows = None, []
    for turn in range(turns):
        text = question(conversation, turn)
        before = store.read()
        started, ttft, final = time.perf_counter(), None, None
        with client.responses.create(model="tiny-llama", input=text, previous_response_id=previous,
                                     max_output_tokens=max_tokens, temperature=0, stream=True) as events:
            for event in events:
                if event.type == "response.output_text.delta":
                    ttft = ttft or time.perf_counter() - started
                if event.type in ("response.completed", "response.incomplete"):
                    final = event.response
        after = store.read()
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        previous = final.id
        rows.append({"prompt_tokens": final.usage.input_tokens,
                     "cached_tokens": final.usage.input_tokens_details.cached_tokens, "ttft_ms": ttft * 1e3,
                     "upload_bytes": uploads.last, "upload_tokens": counter.count(text),
                     "store_rows_read": delta.get("trtkit_gateway_conversation_rows_total:read", 0.0),
                     "store_rows_written": delta.get("trtkit_gateway_conversation_rows_total:write", 0.0),
                     "store_read_ms": delta.get("trtkit_gateway_conversation_store_seconds_sum:read", 0.0) * 1e3,
                     "store_write_ms": delta.get("trtkit_gateway_conversation_store_seconds_sum:write", 0.0) * 1e3})
    return rows


def medians(runs: list[list[dict]]) -> list[dict]:
    return [{k: round(statistics.median(run[t][k] for run in runs), 3) for k in runs[0][t]}
            for t in range(len(runs[0]))]


def load_average() -> float:
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="2 conversations each way, 8-token answers")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.max_tokens = 2, 8
    import httpx
    import openai

    from trtkit.config import load_config
    from trtkit.governance.tokens import TokenCounter
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer
    from trtkit.sources.resolve import resolve_model_dir

    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="trtkit-conversations-") as tmp:
        work = Path(tmp)
        env = os.environ.copy() | {"TRTKIT_HOME": str(work / "home")}
        os.environ["TRTKIT_HOME"] = env["TRTKIT_HOME"]
        config_path = bench_config(work)
        config = load_config(config_path)
        repo = deploy_repository(config, resolve_model_dir(config.model.source), work / "repo", target="cpu").out_dir
        counter = TokenCounter.from_config(config)
        secret = create_key(env)
        with serving(TritonServer(repo, start_timeout_s=150, log_path=work / "triton.log"), env, config_path) as (
                _gateway, url):
            uploads = Uploads()
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0,
                                   http_client=httpx.Client(event_hooks={"request": [uploads]}, timeout=120))
            store = StoreMetrics(url)
            chat_turns(client, counter, 99, 2, args.max_tokens, uploads)  # warm-up: both paths' first use
            responses_turns(client, counter, 98, 2, args.max_tokens, uploads, store)
            chat_runs, stored_runs = [], []
            for rep in range(args.reps):  # alternating, so drift on a shared machine falls on both paths alike
                chat_runs.append(chat_turns(client, counter, 2 * rep, args.turns, args.max_tokens, uploads))
                stored_runs.append(responses_turns(client, counter, 2 * rep + 1, args.turns, args.max_tokens,
                                                   uploads, store))
            tool_turns(client, counter, 97, 2, args.max_tokens, uploads, store, stored=True)  # warm-up: the grammar
            tools_resent, tools_stored = [], []
            for rep in range(args.reps):
                tools_resent.append(tool_turns(client, counter, 50 + 2 * rep, args.turns, args.max_tokens, uploads,
                                               store, stored=False))
                tools_stored.append(tool_turns(client, counter, 51 + 2 * rep, args.turns, args.max_tokens, uploads,
                                               store, stored=True))
    report(medians(chat_runs), medians(stored_runs), args, load_before, load_average(),
           (medians(tools_resent), medians(tools_stored)))


def report(chat: list[dict], stored: list[dict], args, load_before: float, load_after: float,  # type: ignore[no-untyped-def]
           tools: tuple[list[dict], list[dict]]) -> None:
    print(f"{'turn':>4} | {'billed prompt':>13} {'cached':>13} | {'TTFT ms':>15} | {'upload tokens':>13} "
          f"{'upload bytes':>13} | {'store rows r/w':>14} {'store ms r/w':>13}")
    print(f"{'':>4} | {'chat / resp':>13} {'chat / resp':>13} | {'chat / resp':>15} | {'chat / resp':>13} "
          f"{'chat / resp':>13} | {'resp':>14} {'resp':>13}")
    for t, (c, s) in enumerate(zip(chat, stored, strict=True), start=1):
        print(f"{t:>4} | {c['prompt_tokens']:>5.0f} / {s['prompt_tokens']:<5.0f} {c['cached_tokens']:>5.0f} / "
              f"{s['cached_tokens']:<5.0f} | {c['ttft_ms']:>6.1f} / {s['ttft_ms']:<6.1f} | "
              f"{c['upload_tokens']:>5.0f} / {s['upload_tokens']:<5.0f} {c['upload_bytes']:>5.0f} / "
              f"{s['upload_bytes']:<5.0f} | {s['store_rows_read']:>5.0f} / {s['store_rows_written']:<5.0f} "
              f"{s['store_read_ms']:>5.2f} / {s['store_write_ms']:<5.2f}")
    ratio = stored[-1]["ttft_ms"] / chat[-1]["ttft_ms"]
    later = [s["upload_bytes"] for s in stored[1:]]  # every turn after the first names its previous response
    flat = max(later) <= 1.25 * min(later)  # the stored chain's body does not grow with the history
    grows = chat[-1]["upload_bytes"] >= len(chat) / 2 * chat[0]["upload_bytes"]  # the resent one does
    met = {"ttft_turn_last_le_1.1x": bool(ratio <= TTFT_RATIO_MAX), "upload_o_new_input": bool(flat),
           "resent_upload_o_history": bool(grows)}
    print(f"turn {len(chat)} TTFT: stored chain {stored[-1]['ttft_ms']:.1f} ms, resent {chat[-1]['ttft_ms']:.1f} ms "
          f"(x{ratio:.3f}, target <= {TTFT_RATIO_MAX}); load average {load_before:.2f} before, {load_after:.2f} after")
    print("\nA tool-using conversation (odd turns: a call of get_weather; even turns: its output, answered in text)")
    tool_table(*tools)
    tool = verdict(*tools, TTFT_RATIO_MAX)
    print(f"turn {len(chat)} TTFT (tools): stored chain {tools[1][-1]['ttft_ms']:.1f} ms, resent "
          f"{tools[0][-1]['ttft_ms']:.1f} ms (x{tool['ratio']:.3f}, target <= {TTFT_RATIO_MAX})")
    print_bench({"benchmark": "conversations", "turns": args.turns, "reps": args.reps,
                 "max_tokens": args.max_tokens, "ttft_ratio_last_turn": round(ratio, 3),
                 "tools_ttft_ratio_last_turn": round(tool["ratio"], 3),
                 "load_average": [round(load_before, 2), round(load_after, 2)],
                 "per_turn": {"chat": chat, "responses": stored, "tools_resent": tools[0], "tools_stored": tools[1]},
                 "met": {**met, **tool["met"]}})


if __name__ == "__main__":
    main()
