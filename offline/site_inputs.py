"""Whether a part of a split site must be previewed again (`python -m offline site`).

A part's preview is a function of what it reads: the program and the pack (the project's
files, the runner, the interpreter and SDK versions), its own stack file and the site's
others, the core's cluster config, its rendering (the baseline of its diff), the outputs of the
stacks it references and the backend (all it reads of its environment). Their digest is the
part's key; no secret value goes into it (stack files hold ciphertext). Each preview of a part
writes its verdict beside its build with the key (`RECORD`); the site preview reuses it while
the key is unchanged, so a change to one SU reruns the core, that SU's part, the platform and
the workloads, not every SU's.

What a nodes part reads of the site is narrower than the whole config: only its own SUs'
node ranges and its hosts' inventory rows (a part builds only its nodes; every other setting
is read whole) and the core's outputs through `part_view` (its own nodes' identities). A node
override that moves a node between SUs makes every nodes part read the whole node list.
Anything else is read whole: a key that covers more than the part reads costs a rerun, never
a stale verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from .runtime import OUTPUTS_FILE, backend_url

CLUSTER_KEY = "gpu-cluster:cluster"
RECORD = "site-part.json"  # in build/<stack>/: the key and verdict of its last preview
NOT_READ = {"build", "rendered", ".git", "__pycache__", ".venv", "venv", ".mypy_cache",
            ".ruff_cache", ".pytest_cache", "node_modules"}
RUNNER = Path(__file__).resolve().parent  # the preview's own code, wherever it runs from
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def tree_digest(root: Path, config_files: bool = False, skip: Path | None = None) -> str:
    """Every file under `root` (links followed) but builds, renderings and caches; with
    `config_files`, but the stack files and the inventory (`skip`) too (read as config)."""
    h = hashlib.sha256()
    for here, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in NOT_READ)
        rel = Path(here).relative_to(root)
        for name in sorted(files):
            if config_files and (rel / name == skip or rel == Path(".") and name.startswith(
                    "Pulumi.") and name != "Pulumi.yaml"):
                continue
            h.update(f"{rel / name}\0".encode())
            h.update(Path(here, name).read_bytes())
    return h.hexdigest()


SDKS = ("pulumi", "pulumi-command", "pulumi-kubernetes", "pulumi-policy", "pyyaml", "pydantic")


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Site:
    """What every part's key shares, read once per site preview."""

    def __init__(self, project: Path, core: str) -> None:
        self.project, self.core = project, core
        self.files = {p.name: p.read_bytes() for p in sorted(project.glob("Pulumi.*.yaml"))}
        doc = yaml.load(self.files.get(f"Pulumi.{core}.yaml", b""), Loader=_LOADER) or {}
        config = doc.get("config") if isinstance(doc, Mapping) else None
        self.config: Mapping[str, Any] = config if isinstance(config, Mapping) else {}
        cluster = self.config.get(CLUSTER_KEY)
        named = cluster.get("inventoryFile") if isinstance(cluster, Mapping) else None
        self.inventory = Path(named) if isinstance(named, str) else None
        self.code = _digest([tree_digest(project, True, self.inventory), tree_digest(RUNNER)])
        self.backend = backend_url(project)  # what the preview reads of its environment
        self.sdks = [sys.version, *(_version(d) for d in SDKS)]
        self._read: dict[str, Any] = {}  # stack -> its outputs
        self._facts: Any = None  # the inventory, once a nodes part reads it

    def key(self, stack: str, part: str, references: list[str]) -> str:
        """The digest of what the part `stack` reads; `references`: the stacks before it,
        whose outputs it may read."""
        # The project's own (the runner previews projects that have none, and no split site).
        from components.planning.site_facts import part_view

        cluster = self.config.get(CLUSTER_KEY)
        hosts = _own_hosts(cluster, stack) if part == "nodes" else None
        if hosts is not None and isinstance(cluster, Mapping):
            cluster = _own_ranges(cluster, stack)
        outputs = {s: self._outputs(s) for s in references}
        if hosts is not None and self.core in outputs:
            outputs[self.core] = part_view(outputs[self.core], stack, hosts)
        own = f"Pulumi.{stack}.yaml"
        core_file = f"Pulumi.{self.core}.yaml"
        return _digest({
            "code": self.code, "backend": self.backend, "sdks": self.sdks,
            "stack": stack, "part": part,
            # The core reads its whole file; a part its own file, the core's config (its
            # cluster key as far as the part reads it) and the site's other files.
            "files": {n: hashlib.sha256(b).hexdigest() for n, b in self.files.items()
                      if stack == self.core or n != core_file},
            "config": self.config if stack == self.core else
            {**{k: v for k, v in self.config.items() if k != CLUSTER_KEY}, CLUSTER_KEY: cluster},
            "own": hashlib.sha256(self.files.get(own, b"")).hexdigest(),
            "rendering": tree_digest(self.project / "rendered" / stack, False)
            if (self.project / "rendered" / stack).is_dir() else None,
            "outputs": outputs,
            "inventory": self._inventory(hosts),
        })

    def _inventory(self, hosts: list[str] | None) -> Any:
        """The inventory as the part reads it: a nodes part its own hosts' rows (and the
        switches'), any other part the whole file."""
        if self.inventory is None:
            return None
        path = self.project / self.inventory
        if hosts is None or not path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        from components.model.inventory import InventoryError, load_inventory

        if self._facts is None:
            try:
                self._facts = load_inventory(path)
            except InventoryError:
                return hashlib.sha256(path.read_bytes()).hexdigest()
        return {"nodes": {h: self._facts.nodes.get(h) for h in hosts},
                "switches": self._facts.switch_guids}

    def _outputs(self, stack: str) -> Any:
        """The stack's last outputs, read once (the parts of a stage all read the core's)."""
        if stack not in self._read:
            path = self.project / "build" / stack / OUTPUTS_FILE
            self._read[stack] = json.loads(path.read_text()).get("outputs", {}) \
                if path.is_file() else None
        return self._read[stack]


def _split_part(cluster: Any, stack: str) -> Mapping[str, Any]:
    parts = ((cluster.get("split") or {}).get("parts") or {}) if isinstance(cluster, Mapping) \
        else {}
    part = parts.get(stack) if isinstance(parts, Mapping) else None
    return part if isinstance(part, Mapping) else {}


def _moves_nodes(gpu: Mapping[str, Any]) -> bool:
    """A node override that names an SU: a node of one range may belong to another SU."""
    overrides = gpu.get("overrides") or {}
    return not isinstance(overrides, Mapping) or any(
        not isinstance(o, Mapping) or "su" in o for o in overrides.values())


def _own_ranges(cluster: Mapping[str, Any], stack: str) -> Mapping[str, Any]:
    """The cluster config with only this nodes part's own SUs' node ranges."""
    gpu = cluster["gpuNodes"]
    sus = set(_split_part(cluster, stack).get("sus") or ())
    return {**cluster, "gpuNodes": {**gpu, "ranges": [
        r for r in gpu["ranges"] if int(r.get("su", 1)) in sus]}}


def _own_hosts(cluster: Any, stack: str) -> list[str] | None:
    """The hostnames of a nodes part's own SUs, or None when they cannot be told from its
    ranges alone (a malformed config, an override moving a node): then the part's key reads
    the whole site."""
    from components.model.gpu_nodes_section import NodeRange

    try:
        gpu = cluster["gpuNodes"]
        if _moves_nodes(gpu):
            return None
        cut = _own_ranges(cluster, stack)["gpuNodes"]["ranges"]
        return [r.hostname(i) for r in map(NodeRange.model_validate, cut)
                for i in range(r.count)]
    except Exception:  # any config the part would refuse: read it all
        return None


def recorded(project: Path, stack: str, key: str) -> dict[str, Any] | None:
    """The part's last preview verdict, if it was made with `key`."""
    path = project / "build" / stack / RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("key") == key else None


def record(project: Path, stack: str, key: str, status: int, output: str,
           rendered: bool) -> None:
    """`rendered`: the preview also wrote the part's rendering, so with this key its diff is
    empty; otherwise its diff and runbook are the build's."""
    (project / "build" / stack / RECORD).write_text(json.dumps(
        {"key": key, "status": status, "output": output, "rendered": rendered}, indent=1))


def forget(project: Path, stack: str) -> None:
    """A preview of the stack is under way: its build no longer answers for any key."""
    (project / "build" / stack / RECORD).unlink(missing_ok=True)
