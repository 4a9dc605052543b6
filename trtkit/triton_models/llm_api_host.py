"""Starting the LLM-API engine from the ``tensorrt_llm`` model's parameters (parameter ``llm_api_engine``).

- ``tensorrt_llm``: ``tensorrt_llm.LLM(model, **options)``, the PyTorch backend, on this host's GPUs. As upstream's
  Triton LLM-API model does, ``gpu_device_ids`` (one comma list per instance, ``;`` between instances) sets
  ``CUDA_VISIBLE_DEVICES`` before ``tensorrt_llm`` is imported, and MPI job variables a launcher left behind are
  cleared, so that ``tensor_parallel_size`` x ``pipeline_parallel_size`` > 1 starts the LLM API's own workers.
- ``reference``: the CPU reference engine's LLM facade (``trtkit.refengine.llm_api``) on the same options file,
  with the CPU knobs (``cpu_*`` parameters) apart. The same adapter and the same port run over both.

The options file (parameter ``llm_api_options``) is the one trtkit deploy writes: ``model`` plus every
``TorchLlmArgs`` option, checked against the 1.2.1 allowlist.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import yaml

from trtkit.errors import EngineError
from trtkit.triton_models.llm_api_port import LlmApiPort

log = logging.getLogger(__name__)
ENGINES = ("tensorrt_llm", "reference")
# variables an mpirun leaves in its children: the LLM API must start its own MPI world (upstream's model clears them)
MPI_JOB_VARIABLES = re.compile(r"^(OMPI_COMM_WORLD_|OMPI_UNIVERSE_SIZE|OMPI_FIRST_RANKS|OMPI_APP_CTX_NUM_PROCS|"
                               r"PMIX_RANK|PMIX_NAMESPACE|PMIX_SERVER_|PMI_RANK|PMI_SIZE|PMI_FD|OMPI_MCA_orte_|ORTE_)")


def read_options(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise EngineError(f"LLM-API options {path} cannot be read ({exc}); regenerate the repository with trtkit "
                          "deploy") from exc
    if not isinstance(data, dict) or not data.get("model"):
        raise EngineError(f"LLM-API options {path} must be a mapping with 'model'; regenerate it with trtkit deploy")
    return data


def start_llm_api(params: dict[str, str], instance_name: str = "") -> LlmApiPort:
    engine = params.get("llm_api_engine", "")
    if engine not in ENGINES:
        raise EngineError(f"parameter llm_api_engine {engine!r} is not one of {', '.join(ENGINES)}")
    options = read_options(params["llm_api_options"])
    model = str(options.pop("model"))
    if engine == "reference":
        from trtkit.refengine.llm_api import LLM, GuidedDecodingParams, SamplingParams

        llm = LLM(model, cpu=_cpu_options(params), **options)
        return LlmApiPort(llm, SamplingParams, GuidedDecodingParams, vocab_size=llm.vocab_size)
    select_gpus(params.get("gpu_device_ids", ""), instance_name)
    tensorrt_llm = importlib.import_module("tensorrt_llm")
    sampling = importlib.import_module("tensorrt_llm.sampling_params")
    log.info("starting tensorrt_llm %s LLM on %s", getattr(tensorrt_llm, "__version__", "?"), model)
    llm = tensorrt_llm.LLM(model=model, **options)
    return LlmApiPort(llm, sampling.SamplingParams, sampling.GuidedDecodingParams, vocab_size=model_vocab_size(model))


def select_gpus(device_ids: str, instance_name: str) -> None:
    """Restrict this instance to its GPUs before CUDA starts, and let the LLM API start its own MPI workers."""
    for name in [n for n in os.environ if MPI_JOB_VARIABLES.match(n)]:
        del os.environ[name]
    if not device_ids.strip():
        return
    lists = [part.strip() for part in device_ids.split(";")]
    match = re.search(r"_(\d+)$", instance_name)
    index = int(match.group(1)) if match and len(lists) > 1 else 0
    if index >= len(lists):
        raise EngineError(f"gpu_device_ids {device_ids!r} lists {len(lists)} instance(s), but this is instance "
                          f"{index}; give one GPU list per instance, separated by ';'")
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["TRTLLM_VISIBLE_DEVICES"] = lists[index]


def model_vocab_size(model: str) -> int:
    """The vocabulary size (embedding_bias needs one value per entry) from the model's config.json."""
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
        size: Any = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
        return int(size)
    except (OSError, ValueError, TypeError) as exc:
        raise EngineError(f"{model}: cannot read vocab_size from config.json ({exc})") from exc


def _cpu_options(params: dict[str, str]) -> Any:
    from trtkit.refengine.config import engine_dtype
    from trtkit.refengine.llm_api_options import CpuOptions

    def integer(name: str, default: int) -> int:
        value = params.get(name, "")
        return int(value) if value not in ("", None) else default

    backend = params.get("guided_decoding_backend") == "xgrammar"
    return CpuOptions(kv_cache_bytes=integer("cpu_kv_cache_bytes", 256 << 20),
                      dtype=engine_dtype(params.get("cpu_dtype")),
                      num_threads=integer("cpu_threads", 0), attention=params.get("cpu_attention") or "auto",
                      max_queue_size=integer("cpu_max_queue_size", 1024),
                      min_step_ms=float(params.get("cpu_min_step_ms") or 0),
                      xgrammar_tokenizer_info=(params.get("xgrammar_tokenizer_info_path") or None) if backend else None)
