"""Model sources: bundled GGUF -> HF folder (cached), generated tiny model, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.errors import ModelSourceError
from trtkit.sources import resolve_model_dir
from trtkit.sources.gguf import COMPLETE_MARKER


@pytest.mark.slow
def test_bundled_smollm2_converts_and_answers_sensibly(smollm2_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (smollm2_dir / COMPLETE_MARKER).is_file()
    assert (smollm2_dir / "model.safetensors").is_file() and (smollm2_dir / "tokenizer.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    assert model.config.hidden_size == 576 and model.config.num_hidden_layers == 30
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0][ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def test_second_resolution_reuses_the_cache(smollm2_dir: Path) -> None:
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    again = resolve_model_dir("bundled:smollm2-135m")
    assert again == smollm2_dir
    assert (again / "model.safetensors").stat().st_mtime_ns == before


def test_tiny_llama_has_real_tokenizer_and_128_multiple_width(tiny_llama_dir: Path) -> None:
    import json

    from transformers import AutoTokenizer

    config = json.loads((tiny_llama_dir / "config.json").read_text())
    assert config["hidden_size"] % 128 == 0 and config["num_key_value_heads"] < config["num_attention_heads"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    assert tokenizer.decode(tokenizer.encode("hello world")) == "hello world"


def test_hf_folder_is_used_in_place(tiny_llama_dir: Path) -> None:
    assert resolve_model_dir(str(tiny_llama_dir)) == tiny_llama_dir


@pytest.mark.parametrize(("source", "message"), [
    ("bundled:llama-70b", "bundled:llama-70b is not a bundled model; known: bundled:smollm2-135m"),
    ("generated:huge", "generated:huge is unknown"),
    ("/nonexistent/model.gguf", "GGUF file /nonexistent/model.gguf does not exist"),
    ("meta-llama/Llama-3-8B", "looks like a hub id; trtkit never downloads models"),
    ("/nonexistent/folder", "/nonexistent/folder does not exist; use bundled:smollm2-135m"),
])
def test_bad_sources_name_the_fix(source: str, message: str) -> None:
    with pytest.raises(ModelSourceError) as info:
        resolve_model_dir(source)
    assert message in str(info.value)


def test_folder_without_config_json(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="has no config.json"):
        resolve_model_dir(str(tmp_path))


@pytest.mark.parametrize(("folder_fixture", "rope_theta"), [("smollm2_dir", 100000.0), ("tiny_llama_dir", 10000.0)])
def test_folders_trtkit_writes_read_the_same_under_the_containers_transformers(
        folder_fixture: str, rope_theta: float, request: pytest.FixtureRequest) -> None:
    """The GPU container's transformers (4.57.3) ignores transformers 5's ``rope_parameters`` (SmolLM2 would
    silently get rope_theta 10000) and has no ``TokenizersBackend``: trtkit writes the 4.x spellings too.
    Also run under the container's pins (scripts/setup_pins_env.sh), where 4.57 reads these folders."""
    import json

    from transformers import AutoConfig, AutoTokenizer

    folder: Path = request.getfixturevalue(folder_fixture)
    assert json.loads((folder / "config.json").read_text())["rope_theta"] == rope_theta
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] != "TokenizersBackend"
    config = AutoConfig.from_pretrained(folder)
    rope = getattr(config, "rope_parameters", None) or {"rope_theta": config.rope_theta}
    assert rope["rope_theta"] == rope_theta
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.encode("hello world") == [28120, 905]  # no BOS: the GGUF says add_bos_token false
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert tokenizer.chat_template


def test_portable_folder_keeps_scaled_rope_for_transformers_4(tmp_path: Path) -> None:
    import json

    from trtkit.sources.portable import make_portable

    rope = {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "rope_parameters": rope}))
    make_portable(tmp_path)
    make_portable(tmp_path)  # idempotent
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_theta"] == 500000.0 and config["rope_parameters"] == rope
    assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}


def test_a_gguf_read_parses_its_header_once_and_restores_gguf(tmp_path: Path) -> None:
    """transformers parses the header for the tokenizer, the config and the weights, and builds the tensor-name map
    per module: during a conversion each happens once; afterwards (also after an error) gguf is as it was."""
    import gguf
    import numpy as np

    from trtkit.sources.gguf import _gguf_read_once

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_read_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and first.tensors[0].name == "token_embd.weight"
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
    assert gguf.GGUFReader(path) is not first
    with pytest.raises(RuntimeError), _gguf_read_once():
        raise RuntimeError("transformers failed")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
