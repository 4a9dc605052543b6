"""Errors the gateway answers with an HTTP status (besides the client's own ClientError family)."""

from __future__ import annotations

from trtkit.errors import ClientError


class AuthenticationError(ClientError):
    """No key, an unknown key, or a revoked one: 401."""


class ModelNotFoundError(ClientError):
    """The request names a model this gateway does not serve (or the key may not use): 404."""


class RequestValidationError(ClientError):
    """A field is missing, of the wrong type, out of range or unsupported: 400 naming the field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class RateLimitedError(ClientError):
    """RPM or TPM of a key is used up for this minute: 429 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.headers = headers


class ConcurrencyLimitedError(RateLimitedError):
    """The key has as many requests in flight as it may (gateway.limits.max_concurrent_per_key, or its own
    max_concurrent): 429 with Retry-After, until one of them ends."""


class NotFoundError(ClientError):
    """A stored response this key cannot reach (unknown, another key's, deleted, expired): 404 naming the field."""

    def __init__(self, message: str, param: str, code: str) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class PermissionDeniedError(ClientError):
    """The key may not do what the request asks (set a conversation's budget): 403 naming the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param
