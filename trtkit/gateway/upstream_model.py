"""The ``model`` the gateway sends an OpenAI-compatible upstream, checked against what it serves at start.

The gateway advertises the config's name to its callers and sends the upstream ``gateway.upstream.model`` (default:
the config's name). A Dynamo frontend, vLLM or llama-server serves under a name of its own, so a mismatch made every
request an upstream 404. Now, at start: the upstream's ``/v1/models`` is asked once. The name is served: fine. It is
not, and the upstream serves exactly one model while ``gateway.upstream.model`` is unset: that one is used, and the
log says so. Otherwise the gateway refuses to start, naming the models served and the setting to use. An upstream
that cannot be asked yet (still starting, no /models route) is given the configured name, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from trtkit.errors import ConfigError
from trtkit.transport.openai.served_models import served_models
from trtkit.transport.openai.upstream import UpstreamSettings

log = logging.getLogger(__name__)
ModelLister = Callable[[str, str | None, float], list[str] | None]


def checked_upstream_model(settings: UpstreamSettings, *, configured: bool,
                           list_models: ModelLister = served_models) -> UpstreamSettings:
    """``settings`` with the model to send; ``configured``: ``gateway.upstream.model`` was set explicitly."""
    served = list_models(settings.url, settings.api_key, settings.connect_timeout_s)
    if served is None:
        log.warning("could not ask %s/models what it serves; sending model '%s' (gateway.upstream.model)",
                    settings.url.rstrip("/"), settings.model)
        return settings
    if settings.model in served:
        return settings
    if len(served) == 1 and not configured:
        log.warning("the upstream %s serves one model, '%s', not '%s': sending '%s' (set gateway.upstream.model "
                    "to make this explicit)", settings.url, served[0], settings.model, served[0])
        return replace(settings, model=served[0])
    listed = ", ".join(f"'{name}'" for name in served) or "no model (is a worker registered yet?)"
    where = "gateway.upstream.model" if configured else "the config's name (gateway.upstream.model is unset)"
    raise ConfigError(f"the upstream {settings.url} does not serve '{settings.model}', the model {where} names; it "
                      f"serves {listed}. Set gateway.upstream.model to the one to send")
