"""Store URL grammar (the config validates with it; ``trtkit.store.url`` adds the defaults): ``sqlite:///PATH`` (the embedded default) or ``postgresql://...`` (one database for a fleet).

SQLite URLs follow SQLAlchemy's spelling: ``sqlite:///usage.db`` is relative to the working directory,
``sqlite:////var/lib/trtkit/usage.db`` is absolute. A plain file path (no scheme) also means SQLite, so
configs and ``--store`` options that name a file work.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trtkit.errors import ConfigError

GATEWAY_STORE_ENV = "TRTKIT_GATEWAY_STORE"  # the k8s manifests put the Secret's URL here
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(slots=True, frozen=True)
class StoreUrl:
    backend: Literal["sqlite", "postgresql"]
    path: Path | None  # sqlite
    dsn: str | None  # postgresql: the URL as libpq takes it

    def redacted(self) -> str:
        """For logs and errors: never the password."""
        if self.backend == "sqlite":
            return f"sqlite:///{self.path}"
        return re.sub(r"://([^:@/]+):[^@/]*@", r"://\1:***@", self.dsn or "")


def parse_store_url(text: str | os.PathLike[str], field: str = "store") -> StoreUrl:
    """``field`` names the config field or option the URL came from, for the error message."""
    raw = os.fspath(text).strip()
    fix = ("use sqlite:///PATH (e.g. sqlite:////var/lib/trtkit/usage.db) or "
           "postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    if not raw:
        raise ConfigError(f"{field}: empty store URL; {fix}")
    match = _SCHEME.match(raw)
    if match is None:
        return StoreUrl("sqlite", Path(raw).expanduser(), None)
    scheme = match.group(1).lower()
    if scheme in _POSTGRES_SCHEMES:
        rest = raw[len(scheme) + 1:]
        if not rest.startswith("//") or len(rest) <= 2:
            raise ConfigError(f"{field}: {scheme} URL '{raw}' has no host or database; {fix}")
        return StoreUrl("postgresql", None, "postgresql:" + rest)
    if scheme == "sqlite":
        if not raw.startswith("sqlite:///") or len(raw) <= len("sqlite:///"):
            raise ConfigError(f"{field}: '{raw}' is not a SQLite URL with a file path (an in-memory database "
                              f"would lose every row); {fix}")
        return StoreUrl("sqlite", Path(raw[len("sqlite:///"):]).expanduser(), None)
    raise ConfigError(f"{field}: unsupported store scheme '{scheme}' in '{raw}'; {fix}")
