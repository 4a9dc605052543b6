"""Small helpers the live tests use to talk to the shared tritonserver (gRPC streams, HTTP, metrics)."""

from __future__ import annotations

import functools
import json
import queue
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from trtkit.tokenizer.detokenizer import decode_continuation, find_anchor, without_broken_tail
from trtkit.tokenizer.fast_tokenizer import FastTokenizer

DTYPES = {np.object_: "BYTES", np.int32: "INT32", np.bool_: "BOOL", np.float32: "FP32", np.uint64: "UINT64"}


def tensor(name: str, value: object, dtype: type) -> grpcclient.InferInput:
    array = np.array([[value]], dtype=dtype) if not isinstance(value, list) else np.array([value], dtype=dtype)
    item = grpcclient.InferInput(name, list(array.shape), DTYPES[array.dtype.type])
    item.set_data_from_numpy(array)
    return item


def inputs(text: str, max_tokens: int, *, stream: bool, **extra: object) -> list[grpcclient.InferInput]:
    items = [tensor("text_input", text.encode(), np.object_), tensor("max_tokens", max_tokens, np.int32),
             tensor("stream", stream, np.bool_)]
    for name, value in extra.items():
        if isinstance(value, list):
            items.append(tensor(name, [v.encode() if isinstance(v, str) else v for v in value], np.object_))
        elif isinstance(value, bool):
            items.append(tensor(name, value, np.bool_))
        elif isinstance(value, float):
            items.append(tensor(name, value, np.float32))
        elif isinstance(value, (bytes, str)):
            items.append(tensor(name, value.encode() if isinstance(value, str) else value, np.object_))
        else:
            items.append(tensor(name, value, np.int32))
    return items


@dataclass
class Reply:
    texts: list[str]
    finals: list[dict]
    error: Exception | None

    @property
    def text(self) -> str:
        return "".join(self.texts)


@dataclass
class Live:
    server: object
    model_dir: Path

    @functools.cached_property
    def tokenizer(self) -> FastTokenizer:  # loaded once (0.3 s each; the forced-length tests ask hundreds of times)
        return FastTokenizer(self.model_dir)

    @functools.cached_property
    def cycle(self) -> list[int]:
        return list(json.loads((self.model_dir / "cycle.json").read_text()))

    def expected(self, num_tokens: int) -> str:
        """What the echo model writes after a prompt that ends a cycle (a character cut by the length
        limit is dropped, never sent as U+FFFD)."""
        cycle = self.cycle
        ids = (cycle * (num_tokens // len(cycle) + 1))[:num_tokens]
        return without_broken_tail(decode_continuation(self.tokenizer, find_anchor(self.tokenizer), ids))

    def client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.server.grpc_url)  # type: ignore[attr-defined]

    def stream(self, model: str, items: list, timeout: float = 60.0) -> Reply:
        """One request over a gRPC stream; collects every response until the final one."""
        results: queue.Queue = queue.Queue()
        client = self.client()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer(model, items, enable_empty_final_response=True)
            return collect(results, timeout)
        finally:
            client.stop_stream()
            client.close()

    def metrics(self) -> str:
        with urllib.request.urlopen(self.server.metrics_url, timeout=10) as r:  # type: ignore[attr-defined]
            return r.read().decode()

    def metric(self, family: str, label: str, value: str) -> float:
        pattern = rf'^{family}{{[^}}]*{label}="{value}"[^}}]*}} ([0-9.e+-]+)$'
        found = re.findall(pattern, self.metrics(), flags=re.M)
        assert found, f"{family}{{{label}={value}}} not on the metrics endpoint"
        return float(found[0])

    def http(self, path: str, body: dict) -> tuple[int, bytes]:
        request = urllib.request.Request(f"{self.server.http_url}{path}", json.dumps(body).encode())  # type: ignore[attr-defined]
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def collect(results: queue.Queue, timeout: float) -> Reply:
    texts, finals = [], []
    while True:
        result, error = results.get(timeout=timeout)
        if error is not None:
            return Reply(texts, finals, error)
        response = result.get_response()
        text = result.as_numpy("text_output")
        if text is not None:
            texts.append(text.reshape(-1)[0].decode())
            record = {name: result.as_numpy(name) for name in ("num_input_tokens", "num_output_tokens",
                                                                "num_cached_tokens", "finish_reason")}
            finals.append({k: (v.reshape(-1)[0] if v is not None else None) for k, v in record.items()})
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            return Reply(texts, finals, None)
