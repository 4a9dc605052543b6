"""The package's import graph: no cycle between modules, and no arrow that runs up the layers.

Every ``import`` of a trtkit module counts, wherever it stands: at the top, inside a function, or under
``if TYPE_CHECKING``. A cycle hidden in a function body or behind TYPE_CHECKING is still two ideas that
cannot be understood apart; so is a package that reaches up into one built on it. Each package may import
only the packages ``MAY_IMPORT`` lists for it (``errors`` and ``heap`` are open to all): a new arrow is a
design decision, taken here in the open.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "trtkit"
BASE = {"trtkit", "errors", "heap"}  # the root (``__version__``), the error types and the heap tuning: for all

# package -> the packages it may import (besides BASE), lowest layers first
MAY_IMPORT: dict[str, set[str]] = {
    "contracts": set(),
    "config": set(),
    "tokenizer": set(),
    "testing": set(),
    "wire": {"tokenizer"},
    "sources": {"config"},
    "store": {"config"},
    # sources: under build.backend: pytorch an unquantized model is served from its source folder as it is
    "trtllm_build": {"config", "contracts", "sources"},
    "refengine": {"config", "tokenizer", "wire"},
    # refengine: the quality report of a unified checkpoint runs the exported files in the CPU reference engine
    "checkpoint": {"config", "refengine", "sources", "trtllm_build"},
    "repository": {"config", "sources", "tokenizer", "trtllm_build", "wire"},
    "consistency": {"config", "tokenizer", "trtllm_build"},
    "serve": {"config"},
    "triton_models": {"refengine", "tokenizer", "wire"},
    # NVIDIA Dynamo on one machine: the reference engine as a Dynamo worker, the local cluster's processes
    "dynamo": {"config", "refengine", "serve", "sources"},
    "governance": {"config", "sources", "store", "tokenizer"},  # no transport, no wire: any upstream carries it
    "transport": {"config", "governance", "tokenizer", "wire"},
    # the address grammar's one factory: an address to its upstream, and the governed client over it
    "upstreams": {"config", "governance", "transport"},
    "client": {"transport"},  # client.py: the old trtkit.client names, deprecated (transport/deprecated.py)
    "context": {"config", "governance"},  # the context strategies: the client's conversations and the gateway's
    "conversation": {"config", "context", "governance"},
    "gateway": {"config", "context", "governance", "store", "transport", "upstreams", "wire"},
    "bench": {"config", "governance", "transport", "wire"},  # config: the one server-address grammar
    "k8s": {"config", "serve", "trtllm_build"},
    "pipeline": {"checkpoint", "consistency", "config", "governance", "repository", "serve", "sources", "transport",
                 "trtllm_build", "upstreams"},
    "cli": {"bench", "checkpoint", "config", "consistency", "context", "conversation", "dynamo", "gateway", "governance",
            "k8s", "pipeline", "repository", "serve", "store", "transport", "trtllm_build", "upstreams", "wire"},
}


# modules held to narrower rules than their package: (module prefix, what it may not import, why)
MODULE_RULES: list[tuple[str, tuple[str, ...], str]] = [
    # the OpenAI HTTP upstream is one more implementation of governance/upstream.py's seam, beside the Triton
    # clients: it speaks HTTP and JSON, never the Triton tensor contract or a Triton client
    ("trtkit.transport.openai.", ("trtkit.wire", "trtkit.transport.triton", "tritonclient"), "the OpenAI upstream"),
    ("trtkit.transport.openai.http1", ("trtkit.wire", "trtkit.governance", "tritonclient"), "the HTTP/1.1 client"),
    ("trtkit.transport.openai.errors", ("trtkit.wire", "trtkit.governance", "tritonclient"), "upstream errors"),
    # an upstream is a plug: it never runs the governed flow or holds the client that calls it (no call back up)
    ("trtkit.transport.triton.", ("trtkit.governance.client", "trtkit.governance.flow"), "a Triton upstream"),
    ("trtkit.transport.openai.", ("trtkit.governance.client", "trtkit.governance.flow"), "an OpenAI upstream"),
    # the relay passes an OpenAI upstream's answers on: it knows no Triton contract either
    ("trtkit.gateway.relay", ("trtkit.wire", "trtkit.transport.triton", "tritonclient"), "the relay"),
]


def module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = module_names()


def imported(module: str, path: Path) -> Iterator[str]:
    """Every trtkit module ``module`` imports, anywhere in its source (a name imported from a package is the
    package, unless it is a module of it)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "trtkit")
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]) if node.level else \
                node.module or ""
            base = base.rstrip(".")
            if base.split(".")[0] != "trtkit":
                continue
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def owner(name: str) -> str:
    """The module a dotted name belongs to (``trtkit.a.b.C`` -> ``trtkit.a.b``)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        edges[module] |= {owner(name) for name in imported(module, path)} - {module}
    return edges


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "trtkit"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


EDGES = graph()


def test_the_graph_reads_every_module() -> None:
    assert len(MODULES) > 150 and "trtkit.errors" in MODULES
    assert "trtkit.config.schema" in EDGES["trtkit.config.rules"]  # a plain import is seen


def test_no_module_cycle() -> None:
    assert cycles(EDGES) == []


def test_cycle_finder_finds_a_hidden_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_is_placed() -> None:
    packages = {package_of(m) for m in MODULES} - BASE
    assert packages == set(MAY_IMPORT), "add the new package to MAY_IMPORT (and ARCHITECTURE.md's table)"


def test_the_allowed_arrows_have_no_cycle() -> None:
    assert cycles({p: set(d) for p, d in MAY_IMPORT.items()}) == []


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_no_arrow_outside_the_layers(package: str) -> None:
    wrong = sorted(f"{m} -> {t}" for m, targets in EDGES.items() if package_of(m) == package for t in targets
                   if package_of(t) not in MAY_IMPORT[package] | BASE | {package})
    assert wrong == []


def test_the_architecture_table_lists_every_package() -> None:
    table = (ROOT.parent / "ARCHITECTURE.md").read_text(encoding="utf-8").split("## Packages", 1)[1]
    listed = {row.split("`")[1].removeprefix("trtkit/").strip("/").removesuffix(".py")
              for row in table.splitlines() if row.startswith("| `trtkit/")}
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages - listed == set(), "add a row to ARCHITECTURE.md's package table"
    assert listed - packages - {"data/calib", "errors", "heap"} == set(), "a row names a package that is gone"


def every_import(path: Path) -> Iterator[str]:
    """Every module name an import statement names (third-party ones too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("prefix, forbidden, what", MODULE_RULES, ids=[rule[2] for rule in MODULE_RULES])
def test_module_rules(prefix: str, forbidden: tuple[str, ...], what: str) -> None:
    modules = [m for m in MODULES if m.startswith(prefix)]
    assert modules, f"no module starts with {prefix}: update MODULE_RULES"
    wrong = sorted(f"{m} -> {name}" for m in modules for name in every_import(MODULES[m])
                   if any(name == f or name.startswith(f + ".") for f in forbidden))
    assert wrong == [], f"{what} must not import these"


def test_governance_imports_no_transport_and_no_http() -> None:
    """The seam holds: governance sees an upstream only through governance/upstream.py."""
    wrong = sorted(f"{m} -> {name}" for m in MODULES if package_of(m) == "governance" for name in every_import(MODULES[m])
                   if name.split(".")[0] in ("tritonclient", "httpx", "httptools", "grpc")
                   or name.startswith(("trtkit.transport", "trtkit.wire", "trtkit.gateway")))
    assert wrong == []
