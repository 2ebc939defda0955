"""The recorded resource graph, normalised: what every output file is rendered from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from .normalize import Normaliser
from .runtime import Registration

LAYERS = ("hardware", "fabric", "bootstrap", "platform", "storage", "workloads")
PHYSICAL_LAYERS = frozenset({"hardware", "fabric"})
STACK_LAYER = "stack"
COMPONENT_PREFIX = "gpucluster:"


@dataclass(slots=True)
class Resource:
    reg: Registration  # raw registration (wire-shaped inputs) for policies
    layer: str
    inputs: dict[str, Any]  # normalised
    options: dict[str, Any]

    @property
    def urn(self) -> str:
        return self.reg.urn

    @property
    def type(self) -> str:
        return self.reg.type

    @property
    def name(self) -> str:
        return self.reg.name

    @property
    def parent(self) -> str | None:
        return self.reg.parent

    def document(self) -> dict[str, Any]:
        """The per-resource record of plan.json and rendered/ (one shape for both)."""
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.reg.custom,
            "layer": self.layer,
            "inputs": self.inputs,
            "options": self.options,
        }


def own_layer(type_: str) -> str | None:
    """`gpucluster:<layer>:<Type>` → layer; anything else has none of its own."""
    if not type_.startswith(COMPONENT_PREFIX):
        return None
    parts = type_.split(":")
    return parts[1] if len(parts) == 3 and parts[1] in LAYERS else None


@dataclass
class Plan:
    project: str
    stack: str
    resources: list[Resource]  # sorted by URN
    by_urn: dict[str, Resource]
    secret_strings: set[str]

    def summary(self) -> dict[str, Any]:
        layers = Counter(r.layer for r in self.resources)
        types = Counter(r.type for r in self.resources)
        return {
            "total": len(self.resources),
            "custom": sum(1 for r in self.resources if r.reg.custom),
            "byLayer": {k: layers[k] for k in sorted(layers, key=layer_order)},
            "byType": dict(sorted(types.items())),
        }


def layer_order(layer: str) -> tuple[int, str]:
    return (LAYERS.index(layer), layer) if layer in LAYERS else (len(LAYERS), layer)


def build_plan(
    project: str, stack: str, registrations: list[Registration], project_dir: str = ""
) -> Plan:
    regs = sorted(registrations, key=lambda r: r.urn)
    by_urn_reg = {r.urn: r for r in regs}
    layer_cache: dict[str, str] = {}

    def layer_of(urn: str) -> str:
        # Iterative walk with memoisation: linear overall, no recursion limit on deep trees.
        chain: list[str] = []
        found = STACK_LAYER
        cur: str | None = urn
        while cur is not None:
            if cur in layer_cache:
                found = layer_cache[cur]
                break
            reg = by_urn_reg.get(cur)
            if reg is None:
                break
            chain.append(cur)
            own = own_layer(reg.type)
            if own is not None:
                found = own
                break
            cur = reg.parent
        for u in chain:
            layer_cache[u] = found
        return found

    norm = Normaliser(project_dir)
    resources = [_resource(reg, layer_of(reg.urn), norm) for reg in regs]
    return Plan(project, stack, resources, {r.urn: r for r in resources}, norm.secret_strings)


def _resource(reg: Registration, layer: str, norm: Normaliser) -> Resource:
    return Resource(reg=reg, layer=layer, inputs=norm.inputs(reg.type, reg.inputs),
                    options=reg.options())


class PlanBuilder:
    """The plan built as the program registers its resources, each one ready for the pack and
    the renderers as it arrives: a resource's layer is its own or its parent's, and the SDK
    registers a parent before its children. The same plan as `build_plan`'s."""

    def __init__(self, project: str, stack: str, project_dir: str = "") -> None:
        self._project, self._stack, self._project_dir = project, stack, project_dir
        self._norm = Normaliser(project_dir)
        self.by_urn: dict[str, Resource] = {}
        self._arrived: list[Resource] = []
        self._unseen_parents: set[str] = set()  # the stack's, or one arriving late

    def add(self, reg: Registration) -> Resource:
        layer = own_layer(reg.type)
        if layer is None:
            parent = self.by_urn.get(reg.parent) if reg.parent else None
            if reg.parent and parent is None:
                self._unseen_parents.add(reg.parent)
            layer = parent.layer if parent is not None else STACK_LAYER
        res = self.by_urn[reg.urn] = _resource(reg, layer, self._norm)
        self._arrived.append(res)
        return res

    def plan(self) -> Plan:
        if not self._unseen_parents.isdisjoint(self.by_urn):  # a parent after its child
            return build_plan(self._project, self._stack, [r.reg for r in self._arrived],
                              self._project_dir)
        resources = sorted(self._arrived, key=lambda r: r.urn)
        return Plan(self._project, self._stack, resources, {r.urn: r for r in resources},
                    self._norm.secret_strings)
