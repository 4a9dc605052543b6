"""Workloads made locally with the model's tokenizer: what each request asks for, decided before the run.

A workload is a list of ``BenchRequest``; each load point cycles through its own slice of it. Prompts
of N tokens are cut from the bundled mixed-language corpus (English, Chinese, code, dialogue) so token
counts are real for the model's tokenizer, not guessed from characters.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from trtkit.errors import BenchError
from trtkit.governance.tokens import TokenCounter

_DIST = re.compile(r"^(fixed|uniform|normal):([0-9.]+)(?:[-,]([0-9.]+))?$")
KINDS = ("default", "synthetic", "shared-prefix", "multi-turn")


@dataclass(slots=True, frozen=True)
class BenchRequest:
    prompt: str  # what Triton is sent: the text, or a conversation rendered by the chat template (RawPrompt)
    max_tokens: int
    min_tokens: int | None = None  # set to max_tokens to force the output length
    messages: tuple[tuple[str, str], ...] = ()  # (role, content) for chat endpoints; empty = one user message
    tag: str = ""
    guide_type: str | None = None  # structured output: the engine's guided_decoding_guide_type (json, json_schema,
    guide: str | None = None  # regex, ebnf_grammar) and its guide, for every request of the workload

    def chat_messages(self) -> list[dict[str, str]]:
        pairs = self.messages or (("user", self.prompt),)
        return [{"role": role, "content": content} for role, content in pairs]


@dataclass(slots=True, frozen=True)
class LengthDist:
    """``fixed:N``, ``uniform:LO-HI`` or ``normal:MEAN,STD`` (clipped to >= 1)."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str, option: str) -> LengthDist:
        match = _DIST.match(text.strip())
        if not match or (match.group(1) != "fixed" and match.group(3) is None):
            raise BenchError(f"{option} {text!r}: write fixed:N, uniform:LO-HI or normal:MEAN,STD")
        dist = cls(match.group(1), float(match.group(2)), float(match.group(3) or 0))
        if dist.a < 1 or (dist.kind == "uniform" and dist.b < dist.a):
            raise BenchError(f"{option} {text!r}: lengths must be >= 1 and LO <= HI")
        return dist

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(rng.gauss(self.a, self.b)))


@dataclass(slots=True, frozen=True)
class WorkloadSpec:
    kind: str = "default"  # one of KINDS, or a path to a JSONL file of prompts
    input_len: LengthDist = LengthDist("uniform", 32, 128)
    output_len: LengthDist = LengthDist("fixed", 64)
    force_output_len: bool = False  # min_tokens = max_tokens: every request generates exactly its length
    prefix_tokens: int = 256
    prefix_share: float = 0.5
    turns: int = 3
    max_input_tokens: int | None = None  # the deployment's build.max_input_len: longer corpus prompts are skipped
    guide_type: str | None = None  # every request held to this guide (structured output); None: free text
    guide: str | None = None


def corpus_texts() -> list[str]:
    """The bundled calibration corpus, one string per document, in a stable order."""
    root = resources.files("trtkit.data").joinpath("calib")
    texts = []
    for folder in sorted(p.name for p in root.iterdir() if p.is_dir()):
        for item in sorted(root.joinpath(folder).iterdir(), key=lambda p: p.name):
            if item.name.endswith(".txt"):
                texts.append(item.read_text(encoding="utf-8"))
    return texts


class PromptCutter:
    """Cuts prompts of an exact token length out of the corpus."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.ids: list[int] = []
        for text in corpus_texts():
            self.ids.extend(counter.text_ids(text + "\n\n"))

    def cut(self, num_tokens: int, rng: random.Random) -> str:
        start = rng.randrange(0, max(1, len(self.ids) - num_tokens))
        ids = (self.ids * (1 + num_tokens // max(1, len(self.ids))))[start:start + num_tokens]
        text = self.counter.decode(ids)
        # decode/encode is not a bijection at cut points: trim until the text is no longer than asked
        while len(self.counter.text_ids(text)) > num_tokens and text:
            text = text[:-1]
        return text


def build_workload(spec: WorkloadSpec, counter: TokenCounter, count: int, seed: int) -> list[BenchRequest]:
    rng = random.Random(seed)
    if spec.kind not in KINDS:
        return _guided(spec, _from_jsonl(Path(spec.kind), spec, rng, count, counter))
    cutter = PromptCutter(counter)
    make = {"default": _default, "synthetic": _synthetic, "shared-prefix": _shared_prefix,
            "multi-turn": _multi_turn}[spec.kind]
    return _guided(spec, make(spec, cutter, rng, count))


def _guided(spec: WorkloadSpec, requests: list[BenchRequest]) -> list[BenchRequest]:
    if spec.guide_type is None:
        return requests
    return [dataclasses.replace(r, guide_type=spec.guide_type, guide=spec.guide) for r in requests]


def _lengths(spec: WorkloadSpec, rng: random.Random) -> tuple[int, int | None]:
    out = spec.output_len.sample(rng)
    return out, (out if spec.force_output_len else None)


def _default(spec: WorkloadSpec, cutter: PromptCutter, rng: random.Random, count: int) -> list[BenchRequest]:
    """Paragraphs of the bundled corpus, as they are (mixed languages, code, dialogue)."""
    paragraphs = [p.strip() for text in corpus_texts() for p in text.split("\n\n") if len(p.strip()) > 40]
    if spec.max_input_tokens is not None:
        paragraphs = [p for p in paragraphs if cutter.counter.count_prompt(p) <= spec.max_input_tokens]
    if not paragraphs:
        raise BenchError(f"no bundled prompt fits in {spec.max_input_tokens} input tokens; use --workload synthetic "
                         f"with a shorter --input-len")
    requests = []
    for _ in range(count):
        out, forced = _lengths(spec, rng)
        requests.append(BenchRequest(paragraphs[rng.randrange(len(paragraphs))], out, forced, tag="corpus"))
    return requests


def _synthetic(spec: WorkloadSpec, cutter: PromptCutter, rng: random.Random, count: int) -> list[BenchRequest]:
    requests = []
    for _ in range(count):
        out, forced = _lengths(spec, rng)
        requests.append(BenchRequest(cutter.cut(spec.input_len.sample(rng), rng), out, forced, tag="synthetic"))
    return requests


def _shared_prefix(spec: WorkloadSpec, cutter: PromptCutter, rng: random.Random, count: int) -> list[BenchRequest]:
    """A system prompt of ``prefix_tokens`` shared by ``prefix_share`` of the requests: shows KV reuse."""
    if not 0 <= spec.prefix_share <= 1:
        raise BenchError("--prefix-share must be between 0 and 1 (the fraction of requests that share the prefix)")
    prefix = cutter.cut(spec.prefix_tokens, rng)
    requests = []
    for _ in range(count):
        out, forced = _lengths(spec, rng)
        body = cutter.cut(spec.input_len.sample(rng), rng)
        shared = rng.random() < spec.prefix_share
        requests.append(BenchRequest(f"{prefix}\n\n{body}" if shared else body, out, forced,
                                     tag="shared" if shared else "unique"))
    return requests


def _multi_turn(spec: WorkloadSpec, cutter: PromptCutter, rng: random.Random, count: int) -> list[BenchRequest]:
    """Conversations of ``turns`` turns; turn k resends the k-1 earlier turns (with fixed stand-in replies, so
    the load is reproducible), so each conversation's prefix grows and the KV cache can reuse it."""
    requests: list[BenchRequest] = []
    while len(requests) < count:
        history: list[tuple[str, str]] = []
        for turn in range(spec.turns):
            out, forced = _lengths(spec, rng)
            history.append(("user", cutter.cut(spec.input_len.sample(rng), rng)))
            text = _conversation(cutter.counter, history)
            requests.append(BenchRequest(text, out, forced, tuple(history), tag=f"turn-{turn + 1}"))
            history.append(("assistant", cutter.cut(min(out, 64), rng)))
    return requests[:count]


def _conversation(counter: TokenCounter, messages: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """What Triton is sent for a conversation: the whole of it rendered by the chat template (a ``RawPrompt``,
    sent with its ``prompt_form``), the engine input the gateway makes of the same messages."""
    return counter.chat_prompt([{"role": role, "content": content} for role, content in messages])


def _from_jsonl(path: Path, spec: WorkloadSpec, rng: random.Random, count: int,
                counter: TokenCounter) -> list[BenchRequest]:
    """One JSON object a line: ``{"prompt": ...}`` or ``{"messages": [...]}``, optional ``max_tokens``."""
    if not path.is_file():
        raise BenchError(f"--workload {path}: no such file; give default, synthetic, shared-prefix, multi-turn "
                         f"or a JSONL file of prompts")
    pool = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            messages = tuple((m["role"], m["content"]) for m in row.get("messages", ()))
            if "prompt" not in row and not messages:
                raise KeyError("prompt")
            prompt = row["prompt"] if "prompt" in row else _conversation(counter, messages)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BenchError(f"{path}:{number}: each line must be a JSON object with 'prompt' or 'messages' "
                             f"({exc})") from None
        pool.append((prompt, messages, row.get("max_tokens")))
    if not pool:
        raise BenchError(f"{path} holds no prompts")
    requests = []
    for i in range(count):
        prompt, messages, max_tokens = pool[i % len(pool)]
        out, forced = _lengths(spec, rng)
        out = int(max_tokens or out)
        requests.append(BenchRequest(prompt, out, out if spec.force_output_len else forced, messages, tag="file"))
    return requests
