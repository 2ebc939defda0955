"""Runs the gpu-guardrails rules through pulumi-policy's own analyzer servicer.

`Analyzer` builds the gRPC requests the Pulumi engine sends to a policy pack
(`AnalyzeRequest`, `AnalyzeStackRequest`, `ConfigureAnalyzerRequest`, properties as a protobuf
`Struct`, so every number is a float) and calls `_PolicyAnalyzerServicer.Analyze` /
`AnalyzeStack` — the code `PolicyPack(...)` serves under `pulumi preview --policy-pack`. Rules
therefore see exactly what they see under the CLI: read-only proxies, floats, unknowns that
raise. `recorded_prod` is the recorded prod stack from a real offline preview (the `prod_plan`
fixture of conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2 as proto
from pulumi.runtime.rpc import UNKNOWN
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer

from offline.normalize import UNKNOWN as PLAN_UNKNOWN
from support.project import REPO, shared_prod

if str(REPO / "policies") not in sys.path:
    sys.path.insert(0, str(REPO / "policies"))

import gpu_guardrails
from gpu_guardrails.registry import take_deferred

LEVELS = {proto.ADVISORY: "advisory", proto.MANDATORY: "mandatory",
          proto.REMEDIATE: "remediate", proto.DISABLED: "disabled"}
_LEVEL_TO_PROTO = {"advisory": proto.ADVISORY, "mandatory": proto.MANDATORY,
                   "remediate": proto.REMEDIATE, "disabled": proto.DISABLED}


@dataclass(frozen=True)
class Res:
    """A resource as the engine describes it to an analyzer."""

    type: str
    name: str
    props: Mapping[str, Any]
    urn: str = ""
    protect: bool = False
    parent: str | None = None
    provider: Res | None = None

    @property
    def the_urn(self) -> str:
        return self.urn or f"urn:pulumi:prod::gpu-cluster::{self.type}::{self.name}"


@dataclass(frozen=True)
class Diag:
    policy: str
    level: str
    urn: str
    message: str


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    json_format.ParseDict(json.loads(json.dumps(value)), s)
    return s


def _options(r: Res) -> proto.AnalyzerResourceOptions:
    return proto.AnalyzerResourceOptions(protect=r.protect, parent=r.parent or "")


def _provider(r: Res) -> proto.AnalyzerProviderResource | None:
    p = r.provider
    if p is None:
        return None
    return proto.AnalyzerProviderResource(type=p.type, properties=_struct(p.props),
                                          urn=p.the_urn, name=p.name)


class Analyzer:
    """The pack's servicer, configured like `--policy-pack-config` would."""

    def __init__(self, config: Mapping[str, Any] | None = None,
                 only: set[str] | None = None, policies: list[Any] | None = None) -> None:
        if policies is None:
            policies = [p for p in gpu_guardrails.POLICIES if only is None or p.name in only]
        self.policies = policies
        # A new analyzer process: no check deferred by an earlier one (registry.take_deferred).
        take_deferred()
        self.servicer = _PolicyAnalyzerServicer(
            "gpu-guardrails", "0.0.1", policies, gpu_guardrails.DEFAULT_ENFORCEMENT_LEVEL,
            gpu_guardrails.INITIAL_CONFIG or None)
        if config:
            self.configure(config)

    def configure(self, config: Mapping[str, Any]) -> None:
        # What the CLI sends: every policy with its level and properties.
        confs = {}
        for p in self.policies:
            entry = config.get(p.name, {})
            level = (p.enforcement_level or EnforcementLevel.ADVISORY).value
            props: dict[str, Any] = {}
            if isinstance(entry, str):
                level = entry
            elif isinstance(entry, Mapping):
                level = entry.get("enforcementLevel", level)
                props = {k: v for k, v in entry.items() if k != "enforcementLevel"}
            confs[p.name] = proto.PolicyConfig(enforcementLevel=_LEVEL_TO_PROTO[level],
                                               properties=_struct(props))
        self.servicer.Configure(proto.ConfigureAnalyzerRequest(policyConfig=confs), None)

    def analyze(self, r: Res) -> list[Diag]:
        req = proto.AnalyzeRequest(type=r.type, properties=_struct(r.props), urn=r.the_urn,
                                   name=r.name, options=_options(r))
        prov = _provider(r)
        if prov is not None:
            req.provider.CopyFrom(prov)
        return self._diags(self.servicer.Analyze(req, None), r.the_urn)

    def analyze_stack(self, resources: list[Res]) -> list[Diag]:
        items = []
        for r in resources:
            item = proto.AnalyzerResource(type=r.type, properties=_struct(r.props),
                                          urn=r.the_urn, name=r.name, options=_options(r),
                                          parent=r.parent or "")
            prov = _provider(r)
            if prov is not None:
                item.provider.CopyFrom(prov)
            items.append(item)
        return self._diags(self.servicer.AnalyzeStack(
            proto.AnalyzeStackRequest(resources=items), None), "")

    def run(self, resources: list[Res]) -> list[Diag]:
        out: list[Diag] = []
        for r in resources:
            out += self.analyze(r)
        return out + self.analyze_stack(resources)

    @staticmethod
    def _diags(resp: Any, urn: str) -> list[Diag]:
        return [Diag(d.policyName, LEVELS[d.enforcementLevel], d.urn or urn, d.message)
                for d in resp.diagnostics]


def offline_preview(project: Path, stack: str = "prod") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offline", "preview", "--stack", stack, "--project-dir",
         str(project), "--quiet"],
        cwd=project, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(project), "PYTHONHASHSEED": "0",
             "PYTHONDONTWRITEBYTECODE": "1"})


def _unknowns(value: Any) -> Any:
    """The plan's "[unknown]" as the engine sends a value unknown in preview."""
    if value == PLAN_UNKNOWN:
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _unknowns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unknowns(v) for v in value]
    return value


def plan_resources(project: Path, stack: str = "prod") -> list[Res]:
    """The recorded plan as engine-shaped resources (inputs as the engine would send them)."""
    doc = json.loads((project / "build" / stack / "plan.json").read_text())
    raw = {r["urn"]: r for r in doc["resources"]}
    made: dict[str, Res] = {}

    def make(urn: str) -> Res:
        if urn not in made:
            r = raw[urn]
            prov = r["options"].get("provider")
            made[urn] = Res(r["type"], r["name"], _unknowns(r["inputs"]), urn=urn,
                            protect=bool(r["options"].get("protect")), parent=r.get("parent"),
                            provider=make(prov) if prov in raw else None)
        return made[urn]

    return [make(u) for u in raw]


_PROD: dict[str, Any] = {}


def recorded_prod(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Res]]:
    """The run's one offline preview of prod (`shared_prod`), as engine-shaped resources."""
    if "project" not in _PROD:
        project = shared_prod(tmp_path_factory)
        _PROD["project"] = project
        _PROD["plan"] = plan_resources(project)
    return _PROD["project"], _PROD["plan"]


def prod_policy_config() -> dict[str, Any]:
    path = REPO / "policies" / "policy-config.prod.json"
    return json.loads(path.read_text()) if path.is_file() else {}
