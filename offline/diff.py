"""Diff the committed rendering (`rendered/<stack>/`) against what the program renders now.

Resources are matched by URN (stored in every file). Each one is classified like the engine
would: create, delete, update (with the property paths that changed) or replace (a changed
path forces replacement: see REPLACE_RULES, plus the resource's own `replaceOnChanges`).
Secret values render as "[secret]" on both sides, so a change to a secret alone is not seen,
unless `credentials` names it ("[secret SHA256:…]", "[secret version 2]"): then a rotation shows.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .model import LAYERS, PHYSICAL_LAYERS, STACK_LAYER, layer_order
from .normalize import REVEAL_IN_SECRET, SECRET, UNKNOWN

try:  # libyaml: parsing thousands of rendered files stays fast
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

# Whether a change needs a maintenance window is the impact's to say (a key rotation changes
# every host's commands and takes nothing down).
PHYSICAL_HEADING = "Physical changes (hardware, cabling, switch or subnet-manager config)"

# ---------------------------------------------------------------- replacement table
#
# Property paths whose change makes the engine replace (delete + create) rather than update.
# Kept deliberately small and conservative; a path matches when it is the rule's path, lies
# under it, or is an ancestor of it (a whole object changed).
#
#   every kubernetes:* object      metadata.name, metadata.namespace (the object's identity)
#   core/v1 PersistentVolume       spec.csi, .nfs, .hostPath, .local, .volumeMode, .nodeAffinity
#                                  (volume source, mode and affinity are immutable)
#   core/v1 PersistentVolumeClaim  spec.accessModes, .selector, .storageClassName, .volumeName,
#                                  .volumeMode, .dataSource(Ref) (only requests may grow)
#   apps/v1 Deployment, DaemonSet  spec.selector (immutable in apps/v1)
#   apps/v1 StatefulSet            spec.selector, .serviceName, .volumeClaimTemplates,
#                                  .podManagementPolicy
#   batch/v1 Job                   spec.selector, .template, .completions
#   core/v1 Service                spec.clusterIP, spec.clusterIPs (allocated once)
#   storage.k8s.io/v1 StorageClass provisioner, parameters, reclaimPolicy, volumeBindingMode
#   core/v1 ConfigMap              data, binaryData (pulumi-kubernetes replaces a ConfigMap whose
#                                  data changes unless the provider sets enableConfigMapMutable)
#   core/v1 Secret                 data, binaryData, stringData when `immutable: true`
#   helm.sh Release                name, namespace (the release's identity)
#   command:remote:Command         triggers only (pulumi-command 1.2 sets replaceOnChanges on
#   command:remote:CopyToRemote    `triggers[*]` and nothing else: a changed connection.host is an
#   command:local:Command          update that runs `create` on the new host, never `delete` on
#                                  the old one)
#   any resource                   its replaceOnChanges option; a change of provider reference

_K8S_IDENTITY = ("metadata.name", "metadata.namespace")
REPLACE_RULES: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:PersistentVolume": (
        "spec.csi", "spec.nfs", "spec.hostPath", "spec.local", "spec.volumeMode",
        "spec.nodeAffinity",
    ),
    "kubernetes:core/v1:PersistentVolumeClaim": (
        "spec.accessModes", "spec.selector", "spec.storageClassName", "spec.volumeName",
        "spec.volumeMode", "spec.dataSource", "spec.dataSourceRef",
    ),
    "kubernetes:apps/v1:Deployment": ("spec.selector",),
    "kubernetes:apps/v1:DaemonSet": ("spec.selector",),
    "kubernetes:apps/v1:StatefulSet": (
        "spec.selector", "spec.serviceName", "spec.volumeClaimTemplates",
        "spec.podManagementPolicy",
    ),
    "kubernetes:batch/v1:Job": ("spec.selector", "spec.template", "spec.completions"),
    "kubernetes:core/v1:Service": ("spec.clusterIP", "spec.clusterIPs"),
    "kubernetes:core/v1:ConfigMap": ("data", "binaryData"),
    "kubernetes:storage.k8s.io/v1:StorageClass": (
        "provisioner", "parameters", "reclaimPolicy", "volumeBindingMode",
    ),
    "kubernetes:helm.sh/v3:Release": ("name", "namespace"),
    "kubernetes:helm.sh/v4:Release": ("name", "namespace"),
    "command:remote:Command": ("triggers",),
    "command:remote:CopyToRemote": ("triggers",),
    "command:local:Command": ("triggers",),
}

# Inputs a provider SDK makes secret as a whole (normalize.REVEAL_IN_SECRET; pulumi-command:
# `Output.secret(connection)`): the CLI diff shows only that the input changed, as `[secret]`.
# The offline diff reports the same single path and, under it, the fields that changed.
SECRET_NOTE = "(`pulumi preview` shows [secret])"


def _holds_secret(value: Any) -> bool:
    return isinstance(value, str) and SECRET[:-1] in value and not value.startswith(SECRET[:-1])


def _secret_input(type_: str) -> str | None:
    return next((key for prefix, fields in REVEAL_IN_SECRET.items()
                 if type_.startswith(prefix) for key in fields), None)


def _immutable_data(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, ...]:
    if old.get("inputs", {}).get("immutable") is True:
        return ("data", "binaryData", "stringData")
    return ()


# Rules that depend on the old value of the resource.
DYNAMIC_RULES: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[str, ...]]] = {
    "kubernetes:core/v1:Secret": _immutable_data,
}


def replace_paths_for(type_: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    paths: list[str] = list(REPLACE_RULES.get(type_, ()))
    if type_.startswith("kubernetes:") and not type_.startswith("kubernetes:helm.sh/"):
        paths.extend(_K8S_IDENTITY)
    dyn = DYNAMIC_RULES.get(type_)
    if dyn is not None:
        paths.extend(dyn(old, new))
    for doc in (old, new):
        paths.extend((doc.get("options") or {}).get("replaceOnChanges") or ())
    return paths


# ---------------------------------------------------------------- property paths

_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


def _key(prefix: str, key: str) -> str:
    if _IDENT.match(key):
        return f"{prefix}.{key}" if prefix else key
    return f'{prefix}["{key}"]'


def _same_secret(old: Any, new: Any) -> bool:
    """A secret whose identity one side does not know ("[secret]", e.g. a rendering made before
    `credentials` named it) is taken as unchanged: offline, only two named ones can differ."""
    return (isinstance(old, str) and isinstance(new, str) and old.startswith(SECRET[:-1])
            and new.startswith(SECRET[:-1]) and SECRET in (old, new))


def _known_since(old: Any, new: Any) -> bool:
    """A value the rendering shows unknown (it was made on a first preview, before a command
    ran) and the program now computes from that command's output: `pulumi up` stored what it
    computed from the same output then, so the engine finds it unchanged."""
    return old == UNKNOWN and new != UNKNOWN


def changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Leaf-most property paths where `old` and `new` differ (Pulumi's path syntax)."""
    if old == new or _same_secret(old, new) or _known_since(old, new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            if k not in old or k not in new:
                out.append(_key(prefix, k))
            else:
                out.extend(changed_paths(old[k], new[k], _key(prefix, k)))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(old) or i >= len(new):
                out.append(f"{prefix}[{i}]")
            else:
                out.extend(changed_paths(old[i], new[i], f"{prefix}[{i}]"))
        return out
    return [prefix or "(value)"]


_SEG = re.compile(r'\.?([A-Za-z_$*][A-Za-z0-9_$-]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\d+|\*)\]')


def split_path(path: str) -> list[str]:
    segs: list[str] = []
    pos = 0
    while pos < len(path):
        m = _SEG.match(path, pos)
        if m is None or m.end() == pos:
            return [path]  # not a path we understand: compare as one opaque segment
        segs.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return segs


def path_matches(changed: str, rule: str) -> bool:
    """True when `changed` is `rule`, lies under it, or contains it; `*` matches one segment."""
    if rule == "*":
        return True
    a, b = split_path(changed), split_path(rule)
    n = min(len(a), len(b))
    return all(x == y or y == "*" for x, y in zip(a[:n], b[:n], strict=True))


# ---------------------------------------------------------------- classification


@dataclass
class Change:
    action: str  # create | delete | update | replace
    urn: str
    type: str
    name: str
    layer: str
    paths: list[str] = field(default_factory=list)
    replace_because: list[str] = field(default_factory=list)
    # path -> changed lines ("-old", "+new") for multi-line text such as host scripts
    text_diffs: dict[str, list[str]] = field(default_factory=dict)
    # path -> (old, new) for every other changed value that is a scalar on both sides (None:
    # absent); secrets are their rendered mask ("[secret]", "[secret version 2]")
    values: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # A deleted resource's inputs, for readers of what goes (a retired switch's port map)
    old_inputs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def physical(self) -> bool:
        return self.layer in PHYSICAL_LAYERS

    def sort_key(self) -> tuple[Any, ...]:
        return (not self.physical, layer_order(self.layer), self.urn)


def classify(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
             layer: str) -> Change | None:
    doc = new if new is not None else old
    assert doc is not None
    urn, type_, name = doc["urn"], doc["type"], doc["name"]
    if old is None:
        return Change("create", urn, type_, name, layer)
    if new is None:
        return Change("delete", urn, type_, name, layer, old_inputs=old.get("inputs") or {})
    paths = changed_paths(old.get("inputs") or {}, new.get("inputs") or {})
    # A change of dependencies alone is not an update: the engine diffs inputs and the
    # resource options it acts on, and a component's dependents list all its children.
    opt_paths = [p for p in changed_paths(old.get("options") or {}, new.get("options") or {},
                                          "opts") if not p.startswith("opts.dependsOn")]
    if old.get("parent") != new.get("parent"):
        opt_paths.append("parent")
    if not paths and not opt_paths:
        return None
    texts: dict[str, list[str]] = {}
    secret = _secret_input(type_)
    inside = [p for p in paths if secret and split_path(p)[0] == secret]
    if secret and inside:
        texts[secret] = [SECRET_NOTE] + [
            f"{sign}{p[len(secret) + 1:]}: {_value_at(doc.get('inputs'), p)}"
            for p in inside for sign, doc in (("-", old), ("+", new))]
        paths = [p for p in paths if p not in inside] + [secret]
    rules = replace_paths_for(type_, old, new)
    because = sorted({p for p in paths for r in rules if path_matches(p, r)})
    if any(p == "opts.provider" for p in opt_paths):
        because.append("opts.provider")
    action = "replace" if because else "update"
    olds, news = old.get("inputs"), new.get("inputs")
    texts |= {p: d for p in paths
              if p not in texts and (d := text_diff(_value_at(olds, p), _value_at(news, p))
                                     or _secret_diff(_value_at(olds, p), _value_at(news, p)))}
    values = {p: (o, n) for p in paths
              if _one_line(o := _value_at(olds, p)) and _one_line(n := _value_at(news, p))}
    for p in paths:
        # A text with a secret in it (a subnet manager's config with its keys) is secret as a
        # whole to the engine: the CLI shows only that it changed.
        if p in texts and any(_holds_secret(_value_at(doc, p)) for doc in (olds, news)):
            texts[p] = [SECRET_NOTE, *texts[p]]
    return Change(action, urn, type_, name, layer, paths + opt_paths, because, texts, values=values)


def _scalar(value: Any) -> bool:
    """One line's worth: not a mapping, a list or a multi-line text (those get `text_diffs`)."""
    return value is None or isinstance(value, bool | int | float) or (
        isinstance(value, str) and "\n" not in value)


def _one_line(value: Any) -> bool:
    """A scalar, or a small mapping or list (an added list element: a HyperNode's member, a
    toleration) that reads in one line as JSON."""
    if _scalar(value):
        return True
    if not isinstance(value, dict | list):
        return False
    text = json.dumps(value, ensure_ascii=False)
    return len(text) <= VALUE_CHARS and "\\n" not in text


def _secret_diff(old: Any, new: Any) -> list[str]:
    """A named secret that changed identity ("[secret version 1]" → "[secret version 2]")."""
    if isinstance(old, str) and isinstance(new, str) and old.startswith("[secret ") \
            and new.startswith("[secret "):
        return [f"-{old}", f"+{new}"]
    return []


def _value_at(doc: Any, path: str) -> Any:
    for seg in split_path(path):
        if isinstance(doc, dict):
            doc = doc.get(seg)
        elif isinstance(doc, list) and seg.isdigit() and int(seg) < len(doc):
            doc = doc[int(seg)]
        else:
            return None
    return doc


def text_diff(old: Any, new: Any) -> list[str]:
    """Changed lines of two multi-line strings (scripts, config files), without context."""
    if not (isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new)):
        return []
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
    return [ln for ln in lines if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


@dataclass
class Diff:
    changes: list[Change]
    unreadable: list[str] = field(default_factory=list)
    reformatted: list[str] = field(default_factory=list)
    # Rendered files that stay as they are: they show a value unknown (rendered on a first
    # preview) that the program now computes from the same deployed outputs (_known_since).
    settled: dict[str, str] = field(default_factory=dict)
    # Resources whose dependencies alone change: no update, but `pulumi up` orders them (and
    # a later delete) differently. name -> (dependencies added, dependencies dropped)
    reordered: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.changes or self.unreadable or self.reformatted or self.reordered)

    def counts(self) -> dict[str, int]:
        out = {a: 0 for a in ("create", "update", "replace", "delete")}
        for c in self.changes:
            out[c.action] += 1
        return out


def _layer_from_path(rel: str) -> str:
    first = rel.split("/", 1)[0]
    return first if first in LAYERS or first == STACK_LAYER else STACK_LAYER


def read_tree(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in root.rglob("*.yaml")
        if p.is_file()
    }


def diff_trees(old_files: Mapping[str, str], new_files: Mapping[str, str],
               new_docs_by_path: Mapping[str, dict[str, Any]] | None = None) -> Diff:
    """Compare two {path: yaml text} trees; only old files whose text differs are parsed
    (new ones too unless their documents are given)."""
    unchanged = {p for p, t in new_files.items() if old_files.get(p) == t}
    old_docs: dict[str, tuple[str, dict[str, Any]]] = {}
    unreadable: list[str] = []
    for path in sorted(set(old_files) - unchanged):
        try:
            doc = yaml.load(old_files[path], Loader=_Loader)
        except yaml.YAMLError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("urn"), str):
            unreadable.append(path)
            continue
        old_docs[doc["urn"]] = (path, doc)
    new_docs: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in sorted(set(new_files) - unchanged):
        if new_docs_by_path is not None:
            doc = new_docs_by_path[path]
        else:
            doc = yaml.load(new_files[path], Loader=_Loader)
        new_docs[doc["urn"]] = (path, doc)
    changes: list[Change] = []
    reformatted: list[str] = []
    settled: dict[str, str] = {}
    reordered: dict[str, tuple[list[str], list[str]]] = {}
    for urn in sorted(set(old_docs) | set(new_docs)):
        old = old_docs.get(urn)
        new = new_docs.get(urn)
        path = new[0] if new else old[0]  # type: ignore[index]
        change = classify(old[1] if old else None, new[1] if new else None,
                          _layer_from_path(path))
        if change is not None:
            changes.append(change)
        elif (old and new and old[0] == new[0] and old[1] != new[1]
              and _keep_unknown(old[1], new[1]) == old[1]):
            settled[old[0]] = old_files[old[0]]
        elif old and new and (deps := _dependencies_changed(old[1], new[1])):
            reordered[new[1]["name"]] = deps
        elif old and new:
            # Same resource, same content, different file text or place: only `--render`
            # output would differ, which check-rendered must still catch.
            reformatted.append(new[0] if old[0] == new[0] else f"{old[0]} -> {new[0]}")
    changes.sort(key=Change.sort_key)
    return Diff(changes, unreadable, reformatted, settled, reordered)


def _dependencies_changed(old: Mapping[str, Any], new: Mapping[str, Any]
                          ) -> tuple[list[str], list[str]] | None:
    """(added, dropped) dependencies by name, when they differ."""
    def names(doc: Mapping[str, Any]) -> set[str]:
        return {u.rpartition("::")[2] for u in (doc.get("options") or {}).get("dependsOn") or []}
    before, after = names(old), names(new)
    return (sorted(after - before), sorted(before - after)) if before != after else None


def _keep_unknown(old: Any, new: Any) -> Any:
    """`new` with the values `old` shows unknown kept unknown (_known_since)."""
    if _known_since(old, new):
        return old
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: _keep_unknown(old.get(k), v) for k, v in new.items()}
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_keep_unknown(o, n) for o, n in zip(old, new, strict=True)]
    return new


# ---------------------------------------------------------------- text


_SYMBOL = {"create": "+", "delete": "-", "update": "~", "replace": "+-"}
_ACTION_ORDER = {"replace": 0, "update": 1, "delete": 2, "create": 3}


def _format(change: Change, limit: int) -> Iterable[str]:
    yield f"  {_SYMBOL[change.action]:>2} {change.action:<7} {change.type}  {change.name}"
    if change.action in ("create", "delete"):
        return
    yield f"             {change.urn}"
    if change.replace_because:
        yield f"             replaced because: {', '.join(change.replace_because)}"
    shown = change.paths[:limit]
    for p in shown:
        yield f"             ~ {p}" + (f": {_shown(change.values[p][0])} → "
                                       f"{_shown(change.values[p][1])}"
                                       if p in change.values else "")
        lines = [] if p in change.values else change.text_diffs.get(p, [])
        for line in lines[:TEXT_LINES]:
            yield f"                 {line}"
        if len(lines) > TEXT_LINES:
            yield f"                 … {len(lines) - TEXT_LINES} more changed lines"
    if len(change.paths) > len(shown):
        yield f"             … and {len(change.paths) - len(shown)} more paths"


TEXT_LINES = 12
VALUE_CHARS = 120


def _shown(value: Any) -> str:
    """A value as the diff prints it: JSON (strings quoted), `(absent)`, long ones cut."""
    if value is None:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 1] + "…"


def _same_change(ch: Change) -> tuple[Any, ...]:
    return (ch.action, ch.type, tuple(ch.paths), tuple(ch.replace_because),
            tuple((k, tuple(v)) for k, v in sorted(ch.text_diffs.items())),
            tuple(sorted((k, json.dumps(v)) for k, v in ch.values.items())))


def _format_group(changes: list[Change], limit: int, fold: int) -> Iterable[str]:
    """Creates/deletes of a type folded; identical updates (the same lines changed on every
    node) shown once with the resources they apply to."""
    runs: dict[tuple[str, str], list[Change]] = {}
    for ch in changes:
        runs.setdefault((ch.action, ch.type), []).append(ch)
    for (action, type_), items in sorted(
        runs.items(), key=lambda kv: (_ACTION_ORDER[kv[0][0]], kv[0][1])
    ):
        if action in ("create", "delete") and len(items) > fold:
            names = sorted(c.name for c in items)
            yield (f"  {_SYMBOL[action]:>2} {action:<7} {type_}  × {len(items)} "
                   f"({names[0]} … {names[-1]})")
            continue
        if action in ("create", "delete"):
            for ch in sorted(items, key=lambda c: c.name):
                yield from _format(ch, limit)
            continue
        same: dict[tuple[Any, ...], list[Change]] = {}
        for ch in sorted(items, key=lambda c: c.name):
            same.setdefault(_same_change(ch), []).append(ch)
        for group in same.values():
            first = group[0]
            yield from _format(first, limit)
            if len(group) > 1:
                others = [c.name for c in group[1:]]
                shown = ", ".join(others[:fold]) + (f" … (+{len(others) - fold})"
                                                    if len(others) > fold else "")
                yield f"             the same change on {len(others)} more: {shown}"


def format_diff(diff: Diff, label: str, path_limit: int = 20, fold: int = 8) -> list[str]:
    if diff.empty:
        return [f"no changes against {label}"]
    c = diff.counts()
    lines = [
        f"Changes against {label}: {c['create']} to create, {c['update']} to update, "
        f"{c['replace']} to replace, {c['delete']} to delete"
    ]
    physical = [ch for ch in diff.changes if ch.physical]
    other = [ch for ch in diff.changes if not ch.physical]
    if physical:
        lines.append(PHYSICAL_HEADING + ":")
        lines.extend(_format_group(physical, path_limit, fold))
    if other:
        lines.append("Other changes:")
        lines.extend(_format_group(other, path_limit, fold))
    for path in diff.unreadable:
        lines.append(f"  ?? unreadable rendered file (no urn): {path}")
    if diff.reordered:
        lines.append(f"Dependencies only ({len(diff.reordered)}: no update; `pulumi up` orders "
                     "them by these):")
        for name, (added, dropped) in sorted(diff.reordered.items())[:fold]:
            lines.append(f"   ~ {name}: " + ", ".join([*(f"+{d}" for d in added),
                                                     *(f"-{d}" for d in dropped)]))
        if len(diff.reordered) > fold:
            lines.append(f"   … and {len(diff.reordered) - fold} more")
    if diff.reformatted:
        lines.append(f"{len(diff.reformatted)} files differ only in formatting or location, "
                     f"e.g. {diff.reformatted[0]}")
    return lines


def diff_json(diff: Diff) -> str:
    """`[{action, type, name, layer, urn, paths, replaceBecause, textDiffs, values}]`, sorted;
    `values`: `{path: {"old": …, "new": …}}` for changed values that read in one line: scalars
    and small mappings or lists (null: absent)."""
    rows = [{"action": c.action, "type": c.type, "name": c.name, "layer": c.layer,
             "urn": c.urn, "paths": c.paths, "replaceBecause": c.replace_because,
             "textDiffs": c.text_diffs,
             "values": {p: {"old": o, "new": n} for p, (o, n) in c.values.items()}}
            for c in sorted(diff.changes, key=Change.sort_key)]
    return json.dumps(rows, indent=1, sort_keys=True) + "\n"
