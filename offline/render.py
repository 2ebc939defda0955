"""Everything written to disk, as {relative path: text} maps built in memory first.

Building the whole tree in memory before touching the disk is what lets a config error or a
leak check leave `build/` untouched, and lets `--render` rewrite only files that changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from . import yamlfast
from .model import Plan, Resource

try:  # libyaml is several times faster on 10k files; fall back to the pure-Python dumper
    _BaseDumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _BaseDumper = yaml.SafeDumper


class _Dumper(_BaseDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    # Scripts and config files as literal blocks so a PR diff reads line by line.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def pyyaml_dump(obj: Any) -> str:
    return yaml.dump(
        obj, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True,
        width=1 << 16,
    )


def to_yaml(obj: Any) -> str:
    return yamlfast.dump(obj, fallback=pyyaml_dump)


def to_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: str) -> str:
    cleaned = _UNSAFE.sub("_", name).lstrip(".") or "_"
    return cleaned[:120]


def type_slug(type_: str) -> str:
    """`kubernetes:apps/v1:Deployment` → `kubernetes-apps-v1-Deployment`."""
    return safe_name(type_.replace(":", "-").replace("/", "-"))


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _dedupe(paths: Mapping[str, str], suffix_of: Mapping[str, str]) -> dict[str, str]:
    """key → path; keys sharing a path get `~<hash>` before the extension (deterministic)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key, path in paths.items():
        groups[path].append(key)
    out: dict[str, str] = {}
    for path, keys in groups.items():
        if len(keys) == 1:
            out[keys[0]] = path
            continue
        stem, dot, ext = path.rpartition(".")
        for key in keys:
            out[key] = f"{stem}~{_short_hash(suffix_of[key])}{dot}{ext}"
    return out


# ---------------------------------------------------------------- rendered/<stack>


def rendered_doc(res: Resource) -> dict[str, Any]:
    doc = res.document()
    del doc["custom"], doc["layer"]  # both follow from the type and the path
    return doc


@dataclass(frozen=True, slots=True)
class Pieces:
    """A resource's own parts of the files: its rendered document and text, and its row of
    plan.json. Made as the resource arrives; the files are assembled once all have."""

    res: Resource
    doc: dict[str, Any]
    text: str
    row: str  # indented as plan.json holds it


def pieces(res: Resource) -> Pieces:
    doc = rendered_doc(res)
    return Pieces(res, doc, to_yaml(doc), "    " + _enc(res.document()))


def _pieces(plan: Plan, made: Mapping[str, Pieces]) -> dict[str, Pieces]:
    """Each resource's pieces: as made, unless the resource was planned again since."""
    out: dict[str, Pieces] = {}
    for r in plan.resources:
        p = made.get(r.urn)
        out[r.urn] = p if p is not None and p.res is r else pieces(r)
    return out


def rendered_files(plan: Plan, made: Mapping[str, Pieces]
                   ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """`<layer>/<type slug>/<name>.yaml` per resource; URN-hash suffix only on a clash.

    Returns the texts and the documents they were made from (the diff needs both)."""
    paths = {
        r.urn: f"{r.layer}/{type_slug(r.type)}/{safe_name(r.name)}.yaml" for r in plan.resources
    }
    paths = _dedupe(paths, {u: u for u in paths})
    each = _pieces(plan, made)
    return ({paths[u]: p.text for u, p in each.items()},
            {paths[u]: p.doc for u, p in each.items()})


# ---------------------------------------------------------------- Kubernetes objects


# Kinds without a namespace (core + the CRDs this stack uses). Used only to file objects.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService", "CertificateSigningRequest", "ClusterIssuer", "ClusterPolicy",
        "ClusterRole", "ClusterRoleBinding", "ClusterTrainingRuntime", "CSIDriver", "CSINode",
        "CustomResourceDefinition", "HyperNode", "IngressClass", "IPAddress",
        "MutatingWebhookConfiguration", "Namespace", "NicClusterPolicy", "Node", "NodeFeatureRule",
        "PersistentVolume", "PriorityClass", "Queue", "RuntimeClass", "StorageClass",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration", "VolumeAttachment",
    }
)


def is_k8s_object(res: Resource) -> bool:
    t = res.type
    return (
        res.reg.custom
        and t.startswith("kubernetes:")
        and not t.startswith("kubernetes:helm.sh/")
        and t.count(":") == 2
    )


def is_helm_release(res: Resource) -> bool:
    return res.type.startswith("kubernetes:helm.sh/") and res.type.endswith(":Release")


def _api_version_kind(res: Resource) -> tuple[str, str]:
    _, module, kind = res.type.split(":")
    default_api = module[len("core/"):] if module.startswith("core/") else module
    api = res.inputs.get("apiVersion")
    k = res.inputs.get("kind")
    return (api if isinstance(api, str) else default_api), (k if isinstance(k, str) else kind)


def k8s_manifest(res: Resource) -> dict[str, Any]:
    api, kind = _api_version_kind(res)
    metadata = dict(res.inputs.get("metadata") or {}) if isinstance(
        res.inputs.get("metadata"), dict) else {}
    if not isinstance(metadata.get("name"), str) or metadata.get("name") == "[unknown]":
        # Pulumi auto-naming appends a random suffix at apply time; the resource name is the
        # stable part, and an object needs a name to validate.
        metadata["name"] = res.name
    body = {k: v for k, v in res.inputs.items() if k not in ("apiVersion", "kind", "metadata")}
    return {"apiVersion": api, "kind": kind, "metadata": metadata, **body}


def _namespace(res: Resource, manifest: dict[str, Any], plan: Plan) -> str:
    ns = manifest["metadata"].get("namespace")
    if isinstance(ns, str) and ns:
        return ns
    if manifest["kind"] in CLUSTER_SCOPED_KINDS:
        return "cluster"
    prov = plan.by_urn.get(res.reg.provider or "")
    if prov is not None and isinstance(prov.inputs.get("namespace"), str):
        return prov.inputs["namespace"]  # the provider's default namespace applies
    return "default"


def manifest_files(plan: Plan) -> tuple[dict[str, str], list[str]]:
    """`<namespace|cluster>/<kind>-<name>.yaml`; returns (files, warnings about duplicates)."""
    manifests: dict[str, dict[str, Any]] = {}
    paths: dict[str, str] = {}
    identity: dict[str, tuple[str, str, str, str]] = {}
    for res in plan.resources:
        if not is_k8s_object(res):
            continue
        m = k8s_manifest(res)
        ns = _namespace(res, m, plan)
        name = str(m["metadata"]["name"])
        manifests[res.urn] = m
        paths[res.urn] = f"{safe_name(ns)}/{m['kind'].lower()}-{safe_name(name)}.yaml"
        identity[res.urn] = (ns, m["apiVersion"].split("/")[0], m["kind"], name)
    warnings: list[str] = []
    seen: dict[tuple[str, str, str, str], str] = {}
    for urn in sorted(identity):
        other = seen.setdefault(identity[urn], urn)
        if other != urn:
            ns, group, kind, name = identity[urn]
            warnings.append(
                f"two resources render the same Kubernetes object {kind} {ns}/{name}: "
                f"{other} and {urn} (the second create would fail on a real cluster)"
            )
    paths = _dedupe(paths, {u: "/".join(identity[u]) + u for u in paths})
    return {paths[u]: to_yaml(manifests[u]) for u in manifests}, warnings


def helm_files(plan: Plan) -> dict[str, str]:
    docs: dict[str, dict[str, Any]] = {}
    paths: dict[str, str] = {}
    for res in plan.resources:
        if not is_helm_release(res):
            continue
        i = res.inputs
        name = i["name"] if isinstance(i.get("name"), str) else res.name
        repo_opts = i.get("repositoryOpts")
        docs[res.urn] = {
            "name": name,
            "chart": i.get("chart"),
            "version": i.get("version"),
            "repo": repo_opts.get("repo") if isinstance(repo_opts, dict) else None,
            "namespace": i.get("namespace"),
            "values": i.get("values") or {},
        }
        paths[res.urn] = f"{safe_name(name)}.yaml"
    paths = _dedupe(paths, {u: u for u in paths})
    return {paths[u]: to_yaml(docs[u]) for u in docs}


# ---------------------------------------------------------------- artifacts


RESERVED_TOP = frozenset({"plan.json", "policy-report.json", "manifests", "helm"})


class ArtifactError(ValueError):
    pass


def check_artifacts(artifacts: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(artifacts):
        text = artifacts[path]
        parts = path.split("/")
        if (
            not isinstance(path, str)
            or path.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ArtifactError(f"artifact path {path!r} must be relative, without '.' or '..'")
        if parts[0] in RESERVED_TOP:
            raise ArtifactError(f"artifact path {path!r} collides with the runner's own {parts[0]}")
        if not isinstance(text, str):
            raise ArtifactError(f"artifact {path!r} must be text, got {type(text).__name__}")
        out[path] = text
    return out


def _enc(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def plan_json(plan: Plan, made: Mapping[str, Pieces]) -> str:
    """One resource per line: readable and greppable, and written by the C JSON encoder
    (indent= would switch to the pure-Python one, seconds on 10k resources)."""
    rows = ",\n".join(p.row for p in _pieces(plan, made).values())
    return (
        "{\n"
        f'  "project": {_enc(plan.project)},\n'
        f'  "resources": [\n{rows}\n  ],\n'
        f'  "stack": {_enc(plan.stack)},\n'
        f'  "summary": {to_json(plan.summary()).rstrip().replace(chr(10), chr(10) + "  ")}\n'
        "}\n"
    )
