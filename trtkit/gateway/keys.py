"""API keys: the secret is shown once and stored only as a hash; comparison is constant-time.

A secret reads ``tk-<key id>-<random>``. The key id (public, 12 hex characters) finds the row; the
SHA-256 of the whole secret is compared with ``hmac.compare_digest``. Secrets carry 256 random bits,
so a fast hash is enough (no password stretching: nothing to brute-force).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from trtkit.errors import ClientError
from trtkit.store.records import ApiKey

SECRET_PREFIX = "tk-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
__all__ = ["ApiKey", "SECRET_PREFIX", "new_secret", "hash_secret", "key_id_of", "secret_matches", "check_key_name"]


def check_key_name(name: str) -> str:
    """A key's name is the tenant in the ledger, budgets and metrics: 1-64 letters, digits, '.', '_', '@', '-'."""
    if not _NAME.match(name):
        raise ClientError(f"key name {name!r}: use 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter "
                          f"or digit, e.g. team-a")
    return name


def new_secret() -> tuple[str, str]:
    """(key id, secret)."""
    key_id = secrets.token_hex(6)
    return key_id, f"{SECRET_PREFIX}{key_id}-{secrets.token_urlsafe(32)}"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def key_id_of(secret: str) -> str | None:
    """The key id inside a well-formed secret, else None."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    key_id, sep, rest = secret[len(SECRET_PREFIX):].partition("-")
    return key_id if sep and rest and len(key_id) == 12 else None


def secret_matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)
