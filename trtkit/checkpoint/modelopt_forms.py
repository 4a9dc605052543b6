"""ModelOpt quantization configs in both of their forms.

ModelOpt 0.47 (what trtkit installs off the GPU host) takes ``quant_cfg`` as a list of
``{"quantizer_name", "cfg", "enable"}`` entries; ModelOpt ~=0.37, which the TensorRT-LLM 1.2.1
container pins, takes a dict ``{pattern: {..., "enable": bool}}``. In both, later entries override
earlier ones. trtkit edits the list form and hands ModelOpt whatever form its own presets use.
"""

from __future__ import annotations

import copy
from typing import Any

Entry = dict[str, Any]


def as_entries(quant_cfg: list[Entry] | dict[str, Any]) -> list[Entry]:
    """A preset's ``quant_cfg`` in list form (a copy)."""
    if isinstance(quant_cfg, list):
        return copy.deepcopy(quant_cfg)
    entries = []
    for pattern, value in quant_cfg.items():
        entry: Entry = {"quantizer_name": pattern}
        value = copy.deepcopy(value)
        if isinstance(value, dict) and "enable" in value:
            entry["enable"] = value.pop("enable")
        if value:
            entry["cfg"] = value
        entries.append(entry)
    return entries


def in_form_of(preset_quant_cfg: list[Entry] | dict[str, Any], entries: list[Entry]) -> list[Entry] | dict[str, Any]:
    """``entries`` in the form the installed ModelOpt's presets use (dict form for ~=0.37).

    A pattern that comes back later moves to the end, so "later wins" holds in the dict too."""
    if isinstance(preset_quant_cfg, list):
        return entries
    merged: dict[str, Any] = {}
    for entry in entries:
        pattern = entry["quantizer_name"]
        value = copy.deepcopy(entry.get("cfg", {}))
        if "enable" in entry:
            if isinstance(value, dict):
                value["enable"] = entry["enable"]
            elif not entry["enable"]:
                value = {"enable": False}
        merged.pop(pattern, None)
        merged[pattern] = value
    return merged
