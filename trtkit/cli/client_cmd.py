"""`trtkit generate`, `trtkit chat`, `trtkit usage`, `trtkit tokens count`: thin wrappers over trtkit.transport,
trtkit.conversation and the usage ledger (trtkit.store)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from trtkit.cli.command import Renamed, add_command, group
from trtkit.cli.options import (
    ConfigArg,
    GuideOpt,
    GuideTypeOpt,
    JsonOpt,
    read_guide,
    read_text,
    upstream_address,
)

SMOL = "model_configs/smollm2-135m.yaml"
UrlOpt = Annotated[str | None, typer.Option("--url", help="tritonserver gRPC address, HOST:PORT or grpc://HOST:PORT; "
                                            "default: the newest server started by `trtkit serve`, else "
                                            "127.0.0.1:serve.grpc_port", show_default=False)]
MaxTokensOpt = Annotated[int | None, typer.Option("--max-tokens", help="New tokens at most (clamped to "
                                                  "max_seq_len); default client.default_max_tokens")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="0 = greedy (deterministic, cacheable)")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Fixed sampling seed (makes sampling cacheable)")]
UserOpt = Annotated[str, typer.Option("--user", help="User name recorded in the ledger and used by budgets")]
KeyOpt = Annotated[str, typer.Option("--key-id", help="API key name (never the secret) for the ledger and budgets")]

tokens_app = group("Count characters against tokens with the model's tokenizer.",
                   examples=[f'trtkit tokens count {SMOL} "今天天气很好"'])


def _say(line: str) -> None:
    typer.echo(line, err=True)


def _server_url(config, url: str | None) -> str:  # type: ignore[no-untyped-def]
    if url:
        return upstream_address(url, "--url", ("grpc",)).address
    from trtkit.serve.state import read_records

    running = sorted((r for r in read_records() if r.is_running()), key=lambda r: r.started_at)
    return running[-1].grpc_url if running else f"127.0.0.1:{config.serve.grpc_port}"


def _client(config_path: Path, url: str | None, user: str, key_id: str):  # type: ignore[no-untyped-def]
    from trtkit.config import load_config
    from trtkit.governance import Caller
    from trtkit.pipeline.first_run import quiet_first_run
    from trtkit.upstreams import connect

    config = load_config(config_path)
    address = _server_url(config, url)
    with quiet_first_run(config, _say):
        return config, connect(address, config=config, caller=Caller(user=user, key_id=key_id))


def _usage_line(result) -> str:  # type: ignore[no-untyped-def]
    u = result.usage
    ttft = f"{result.ttft_s * 1e3:.0f} ms" if result.ttft_s is not None else "-"
    cache = " (cache hit)" if result.cache_hit else ""
    return (f"[usage] prompt {u.prompt_tokens} (cached {u.cached_tokens}) + completion {u.completion_tokens} = "
            f"{u.total_tokens} tokens; finish {result.finish_reason}; TTFT {ttft}; "
            f"latency {result.latency_s * 1e3:.0f} ms; cost {result.cost:.6g}{cache}")


def generate(config_path: ConfigArg, prompt: Annotated[str, typer.Argument(
                 help="Prompt text; '-' reads stdin, @FILE a file")],
             url: UrlOpt = None, max_tokens: MaxTokensOpt = None, temperature: TemperatureOpt = 0.0,
             seed: SeedOpt = None, stream: Annotated[bool, typer.Option("--stream/--no-stream")] = True,
             user: UserOpt = "", key_id: KeyOpt = "", as_json: JsonOpt = False, guide_type: GuideTypeOpt = None,
             guide: GuideOpt = None) -> None:
    """One-shot generation with exact token usage (text to stdout, usage to stderr)."""
    from trtkit.governance import SamplingParams

    text = read_text(prompt, "PROMPT")
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
         strategy: Annotated[Literal["tail", "summary", "retrieval"] | None, typer.Option(
             "--strategy", help="Context strategy; default client.context.strategy", show_default=False)] = None,
         max_tokens: MaxTokensOpt = None, temperature: TemperatureOpt = 0.0, user: UserOpt = "",
         key_id: KeyOpt = "", session: Annotated[str | None, typer.Option("--session", help="Session id")] = None
         ) -> None:
    """Interactive streaming chat; usage after each turn. An empty line or Ctrl-D ends it."""
    from trtkit.conversation import Conversation
    from trtkit.governance import SamplingParams

    config, client = _client(config_path, url, user, key_id)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    with client:
        talk = Conversation(client, config, client.governor.counter, strategy=strategy, caller=client.caller)
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


def _report_format(value: str) -> str:
    """--format table|csv; json is --json now (kept for one release, with a deprecation line)."""
    if value == "json":
        typer.echo("warning: --format json is deprecated; use --json", err=True)
    elif value not in ("table", "csv"):
        raise typer.BadParameter(f"{value!r} is not one of 'table', 'csv' (JSON: --json)")
    return value


def usage(by: Annotated[Literal["day", "model", "user", "key", "session", "org", "team", "project"], typer.Option(
              "--by", help="Group rows by day, model, user, API key name, session, or the gateway's organisation, "
                           "team or project")] = "day",
          fmt: Annotated[str, typer.Option("--format", callback=_report_format, metavar="table|csv",
                                           help="Text layout")] = "table",
          as_json: JsonOpt = False,
          days: Annotated[float | None, typer.Option("--days", min=0.0, help="Only the last N days",
                                                     show_default=False)] = None,
          store: Annotated[str | None, typer.Option(
              "--store", help="The usage ledger: sqlite:///PATH, a file path or postgresql://...; default "
                              "client.store's default, $TRTKIT_HOME/usage.db", show_default=False)] = None,
          ) -> None:
    """Report the usage ledger by day, model, user, API key (the gateway's key names), session, or the level of the
    gateway's hierarchy a request ran under (org, team, project: '-' for keys under none). It reads an existing
    ledger only, read-only (nothing in the file or beside it changes): a path with no ledger is an error naming
    it."""
    from trtkit.store import ledger_url
    from trtkit.store.ledger import open_ledger
    from trtkit.store.usage_reports import format_report, usage_report

    since = time.time() - days * 86400 if days else None
    with open_ledger(ledger_url(store, "--store"), create=False, read_only=True) as ledger:
        typer.echo(format_report(usage_report(ledger, by, since), "json" if as_json else fmt, by))  # type: ignore[arg-type]


def tokens_count(config: ConfigArg,
                 text: Annotated[str, typer.Argument(help="Text to count; '-' reads stdin, @FILE a file")],
                 as_json: JsonOpt = False) -> None:
    """Characters against tokens for this model. Non-English text often costs several times more tokens."""
    from trtkit.config import load_config
    from trtkit.governance.tokens import TokenCounter
    from trtkit.pipeline.first_run import quiet_first_run

    body = read_text(text, "TEXT")
    if body == text and len(text) < 4096 and Path(text).is_file():
        typer.echo(f"note: counting the text {text!r} itself; to count that file's contents pass @{text}", err=True)
    model_config = load_config(config)
    with quiet_first_run(model_config, _say):
        counter = TokenCounter.from_config(model_config)
    m = counter.measure(body)
    if as_json:
        typer.echo(json.dumps({"characters": m.characters, "utf8_bytes": m.utf8_bytes, "tokens": m.tokens,
                               "chars_per_token": round(m.chars_per_token, 3)}))
        return
    typer.echo(f"characters  {m.characters}\nutf8 bytes  {m.utf8_bytes}\ntokens      {m.tokens}\n"
               f"chars/token {m.chars_per_token:.2f}")
    if m.tokens > m.characters:
        typer.echo("note: more tokens than characters: this text (e.g. Chinese) is billed well above what its "
                   "length suggests", err=True)


def register(app: typer.Typer) -> None:
    add_command(app, "generate", generate, examples=[
        f'trtkit generate {SMOL} "Write a haiku about GPUs" --url 127.0.0.1:8001',
        f"trtkit generate {SMOL} @prompt.txt --max-tokens 200 --json"])
    add_command(app, "chat", chat, examples=[f"trtkit chat {SMOL}",
                                             f"trtkit chat {SMOL} --strategy summary --url grpc://127.0.0.1:8001"])
    add_command(app, "usage", usage, renames=[Renamed("--ledger", "--store")], examples=[
        "trtkit usage --by key", "trtkit usage --by team --json", "trtkit usage --by day --days 7 --json --store postgresql://trtkit:SECRET@db/trtkit"])
    add_command(tokens_app, "count", tokens_count,
                renames=[Renamed("-c", "CONFIG", to_argument=True), Renamed("--config", "CONFIG", to_argument=True)],
                examples=[f'trtkit tokens count {SMOL} "今天天气很好，我们去公园散步吧。"',
                          f"trtkit tokens count {SMOL} @README.md --json", f"cat notes.txt | trtkit tokens count {SMOL} -"])
    app.add_typer(tokens_app, name="tokens")
