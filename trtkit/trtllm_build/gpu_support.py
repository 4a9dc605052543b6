"""What a GPU can build and serve, by compute capability: the one answer that plan, preflight and calibrate share.

Two kinds of limit, both keyed by the checkpoint's ``quant_algo`` / ``kv_cache_quant_algo``:
- kernels that need a newer GPU: FP8 weights or an FP8 KV cache need SM 8.9 (Ada) or newer, W4A8 AWQ (FP8
  activations) too, NVFP4 needs Blackwell (SM 10.0 or newer);
- what the TensorRT-LLM 1.2 builder refuses on data-center Blackwell. Its condition is
  ``get_sm_version() >= 100 and get_sm_version() < 120`` (tensorrt_llm/builder.py, ``build()``): INT8/INT4
  weights (weight-only, AWQ and GPTQ; W4A8 AWQ has INT4 weights with per-group scales), SmoothQuant,
  per-channel or per-token scaling, and an INT8 KV cache. SM 12.x (RTX PRO 6000 Blackwell, RTX 5090, GB10) is
  outside that range: the builder accepts them there. Sources in ``trtkit/contracts/trtllm_1.2_rules.json``
  (rule ``sm100_refusals``).

The PyTorch backend (``build.backend: pytorch``) builds nothing; what it runs is its Hardware Support Matrix
(docs/source/features/quantization.md, recorded in ``trtkit/contracts/llm_api_1.2.json``): ``pytorch_refusals``.
``refusals_for`` picks the table by backend, so plan, preflight and calibrate ask one function.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.config.build_backend import BuildBackend

# quant_algo -> oldest SM with kernels for it (FP8 tensor cores arrived with Ada, FP4 with Blackwell)
MIN_SM_FOR_WEIGHTS = {"FP8": 89, "FP8_PER_CHANNEL_PER_TOKEN": 89, "W4A8_AWQ": 89, "NVFP4": 100}
MIN_SM_FOR_KV = {"FP8": 89}
# builder.py: `if get_sm_version() >= 100 and get_sm_version() < 120:` (the refusals below)
BUILDER_REFUSAL_SM = range(100, 120)
# quant_algo values with INT8/INT4 weights (is_int8_weight_only / is_int4_weight_only in QuantMode)
INT_WEIGHT_ALGOS = ("W8A16", "W4A16", "W4A16_AWQ", "W4A16_GPTQ", "W8A16_GPTQ", "W4A8_AWQ")
# SmoothQuant (has_act_and_weight_quant) and FP8 row-wise (has_per_channel_scaling / per-token scaling)
SMOOTHQUANT_ALGOS = ("W8A8_SQ_PER_CHANNEL", "W8A8_SQ_PER_TENSOR_PLUGIN", "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",
                     "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN", "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN")
PER_CHANNEL_OR_TOKEN_ALGOS = ("FP8_PER_CHANNEL_PER_TOKEN",)
ARCHITECTURE_OF_MAJOR = {7: "Volta/Turing", 8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 11: "Blackwell",
                         12: "Blackwell (RTX)"}


@dataclass(slots=True, frozen=True)
class Refusal:
    """One reason a GPU cannot build or serve a checkpoint, and how to get past it."""

    what: str  # e.g. "quant_algo FP8 (quantization.format fp8)"
    why: str   # e.g. "needs compute capability 8.9 or newer (Ada, Hopper, Blackwell)"
    fix: str

    def sentence(self, gpu: str, cc: tuple[int, int]) -> str:
        return f"{self.what} {self.why}; {gpu} is {cc[0]}.{cc[1]}; {self.fix}"


def sm_of(cc: tuple[int, int]) -> int:
    return cc[0] * 10 + cc[1]


def refusals(quant_algo: str | None, kv_cache_quant_algo: str | None, cc: tuple[int, int]) -> list[Refusal]:
    """Every reason this GPU (compute capability ``cc``) cannot build this checkpoint with TensorRT-LLM 1.2."""
    found = _kernel_refusals(quant_algo, kv_cache_quant_algo, sm_of(cc))
    refused = builder_refusal(quant_algo, kv_cache_quant_algo, sm_of(cc))
    if refused:
        found.append(Refusal(f"TensorRT-LLM 1.2 refuses {refused}", "on SM 10.x and 11.x (B200, GB200, B300, GB300)",
                             "use quantization.format fp8 or nvfp4 with kv_cache_dtype fp8 or auto, then re-run "
                             "trtkit calibrate, or build on a Hopper, Ada or RTX Blackwell (SM 12.x) GPU"))
    return found


def _kernel_refusals(quant_algo: str | None, kv_algo: str | None, sm: int) -> list[Refusal]:
    found = []
    need = MIN_SM_FOR_WEIGHTS.get(quant_algo or "")
    if need is not None and sm < need:
        found.append(_too_old(f"quant_algo {quant_algo}", need))
    kv_need = MIN_SM_FOR_KV.get(kv_algo or "")
    if kv_need is not None and sm < kv_need and not (need is not None and sm < need):
        found.append(_too_old(f"kv_cache_quant_algo {kv_algo}", kv_need))
    return found


def _too_old(what: str, need: int) -> Refusal:
    if need >= 100:
        return Refusal(what, "needs a Blackwell GPU (compute capability 10.0 or newer)",
                       "use fp8 on Hopper or Ada, or build on a B200, B300 or RTX PRO 6000 Blackwell")
    return Refusal(what, "needs compute capability 8.9 or newer (Ada, Hopper, Blackwell)",
                   "use int8_sq or int8_wo (kv_cache_dtype int8), or build on an L4, L40S, H100 or newer")


def builder_refusal(quant_algo: str | None, kv_cache_quant_algo: str | None, sm: int) -> str | None:
    """What the 1.2 builder refuses in this checkpoint on this SM (only 10.x and 11.x refuse anything), or None."""
    if sm not in BUILDER_REFUSAL_SM:
        return None
    refused = []
    if quant_algo in INT_WEIGHT_ALGOS:
        refused.append(f"quant_algo {quant_algo} (INT8/INT4 weights: weight-only, AWQ, GPTQ, W4A8 AWQ)")
    elif quant_algo in SMOOTHQUANT_ALGOS:
        refused.append(f"quant_algo {quant_algo} (SmoothQuant)")
    elif quant_algo in PER_CHANNEL_OR_TOKEN_ALGOS:
        refused.append(f"quant_algo {quant_algo} (per-channel or per-token scaling)")
    if kv_cache_quant_algo == "INT8":
        refused.append("an int8 KV cache")
    return " and ".join(refused) or None


# PyTorch backend: quant_algo -> the GPU families that run it ("Blackwell sm100/103" = major 10, "sm120" = major 12)
PYTORCH_MATRIX: dict[str, tuple[str, ...]] = {
    "NVFP4": ("blackwell", "blackwell_rtx"), "FP8": ("ada", "hopper", "blackwell", "blackwell_rtx"),
    "FP8_BLOCK_SCALES": ("hopper", "blackwell"), "W4A8_AWQ": ("ada", "hopper"),
    "W4A16_AWQ": ("ampere", "ada", "hopper"),
}
PYTORCH_KV_MATRIX: dict[str, tuple[str, ...]] = {"FP8": ("ampere", "ada", "hopper", "blackwell", "blackwell_rtx")}
FAMILY_NAMES = {"ampere": "Ampere", "ada": "Ada", "hopper": "Hopper", "blackwell": "Blackwell SM 10.x (B200, B300, GB300)",
                "blackwell_rtx": "Blackwell SM 12.x (RTX PRO 6000, RTX 5090)"}


def family(cc: tuple[int, int]) -> str:
    """The support-matrix row of a compute capability ("older" before Ampere, "other" for SM 11.x)."""
    if cc == (8, 9):
        return "ada"
    return {8: "ampere", 9: "hopper", 10: "blackwell", 12: "blackwell_rtx"}.get(cc[0], "older" if cc[0] < 8 else "other")


def pytorch_refusals(quant_algo: str | None, kv_cache_quant_algo: str | None, cc: tuple[int, int]) -> list[Refusal]:
    """Every reason the PyTorch backend's support matrix gives for this GPU not running this checkpoint."""
    row, found = family(cc), []
    for what, table, algo in (("quant_algo", PYTORCH_MATRIX, quant_algo), ("kv_cache_quant_algo", PYTORCH_KV_MATRIX,
                                                                          kv_cache_quant_algo)):
        rows = table.get(algo or "")
        if rows is not None and row not in rows:
            runs_on = ", ".join(FAMILY_NAMES[r] for r in rows)
            found.append(Refusal(f"{what} {algo} on the PyTorch backend", f"runs only on {runs_on} (TensorRT-LLM's "
                                 f"quantization support matrix)", "pick a format this GPU runs (trtkit plan CONFIG "
                                 "--gpu KIND lists the blockers), or serve it on one of those GPUs"))
    return found


def refusals_for(backend: BuildBackend, quant_algo: str | None, kv_cache_quant_algo: str | None,
                 cc: tuple[int, int]) -> list[Refusal]:
    """What a GPU cannot run, by backend: the 1.2 builder and kernels (tensorrt) or the PyTorch support matrix."""
    return backend.pick(tensorrt=refusals, pytorch=pytorch_refusals)(quant_algo, kv_cache_quant_algo, cc)


def architecture(cc: tuple[int, int]) -> str:
    if cc == (8, 9):
        return "Ada Lovelace"
    return ARCHITECTURE_OF_MAJOR.get(cc[0], f"SM {cc[0]}.{cc[1]}")
