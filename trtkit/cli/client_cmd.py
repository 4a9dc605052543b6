"""`trtkit generate`, `trtkit chat`, `trtkit usage`, `trtkit tokens count`: thin wrappers over trtkit.transport,
trtkit.conversation and the usage ledger (trtkit.store)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from trtkit.cli.options import ConfigArg, GuideOpt, GuideTypeOpt, JsonOpt, read_guide
from trtkit.errors import ClientError

UrlOpt = Annotated[str | None, typer.Option("--url", help="tritonserver gRPC address host:port; default: the newest "
                                            "server started by `trtkit serve`, else 127.0.0.1:serve.grpc_port")]
MaxTokensOpt = Annotated[int | None, typer.Option("--max-tokens", help="New tokens at most (clamped to "
                                                  "max_seq_len); default client.default_max_tokens")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="0 = greedy (deterministic, cacheable)")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Fixed sampling seed (makes sampling cacheable)")]
UserOpt = Annotated[str, typer.Option("--user", help="User name recorded in the ledger and used by budgets")]
KeyOpt = Annotated[str, typer.Option("--key-id", help="API key name (never the secret) for the ledger and budgets")]

tokens_app = typer.Typer(help="Count characters against tokens with the model's tokenizer.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
    app.command("chat")(chat)
    app.command("usage")(usage)
    app.add_typer(tokens_app, name="tokens")


def _server_url(config, url: str | None) -> str:  # type: ignore[no-untyped-def]
    if url:
        return url
    from trtkit.serve.state import read_records

    running = sorted((r for r in read_records() if r.is_running()), key=lambda r: r.started_at)
    return running[-1].grpc_url if running else f"127.0.0.1:{config.serve.grpc_port}"


def _client(config_path: Path, url: str | None, user: str, key_id: str):  # type: ignore[no-untyped-def]
    from trtkit.config import load_config
    from trtkit.governance import Caller
    from trtkit.transport import TritonLLMClient

    config = load_config(config_path)
    return config, TritonLLMClient(_server_url(config, url), config=config, caller=Caller(user=user, key_id=key_id))


def _usage_line(result) -> str:  # type: ignore[no-untyped-def]
    u = result.usage
    ttft = f"{result.ttft_s * 1e3:.0f} ms" if result.ttft_s is not None else "-"
    cache = " (cache hit)" if result.cache_hit else ""
    return (f"[usage] prompt {u.prompt_tokens} (cached {u.cached_tokens}) + completion {u.completion_tokens} = "
            f"{u.total_tokens} tokens; finish {result.finish_reason}; TTFT {ttft}; "
            f"latency {result.latency_s * 1e3:.0f} ms; cost {result.cost:.6g}{cache}")


def generate(config_path: ConfigArg, prompt: Annotated[str, typer.Argument(help="Prompt text; '-' reads stdin")],
             url: UrlOpt = None, max_tokens: MaxTokensOpt = None, temperature: TemperatureOpt = 0.0,
             seed: SeedOpt = None, stream: Annotated[bool, typer.Option("--stream/--no-stream")] = True,
             user: UserOpt = "", key_id: KeyOpt = "", as_json: JsonOpt = False, guide_type: GuideTypeOpt = None,
             guide: GuideOpt = None) -> None:
    """One-shot generation with exact token usage (text to stdout, usage to stderr)."""
    from trtkit.governance import SamplingParams

    text = sys.stdin.read() if prompt == "-" else prompt
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed,
                            guided_decoding_guide_type=guide_type, guided_decoding_guide=read_guide(guide_type, guide))
    _, client = _client(config_path, url, user, key_id)
    with client:
        if stream and not as_json:
            result = None
            for chunk in client.stream(text, params):
                typer.echo(chunk.text, nl=False)
                result = chunk.result or result
            typer.echo("")
        else:
            result = client.generate(text, params)
    assert result is not None
    if as_json:
        typer.echo(json.dumps({"id": result.request_id, "text": result.text, "finish_reason": result.finish_reason,
                               "usage": result.usage.to_openai(), "cache_hit": result.cache_hit,
                               "ttft_ms": None if result.ttft_s is None else result.ttft_s * 1e3,
                               "latency_ms": result.latency_s * 1e3, "cost": result.cost}, indent=2))
    else:
        if not stream:
            typer.echo(result.text)
        typer.echo(_usage_line(result), err=True)


def chat(config_path: ConfigArg, url: UrlOpt = None,
         strategy: Annotated[str | None, typer.Option("--strategy", help="tail | summary | retrieval; default "
                                                      "client.context.strategy")] = None,
         max_tokens: MaxTokensOpt = None, temperature: TemperatureOpt = 0.0, user: UserOpt = "",
         key_id: KeyOpt = "", session: Annotated[str | None, typer.Option("--session", help="Session id")] = None
         ) -> None:
    """Interactive streaming chat; usage after each turn. An empty line or Ctrl-D ends it."""
    from trtkit.conversation import Conversation
    from trtkit.governance import SamplingParams

    config, client = _client(config_path, url, user, key_id)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    with client:
        talk = Conversation(client, config, client.governor.counter, strategy=strategy, caller=client.setup.caller)
        session_id = talk.start(session)
        typer.echo(f"session {session_id}, strategy {talk.strategy.name}; empty line to quit", err=True)
        while True:
            typer.echo("> ", nl=False, err=True)
            line = sys.stdin.readline()
            if not line.strip():
                break
            result = None
            for chunk in talk.ask_stream(session_id, line.strip(), params):
                typer.echo(chunk.text, nl=False)
                result = chunk.result or result
            typer.echo("")
            if result is not None:
                typer.echo(_usage_line(result), err=True)


def usage(by: Annotated[str, typer.Option("--by", help="day | model | user | key | session")] = "day",
          fmt: Annotated[str, typer.Option("--format", help="table | csv | json")] = "table",
          days: Annotated[float | None, typer.Option("--days", help="Only the last N days")] = None,
          ledger_url: Annotated[str | None, typer.Option("--ledger", help="Ledger: sqlite:///PATH, a file path or "
                                                         "postgresql://...; default $TRTKIT_HOME/usage.db")] = None
          ) -> None:
    """Report the usage ledger by day, model, user, API key (the gateway's key names) or session."""
    from trtkit.store.ledger import open_ledger
    from trtkit.store.usage_reports import format_report, usage_report
    if by not in ("day", "model", "user", "key", "session"):
        raise ClientError(f"--by {by!r} is unknown; use day, model, user, key or session")
    if fmt not in ("table", "csv", "json"):
        raise ClientError(f"--format {fmt!r} is unknown; use table, csv or json")
    since = time.time() - days * 86400 if days else None
    from trtkit.store import ledger_url as resolve_ledger_url

    with open_ledger(resolve_ledger_url(ledger_url, "--ledger")) as ledger:
        typer.echo(format_report(usage_report(ledger, by, since), fmt, by))  # type: ignore[arg-type]


@tokens_app.command("count")
def tokens_count(text: Annotated[str, typer.Argument(help="Text to count, or a path to a text file")],
                 config: Annotated[Path, typer.Option("--config", "-c", help="Model config YAML (its tokenizer)")],
                 as_json: JsonOpt = False) -> None:
    """Characters against tokens for this model. Non-English text often costs several times more tokens."""
    from trtkit.config import load_config
    from trtkit.governance.tokens import TokenCounter

    path = Path(text)
    body = path.read_text(encoding="utf-8") if len(text) < 4096 and path.is_file() else text
    m = TokenCounter.from_config(load_config(config)).measure(body)
    if as_json:
        typer.echo(json.dumps({"characters": m.characters, "utf8_bytes": m.utf8_bytes, "tokens": m.tokens,
                               "chars_per_token": round(m.chars_per_token, 3)}))
        return
    typer.echo(f"characters  {m.characters}\nutf8 bytes  {m.utf8_bytes}\ntokens      {m.tokens}\n"
               f"chars/token {m.chars_per_token:.2f}")
    if m.tokens > m.characters:
        typer.echo("note: more tokens than characters: this text (e.g. Chinese) is billed well above what its "
                   "length suggests", err=True)
