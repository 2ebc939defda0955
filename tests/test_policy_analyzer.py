"""The harness of support/analyzer.py itself: rules see what the engine sends (read-only
proxies, floats, unknowns), the pack is well formed, and the recorded prod plan (the
`prod_plan` fixture) passes every rule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from support.analyzer import UNKNOWN, Analyzer, Res, gpu_guardrails, prod_policy_config


def test_rules_see_what_the_engine_sends() -> None:
    seen: dict[str, Any] = {}
    from pulumi_policy import ResourceValidationPolicy

    def capture(args: Any, report: Any) -> None:
        seen["replicas"] = args.props["spec"]["replicas"]
        seen["props"] = args.props
        seen["config"] = args.get_config()
        seen["provider"] = args.provider.name if args.provider else None

    an = Analyzer(policies=[ResourceValidationPolicy("capture", "captures", validate=capture)])
    an.configure({"capture": {"minSize": 16}})
    prov = Res("pulumi:providers:kubernetes", "kubernetes", {"kubeconfig": "x"})
    an.analyze(Res("kubernetes:apps/v1:Deployment", "d", {"spec": {"replicas": 2}},
                   provider=prov))
    assert seen["replicas"] == 2.0 and isinstance(seen["replicas"], float)
    assert isinstance(seen["props"], Mapping) and not isinstance(seen["props"], dict)
    assert seen["config"] == {"minSize": 16.0}
    assert seen["provider"] == "kubernetes"

def test_unknown_values_are_an_advisory_note_as_in_the_engine() -> None:
    an = Analyzer(only={"no-latest-image"})
    out = an.analyze(Res("kubernetes:core/v1:Pod", "p", {"spec": {"containers": [
        {"name": "c", "image": UNKNOWN}]}}))
    assert [(d.policy, d.level) for d in out] == [("no-latest-image", "advisory")]
    assert "can't run policy 'no-latest-image'" in out[0].message


def test_the_pack_is_well_formed() -> None:
    names = [p.name for p in gpu_guardrails.POLICIES]
    assert len(names) >= 30 and len(names) == len(set(names))
    from gpu_guardrails.registry import DOCS
    for p in gpu_guardrails.POLICIES:
        assert p.description and "\n" not in p.description, p.name
        assert p.enforcement_level is not None, p.name
        assert (DOCS[p.name].__doc__ or "").strip(), p.name


def test_the_prod_plan_passes_every_rule(prod_plan: list[Res]) -> None:
    out = Analyzer(prod_policy_config()).run(prod_plan)
    assert [d for d in out if d.level == "mandatory"] == []
    assert out == []
