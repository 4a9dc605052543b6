"""Engine build for TensorRT-LLM 1.2.x: trtllm-build flags, preflight, manifest/cache, KV memory planner.

Only ``runner`` (trtllm-build) and ``host_facts``' probes touch the GPU host; everything else is plain Python
tested on CPU.
"""

from trtkit.config.gpus import GpuSpec, lookup_gpu
from trtkit.trtllm_build.builder import BuildPlan, BuildResult, build_engines, plan_build
from trtkit.trtllm_build.host_facts import GpuFact, HostFacts
from trtkit.trtllm_build.manifest import read_manifest, verify_engine_for_host
from trtkit.trtllm_build.plan_config import kv_plan_for_config
from trtkit.trtllm_build.planner import KvPlan, compare_variants, plan_kv_cache
from trtkit.trtllm_build.shapes import ModelShape, known_shape, resolve_shape

__all__ = ["BuildPlan", "BuildResult", "build_engines", "plan_build", "GpuSpec", "lookup_gpu", "read_manifest",
           "verify_engine_for_host", "KvPlan", "kv_plan_for_config", "compare_variants", "plan_kv_cache", "GpuFact", "HostFacts",
           "ModelShape", "known_shape", "resolve_shape"]
