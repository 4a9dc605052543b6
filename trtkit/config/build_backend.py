"""``build.backend``, chosen once: a :class:`BuildBackend` that the stages ask, never a string they compare.

vLLM picks its platform once (``current_platform``) and asks it questions; trtkit does the same with build.backend.
``backend_of(config)`` hands out one of two objects, and each holds what differs between the backends:

=====================  ==========================================  ===============================================
what differs           ``tensorrt`` (:data:`TENSORRT`)             ``pytorch`` (:data:`PYTORCH`)
=====================  ==========================================  ===============================================
convert / calibrate    a TensorRT-LLM checkpoint, one shard per    ModelOpt's unified Hugging Face checkpoint,
                       tp x pp rank                                unsharded: the LLM API shards it at load
build                  trtllm-build engines                        no engine: the LLM-API options file
deploy slot            the C++ backend (GPU), the CPU engine       the LLM-API engine model on both targets
                       model (CPU)                                 (``tensorrt_llm.LLM`` / the reference facade)
config refusals        the ``pytorch`` section, fp8_block          engine switches, formats and an int8 KV cache
                                                                   it does not load; llm_api_options' allowlist
serve start timeout    120 s                                       900 s
k8s                    one tritonserver per rank, multi-node       one tritonserver per pod, one node
Dynamo (deploy dynamo) refused: its worker runs no TensorRT engine  TensorRT-LLM 1.3.0rc29's LLM API workers
=====================  ==========================================  ===============================================

Where a stage has two implementations of one step (build engines or write options, export one checkpoint or the
other), it keeps both and chooses with :meth:`BuildBackend.pick`, whose keywords name every backend: a third backend
adds a keyword, and every stage that has not answered for it fails mypy and the call. This module is the one place
that reads ``build.backend`` or names a backend in a string (tests/test_build_backend.py holds the code to that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from trtkit.config.llm_api import check_llm_api_options
from trtkit.config.schema import ConvertSection, ModelConfig, ServeSection
from trtkit.errors import ConfigError

T = TypeVar("T")

# build.* switches of trtllm-build with no meaning when nothing is built (the PyTorch backend compiles nothing)
TENSORRT_ONLY_BUILD_KEYS = {
    "opt_num_tokens": "--opt_num_tokens", "gpt_attention_plugin": "--gpt_attention_plugin",
    "gemm_plugin": "--gemm_plugin", "use_fused_mlp": "--use_fused_mlp", "context_fmha": "--context_fmha",
    "use_paged_context_fmha": "--use_paged_context_fmha", "remove_input_padding": "--remove_input_padding",
    "reduce_fusion": "--reduce_fusion", "multiple_profiles": "--multiple_profiles",
    "gather_logits": "--gather_context_logits/--gather_generation_logits", "workers": "--workers",
}
# quantization formats the PyTorch backend does not load (contract: quantization.refused_by_trtkit)
PYTORCH_REFUSED_FORMATS = {
    "int8_sq": "INT8 SmoothQuant: the PyTorch backend has no int8-activation kernels for it",
    "int8_wo": "INT8 weight-only: not in the PyTorch backend's support matrix, and loading it from a unified "
               "checkpoint is unconfirmed in TensorRT-LLM 1.2.1",
    "int4_wo": "INT4 per-channel weight-only: not in the PyTorch backend's support matrix",
}
PYTORCH_FORMAT_FIX = "use fp8, fp8_block, nvfp4, int4_awq or w4a8_awq (each on the GPUs that run it), or none"
LLM_API_ENGINES = {"gpu": "tensorrt_llm", "cpu": "reference"}  # the LLM-API engine model's engine, by target


@dataclass(slots=True, frozen=True)
class EngineSlot:
    """What `trtkit deploy` puts in the ``tensorrt_llm`` slot for a backend and a target (cpu or gpu)."""

    label: str  # what `trtkit deploy` prints
    python_model: bool  # a trtkit Python model (the CPU engine or the LLM-API engine model), not the C++ backend
    llm_api_engine: str | None = None  # the LLM-API engine model's engine (parameter llm_api_engine), or None
    runs_built_engines: bool = False  # the C++ backend: engines built on another host are refused at deploy
    can_emulate_cpp: bool = False  # the CPU engine model, whose test switch answers as the C++ backend


class BuildBackend:
    """One value of build.backend and everything that differs with it. The two instances are :data:`TENSORRT` and
    :data:`PYTORCH`; they are compared by identity and survive copying as themselves."""

    name: str  # build.backend's value, and TensorRT-LLM's own name for the backend (trtllm-serve --backend, LLM())
    builds_engines: bool  # `trtkit build` runs trtllm-build
    serves_llm_api: bool  # the model is served through TensorRT-LLM's LLM API from an options file
    checkpoint_kind: str  # what convert and calibrate write ("a TensorRT-LLM checkpoint")
    shards_checkpoint: bool  # convert and calibrate write one shard per tp x pp rank
    build_stage: str  # the quickstart's build stage
    server_start_timeout_s: float  # serve.server_start_timeout_s when the config sets none (see the subclasses)
    spans_nodes: bool  # one replica may span several Kubernetes nodes (a LeaderWorkerSet)

    def pick(self, *, tensorrt: T, pytorch: T) -> T:
        """This backend's one of two implementations of a step (a function, a table entry)."""
        raise NotImplementedError

    def check_config(self, data: object, config: ModelConfig) -> None:
        """Raise ConfigError for a key or value this backend cannot honour. ``data`` is the YAML as read (defaults
        cannot tell a key the YAML set), ``config`` the loaded config."""
        raise NotImplementedError

    def calibration_refusal(self, fmt: str, kv_cache_dtype: str) -> str | None:
        """Why `trtkit calibrate --format FMT --kv-cache-dtype KV` cannot serve this backend (the config's refusals,
        worded for the flags), or None."""
        raise NotImplementedError

    def checkpoint_folder(self, convert: ConvertSection, quantization: str | None = None) -> str:
        """The folder name under WORKDIR/checkpoints: convert's (``quantization`` None) or calibrate's."""
        raise NotImplementedError

    def manifest_inputs(self) -> dict[str, str]:
        """What a convert or calibrate manifest records of the backend (tensorrt: nothing, as before backends)."""
        return {} if self.shards_checkpoint else {"backend": self.name}

    def engine_slot(self, target: str) -> EngineSlot:
        raise NotImplementedError

    def launch_ranks(self, world_size: int) -> int:
        """tritonserver processes a replica starts for tp x pp = ``world_size`` GPUs."""
        raise NotImplementedError

    def dynamo_refusal(self) -> str | None:
        """Why `trtkit deploy dynamo` cannot serve this backend's model, or None. Dynamo 1.6 pins TensorRT-LLM
        1.3.0rc29, whose worker (``python -m dynamo.trtllm``) runs the PyTorch backend only."""
        raise NotImplementedError

    def start_timeout(self, serve: ServeSection) -> float:
        """serve.server_start_timeout_s, or this backend's default when the config sets none."""
        return serve.server_start_timeout_s or self.server_start_timeout_s

    def __repr__(self) -> str:
        return f"BuildBackend({self.name!r})"

    def __copy__(self) -> BuildBackend:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> BuildBackend:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return backend_named, (self.name,)


class TensorrtBackend(BuildBackend):
    """TensorRT engines built by trtllm-build, served by the C++ ``tensorrtllm`` backend (the CPU engine on CPU)."""

    name = "tensorrt"
    builds_engines = True
    serves_llm_api = False
    checkpoint_kind = "TensorRT-LLM"
    shards_checkpoint = True
    build_stage = "building TensorRT engines with trtllm-build"
    # the C++ backend deserializes a built engine: seconds to a minute for an 8B model
    server_start_timeout_s = 120.0
    spans_nodes = True

    def pick(self, *, tensorrt: T, pytorch: T) -> T:
        return tensorrt

    def check_config(self, data: object, config: ModelConfig) -> None:
        if isinstance(data, dict) and "pytorch" in data:
            raise ConfigError("pytorch: these LLM-API options apply only with build.backend: pytorch; set "
                              "build.backend: pytorch, or remove the pytorch section")
        if config.quantization.format == "fp8_block":
            raise ConfigError("quantization.format: fp8_block (FP8 block scales) is a PyTorch-backend format; trtkit "
                              "builds TensorRT engines with fp8 (per tensor). Use build.backend: pytorch, or format fp8")

    def calibration_refusal(self, fmt: str, kv_cache_dtype: str) -> str | None:
        if fmt == "fp8_block":
            return ("--format fp8_block is a PyTorch-backend format (a unified checkpoint); set build.backend: "
                    "pytorch, or use fp8")
        return None

    def checkpoint_folder(self, convert: ConvertSection, quantization: str | None = None) -> str:
        prefix = f"{quantization}-" if quantization else ""
        return f"{prefix}{convert.dtype}-tp{convert.tp_size}-pp{convert.pp_size}"

    def engine_slot(self, target: str) -> EngineSlot:
        if target == "gpu":
            return EngineSlot("C++ tensorrtllm backend", python_model=False, runs_built_engines=True)
        return EngineSlot("CPU reference engine", python_model=True, can_emulate_cpp=True)

    def launch_ranks(self, world_size: int) -> int:
        return world_size  # one tritonserver per rank, under mpirun

    def dynamo_refusal(self) -> str | None:
        return ("build.backend: tensorrt builds TensorRT engines, which Dynamo's TensorRT-LLM worker cannot run: "
                "Dynamo 1.6 pins TensorRT-LLM 1.3.0rc29, whose worker runs the PyTorch backend only (the engine "
                "builder left TensorRT-LLM after 1.3.0rc20); set build.backend: pytorch for `trtkit deploy dynamo`, "
                "or deploy the engines with `trtkit deploy k8s`")


class PytorchBackend(BuildBackend):
    """TensorRT-LLM's LLM API (its PyTorch backend): no engine build, the LLM-API engine model in the slot."""

    name = "pytorch"
    builds_engines = False
    serves_llm_api = True
    checkpoint_kind = "Hugging Face"
    shards_checkpoint = False
    build_stage = "writing the LLM-API options (PyTorch backend: no engine to build)"
    # The LLM-API engine model on an 8B model on one H100 imports tensorrt_llm twice (the Triton stub, then the LLM
    # API's MPI worker), loads ~16 GB of weights, runs the autotuner, captures CUDA graphs for its batch sizes and
    # makes a KV-cache estimation pass (a profiling run, then the cache built again): minutes, not the two the C++
    # backend needs. Not measured here (no GPU): scripts/gpu_smoke.sh records each server's time to ready.
    server_start_timeout_s = 900.0
    spans_nodes = False  # multi-node LLM API serving needs trtllm-llmapi-launch under mpirun: not generated yet

    def pick(self, *, tensorrt: T, pytorch: T) -> T:
        return pytorch

    def check_config(self, data: object, config: ModelConfig) -> None:
        build = data.get("build") if isinstance(data, dict) else None
        for key in build if isinstance(build, dict) else ():
            if key in TENSORRT_ONLY_BUILD_KEYS:
                raise ConfigError(f"build.{key}: a TensorRT engine switch (trtllm-build {TENSORRT_ONLY_BUILD_KEYS[key]}), "
                                  f"and build.backend: pytorch builds no engine; remove build.{key}")
        q = config.quantization
        if q.format in PYTORCH_REFUSED_FORMATS:
            raise ConfigError(f"quantization.format: {q.format} ({PYTORCH_REFUSED_FORMATS[q.format]}) under "
                              f"build.backend: pytorch; {PYTORCH_FORMAT_FIX}, or build.backend: tensorrt")
        if q.kv_cache_dtype == "int8":
            raise ConfigError("quantization.kv_cache_dtype: int8 is not in the PyTorch backend's support matrix (FP8 KV "
                              "only); use fp8 or auto, or build.backend: tensorrt")
        check_llm_api_options(config.pytorch.llm_api_options, "pytorch.llm_api_options")

    def calibration_refusal(self, fmt: str, kv_cache_dtype: str) -> str | None:
        if fmt in PYTORCH_REFUSED_FORMATS:
            return f"--format {fmt} ({PYTORCH_REFUSED_FORMATS[fmt]}) under build.backend: pytorch; {PYTORCH_FORMAT_FIX}"
        if kv_cache_dtype == "int8":
            return "--kv-cache-dtype int8 is not in the PyTorch backend's support matrix; use fp8 or auto"
        return None

    def checkpoint_folder(self, convert: ConvertSection, quantization: str | None = None) -> str:
        return f"hf-{quantization or 'none'}-{convert.dtype}"  # one unsharded checkpoint: the LLM API splits it

    def engine_slot(self, target: str) -> EngineSlot:
        engine = LLM_API_ENGINES[target]
        over = "tensorrt_llm.LLM (PyTorch backend)" if target == "gpu" else "the CPU reference engine"
        return EngineSlot(f"LLM-API engine model over {over}", python_model=True, llm_api_engine=engine)

    def launch_ranks(self, world_size: int) -> int:
        return 1  # the LLM API spawns its own MPI workers over the pod's GPUs (upstream's Triton LLM-API model)

    def dynamo_refusal(self) -> str | None:
        return None


TENSORRT: BuildBackend = TensorrtBackend()
PYTORCH: BuildBackend = PytorchBackend()
BACKENDS: dict[str, BuildBackend] = {backend.name: backend for backend in (TENSORRT, PYTORCH)}


def backend_named(name: str) -> BuildBackend:
    """The backend of a build.backend value as written in a file trtkit wrote (a deploy manifest)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"build.backend {name!r} is unknown; use {' or '.join(BACKENDS)}") from None


def backend_of(config: ModelConfig) -> BuildBackend:
    """The config's build.backend: the one place it is read."""
    return backend_named(config.build.backend)
