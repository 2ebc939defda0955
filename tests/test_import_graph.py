"""The code's layering holds: no module imports one that (directly or through others) imports
it back, function-level imports included — a cycle is how a layer starts depending on the one
above it. `if TYPE_CHECKING:` imports do not run, but they are still a dependency a reader
follows: a cycle through them is a cycle too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "offline", "twin", "e2e", "policies")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(source: str, name: str, package: str, modules: set[str],
             annotations: bool = False) -> set[str]:
    """First-party modules the module `name` (in `package`) imports at run time, at any depth
    of its code; `annotations`: and under `if TYPE_CHECKING:`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not annotations:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            # `from pkg import mod` imports the module pkg.mod; `from pkg import name`, pkg.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            targets = []
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph(annotations: bool = False) -> dict[str, set[str]]:
    paths = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    modules = {_module_name(p) for p in paths}
    graph = {}
    for p in paths:
        name = _module_name(p)
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imports(p.read_text(), name, package, modules, annotations)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycles() -> None:
    graph = import_graph(annotations=True)
    assert "components.config" in graph and graph["components.stack_config"], graph.keys()
    assert {"offline.cli", "twin.controlplane", "policies.gpu_guardrails.registry"} \
        <= graph.keys() and graph["policies.gpu_guardrails.rules_fabric"]
    assert cycles(graph) == []


def test_the_check_finds_a_cycle() -> None:
    """The detector itself: a two-module loop through a function-level import is found, an
    import under TYPE_CHECKING is not."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import components.x\n"
              "def f():\n    from . import y\n")
    modules = {"components.x", "components.y", "components.probe"}
    assert _imports(source, "components.probe", "components", modules) == {"components.y"}
    assert _imports(source, "components.probe", "components", modules, annotations=True) \
        == {"components.x", "components.y"}


def test_the_config_layer_flows_one_way() -> None:
    """Schema below checks below validation: the model never imports what checks it."""
    graph = import_graph()
    order = ["components.config_types", "components.config_nodes", "components.gpu_nodes",
             "components.config", "components.config_checks", "components.stack_config"]
    for i, lower in enumerate(order):
        reach = _reachable(graph, lower)
        assert not reach & set(order[i + 1:]), (lower, sorted(reach & set(order[i + 1:])))


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen
