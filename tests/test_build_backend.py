"""build.backend is chosen once (trtkit/config/build_backend.py): the stages ask a BuildBackend, never compare a string.

The source scan reads every module of the package, as tests/test_import_graph.py reads its imports: outside
config/build_backend.py nothing reads ``build.backend`` and no string names a backend, except the YAML's own
vocabulary (config/schema.py, held to the backends below) and one name that means something else.
"""

from __future__ import annotations

import ast
import copy
import pickle
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest

from trtkit.config import parse_config
from trtkit.config.build_backend import BACKENDS, PYTORCH, TENSORRT, backend_named, backend_of
from trtkit.config.schema import BackendName, ConvertSection, ServeSection
from trtkit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1] / "trtkit"
HOME = "trtkit.config.build_backend"
NAMES = set(get_args(BackendName))
# (module, the assignment a string stands in) where a backend's name is allowed outside HOME, and why
ALLOWED = {
    ("trtkit.config.schema", "BackendName"): "the YAML's vocabulary (test_every_yaml_value_has_a_backend)",
    ("trtkit.config.schema", "backend"): "build.backend's default in the YAML",
    ("trtkit.trtllm_build.host_facts", "TENSORRT_DISTRIBUTIONS"): "the TensorRT pip distribution, not a backend",
}


def modules(root: Path = ROOT) -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), ast.parse(path.read_text(encoding="utf-8"))


def _assigned(node: ast.AST) -> str:
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return ",".join(t.id for t in targets if isinstance(t, ast.Name))


def backend_strings(tree: ast.AST, module: str) -> list[str]:
    """Every string constant that is a backend's name, with where it stands (line, assignment)."""
    found = []

    def visit(node: ast.AST, assigned: str) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            assigned = _assigned(node)
        if isinstance(node, ast.Constant) and node.value in NAMES and (module, assigned) not in ALLOWED:
            found.append(f"{module}:{node.lineno} {node.value!r}")
        for child in ast.iter_child_nodes(node):
            visit(child, assigned)

    visit(tree, "")
    return found


def backend_reads(tree: ast.AST, module: str) -> list[str]:
    """Every ``<x>.build.backend`` read."""
    return [f"{module}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and node.attr == "backend" and isinstance(node.value, ast.Attribute) and node.value.attr == "build"]


def test_the_scan_reads_every_module() -> None:
    names = [name for name, _ in modules()]
    assert len(names) > 150 and HOME in names


def test_build_backend_is_read_in_one_place() -> None:
    assert [hit for name, tree in modules() if name != HOME for hit in backend_reads(tree, name)] == []


def test_no_string_names_a_backend_outside_its_module() -> None:
    assert [hit for name, tree in modules() if name != HOME for hit in backend_strings(tree, name)] == []


def test_the_scan_finds_a_comparison_and_a_table() -> None:
    """The scan is not blind: the forms issue 46 counted (34 comparisons in 16 files) are each found."""
    source = ('if config.build.backend == "pytorch":\n    pass\n'
              'LABELS = {("tensorrt", "gpu"): "C++"}\n'
              'def f(backend):\n    return backend != "tensorrt"\n')
    tree = ast.parse(source)
    assert backend_reads(tree, "m") == ["m:1"]
    assert backend_strings(tree, "m") == ["m:1 'pytorch'", "m:3 'tensorrt'", "m:5 'tensorrt'"]


def test_every_yaml_value_has_a_backend() -> None:
    assert NAMES == set(BACKENDS) and all(BACKENDS[name].name == name for name in NAMES)
    with pytest.raises(ConfigError, match="build.backend 'onnx' is unknown; use tensorrt or pytorch"):
        backend_named("onnx")


def test_a_backend_is_chosen_once_and_stays_itself() -> None:
    config = parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"}, "build": {"backend": "pytorch"}})
    assert backend_of(config) is PYTORCH
    for backend in (TENSORRT, PYTORCH):  # identity survives what dataclasses and processes do to a value
        assert copy.copy(backend) is copy.deepcopy(backend) is pickle.loads(pickle.dumps(backend)) is backend
    assert [b.pick(tensorrt="engines", pytorch="options") for b in (TENSORRT, PYTORCH)] == ["engines", "options"]


def test_what_differs_between_the_backends() -> None:
    convert = ConvertSection(dtype="bfloat16", tp_size=2, pp_size=1)
    assert TENSORRT.checkpoint_folder(convert) == "bfloat16-tp2-pp1"
    assert TENSORRT.checkpoint_folder(convert, "fp8-kvfp8") == "fp8-kvfp8-bfloat16-tp2-pp1"
    assert PYTORCH.checkpoint_folder(convert) == "hf-none-bfloat16"  # unsharded: the LLM API splits it at load
    assert PYTORCH.checkpoint_folder(convert, "fp8") == "hf-fp8-bfloat16"
    assert (TENSORRT.manifest_inputs(), PYTORCH.manifest_inputs()) == ({}, {"backend": "pytorch"})
    assert (TENSORRT.launch_ranks(4), PYTORCH.launch_ranks(4)) == (4, 1)
    slots = {(b.name, t): b.engine_slot(t) for b in (TENSORRT, PYTORCH) for t in ("gpu", "cpu")}
    assert [name for name, slot in slots.items() if slot.runs_built_engines] == [("tensorrt", "gpu")]
    assert [name for name, slot in slots.items() if slot.can_emulate_cpp] == [("tensorrt", "cpu")]
    assert {name: slot.llm_api_engine for name, slot in slots.items() if slot.llm_api_engine} == {
        ("pytorch", "gpu"): "tensorrt_llm", ("pytorch", "cpu"): "reference"}
    assert PYTORCH.start_timeout(replace(ServeSection(), server_start_timeout_s=30.0)) == 30.0
    assert TENSORRT.calibration_refusal("fp8_block", "auto") and not PYTORCH.calibration_refusal("fp8_block", "fp8")
    assert PYTORCH.calibration_refusal("int8_sq", "auto") and PYTORCH.calibration_refusal("fp8", "int8")
    assert "PyTorch backend only" in (TENSORRT.dynamo_refusal() or "") and PYTORCH.dynamo_refusal() is None
