"""Who a request is for: the keys that budgets, cache scoping and the ledger use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Caller:
    user: str = ""
    key_id: str = ""  # a name or hash for the API key; never the secret itself
    session: str = ""

    @property
    def tenant(self) -> str:
        """Cache entries are shared only within a tenant: the key if there is one, else the user."""
        return self.key_id or self.user

    def field(self, scope: str) -> str:
        return {"user": self.user, "key": self.key_id, "session": self.session}.get(scope, "")
