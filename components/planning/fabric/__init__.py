"""InfiniBand fabric planning: pure Python, no pulumi import.

plan_fabric(nodes, sm_hosts, spec) -> FabricPlan        (planner.py)
render_fabric_files(plan) -> {"fabric/<file>": text}     (render.py)
verify_plan(plan, ibnetdiscover_text) -> Report          (verify.py)
"""

from .ibnet import Topology, parse_ibnetdiscover, render_topology_net
from .model import (
    BomLine,
    Cable,
    Endpoint,
    FabricNode,
    FabricPlan,
    FabricSpec,
    HcaPort,
    NodePlacement,
    Partition,
    PlaceholderSummary,
    PlanError,
    RailPlacement,
    SmHost,
    SmPlacement,
    StoragePlacement,
    StorageServer,
    Switch,
)
from .planner import plan_fabric
from .render import plan_warnings, render_fabric_files, summary
from .verify import Finding, Report, compare, verify_files, verify_plan

__all__ = [
    "BomLine", "Cable", "Endpoint", "FabricNode", "FabricPlan", "FabricSpec", "Finding",
    "HcaPort", "NodePlacement", "Partition", "PlaceholderSummary", "PlanError",
    "RailPlacement", "Report", "SmHost", "SmPlacement", "StoragePlacement", "StorageServer",
    "Switch", "Topology",
    "compare", "parse_ibnetdiscover", "plan_fabric", "plan_warnings", "render_fabric_files",
    "render_topology_net", "summary", "verify_files", "verify_plan",
]
