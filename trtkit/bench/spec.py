"""What a bench run is asked to do: endpoint, load points, per-point length, SLOs. Parsing of the CLI strings.

Every parser raises ``BenchError`` naming the option and the accepted form, so the CLI stays thin.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, field

from trtkit.config.upstream_url import parse_upstream_url
from trtkit.errors import BenchError, ConfigError

TRITON_MODELS = ("ensemble", "tensorrt_llm_bls")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*$")


@dataclass(slots=True, frozen=True)
class Endpoint:
    kind: str  # "grpc" (Triton) or "http" (OpenAI-compatible /v1)
    address: str  # host:port for gRPC, the base URL ending in /v1 for HTTP
    host: str

    @property
    def label(self) -> str:
        return f"grpc://{self.address}" if self.kind == "grpc" else self.address


@dataclass(slots=True, frozen=True)
class LoadPoint:
    """One point of a sweep: a fixed number of requests in flight, or an arrival rate (requests/s)."""

    mode: str  # "concurrency" or "rate"
    value: float
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson arrivals

    @property
    def name(self) -> str:
        return f"c{int(self.value)}" if self.mode == "concurrency" else f"r{self.value:g}"


@dataclass(slots=True, frozen=True)
class Slo:
    """Service-level objectives in seconds; a request counts towards goodput only if it meets every one set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s)) if v is not None}


@dataclass(slots=True)
class BenchSpec:
    endpoint: Endpoint
    model: str
    points: list[LoadPoint]
    requests_per_point: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 2
    slo: Slo = field(default_factory=Slo)
    max_in_flight: int = 256  # bounds a rate point whose server cannot keep up
    timeout_s: float = 600.0
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.requests_per_point is None) == (self.duration_s is None):
            raise BenchError("give exactly one of --requests N or --duration S per load point")
        if self.requests_per_point is not None and self.requests_per_point < 1:
            raise BenchError("--requests must be >= 1")
        if self.duration_s is not None and self.duration_s <= 0:
            raise BenchError("--duration must be > 0 seconds")
        if not self.points:
            raise BenchError("no load point: give --concurrency 1,2,4 or --rate 2,4,8")
        if any(p.mode == "concurrency" and p.value > self.max_in_flight for p in self.points):
            raise BenchError(f"a --concurrency point exceeds --max-in-flight {self.max_in_flight}; lower it or raise "
                             f"--max-in-flight deliberately")


def parse_endpoint(url: str, *, allow_remote: bool = False) -> Endpoint:
    """Triton gRPC (``HOST:PORT`` or ``grpc://HOST:PORT``) or ``http(s)://HOST:PORT/v1`` (OpenAI-compatible),
    through the one address grammar (trtkit.config.upstream_url). Loopback only unless ``allow_remote``: a
    benchmark is a load test, and pointing one at a shared server by mistake hurts others."""
    try:
        parsed = parse_upstream_url(url, "--endpoint", ("grpc", "http"))
    except ConfigError as exc:
        raise BenchError(str(exc)) from exc
    endpoint = Endpoint(parsed.scheme, parsed.address, parsed.host)
    if not allow_remote and not is_loopback(endpoint.host):
        raise BenchError(f"--endpoint {url!r} is not a loopback address; benchmarking a remote server needs "
                         f"--allow-remote")
    return endpoint


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def parse_points(concurrency: str | None, rate: str | None, burstiness: float = 1.0) -> list[LoadPoint]:
    if (concurrency is None) == (rate is None):
        raise BenchError("give exactly one of --concurrency LIST (e.g. 1,2,4,8) or --rate LIST (e.g. 2,4,8)")
    if burstiness <= 0:
        raise BenchError("--burstiness must be > 0 (1.0 = Poisson, < 1 burstier, > 1 more regular)")
    text, mode = (concurrency, "concurrency") if concurrency is not None else (rate, "rate")
    assert text is not None
    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            raise BenchError(f"--{mode}: {item!r} is not a number; give a comma-separated list like 1,2,4") from None
        if value <= 0 or (mode == "concurrency" and value != int(value)):
            raise BenchError(f"--{mode}: {item!r} must be a positive {'integer' if mode == 'concurrency' else 'number'}")
        values.append(value)
    return [LoadPoint(mode, v, burstiness) for v in values]


def parse_slo(text: str | None) -> Slo:
    """``ttft=200ms,tpot=50ms`` (also e2e=; units ms or s, bare numbers are ms)."""
    if not text:
        return Slo()
    values: dict[str, float] = {}
    for item in text.split(","):
        name, _, amount = item.partition("=")
        name = name.strip().lower()
        if name not in ("ttft", "tpot", "e2e"):
            raise BenchError(f"--slo: unknown metric {name!r}; use ttft, tpot or e2e, e.g. ttft=200ms,tpot=50ms")
        match = _DURATION.match(amount)
        if not match:
            raise BenchError(f"--slo {name}: {amount!r} is not a duration; write e.g. 200ms or 0.2s")
        number = float(match.group(1))
        values[f"{name}_s"] = number if match.group(2) == "s" else number / 1000.0
    return Slo(**values)
