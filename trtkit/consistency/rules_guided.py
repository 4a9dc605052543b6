"""Guided decoding: the engine model's xgrammar parameters, and the tokenizer-info file they name, against the
tokenizer the repository serves. The C++ backend builds its grammar vocabulary from that file alone
(model_instance_state.cc, getGuidedDecodingConfigFromParams), so a file from another tokenizer would mask the
wrong tokens without any error."""

from __future__ import annotations

from pathlib import Path

from trtkit.consistency.check_inputs import CheckContext
from trtkit.consistency.findings import Finding
from trtkit.consistency.tokenizers import has_tokenizer_files
from trtkit.errors import RepositoryError

_REDEPLOY = "regenerate the repository with `trtkit deploy` (it writes the file from the served tokenizer)"


def guided_decoding(ctx: CheckContext) -> list[Finding]:
    model = ctx.engine_model
    if model is None:
        return []
    backend, info_path = model.param("guided_decoding_backend") or "", model.param("xgrammar_tokenizer_info_path") or ""
    wanted = ctx.config is not None and ctx.config.serve.guided_decoding == "xgrammar"
    if not backend and not info_path:
        if wanted:  # a repository deployed before guided decoding, or by hand: it serves, without structured output
            return [Finding("guided_decoding", model.config_path, "no guided_decoding_backend",
                            "the model config sets serve.guided_decoding: xgrammar (the default), so requests with "
                            "a guide will be refused", _REDEPLOY, severity="warning")]
        return []
    if backend != "xgrammar" or not info_path:
        return [Finding("guided_decoding", model.config_path,
                        f"guided_decoding_backend {backend!r}, xgrammar_tokenizer_info_path {info_path!r}",
                        "the backend takes guided decoding only as xgrammar with a tokenizer-info file, and "
                        "silently runs without it otherwise", _REDEPLOY)]
    return _file_matches_tokenizer(ctx, model.config_path, Path(info_path))


def _file_matches_tokenizer(ctx: CheckContext, config_path: Path, info_path: Path) -> list[Finding]:
    from trtkit.tokenizer.grammar_vocab import read_tokenizer_info, tokenizer_info

    try:
        served = read_tokenizer_info(info_path)
    except RepositoryError as exc:
        return [Finding("guided_decoding", config_path, f"xgrammar_tokenizer_info_path {info_path}", str(exc),
                        _REDEPLOY)]
    folders = [path for _, path in ctx.tokenizer_dirs() if has_tokenizer_files(path)]
    if not folders:
        return []  # tokenizer_paths reports a repository without a tokenizer
    try:
        expected = tokenizer_info(folders[0])
    except RepositoryError as exc:
        return [Finding("guided_decoding", config_path, f"tokenizer_dir {folders[0]}", str(exc), _REDEPLOY)]
    for key, label in (("encoded_vocab", "vocabulary"), ("stop_token_ids", "stop token ids")):
        if served[key] != expected[key]:
            return [Finding("guided_decoding", info_path, f"its {label}",
                            f"they differ from the tokenizer at {folders[0]}, which the models serve", _REDEPLOY)]
    return []
