"""The LLM-API options trtkit writes, held to TensorRT-LLM 1.3.0rc29, the version NVIDIA Dynamo 1.6 runs
(``trtkit/contracts/llm_api_1.3.0rc29.json``: what is valid there, unverified, removed, and what changed since
1.2.1, each with the source it was read from). `trtkit deploy dynamo` and `trtkit check` on its output use it: an
option neither version is known to have is an error, a 1.2.1 option that no 1.3.0rc29 source shows a warning, the
TensorRT backend an error."""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from importlib import resources
from typing import Any

from trtkit.config.build_backend import PYTORCH
from trtkit.config.llm_api import allowlist
from trtkit.errors import ConfigError

log = logging.getLogger(__name__)
CONTRACT = "llm_api_1.3.0rc29.json"


@lru_cache(maxsize=1)
def contract_1_3() -> dict[str, Any]:
    return dict(json.loads(resources.files("trtkit.contracts").joinpath(CONTRACT).read_text(encoding="utf-8")))


def option_problems(options: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what 1.3.0rc29 does not have, each a sentence; the options trtkit writes that no source shows valid there)."""
    c = contract_1_3()
    version = f"TensorRT-LLM {c['target']['tensorrt_llm']} as Dynamo {c['target']['dynamo']} runs it"
    kv = options.get("kv_cache_config") or {}
    known_1_2 = allowlist()
    unknown = sorted(k for k in options if k not in c["valid"] and k not in c["unverified"]
                     and k not in known_1_2["TorchLlmArgs"])
    unknown += sorted(f"kv_cache_config.{k}" for k in kv if k not in c["kv_cache_config_valid"]
                      and f"kv_cache_config.{k}" not in c["unverified"] and k not in known_1_2["KvCacheConfig"])
    errors = [f"{key}: not an option of {version} (trtkit/contracts/{CONTRACT}); remove it" for key in unknown]
    if options.get("backend", PYTORCH.name) != PYTORCH.name:  # the LLM API's own backend option
        errors.append(f"backend: {options['backend']}: {version} serves the PyTorch backend only; use "
                      f"build.backend: pytorch")
    unverified = sorted(k for k in options if k not in c["valid"] and k not in unknown)
    unverified += sorted(f"kv_cache_config.{k}" for k in kv
                         if k not in c["kv_cache_config_valid"] and f"kv_cache_config.{k}" not in unknown)
    return errors, unverified


def unverified_reason(key: str) -> str:
    return str(contract_1_3()["unverified"].get(key, "a TensorRT-LLM 1.2.1 option (llm_api_1.2.json) that Dynamo "
                                                      "1.6.1's worker does not show"))


def check_dynamo_options(options: dict[str, Any]) -> list[str]:
    """Raise ConfigError on an option 1.3.0rc29 does not have; return the unverified ones (each also logged)."""
    errors, unverified = option_problems(options)
    if errors:
        raise ConfigError("the workers' LLM-API options (pytorch.llm_api_options and what the config maps): "
                          + "; ".join(errors))
    for key in unverified:
        log.warning("%s: not verified for TensorRT-LLM 1.3.0rc29 (%s)", key, unverified_reason(key))
    return unverified
