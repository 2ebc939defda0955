"""The code's import graph, read from the source (`ast`, no import runs), and its drawing:
one box per folder, one arrow per folder another imports from. `python tools/import_graph.py`
prints the drawing docs/architecture.md shows (tests/test_import_graph.py checks they agree)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "offline", "twin", "e2e", "policies")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, name: str, package: str, modules: set[str],
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
        for sub in ast.iter_child_nodes(node):
            visit(sub)

    visit(ast.parse(source))
    return found


def import_graph(annotations: bool = False) -> dict[str, set[str]]:
    paths = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    modules = {module_name(p) for p in paths}
    graph = {}
    for p in paths:
        name = module_name(p)
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imports_of(p.read_text(), name, package, modules, annotations)
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


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


# components/ is drawn folder by folder (its folders are its layers); every other package, and
# the program, as one box.
LAYER_FOLDERS = ("model", "planning", "layers", "wiring")


def folder(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "components" and len(parts) > 1 and parts[1] in LAYER_FOLDERS:
        return f"components/{parts[1]}"
    return "__main__.py" if module == "__main__" else f"{parts[0]}/"


def folder_graph() -> dict[str, set[str]]:
    """Folder -> the folders its modules import from (the program, __main__.py, included)."""
    graph = import_graph(annotations=True)
    modules = set(graph)
    graph["__main__"] = imports_of((REPO / "__main__.py").read_text(), "__main__", "", modules,
                                   annotations=True)
    folders: dict[str, set[str]] = {}
    for module, deps in graph.items():
        if module == "components":  # the empty package above the layer folders
            continue
        own = folder(module)
        folders.setdefault(own, set()).update(folder(d) for d in deps if folder(d) != own)
    return folders


def drawing() -> str:
    """The folder graph as a Mermaid flowchart, arrows sorted so the text is stable."""
    graph = folder_graph()
    ids = {f: "program" if f == "__main__.py" else f.removeprefix("components/").strip("/")
           for f in graph}
    lines = ["flowchart TD"]
    lines += [f'  {ids[f]}["{f}"]' for f in sorted(graph)]
    lines += [f"  {ids[f]} --> {ids[d]}" for f in sorted(graph) for d in sorted(graph[f])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(drawing())
