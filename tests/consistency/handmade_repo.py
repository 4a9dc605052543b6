"""A consistent GPU-style repository written by hand (tensorrtllm backend, a trtllm-build config.json),
for breaking one field at a time. Configs are written from Triton's protobuf with text_format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ENGINE_CONFIG: dict[str, Any] = {
    "version": "1.2.0",
    "pretrained_config": {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "vocab_size": 49152,
                          "max_position_embeddings": 2048, "hidden_size": 128, "num_hidden_layers": 2,
                          "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1}},
    "build_config": {"max_batch_size": 8, "max_input_len": 512, "max_seq_len": 1024, "max_beam_width": 1,
                     "max_num_tokens": 2048,
                     "plugin_config": {"use_paged_context_fmha": True, "paged_kv_cache": True}},
}


def _model(name: str, backend: str, max_batch_size: int, params: dict[str, str],
           decoupled: bool = False) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend=backend, max_batch_size=max_batch_size)
    config.model_transaction_policy.decoupled = decoupled
    for key, value in params.items():
        config.parameters[key].string_value = value
    return config


def write_config(repo: Path, config: mc.ModelConfig) -> Path:
    path = repo / config.name / "config.pbtxt"
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "1").mkdir(exist_ok=True)
    path.write_text(text_format.MessageToString(config))
    return path


def read_config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def write_engine(engine_dir: Path, config: dict[str, Any], eos_token_id: int) -> Path:
    engine_dir.mkdir(parents=True, exist_ok=True)
    (engine_dir / "config.json").write_text(json.dumps(config))
    (engine_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_token_id}))
    return engine_dir


def handmade_repository(root: Path, tokenizer_dir: Path, *, eos_token_id: int) -> Path:
    """Consistent: every limit matches the engine, tokenizer present, streaming models decoupled."""
    repo, engine = root / "repo", write_engine(root / "engine", json.loads(json.dumps(ENGINE_CONFIG)), eos_token_id)
    tok = {"tokenizer_dir": str(tokenizer_dir)}
    write_config(repo, _model("preprocessing", "python", 8, {**tok, "max_input_len": "512"}))
    write_config(repo, _model("postprocessing", "python", 8, tok))
    write_config(repo, _model("tensorrt_llm", "tensorrtllm", 8, {
        "gpt_model_type": "inflight_fused_batching", "gpt_model_path": str(engine), "max_beam_width": "1",
        "enable_kv_cache_reuse": "true", "enable_chunked_context": "false", **tok}, decoupled=True))
    write_config(repo, _model("tensorrt_llm_bls", "python", 8, {"tensorrt_llm_model_name": "tensorrt_llm"},
                              decoupled=True))
    ensemble = mc.ModelConfig(name="ensemble", platform="ensemble", max_batch_size=8)
    write_config(repo, ensemble)
    return repo
