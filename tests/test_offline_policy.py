"""The policy adapter behaves like the pulumi-policy analyzer; the starter rules catch what
they claim to. Resources are built as wire-shaped registrations, as the runner records them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from offline.model import build_plan
from offline.normalize import SECRET_SIG, SIG_KEY
from offline.policy import PolicyLoadError, PolicyPackInfo, load_pack, run_policies
from offline.runtime import Registration

REPO = Path(__file__).resolve().parent.parent
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def secret(value: Any) -> dict[str, Any]:
    return {SIG_KEY: SECRET_SIG, "value": value}


def reg(type_: str, name: str, inputs: dict[str, Any], parent: str | None = None,
        **kw: Any) -> Registration:
    prefix = (parent.split("::")[2] + "$") if parent else ""  # the engine's URN form
    fields: dict[str, Any] = dict(
        urn=f"urn:pulumi:prod::gpu-cluster::{prefix}{type_}::{name}", type=type_, name=name,
        parent=parent, custom=not type_.startswith("gpucluster:"), inputs=inputs,
        protect=False, retain_on_delete=False, delete_before_replace=False, depends_on=[],
        property_dependencies={}, additional_secret_outputs=[], ignore_changes=[],
        replace_on_changes=[], provider=None)
    fields.update(kw)
    return Registration(**fields)


def pack(*policies: Any, initial: dict[str, Any] | None = None) -> PolicyPackInfo:
    return PolicyPackInfo(list(policies), initial or {}, EnforcementLevel.ADVISORY)


def run(regs: list[Registration], p: PolicyPackInfo, config: Mapping[str, Any] | None = None
        ) -> list[tuple[str, str, str | None, str]]:
    plan = build_plan("gpu-cluster", "prod", regs)
    return [(v.policy, v.level, v.resource, v.message) for v in run_policies(plan, p, config or {})]


def test_props_arrive_like_under_the_analyzer() -> None:
    seen: dict[str, Any] = {}

    def capture(args: Any, report: Any) -> None:
        if args.resource_type != "kubernetes:apps/v1:Deployment":
            return
        seen["props"] = args.props
        seen["env"] = args.props["spec"]["env"][0]["value"]
        seen["replicas"] = args.props["spec"]["replicas"]
        seen["opts"] = args.opts
        seen["provider"] = args.provider

    policy = ResourceValidationPolicy("capture", "captures", validate=capture)
    provider = reg("pulumi:providers:kubernetes", "k8s", {"kubeconfig": secret("apiVersion: v1")})
    res = reg("kubernetes:apps/v1:Deployment", "d",
              {"spec": {"replicas": 2.0, "env": [{"value": secret("plain-text")}]}},
              protect=True, provider=provider.urn)
    assert run([provider, res], pack(policy)) == []
    assert seen["env"] == "plain-text"  # secrets are unwrapped for rules
    assert seen["replicas"] == 2.0 and isinstance(seen["replicas"], float)
    assert isinstance(seen["props"], Mapping) and not isinstance(seen["props"], dict)
    # The analyzer's own unknown-checking proxies, not plain containers.
    assert type(seen["props"]["spec"]).__name__ == "_DictProxy"
    assert type(seen["props"]["spec"]["env"]).__name__ == "_ListProxy"
    assert seen["opts"].protect is True
    assert seen["provider"].name == "k8s"
    assert seen["provider"].props["kubeconfig"] == "apiVersion: v1"


def test_unknown_values_become_an_advisory_note() -> None:
    def read_image(args: Any, report: Any) -> None:
        if args.props["image"] != "x:1":
            report("wrong image")

    policy = ResourceValidationPolicy("img", "image check", validate=read_image,
                                      enforcement_level=EnforcementLevel.MANDATORY)
    out = run([reg("kubernetes:core/v1:Pod", "p", {"image": UNKNOWN})], pack(policy))
    assert len(out) == 1
    name, level, urn, message = out[0]
    assert (name, level) == ("img", "advisory")
    assert message == "can't run policy 'img' during preview: string value at .image can't be " \
                      "known during preview"


def test_validate_lists_async_rules_and_levels() -> None:
    async def later(args: Any, report: Any) -> None:
        report("from an async rule")

    def now(args: Any, report: Any) -> None:
        report("")  # empty message: the description is used, as in the analyzer

    rule = ResourceValidationPolicy("two", "two validations", validate=[now, later],
                                    enforcement_level=EnforcementLevel.REMEDIATE)
    quiet = ResourceValidationPolicy("quiet", "off by config", validate=now)
    res = reg("kubernetes:core/v1:Namespace", "ns", {})
    out = run([res], pack(rule, quiet), {"quiet": "disabled"})
    assert out == [("two", "mandatory", res.urn, "from an async rule"),
                   ("two", "mandatory", res.urn, "two validations")]
    # "all" sets every level not set per rule; a rule's own config wins over it.
    out = run([res], pack(rule, quiet), {"all": "advisory", "quiet": {"enforcementLevel":
                                                                      "mandatory"}})
    assert [(n, lvl) for n, lvl, _, _ in out] == [("quiet", "mandatory"), ("two", "advisory"),
                                                 ("two", "advisory")]
    with pytest.raises(PolicyLoadError, match="unknown policies"):
        run([res], pack(rule), {"typo-rule": "advisory"})


def test_stack_rules_see_linked_parents_and_dependencies() -> None:
    captured: dict[str, Any] = {}

    def check(args: Any, report: Any) -> None:
        by_name = {r.name: r for r in args.resources}
        captured.update(by_name)
        report("stack-level")
        report("about one resource", by_name["child"].urn)

    comp = reg("gpucluster:storage:Storage", "storage", {})
    other = reg("kubernetes:core/v1:Namespace", "ns", {})
    child = reg("kubernetes:core/v1:PersistentVolume", "child", {}, parent=comp.urn,
                depends_on=[other.urn], property_dependencies={"spec": [other.urn]})
    policy = StackValidationPolicy("stack", "stack rule", validate=check)
    out = run([comp, other, child], pack(policy))
    assert out == [("stack", "advisory", None, "stack-level"),
                   ("stack", "advisory", child.urn, "about one resource")]
    assert captured["child"].parent is captured["storage"]
    assert captured["child"].dependencies == [captured["ns"]]
    assert captured["child"].property_dependencies == {"spec": [captured["ns"]]}


def test_secret_plaintext_never_reaches_a_message() -> None:
    def leaky(args: Any, report: Any) -> None:
        report(f"token is {args.props['token']}")

    policy = ResourceValidationPolicy("leaky", "leaks", validate=leaky)
    out = run([reg("command:local:Command", "c", {"token": secret("kubeadm-token-abcdef")})],
              pack(policy))
    assert out[0][3] == "token is [secret]"


# ---------------------------------------------------------------- the starter pack


@pytest.fixture(scope="module")
def guardrails() -> PolicyPackInfo:
    info = load_pack(REPO / "policies")
    assert info is not None
    return info


def only(info: PolicyPackInfo, *names: str) -> PolicyPackInfo:
    return pack(*[p for p in info.policies if p.name in names])


def pod_job(image: str, gpu_req: Any = 8.0, gpu_lim: Any = 8.0) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if gpu_req is not None:
        res["requests"] = {"nvidia.com/gpu": gpu_req}
    if gpu_lim is not None:
        res["limits"] = {"nvidia.com/gpu": gpu_lim}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {
        "pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
            {"name": "w", "image": image, "resources": res}]}}}}}}


def test_pack_is_importable_and_well_formed(guardrails: PolicyPackInfo) -> None:
    names = [p.name for p in guardrails.policies]
    assert {"no-latest-image", "helm-chart-pinned", "checkpoint-volume-retained",
            "checkpoint-volume-protected", "ssh-host-key-pinned",
            "gpu-requests-equal-limits"} <= set(names)
    assert len(names) == len(set(names))
    for p in guardrails.policies:
        assert isinstance(p, ResourceValidationPolicy | StackValidationPolicy)
        assert p.description and "\n" not in p.description


def test_image_rules(guardrails: PolicyPackInfo) -> None:
    p = only(guardrails, "no-latest-image")
    job = "kubernetes:kubeflow.org/v1:PyTorchJob"
    assert run([reg(job, "ok", pod_job("nvcr.io/nvidia/pytorch:25.01-py3"))], p) == []
    assert run([reg(job, "dg", pod_job("registry:5000/x@sha256:" + "a" * 64))], p) == []
    bad = run([reg(job, "latest", pod_job("nvcr.io/nvidia/pytorch:latest")),
               reg(job, "untagged", pod_job("registry:5000/pytorch"))], p)
    assert [m for *_, m in bad] == [
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image "
        "'nvcr.io/nvidia/pytorch:latest' uses :latest; pin a version tag or a digest",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image "
        "'registry:5000/pytorch' has no tag (defaults to :latest); pin a version tag or a digest",
    ]


def test_gpu_requests_equal_limits(guardrails: PolicyPackInfo) -> None:
    p = only(guardrails, "gpu-requests-equal-limits")
    job = "kubernetes:kubeflow.org/v1:PyTorchJob"
    assert run([reg(job, "ok", pod_job("a:1", 8.0, 8.0))], p) == []
    assert run([reg(job, "lim", pod_job("a:1", None, 8.0))], p) == []
    assert run([reg(job, "str", pod_job("a:1", "8", 8.0))], p) == []
    out = run([reg(job, "diff", pod_job("a:1", 4.0, 8.0)),
               reg(job, "nolim", pod_job("a:1", 8.0, None))], p)
    assert [m.split(" ", 1)[1] for *_, m in out] == [
        "nvidia.com/gpu request 4 differs from limit 8",
        "requests nvidia.com/gpu=8 without a limit"]


def test_helm_and_ssh_rules(guardrails: PolicyPackInfo) -> None:
    p = only(guardrails, "helm-chart-pinned", "ssh-host-key-pinned")
    rel = "kubernetes:helm.sh/v3:Release"
    cmd = "command:remote:Command"
    out = run([
        reg(rel, "ok", {"chart": "volcano", "version": "1.15.1"}),
        reg(rel, "range", {"chart": "volcano", "version": "~1.15"}),
        reg(rel, "none", {"chart": "volcano"}),
        reg(cmd, "pinned",
            {"connection": secret({"host": "10.0.0.1", "hostKey": "ssh-ed25519 A"})}),
        reg(cmd, "open", {"connection": secret({"host": "10.0.0.2", "privateKey": "k"})}),
    ], p)
    assert [(n, urn.rsplit("::", 1)[1]) for n, _, urn, _ in out] == [
        ("helm-chart-pinned", "none"), ("helm-chart-pinned", "range"),
        ("ssh-host-key-pinned", "open")]


def test_checkpoint_rules(guardrails: PolicyPackInfo) -> None:
    p = only(guardrails, "checkpoint-volume-retained", "checkpoint-volume-protected")
    pv, pvc = "kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim"
    good = [
        reg(pv, "ckpt", {"metadata": {"name": "checkpoints"},
                         "spec": {"persistentVolumeReclaimPolicy": "Retain"}}, protect=True),
        reg(pvc, "claim", {"metadata": {"name": "train"}, "spec": {"volumeName": "checkpoints"}},
            protect=True),
        reg(pv, "data", {"metadata": {"name": "datasets"},
                         "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    ]
    assert run(good, p) == []
    bad = [
        reg(pv, "ckpt", {"metadata": {"name": "checkpoints"},
                         "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
        reg(pvc, "claim", {"metadata": {"name": "train"}, "spec": {"volumeName": "checkpoints"}}),
    ]
    out = run(bad, p)
    assert [(n, urn.rsplit("::", 1)[1]) for n, _, urn, _ in out] == [
        ("checkpoint-volume-protected", "ckpt"), ("checkpoint-volume-protected", "claim"),
        ("checkpoint-volume-retained", "ckpt")]
