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

def test_a_check_on_an_unknown_value_waits_for_up_and_is_said_once() -> None:
    # The engine would print one "can't run policy" line per rule and resource; the pack
    # defers the check to `pulumi up` and says so in one finding after every rule ran.
    an = Analyzer(only={"no-latest-image", "checks-wait-for-up"})
    pods = [Res("kubernetes:core/v1:Pod", f"p{i}", {"spec": {"containers": [
        {"name": "c", "image": UNKNOWN}]}}) for i in range(5)]
    out = an.run(pods)
    assert [(d.policy, d.level) for d in out] == [("checks-wait-for-up", "advisory")]
    assert "5 checks by 1 rules wait for `pulumi up`" in out[0].message
    assert "`.spec.containers.0.image` of 5 resources (p0, p1, p2, and 2 more)" \
        in out[0].message
    # Once said, forgotten: the next stack analysis has nothing left to report.
    assert an.analyze_stack(pods) == []


def test_a_known_value_is_still_checked(prod_plan: list[Res]) -> None:
    an = Analyzer(only={"no-latest-image", "checks-wait-for-up"})
    out = an.run([Res("kubernetes:core/v1:Pod", "p", {"spec": {"containers": [
        {"name": "c", "image": UNKNOWN}, {"name": "d", "image": "nvcr.io/x:latest"}]}})])
    # The rule stopped at the unknown image: the one after it waits with it.
    assert [d.policy for d in out] == ["checks-wait-for-up"]
    out = an.run([Res("kubernetes:core/v1:Pod", "p", {"spec": {"containers": [
        {"name": "d", "image": "nvcr.io/x:latest"}]}})])
    assert [(d.policy, d.level) for d in out] == [("no-latest-image", "mandatory")]


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
    # A first preview (the copy has no rendering, so nothing is deployed): each GPU node's
    # reboot drain acts on the verdict its reboot check prints, and 14 rules read commands.
    (wait,) = out
    assert wait.policy == "checks-wait-for-up" and wait.level == "advisory"
    assert "\n112 checks by 14 rules wait for `pulumi up`" in wait.message
    assert "`.create` of 8 resources (gpu-node-00-reboot-drain, " in wait.message
