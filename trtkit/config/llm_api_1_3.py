"""The LLM-API options trtkit writes, held to TensorRT-LLM 1.3.0rc29, the version NVIDIA Dynamo 1.6 runs
(``trtkit/contracts/llm_api_1.3.0rc29.json``: what is valid there, unverified, removed, and what changed since
1.2.1, each with the source it was read from). `trtkit deploy dynamo` checks its workers' options here."""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from importlib import resources
from typing import Any

from trtkit.errors import ConfigError

log = logging.getLogger(__name__)
CONTRACT = "llm_api_1.3.0rc29.json"


@lru_cache(maxsize=1)
def contract_1_3() -> dict[str, Any]:
    return dict(json.loads(resources.files("trtkit.contracts").joinpath(CONTRACT).read_text(encoding="utf-8")))


def check_dynamo_options(options: dict[str, Any]) -> list[str]:
    """Raise ConfigError on an option 1.3.0rc29 does not have; return the unverified ones (each also logged)."""
    c = contract_1_3()
    unknown = sorted(k for k in options if k not in c["valid"] and k not in c["unverified"])
    kv = options.get("kv_cache_config") or {}
    unknown += sorted(f"kv_cache_config.{k}" for k in kv
                      if k not in c["kv_cache_config_valid"] and f"kv_cache_config.{k}" not in c["unverified"])
    if options.get("backend", "pytorch") != "pytorch":
        raise ConfigError(f"backend: {options['backend']} is not served by Dynamo's TensorRT-LLM worker (TensorRT-LLM "
                          f"{c['target']['tensorrt_llm']}: the PyTorch backend only); use build.backend: pytorch")
    if unknown:
        raise ConfigError(f"pytorch.llm_api_options: {', '.join(unknown)} not known to TensorRT-LLM "
                          f"{c['target']['tensorrt_llm']} as Dynamo {c['target']['dynamo']} runs it "
                          f"(trtkit/contracts/{CONTRACT}); remove them for `trtkit deploy dynamo`")
    unverified = sorted(k for k in options if k in c["unverified"])
    unverified += sorted(f"kv_cache_config.{k}" for k in kv if f"kv_cache_config.{k}" in c["unverified"])
    for key in unverified:
        log.warning("%s: not verified for TensorRT-LLM %s (%s)", key, c["target"]["tensorrt_llm"], c["unverified"][key])
    return unverified
