"""Spend alerts, sent from a background thread: never on a request's path.

A settled request hands the budget accounts it drew on to ``AlertSender.saw`` (a queue put: nothing else happens
on the request's path). The sender's thread then asks the store which thresholds those accounts have reached
(``store.spend_alerts.note``: the outbox row of each is inserted once, whichever replica comes first), claims due
rows (of any replica), and POSTs each as JSON signed with HMAC-SHA256. A failed attempt is logged, counted in
``trtkit_gateway_spend_alert_failures`` and retried with exponential backoff for as long as a gateway is up; a
sent one is counted in ``trtkit_gateway_spend_alerts_sent``.

The signature: ``x-trtkit-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` with the secret of
``gateway.alerts.secret_env``; ``verify_signature`` checks one (what a receiver does).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence

import httpx

from trtkit.config.schema import AlertsSection
from trtkit.errors import ConfigError, StoreUnavailable
from trtkit.gateway.metrics import GatewayMetrics
from trtkit.store.records import BudgetLimit
from trtkit.store.spend_alerts import SpendAlerts

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-trtkit-signature"
_POLL_SECONDS = 1.0  # how often the outbox is looked at when nothing was settled (another replica's rows, retries)


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(secret: bytes, header: str, body: bytes, *, now: float | None = None,
                     tolerance_seconds: float = 300.0) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` and was made within ``tolerance_seconds`` (replays of an
    old alert are refused)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), f"t={timestamp},v1={fields.get('v1', '')}")


def alert_secret(settings: AlertsSection, environ: Mapping[str, str] | None = None) -> bytes:
    name = settings.secret_env or ""
    value = (os.environ if environ is None else environ).get(name)
    if not value:
        raise ConfigError(f"gateway.alerts.secret_env names ${name}, which is not set; export the webhook's signing "
                          f"secret in it")
    return value.encode("utf-8")


class AlertSender:
    """One per gateway replica; any replica's sender drains every replica's alerts."""

    def __init__(self, outbox: SpendAlerts, settings: AlertsSection, metrics: GatewayMetrics, *,
                 secret: bytes) -> None:
        assert settings.webhook_url, "an AlertSender needs gateway.alerts.webhook_url"
        self.outbox = outbox
        self.settings = settings
        self.metrics = metrics
        self._secret = secret
        self._seen: queue.SimpleQueue[tuple[list[BudgetLimit], dict[str, tuple[float, ...]]] | None] = \
            queue.SimpleQueue()
        self._stopping = threading.Event()
        self._http = httpx.Client(timeout=settings.timeout_seconds, follow_redirects=False)
        self._thread = threading.Thread(target=self._run, name="trtkit-spend-alerts", daemon=True)
        self._thread.start()

    def saw(self, budgets: Sequence[BudgetLimit], thresholds: dict[str, tuple[float, ...]]) -> None:
        """A request drew on these budgets (called at settle: only a queue put)."""
        self._seen.put((list(budgets), thresholds))

    def stop(self) -> None:
        self._stopping.set()
        self._seen.put(None)
        self._thread.join(timeout=self.settings.timeout_seconds + 5)
        self._http.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._note_seen()
                self.send_due()
            except StoreUnavailable as exc:  # the rows wait in the store; this replica tries again
                log.warning("spend alerts: the store did not answer (%s); retrying", exc)
            except Exception:  # never let the thread die: alerts would stop silently
                log.exception("spend alerts: unexpected error; retrying")

    def _note_seen(self) -> None:
        try:
            first = self._seen.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            return
        batch = [first]
        while not self._seen.empty():
            batch.append(self._seen.get())
        merged: dict[tuple[str, float], BudgetLimit] = {}
        thresholds: dict[str, tuple[float, ...]] = {}
        for item in batch:
            if item is None:
                continue
            budgets, wanted = item
            merged.update({(b.account, b.period_start): b for b in budgets})
            thresholds.update(wanted)
        if merged:
            made = self.outbox.note(list(merged.values()), thresholds)
            if made:
                log.info("spend alerts: %d threshold(s) passed", made)

    def send_due(self) -> int:
        """Send what is due now (this replica's and others'); returns how many were sent."""
        now = time.time()
        sent = 0
        for alert in self.outbox.claim_due(now, self.settings.timeout_seconds * 2 + 5):
            if self._stopping.is_set():
                break
            error = self._post(alert.body.encode("utf-8"))
            if error is None:
                self.outbox.mark_sent(alert.id, time.time())
                self.metrics.spend_alerts_sent.inc()
                sent += 1
                continue
            delay = min(self.settings.max_retry_seconds, self.settings.retry_seconds * 2 ** alert.attempts)
            self.outbox.mark_failed(alert.id, error, time.time() + delay)
            self.metrics.spend_alert_failures.inc()
            log.warning("spend alert %s: webhook attempt %d failed (%s); retrying in %.1f s", alert.id,
                        alert.attempts + 1, error, delay)
        return sent

    def _post(self, body: bytes) -> str | None:
        """None when the webhook took it (2xx), else what went wrong."""
        headers = {"content-type": "application/json", SIGNATURE_HEADER: sign(self._secret, int(time.time()), body)}
        try:
            response = self._http.post(str(self.settings.webhook_url), content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
