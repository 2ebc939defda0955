"""The code's layering holds: no module imports one that (directly or through others) imports
it back, function-level imports included — a cycle is how a layer starts depending on the one
above it. `if TYPE_CHECKING:` imports do not run, but they are still a dependency a reader
follows: a cycle through them is a cycle too."""

from __future__ import annotations

import re

from tools.import_graph import (
    REPO,
    cycles,
    drawing,
    import_graph,
    imports_of,
    reachable,
)


def test_no_import_cycles() -> None:
    graph = import_graph(annotations=True)
    assert "components.model.cluster" in graph and graph["components.wiring.loading"], graph.keys()
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
    assert imports_of(source, "components.probe", "components", modules) == {"components.y"}
    assert imports_of(source, "components.probe", "components", modules, annotations=True) \
        == {"components.x", "components.y"}


def test_the_config_layer_flows_one_way() -> None:
    """Schema below checks below validation: the model never imports what checks it."""
    graph = import_graph()
    order = ["components.model.fields", "components.model.gpu_nodes_section",
             "components.model.gpu_nodes", "components.model.cluster", "components.model.checks",
             "components.wiring.loading"]
    for i, lower in enumerate(order):
        reach = reachable(graph, lower)
        assert not reach & set(order[i + 1:]), (lower, sorted(reach & set(order[i + 1:])))


# The folders are the layers, each importing only those below it: the model (the config's
# schema, the nodes derived from it, its checks, compatibility), the pure planning code, the
# components that register resources, and the wiring that builds them from a config.
LAYERS = ("components.model", "components.planning", "components.layers", "components.wiring")


def _layer(module: str) -> int | None:
    return next((i for i, pkg in enumerate(LAYERS)
                 if module == pkg or module.startswith(pkg + ".")), None)


def test_the_folders_are_layers() -> None:
    """Every module of components/ is in one of the layer folders, and none imports (even
    under TYPE_CHECKING) a module of a folder above its own."""
    graph = import_graph(annotations=True)
    inside = [m for m in graph if m.startswith("components.") and m != "components"]
    assert [m for m in inside if _layer(m) is None] == []
    upward = sorted((m, dep) for m in inside for dep in graph[m]
                    if (d := _layer(dep)) is not None and d > (_layer(m) or 0))
    assert upward == []
    assert {"components.model.cluster", "components.planning.kubeadm",
            "components.layers.hardware", "components.wiring.blueprint"} <= graph.keys()


def test_the_layer_check_finds_an_upward_import() -> None:
    assert _layer("components.model.checks.hosts") == 0
    assert _layer("components.wiring") == 3 and _layer("offline.cli") is None


def test_the_architecture_drawing_is_the_import_graph() -> None:
    """docs/architecture.md draws the folders and who imports whom from the code itself: a new
    arrow (a layer reaching where it did not) shows in the drawing, or this test fails until it
    does (`python tools/import_graph.py` prints it)."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    drawn = re.search(r"```mermaid\n(.*?)```", doc, re.S)
    assert drawn is not None, "docs/architecture.md has no mermaid drawing"
    assert drawn[1] == drawing()
    assert "  wiring --> layers" in drawing() and "  layers --> wiring" not in drawing()
