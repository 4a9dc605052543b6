"""Seeded hostile HTTP requests for the gateway's ``/v1/chat/completions`` and ``/v1/completions``.

Each :class:`GatewayCase` is raw bytes plus headers (the body may be no JSON at all), with what a correct
gateway does with it (``expect``: ok / invalid / either) and the names one of which its error must
carry (the JSON error's ``param`` or message). The judge is ``fuzz_run.judge``, shared with the gRPC cases.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

from robustness.fuzz_cases import PROMPTS

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
AUTH_NAMES = {"API key", "Authorization"}
# field -> (values a correct gateway must refuse, values it may take or refuse)
SAMPLING = {
    "temperature": ([math.nan, math.inf, -math.inf, -1.0, -1e30, 2.5, 1e300], [0.0, 2.0, 1e-30]),
    "top_p": ([math.nan, math.inf, -1.0, 0.0, 1.5, 1e300], [1e-30, 1.0]),
    "max_tokens": ([0, -1, -(2**31), 2**64, 1.5], [2**31 - 1, 10**6]),
    "max_completion_tokens": ([0, -5], [10**6]),
    "min_tokens": ([-1, 2**64], [0, 3]),
    "presence_penalty": ([math.nan, math.inf, -2.5, 1e30], [-2.0, 2.0]),
    "frequency_penalty": ([math.nan, -math.inf, 2.5, -1e30], [-2.0, 0.0]),
    "seed": ([-1, 2**64, 1.5], [0, 2**63, 2**64 - 1]),
}
WRONG_TYPES = {  # field -> values of the wrong JSON type (none that pydantic's lax mode coerces)
    "model": [5, None, [], {"id": "tiny"}], "max_tokens": ["ten", [1], {"n": 1}], "temperature": ["hot", [0.5], {}],
    "top_p": ["all", [1]], "stream": ["maybe", [True], {}], "stop": [7, [1, 2], {"s": "x"}], "seed": ["x", [1]],
    "user": [5, []], "stream_options": ["yes", 3, {"include_usage": "sure"}, {"bogus": True}],
}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
# field -> values a correct gateway must refuse by that field's name: features it does not support, and bad
# values of the ones it does (logit_bias, response_format, tool calls); the extra fields a case needs come along
UNSUPPORTED = {"n": [2, 5], "best_of": [3], "logprobs": [5], "top_logprobs": [3], "echo": [True],
               "functions": [[{"name": "f"}]],
               "logit_bias": [{"50": 101}, {"fifty": 1}, {"50": "high"}, {"99999999": 1}],
               "response_format": [{"type": "xml"}, "json", {"type": "regex"}, {"type": "json_schema"}],
               "tool_choice": ["auto", {"type": "function", "function": {"name": "g"}}, "sometimes"]}
NEEDS = {"tool_choice": {"tools": TOOLS}}  # tool_choice is judged against tools (without them "auto" is no call)
JUNK_STOPS = ([[""], ["a", ""], ["a", "b", "c", "d", "e"]],  # must be refused
              [["\x00"], ["\ufffd"], ["🎉"], ["x" * 5000], ["\n", "\t"], "the", ["\\u0000"]])  # may be taken


@dataclass(slots=True)
class GatewayCase:
    index: int
    model: str  # the endpoint: chat | completions (``model`` so the shared report prints it)
    kind: str
    stream: bool
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    refusals: dict[str, bool] = field(default_factory=dict)  # broken field -> must it be refused?
    also_named: set[str] = field(default_factory=set)
    note: str = ""

    @property
    def expect(self) -> str:
        if any(self.refusals.values()):
            return "invalid"
        return "either" if self.refusals else "ok"

    @property
    def names(self) -> set[str]:
        return set(self.refusals) | self.also_named

    @property
    def path(self) -> str:
        return ENDPOINTS[self.model]


def dumps(payload: object) -> bytes:
    """JSON with NaN / Infinity literals where the payload has them (Python's json reads them back)."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=True).encode("utf-8", errors="surrogatepass")


class GatewayCaseGenerator:
    """``cases(n)``: n cases from the seed; the same seed gives the same bytes."""

    def __init__(self, seed: int, served_model: str, max_body_bytes: int) -> None:
        self.rng = random.Random(seed)
        self.served_model, self.max_body_bytes = served_model, max_body_bytes
        self.kinds = [(self.valid, 4), (self.bad_json, 1), (self.invalid_utf8, 1), (self.wrong_type, 2),
                      (self.missing, 1), (self.unknown_field, 1), (self.huge, 0.3), (self.bad_sampling, 3),
                      (self.junk_stop, 1), (self.unsupported, 1), (self.bad_key, 1), (self.wrong_model, 0.5)]

    def cases(self, count: int):  # type: ignore[no-untyped-def]
        makers, weights = zip(*self.kinds, strict=True)
        for index in range(count):
            case = self.rng.choices(makers, weights)[0](index)
            yield case

    # -- the payload of a valid request, then one thing broken ----------------------------------------------
    def _payload(self, endpoint: str, stream: bool) -> dict:
        prompt = self.rng.choice(PROMPTS)
        payload: dict = {"model": self.served_model, "max_tokens": self.rng.randint(1, 12), "stream": stream}
        if endpoint == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = prompt
        if self.rng.random() < 0.3:
            payload["temperature"] = self.rng.choice([0.0, 0.7, 1.0])
        return payload

    def _start(self, index: int, kind: str) -> tuple[str, bool, dict]:
        endpoint, stream = self.rng.choice(list(ENDPOINTS)), self.rng.random() < 0.5
        return endpoint, stream, self._payload(endpoint, stream)

    def _case(self, index: int, kind: str, endpoint: str, stream: bool, body: bytes, refusals: dict[str, bool],
              note: str, **extra: object) -> GatewayCase:
        return GatewayCase(index, endpoint, kind, stream, body, refusals=refusals, note=note, **extra)  # type: ignore[arg-type]

    def valid(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "valid")
        if self.rng.random() < 0.3:  # a supported feature beyond sampling: a bias, a grammar, a forced tool call
            features = [{"logit_bias": {"50": 5, "51": -5}},
                        {"response_format": {"type": "regex", "regex": "[a-z ]{1,20}"}}]
            if endpoint == "chat":
                features.append({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "f"}}})
            payload.update(self.rng.choice(features))
        return self._case(index, "valid", endpoint, stream, dumps(payload), {}, "")

    def bad_json(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "bad_json")
        text = dumps(payload)
        body = self.rng.choice([text[: self.rng.randint(0, len(text) - 1)], b"not json", b"", b"[]", b"null", b"42",
                                b'"a string"', text + b"}", text.replace(b":", b"=", 1), b"{'model': 'x'}"])
        return self._case(index, "bad_json", endpoint, stream, body, {"JSON": True}, body[:40].decode(errors="replace"),
                          also_named={"object"})

    def invalid_utf8(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "invalid_utf8")
        field_name = "messages" if endpoint == "chat" else "prompt"
        if self.rng.random() < 0.5:  # raw bytes that are no UTF-8 inside the prompt: not JSON
            body = dumps(payload).replace(b'"max_tokens"', b'"\xff\xfe": 1, "max_tokens"', 1)
            body = body.replace(b"model", b"mo\xc3del", 1) if self.rng.random() < 0.5 else body
            return self._case(index, "invalid_utf8", endpoint, stream, body, {"JSON": True}, "raw bytes",
                              also_named={"UTF-8", "utf-8", "codec"})
        lone = self.rng.choice(["\ud800", "x\udfff", "\ud83c"])  # JSON escapes of lone surrogates: valid JSON
        if endpoint == "chat":
            payload["messages"][0]["content"] += lone
        else:
            payload["prompt"] += lone
        return self._case(index, "invalid_utf8", endpoint, stream, dumps(payload), {field_name: False},
                          "lone surrogate", also_named={"content", "prompt", "UTF-8", "surrogate"})

    def wrong_type(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "wrong_type")
        name = self.rng.choice([*WRONG_TYPES, "messages" if endpoint == "chat" else "prompt"])
        if name == "messages":
            value = self.rng.choice(["hi", [], [{"role": "robot", "content": "x"}], [{"content": "x"}], [5],
                                     [{"role": "user", "content": 5}]])
        elif name == "prompt":
            value = self.rng.choice([5, None, {"text": "x"}, [5.5, 6], [[5], "x"]])  # [5, 6] is token ids: valid
        else:
            value = self.rng.choice(WRONG_TYPES[name])
        payload[name] = value
        return self._case(index, "wrong_type", endpoint, stream, dumps(payload), {name: True}, f"{name}={value!r}"[:60])

    def missing(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "missing")
        name = self.rng.choice(["model", "messages" if endpoint == "chat" else "prompt"])
        body = b"{}" if self.rng.random() < 0.2 else dumps({k: v for k, v in payload.items() if k != name})
        names = {"model": True} if body == b"{}" else {name: True}
        return self._case(index, "missing", endpoint, stream, body, names, f"no {name}",
                          also_named={"messages", "prompt"} if body == b"{}" else set())

    def unknown_field(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "unknown_field")
        name = self.rng.choice(["temprature", "foo", "max_token", "top_k", "prompt" if endpoint == "chat" else "messages",
                                "__class__", "x" * 300])
        payload[name] = self.rng.choice([1, "x", None, [1], {"a": 1}])
        return self._case(index, "unknown_field", endpoint, stream, dumps(payload), {name: True}, name[:40])

    def huge(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "huge")
        size = self.rng.choice([1 << 20, self.max_body_bytes + 1, self.max_body_bytes * 4])
        filler = "x" * size
        if endpoint == "chat":
            payload["messages"][0]["content"] = filler
        else:
            payload["prompt"] = filler
        return self._case(index, "huge", endpoint, stream, dumps(payload), {"max_body_bytes": True}, f"{size} bytes",
                          also_named={"body"})

    def bad_sampling(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "bad_sampling")
        name = self.rng.choice([n for n in SAMPLING if n != "max_completion_tokens" or endpoint == "chat"])
        must, may = SAMPLING[name]
        refused = not may or self.rng.random() < 0.7
        value = self.rng.choice(must if refused else may)
        payload[name] = value
        if name == "max_completion_tokens":
            payload.pop("max_tokens")
        also = {"max_tokens"} if name == "max_completion_tokens" else set()
        return self._case(index, "bad_sampling", endpoint, stream, dumps(payload), {name: refused}, f"{name}={value!r}",
                          also_named=also)

    def junk_stop(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "junk_stop")
        must, may = JUNK_STOPS
        refused = self.rng.random() < 0.5
        payload["stop"] = self.rng.choice(must if refused else may)
        return self._case(index, "junk_stop", endpoint, stream, dumps(payload), {"stop": refused},
                          repr(payload["stop"])[:40])

    def unsupported(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "unsupported")
        name = self.rng.choice(list(UNSUPPORTED))
        payload[name] = self.rng.choice(UNSUPPORTED[name])
        payload.update(NEEDS.get(name, {}))
        return self._case(index, "unsupported", endpoint, stream, dumps(payload), {name: True}, name)

    def bad_key(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "bad_key")
        header = self.rng.choice([None, "Bearer", "Bearer\t-", "Bearer not-a-key", "Basic dXNlcjpwdw==",
                                  "Bearer sk-trtkit-000000000000-wrongsecret", "bearer " + "k" * 5000])
        headers = {"Authorization": header} if header is not None else {"Authorization": ""}
        return self._case(index, "bad_key", endpoint, stream, dumps(payload), dict.fromkeys(AUTH_NAMES, True),
                          str(header)[:40], headers=headers)

    def wrong_model(self, index: int) -> GatewayCase:
        endpoint, stream, payload = self._start(index, "wrong_model")
        payload["model"] = self.rng.choice(["gpt-4o", "", " ", "../../etc/passwd", "m" * 2000, "🎉"])
        return self._case(index, "wrong_model", endpoint, stream, dumps(payload), {"model": True},
                          payload["model"][:30])
