"""A local cluster's spec from a model config: the model's Hugging Face folder (``model.source``, resolved as every
stage resolves it) and the reference engine's limits and KV pool (``build.*`` and ``serve.*``, as the CPU engine in
Triton takes them). The Dynamo worker serves the source weights in the engine's dtype (``serve.cpu_dtype``); the
config's quantization is a GPU build's business."""

from __future__ import annotations

from dataclasses import replace

from trtkit.config.schema import ModelConfig
from trtkit.dynamo.cluster import ClusterSpec, RouterMode
from trtkit.refengine.config import EngineConfig
from trtkit.sources.resolve import resolve_model_dir


def cluster_spec(config: ModelConfig, *, num_workers: int, mocker: bool = False, router_mode: RouterMode = "kv",
                 port: int = 0, threads_per_worker: int | None = None) -> ClusterSpec:
    """``threads_per_worker``: torch threads of each worker's engine (None: ``serve.cpu_threads``; 0 there means
    every core, which N workers on one machine would share)."""
    engine = EngineConfig.from_model_config(config)
    if threads_per_worker is not None:
        engine = replace(engine, num_threads=threads_per_worker)
    return ClusterSpec(config.name, resolve_model_dir(config.model.source), num_workers=num_workers, mocker=mocker,
                       router_mode=router_mode, port=port, engine_config=engine)
