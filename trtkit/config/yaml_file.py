"""Reading a config file: UTF-8 text, YAML syntax, and no key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, so a config with ``max_batch_size`` twice would run
with whichever came second; here every repeat is a problem with both line numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trtkit.errors import ConfigError


class _RepeatsLoader(yaml.SafeLoader):
    """A safe loader that notes every key repeated within one mapping."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.repeats: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if key in first:
                self.repeats.append(f"line {line}: key {key!r} is repeated (first at line {first[key]}); YAML would "
                                    f"silently keep the last one, so remove one of them")
            else:
                first[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> tuple[Any, list[str]]:
    """The file's data and its repeated-key problems; raises ConfigError for a file that is no UTF-8 YAML."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file; pass a YAML file such as model_configs/smollm2-135m.yaml")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}); a config is "
                          f"a YAML file: save it as UTF-8") from exc
    loader = _RepeatsLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}; fix the syntax") from exc
    finally:
        loader.dispose()
    return data, loader.repeats
