"""What a request costs: the model's price from its config (``client.pricing``), or the caller's organisation's
price for it (``Caller.prices``: `trtkit org update ORG --price MODEL=IN,CACHED,OUT`). Both the reservation (the
most a request can cost: its whole prompt uncached plus max_tokens) and the bill (what it used, its cached prompt
tokens at the cached rate) go through here, on every upstream. A model with no price is billed 0, and the first
request that finds it so logs a warning naming it (once per model and process)."""

from __future__ import annotations

import logging
import threading

from trtkit.config.schema import PricingSection
from trtkit.governance.vocabulary import Caller, Usage, price_cost
from trtkit.store.records import ModelPrice

log = logging.getLogger(__name__)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def config_price(pricing: PricingSection) -> ModelPrice | None:
    """The config's price, or None when it sets none (``rules._prices_whole``: input and output come together)."""
    if pricing.input_per_million is None or pricing.output_per_million is None:
        return None
    cached = pricing.cached_input_per_million
    return ModelPrice(pricing.input_per_million, pricing.output_per_million,
                      pricing.input_per_million if cached is None else cached)


class PriceBook:
    """One model's prices: the config's, under any organisation's override."""

    def __init__(self, model: str, pricing: PricingSection) -> None:
        self.model = model
        self.price = config_price(pricing)

    def price_for(self, caller: Caller | None) -> ModelPrice | None:
        price = caller.prices if caller is not None and caller.prices is not None else self.price
        if price is None:
            warn_unpriced(self.model)
        return price

    def cost(self, usage: Usage, caller: Caller | None) -> float:
        return price_cost(usage, self.price_for(caller))


def warn_unpriced(model: str) -> None:
    with _warned_lock:
        if model in _warned:
            return
        _warned.add(model)
    log.warning("model '%s' has no price: its requests are billed 0 and cost budgets do not fill; set "
                "client.pricing (input_per_million, output_per_million, cached_input_per_million) in its config",
                model)
