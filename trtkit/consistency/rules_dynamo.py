"""`trtkit check DIR` on what `trtkit deploy dynamo` wrote: the workers' LLM-API options (``--extra-engine-args``)
against TensorRT-LLM 1.3.0rc29, the version Dynamo 1.6 runs (``trtkit/contracts/llm_api_1.3.0rc29.json``), and the
graph's workers pointing at that file with the PyTorch backend's worker."""

from __future__ import annotations

from pathlib import Path

import yaml

from trtkit.config.llm_api_1_3 import option_problems, unverified_reason
from trtkit.consistency.findings import Finding

ENGINE_ARGS_FILE = "15-dynamo-engine-args.yaml"
GRAPH_FILE = "20-dynamo-graph.yaml"


def is_dynamo_folder(folder: Path) -> bool:
    return (folder / GRAPH_FILE).is_file()


def check_dynamo_folder(folder: Path) -> list[Finding]:
    findings: list[Finding] = []
    config_map = folder / ENGINE_ARGS_FILE
    if not config_map.is_file():
        return [Finding("dynamo_engine_args", config_map, "no engine-args ConfigMap",
                        f"the workers of {GRAPH_FILE} read their --extra-engine-args from it",
                        "run `trtkit deploy dynamo CONFIG --out DIR` again")]
    data = yaml.safe_load(config_map.read_text(encoding="utf-8")) or {}
    options = yaml.safe_load(next(iter((data.get("data") or {}).values()), "")) or {}
    errors, unverified = option_problems(options)
    findings += [Finding("llm_api_1_3", config_map, error.split(":")[0] + " in --extra-engine-args",
                         "every option must exist in TensorRT-LLM 1.3.0rc29", error) for error in errors]
    findings += [Finding("llm_api_1_3_unverified", config_map, f"{key} in --extra-engine-args",
                         "an option shown valid for TensorRT-LLM 1.3.0rc29", f"check it on a GPU host: "
                         f"{unverified_reason(key)}", severity="warning") for key in unverified]
    graph = yaml.safe_load((folder / GRAPH_FILE).read_text(encoding="utf-8")) or {}
    for component in (graph.get("spec") or {}).get("components") or []:
        for container in ((component.get("podTemplate") or {}).get("spec") or {}).get("containers") or []:
            command = container.get("command") or []
            if component.get("type") in ("worker", "prefill", "decode") and command[-1:] != ["dynamo.trtllm"]:
                findings.append(Finding("dynamo_worker", folder / GRAPH_FILE,
                                        f"component {component.get('name')} runs {' '.join(command)}",
                                        "TensorRT-LLM workers run `python3 -m dynamo.trtllm`",
                                        "run `trtkit deploy dynamo` again"))
    return findings
