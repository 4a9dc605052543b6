"""Rules about what the repository meets at run time: tokenizer files and ids, GPUs, world size."""

from __future__ import annotations

from trtkit.consistency.check_inputs import CheckContext
from trtkit.consistency.findings import Finding
from trtkit.consistency.tokenizers import TokenizerInfo, has_tokenizer_files

_TOKENIZER_MODELS = ("preprocessing", "postprocessing")


def tokenizer_paths(ctx: CheckContext) -> list[Finding]:
    findings = []
    named = {model.name for model, _ in ctx.tokenizer_dirs()}
    for name in _TOKENIZER_MODELS:
        if name in ctx.models and name not in named:
            findings.append(Finding("tokenizer_path", ctx.models[name].config_path, "no tokenizer_dir parameter",
                                    f"{name} needs the model's tokenizer",
                                    "set parameter tokenizer_dir to the tokenizer folder (redeploy)"))
    for model, path in ctx.tokenizer_dirs():
        if not has_tokenizer_files(path):
            findings.append(Finding("tokenizer_path", model.config_path, f"tokenizer_dir {path}",
                                    "that folder holds no tokenizer.json / tokenizer.model / vocab.json",
                                    "point tokenizer_dir at the model's tokenizer folder"))
        elif ctx.tokenizer(path) is None:
            findings.append(Finding("tokenizer_path", model.config_path, f"tokenizer_dir {path}",
                                    "the tokenizer there does not load (see `trtkit -v check`)",
                                    "point tokenizer_dir at a complete tokenizer folder"))
    return findings


def _loaded_tokenizers(ctx: CheckContext) -> list[tuple[str, TokenizerInfo]]:
    found = []
    for model, path in ctx.tokenizer_dirs():
        info = ctx.tokenizer(path) if has_tokenizer_files(path) else None
        if info is not None:
            found.append((model.name, info))
    return found


def end_and_pad_ids(ctx: CheckContext) -> list[Finding]:
    tokenizers = _loaded_tokenizers(ctx)
    if not tokenizers:
        return []
    findings = []
    first_name, first = tokenizers[0]
    for name, info in tokenizers[1:]:
        if (info.end_id, info.pad_id, info.vocab_size) != (first.end_id, first.pad_id, first.vocab_size):
            findings.append(Finding("tokenizer_mismatch", ctx.models[name].config_path,
                                    f"{name} tokenizer end/pad/vocab {info.end_id}/{info.pad_id}/{info.vocab_size}",
                                    f"{first_name} uses {first.end_id}/{first.pad_id}/{first.vocab_size}",
                                    "give every model the same tokenizer_dir"))
    engine = ctx.engine
    if engine is None:
        return findings
    file = ctx.models[first_name].config_path
    if engine.eos_token_ids and first.end_id not in engine.eos_token_ids:
        findings.append(Finding("end_id", file, f"tokenizer end id {first.end_id} ({first.path})",
                                f"the model ends sequences with eos_token_id {engine.eos_token_ids} "
                                f"({engine.config_path.parent})",
                                "use the tokenizer that came with the model (tokenizer_dir)"))
    for label, token_id in (("end id", first.end_id), ("pad id", first.pad_id)):
        if token_id is not None and engine.vocab_size and not 0 <= token_id < engine.vocab_size:
            findings.append(Finding("end_id" if label == "end id" else "pad_id", file,
                                    f"tokenizer {label} {token_id}",
                                    f"the engine's vocab_size is {engine.vocab_size} ({engine.config_path})",
                                    "use the tokenizer that came with the model (tokenizer_dir)"))
    return findings


def world_size(ctx: CheckContext) -> list[Finding]:
    engine, model = ctx.engine, ctx.engine_model
    if engine is None or model is None:
        return []
    findings = []
    if ctx.config is not None:
        planned = ctx.config.convert.tp_size * ctx.config.convert.pp_size
        if planned != engine.world_size:
            findings.append(Finding("world_size", engine.config_path, f"world size {engine.world_size}",
                                    f"the model config asks for tp_size x pp_size = {planned}",
                                    "convert and build again with the config's tp_size and pp_size"))
    device_ids = model.param("gpu_device_ids")
    if device_ids and len([d for d in device_ids.split(",") if d.strip()]) != engine.world_size:
        findings.append(Finding("gpu_count", model.config_path, f"gpu_device_ids {device_ids!r}",
                                f"the engine has world size {engine.world_size}",
                                f"list exactly {engine.world_size} device ids, or drop gpu_device_ids"))
    if model.is_cpp_engine and engine.world_size > ctx.gpu_count:
        findings.append(Finding("gpu_count", engine.config_path, f"world size {engine.world_size}",
                                f"this host has {ctx.gpu_count} visible GPU(s)",
                                "run on a host with enough GPUs (check CUDA_VISIBLE_DEVICES) or rebuild with "
                                "a smaller tp_size x pp_size"))
    return findings


def engine_host(ctx: CheckContext) -> list[Finding]:
    """TensorRT engines load only on the GPU kind and TensorRT version that built them (the engine manifest)."""
    from trtkit.errors import BuildError
    from trtkit.trtllm_build.manifest import MANIFEST_NAME, guard_engine_for_host, host_facts_for_engines

    engine, model = ctx.engine, ctx.engine_model
    if engine is None or model is None or engine.kind != "engine" or not model.is_cpp_engine:
        return []
    if ctx.host is None:
        ctx.host = host_facts_for_engines(engine.path)
    try:
        note = guard_engine_for_host(engine.path, ctx.host)
    except BuildError as exc:
        return [Finding("engine_host", engine.path / MANIFEST_NAME, "the GPU and TensorRT versions recorded at build",
                        str(exc),
                        "rebuild the engines on this host with `trtkit build CONFIG --force`, then redeploy")]
    if note and ctx.host.gpus:  # built on another GPU of the same compute capability: it loads
        return [Finding("engine_host", engine.path / MANIFEST_NAME, "the GPU recorded at build", note,
                        "nothing is required; rebuild on this GPU for kernels tuned to it", "warning")]
    return []
