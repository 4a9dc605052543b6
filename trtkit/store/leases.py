"""The background keeper of a gateway store: renews this replica's in-flight leases, frees expired ones
(any replica's, but never this one's in-flight holds), prunes old rate windows. A database outage is logged
and outlived, never fatal."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from trtkit.errors import StoreUnavailable

log = logging.getLogger(__name__)


class KeptStore(Protocol):
    """What the keeper runs on its store (``gateway_state.SqlGatewayStore``), named here so that this module
    imports nothing of the store that starts it."""

    def renew(self) -> int: ...
    def retry_settles(self) -> int: ...
    def release_expired(self) -> int: ...
    def prune_rate_windows(self) -> int: ...


class LeaseKeeper:
    """Wakes three times a lease: a hold survives two missed renewals before any sweeper may free it."""

    def __init__(self, store: KeptStore, lease_seconds: float) -> None:
        self.store = store
        self.interval_s = lease_seconds / 3.0
        self._stop = threading.Event()
        self._outage = False
        self._thread = threading.Thread(target=self._run, name="trtkit-store-leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self) -> None:
        try:
            self.store.renew()
            self.store.retry_settles()
            freed = self.store.release_expired()
            self.store.prune_rate_windows()
        except StoreUnavailable as exc:
            if not self._outage:
                log.warning("store unreachable, leases not renewed: %s", exc)
            self._outage = True
            return
        except Exception:  # a bug must not stop renewals for good: log it and try again next tick
            log.exception("lease keeper tick failed")
            return
        if self._outage:
            log.warning("store reachable again; leases renewed")
        self._outage = False
        if freed:
            log.warning("freed %d budget holds whose lease ran out (a gateway stopped mid-request)", freed)

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
