"""Seeded random requests for ``ensemble`` / ``tensorrt_llm_bls``: valid ones and hostile ones.

Each :class:`Case` says what a correct server does with it (``expect``: ``ok``, ``invalid`` or
``either``) and which inputs an error must name. The same seed always gives the same cases, and the
generator knows nothing about transports: a target (Triton gRPC today, the gateway later) turns the
tensors into a request.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

NUMPY = {"BYTES": np.object_, "INT32": np.int32, "INT64": np.int64, "UINT64": np.uint64, "FP32": np.float32,
         "FP64": np.float64, "FP16": np.float16, "BOOL": np.bool_, "INT8": np.int8}
PROMPTS = ["Hello", "Write a haiku about GPUs", "你好，世界", "日本語のテキスト", "emoji 🎉👍🏽 test", "1 + 1 =",
           "The capital of France is", "  spaced  out  ", "line\nbreaks\tand tabs", "Ünïcödé façade"]
SAMPLING = {  # input -> (values a correct server must refuse, values it may take or refuse)
    "temperature": ([math.nan, math.inf, -math.inf, -1.0, -1e30], [0.0, 1e30, 1e-30]),
    "top_p": ([math.nan, math.inf, -1.0, 0.0, 1.5, 1e30], [1e-30, 1.0]),
    "top_k": ([-1, -(2**31)], [0, 2**31 - 1, 49152, 10**6]),
    "repetition_penalty": ([math.nan, math.inf, -1.0, 0.0], [1e30, 1e-30]),
    "presence_penalty": ([math.nan, -math.inf], [-1e30, 1e30, -2.0, 2.0]),
    "frequency_penalty": ([math.nan, math.inf], [-1e30, 1e30, -2.0, 2.0]),
    "length_penalty": ([math.nan, math.inf], [-1e30, 1e30, 0.0]),
    "min_tokens": ([-1, -(2**31)], [0, 2**31 - 1]),
    "min_length": ([-1], [2**31 - 1]),
    "max_tokens": ([0, -1, -(2**31), 2**31 - 1, 10**6], []),
    "seed": ([], [0, 2**63, 2**64 - 1]),
    "beam_width": ([0, -1, 2**31 - 1], [1]),
    "num_return_sequences": ([0, -1, 2**31 - 1], [1]),
}
TOKEN_IDS = {"end_id": [-2, -(2**31), 49152, 49153, 2**31 - 1], "pad_id": [-1, -7, 49152, 10**9, 2**31 - 1]}
DTYPES = ["BYTES", "INT32", "INT64", "UINT64", "FP32", "FP64", "BOOL", "INT8"]
INTERNAL_NAMES = ["QUERY", "input_ids", "request_output_len", "_INPUT_ID", "streaming", "TOKENS_BATCH"]


@dataclass(slots=True, frozen=True)
class InputSpec:
    name: str
    datatype: str  # Triton wire type: BYTES, INT32, FP32, ...
    dims: tuple[int, ...]
    optional: bool


@dataclass(slots=True)
class Tensor:
    name: str
    datatype: str
    array: np.ndarray
    wire_shape: list[int] | None = None  # a shape that lies about the data; None: the array's own


@dataclass(slots=True)
class Case:
    index: int
    model: str
    kind: str
    stream: bool
    tensors: list[Tensor]
    refusals: dict[str, bool] = field(default_factory=dict)  # broken input -> must it be refused?
    also_named: set[str] = field(default_factory=set)  # inputs an error may name instead
    note: str = ""

    @property
    def expect(self) -> str:
        """ok | invalid | either: what a correct server does with this case."""
        if any(self.refusals.values()):
            return "invalid"
        return "either" if self.refusals else "ok"

    @property
    def names(self) -> set[str]:
        """An error must name one of these."""
        return set(self.refusals) | self.also_named

    def set(self, tensor: Tensor) -> None:
        """Put ``tensor`` in (replacing an input broken before: that breakage is gone)."""
        self.tensors = [t for t in self.tensors if t.name != tensor.name] + [tensor]
        self.refusals.pop(tensor.name, None)

    def drop(self, name: str) -> None:
        self.tensors = [t for t in self.tensors if t.name != name]
        self.refusals.pop(name, None)

    def refuse(self, name: str, note: str, *, certain: bool = True) -> None:
        """This change must (certain) or may be refused; an error must then name ``name``."""
        self.refusals[name] = certain
        self.note = f"{self.note}; {note}" if self.note else note


def specs_from_config(config: dict) -> dict[str, InputSpec]:
    """Input specs from a model configuration as Triton's ``get_model_config(as_json=True)`` returns it."""
    out = {}
    for item in config.get("input", []):
        dtype = str(item.get("data_type", "TYPE_STRING")).removeprefix("TYPE_")
        out[item["name"]] = InputSpec(item["name"], "BYTES" if dtype == "STRING" else dtype,
                                      tuple(int(d) for d in item.get("dims", [])), bool(item.get("optional")))
    return out


def scalar(name: str, datatype: str, value: object) -> Tensor:
    return Tensor(name, datatype, np.array([[value]], dtype=NUMPY[datatype]))


def words(name: str, items: list[bytes]) -> Tensor:
    return Tensor(name, "BYTES", np.array([items], dtype=np.object_))


class CaseGenerator:
    """``cases(n)`` yields the same ``n`` cases for the same seed and specs."""

    def __init__(self, seed: int, specs: dict[str, InputSpec], models: tuple[str, ...]) -> None:
        self.rng = random.Random(seed)
        self.specs = specs
        self.models = models
        self.mutations: dict[str, tuple[int, Callable[[Case], None]]] = {
            "valid": (12, self._valid_extras), "wrong_dtype": (8, self._wrong_dtype),
            "wrong_shape": (8, self._wrong_shape), "lying_shape": (4, self._lying_shape),
            "missing_input": (5, self._missing), "unknown_input": (5, self._unknown),
            "empty_prompt": (4, self._empty_prompt), "invalid_utf8": (5, self._invalid_utf8),
            "huge_prompt": (1, self._huge_prompt), "bad_sampling": (14, self._bad_sampling),
            "junk_words": (10, self._junk_words), "bad_token_id": (6, self._bad_token_id),
            "batch_mismatch": (6, self._batch_mismatch), "combined": (8, self._combined),
        }

    def cases(self, count: int):
        kinds = list(self.mutations)
        weights = [self.mutations[k][0] for k in kinds]
        for index in range(count):
            kind = self.rng.choices(kinds, weights)[0]
            case = self.base(index, kind)
            self.mutations[kind][1](case)
            yield case

    def base(self, index: int, kind: str) -> Case:
        stream = self.rng.random() < 0.5
        tensors = [scalar("text_input", "BYTES", self.rng.choice(PROMPTS).encode()),
                   scalar("max_tokens", "INT32", self.rng.randint(1, 8)), scalar("stream", "BOOL", stream)]
        return Case(index, self.rng.choice(self.models), kind, stream, tensors)

    # -- mutations: each changes the case and records what a correct server must do ---------------
    def _valid_extras(self, case: Case) -> None:
        r = self.rng
        extras = {"temperature": ("FP32", r.uniform(0, 2)), "top_k": ("INT32", r.randint(0, 50)),
                  "top_p": ("FP32", r.uniform(0.05, 1.0)), "seed": ("UINT64", r.randint(0, 2**32)),
                  "repetition_penalty": ("FP32", r.uniform(0.5, 2.0)), "min_tokens": ("INT32", r.randint(0, 1)),
                  "exclude_input_in_output": ("BOOL", r.random() < 0.8), "return_log_probs": ("BOOL", r.random() < 0.5),
                  "presence_penalty": ("FP32", r.uniform(-2, 2)), "end_id": ("INT32", r.randint(0, 49151))}
        for name in r.sample(sorted(extras), r.randint(0, 4)):
            dtype, value = extras[name]
            case.set(scalar(name, dtype, value))
        if r.random() < 0.3:
            case.set(words("stop_words", [r.choice(["world", "\n", "。", "🎉", "the"]).encode()]))

    def _wrong_dtype(self, case: Case) -> None:
        spec = self.rng.choice(sorted(self.specs.values(), key=lambda s: s.name))
        dtype = self.rng.choice([d for d in DTYPES if d != spec.datatype])
        value: object = b"17" if dtype == "BYTES" else 1
        case.set(Tensor(spec.name, dtype, np.array([[value] * max(1, spec.dims[0] if spec.dims else 1)],
                                                   dtype=NUMPY[dtype])))
        case.refuse(spec.name, f"{spec.name} as {dtype}")

    def _wrong_shape(self, case: Case) -> None:
        name = self.rng.choice(["text_input", "max_tokens", "stream", "temperature", "top_k", "end_id"])
        spec = self.specs[name]
        shape = self.rng.choice([[1, 2], [1, 1, 1], [1], [1, 3, 2]])
        value = b"hi" if spec.datatype == "BYTES" else 1
        case.set(Tensor(name, spec.datatype, np.full(shape, value, dtype=NUMPY[spec.datatype])))
        case.refuse(name, f"{name} shaped {shape}")

    def _lying_shape(self, case: Case) -> None:
        name = self.rng.choice(["text_input", "max_tokens", "top_p"])
        spec = self.specs[name]
        value = b"hi" if spec.datatype == "BYTES" else 1
        tensor = Tensor(name, spec.datatype, np.array([[value]], dtype=NUMPY[spec.datatype]))
        tensor.wire_shape = self.rng.choice([[1, 4], [3, 1], [1, 1000000]])
        case.set(tensor)
        case.refuse(name, f"{name} claims shape {tensor.wire_shape} for one value")
        if tensor.wire_shape[0] != 1:  # Triton reports a batch disagreement under whichever input it compared
            case.also_named.update(t.name for t in case.tensors)

    def _missing(self, case: Case) -> None:
        name = self.rng.choice(["text_input", "max_tokens"])
        case.drop(name)
        case.refuse(name, f"{name} left out")

    def _unknown(self, case: Case) -> None:
        name = self.rng.choice([f"fuzz_{self.rng.randint(0, 999)}", *INTERNAL_NAMES])
        case.set(scalar(name, "INT32", 1))
        case.refuse(name, f"unknown input {name}")

    def _empty_prompt(self, case: Case) -> None:
        case.set(scalar("text_input", "BYTES", self.rng.choice([b"", b" ", b"\n\t ", b"\x00"])))
        # a lone NUL is a character: a correct server may answer it
        case.refuse("text_input", "empty prompt", certain=case.tensors[-1].array.item() != b"\x00")

    def _invalid_utf8(self, case: Case) -> None:
        name = self.rng.choice(["text_input", "text_input", "stop_words", "bad_words"])
        junk = self.rng.choice([b"\xff\xfe", b"ok \xe4\xb8", b"\xc0\xaf", b"\xed\xa0\x80 surrogate", bytes([0x80])])
        case.set(scalar(name, "BYTES", junk) if name == "text_input" else words(name, [b"fine", junk]))
        case.refuse(name, f"invalid UTF-8 in {name}")

    def _huge_prompt(self, case: Case) -> None:
        unit = self.rng.choice(["lorem ipsum ", "你好世界", "🎉", "a"])
        text = (unit * (2**20 // len(unit.encode()) + 1)).encode()[:2**20]
        case.set(scalar("text_input", "BYTES", text.decode("utf-8", "ignore").encode()))
        case.refuse("text_input", "1 MB prompt (over max_input_len)")

    def _bad_sampling(self, case: Case) -> None:
        name = self.rng.choice(sorted(n for n in SAMPLING if n in self.specs))
        must, may = SAMPLING[name]
        certain = bool(must) and (not may or self.rng.random() < 0.7)
        value = self.rng.choice(must if certain else may)
        case.set(scalar(name, self.specs[name].datatype, value))
        case.refuse(name, f"{name}={value}", certain=certain)

    def _junk_words(self, case: Case) -> None:
        name = self.rng.choice(["stop_words", "bad_words"])
        r = self.rng
        junk = [r.choice([b"", b" ", b"<|im_end|>", b"\x00", "🎉".encode(), b"x" * 10000, "的".encode() * 50,
                          bytes(r.randint(32, 126) for _ in range(r.randint(1, 20)))])
                for _ in range(r.choice([1, 3, 200]))]
        case.set(Tensor(name, "BYTES", np.array([junk], dtype=np.object_)))
        if len(junk) == 200 or any(len(w) >= 10000 for w in junk) or b"<|im_end|>" in junk:
            case.refuse(name, f"{len(junk)} junk {name}", certain=False)

    def _bad_token_id(self, case: Case) -> None:
        name = self.rng.choice(sorted(TOKEN_IDS))
        value = self.rng.choice(TOKEN_IDS[name])
        case.set(scalar(name, "INT32", value))
        # -1 is TensorRT-LLM's "no end id"; every other value outside the vocabulary is an error
        case.refuse(name, f"{name}={value}", certain=value != -1)

    def _batch_mismatch(self, case: Case) -> None:
        name = self.rng.choice(["text_input", "max_tokens", "stream", "temperature"])
        spec = self.specs[name]
        rows = self.rng.choice([2, 3, 0])
        value = b"hi" if spec.datatype == "BYTES" else 1
        case.set(Tensor(name, spec.datatype, np.full((rows, 1), value, dtype=NUMPY[spec.datatype])))
        case.refuse(name, f"{name} with batch {rows} beside batch 1")
        # the inputs disagree with each other: Triton names whichever one it compared with the first
        case.also_named.update(t.name for t in case.tensors)

    def _combined(self, case: Case) -> None:
        kinds = [k for k in self.mutations if k not in ("combined", "huge_prompt", "valid")]
        for kind in self.rng.sample(kinds, 2):
            self.mutations[kind][1](case)
