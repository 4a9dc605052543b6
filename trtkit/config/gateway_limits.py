"""The ``gateway.limits`` config section: what a shared, internet-facing gateway refuses or cuts, before and while a
request runs, with the defaults an operator would expect (Envoy and nginx document theirs the same way).

Kept in its own module (schema.py imports it). Every field is checked by the one strict loader; docs/hardening.md
says what each limit stops and what a caller sees when it applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.config.loader import bounded

MIB = 1 << 20


@dataclass(slots=True)
class GatewayLimitsSection:
    max_header_bytes: int = bounded(
        65536, ge=1024, le=16 * MIB, doc="request line and headers of one request at most (Envoy's default is "
        "60 KiB, nginx's 4 x 8 KiB); larger: 431 and the connection closed, before the rest is read")
    header_timeout_seconds: float = bounded(
        15.0, gt=0.0, le=3600.0, doc="a connection must send a complete request head this soon after it opens, and "
        "each request's head this soon after its first byte (nginx's client_header_timeout); else it is closed")
    body_timeout_seconds: float = bounded(
        60.0, gt=0.0, le=3600.0, doc="a request's body must arrive whole this soon after its head (nginx's "
        "client_body_timeout); else 408")
    max_json_depth: int = bounded(
        64, ge=8, le=512, doc="nesting of a request body's JSON at most; deeper: 400 naming the limit")
    max_schema_depth: int = bounded(
        32, ge=2, le=256, doc="JSON nesting of a response_format / text.format schema or a tool's parameters at "
        "most (an object property is two levels); deeper: 400 before admission")
    max_schema_bytes: int = bounded(
        65536, ge=256, le=16 * MIB, doc="size of one guide (a schema as JSON, a regex, a grammar) at most; larger: "
        "400 before admission")
    max_concurrent_per_key: int | None = bounded(
        32, ge=1, doc="requests of one API key in flight at once across every replica (held in the store); a key's "
        "own max_concurrent overrides it; one more: 429. None: no cap")
    send_timeout_seconds: float = bounded(
        60.0, gt=0.0, le=3600.0, doc="a caller that takes no byte of its answer for this long loses the request "
        "(it is stopped and billed for what was generated), so unread streams cannot hold capacity")
