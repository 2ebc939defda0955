"""The one table of which part of a split site builds what (components/model/parts.py): the
parts together build what one unsplit stack builds, each layer exactly once."""

from __future__ import annotations

from dataclasses import fields

from components.model.parts import PARTS, UNSPLIT


def test_each_layer_is_built_by_exactly_one_part() -> None:
    for layer in ("core", "platform", "workloads"):
        assert [p for p, b in PARTS.items() if getattr(b, layer)] == [layer], layer
    assert [p for p, b in PARTS.items() if b.nodes != "none"] == ["nodes"]
    assert all(getattr(UNSPLIT, f.name) for f in fields(UNSPLIT) if f.name != "reaches_core")
    assert UNSPLIT.nodes == "all" and not UNSPLIT.reaches_core


def test_every_part_but_the_core_reaches_the_core() -> None:
    """The core is the one part with no stack reference: the others read its kubeconfig."""
    assert [p for p, b in PARTS.items() if not b.reaches_core] == ["core"]


def test_the_whole_fabric_plan_is_made_where_it_is_used() -> None:
    """The core pushes the switches' and subnet managers' files and the platform draws the
    HyperNodes from the plan; a nodes part names only its own leaves, workloads none."""
    assert {p for p, b in PARTS.items() if b.fabric_plan} == {"core", "platform"}


def test_the_docs_table_is_the_code_table() -> None:
    """docs/split-sites.md shows the same table a reader of the program acts on."""
    from support.project import REPO

    rows = [line.split("|")[1:-1] for line in
            (REPO / "docs" / "split-sites.md").read_text().splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in PARTS]
    shown = {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}
    assert shown.keys() == PARTS.keys()
    for part, b in PARTS.items():
        core, nodes, plan, platform, workloads, reaches = shown[part]
        assert (core.startswith("yes"), plan.startswith("yes"), platform.startswith("yes"),
                workloads.startswith("yes"), reaches.startswith("yes")) == (
            b.core, b.fabric_plan, b.platform, b.workloads, b.reaches_core), part
        assert (nodes == "none") == (b.nodes == "none"), part
