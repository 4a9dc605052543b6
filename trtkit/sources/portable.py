"""Hugging Face folders that trtkit writes, readable by transformers 4.57 as well as 5.x.

The GPU host runs the TensorRT-LLM 1.2.1 container's transformers (4.57.3). A folder saved by
transformers 5 keeps ``rope_theta`` only inside ``rope_parameters``, which 4.57 ignores: it then
silently uses its default rope_theta of 10000 (SmolLM2's is 100000), and the engine built from it is
wrong. Its tokenizer class, ``TokenizersBackend``, does not exist in 4.57 at all. Both spellings that
4.57 reads are also read by transformers 5, so trtkit writes them next to the new ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# cached folders carry this in their name: folders cached before it lack the 4.x spellings
FOLDER_FORMAT = "hf4"
# transformers 5's fast-tokenizer class, and its name in 4.x (5.x still reads the old name)
TOKENIZER_CLASSES = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def make_portable(folder: Path) -> None:
    """Add the transformers 4.x spellings to ``folder``'s config and tokenizer config (idempotent)."""
    _update_json(folder / "config.json", _legacy_rope)
    _update_json(folder / "tokenizer_config.json", _legacy_tokenizer_class)


def _legacy_rope(config: dict[str, Any]) -> None:
    rope = config.get("rope_parameters")
    if not isinstance(rope, dict) or "rope_theta" not in rope:
        return
    config.setdefault("rope_theta", rope["rope_theta"])
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default" and not config.get("rope_scaling"):
        config["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}


def _legacy_tokenizer_class(config: dict[str, Any]) -> None:
    name = config.get("tokenizer_class")
    if name in TOKENIZER_CLASSES:
        config["tokenizer_class"] = TOKENIZER_CLASSES[name]


def _update_json(path: Path, edit: Any) -> None:
    if not path.is_file():
        return
    before = json.loads(path.read_text(encoding="utf-8"))
    after = json.loads(json.dumps(before))
    edit(after)
    if after == before:
        return
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(after, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a concurrent reader sees the old file or the new one, never half of either
