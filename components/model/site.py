"""A split site's config lives once, in its core stack's file (pure; reads the project's stack
files). The core's `split.parts` names every other part's stack and what it owns; each other
part's stack file only names the core (`gpu-cluster:site`) beside its own secrets, and reads
the core's cluster config with its own split. So the parts cannot drift apart, no SU has two
owners, and a part whose reference is mistyped, or a core whose split was deleted while its
parts still name it, is a config error before anything is registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from components.model.fields import CLUSTER_KEY, PROJECT, ConfigError, Problem

SITE_KEY = f"{PROJECT}:site"
# libyaml when present: a 2,048-node site has 66 stack files, read by every part.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _configs(project_dir: Path) -> dict[str, Mapping[str, Any]]:
    """Each Pulumi.<stack>.yaml's `config` object, by stack."""
    found = {}
    for path in sorted(project_dir.glob("Pulumi.*.yaml")):
        doc = yaml.load(path.read_text(), Loader=_LOADER) or {}  # a safe loader
        config = doc.get("config") if isinstance(doc, Mapping) else None
        if isinstance(config, Mapping):
            found[path.name.removeprefix("Pulumi.").removesuffix(".yaml")] = config
    return found


def _split(cluster: Any) -> Mapping[str, Any]:
    split = cluster.get("split") if isinstance(cluster, Mapping) else None
    return split if isinstance(split, Mapping) else {}


def _parts_naming(stack: str, configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The stacks whose `gpu-cluster:site` names `stack` as their core."""
    return sorted(s for s, c in configs.items()
                  if str(c.get(SITE_KEY, "")).rpartition("/")[2] == stack and s != stack)


def stack_cluster(project_dir: Path, stack: str, own: Any, site: str | None,
                  organization: str | None = None) -> Mapping[str, Any]:
    """This stack's cluster config: its own `gpu-cluster:cluster`, or for a part of a split
    site the core's with this part's split. `organization`: this stack's, where known (the
    engine's; a DIY backend's is `organization`). Raises ConfigError, changing nothing."""
    configs = _configs(project_dir)
    if site is None:
        if own is None:
            raise ConfigError([Problem("", None, "the stack has no gpu-cluster:cluster key",
                                       "copy Pulumi.prod.yaml as a starting point, or set "
                                       f"{SITE_KEY} to the core stack of a split site")])
        problems = _own_problems(own, stack, configs)
        if problems:
            raise ConfigError(problems)
        return own
    if own is not None:
        core = site.rpartition("/")[2]
        raise ConfigError([Problem("", "(set)", f"a part of a split site ({SITE_KEY}: {site}) "
                                   f"reads the site's one cluster config from Pulumi.{core}"
                                   ".yaml, so a copy here could only drift from it",
                                   f"remove {CLUSTER_KEY} from Pulumi.{stack}.yaml and make "
                                   "every change in the core's file")])
    return _part_cluster(stack, site, configs, organization)


def _own_problems(own: Any, stack: str, configs: Mapping[str, Mapping[str, Any]]
                  ) -> list[Problem]:
    split = _split(own)
    naming = _parts_naming(stack, configs)
    if split.get("part") not in (None, "core"):
        return [Problem("split.part", split.get("part"), "only the core part holds the site's "
                        "cluster config; every other part reads it from the core",
                        f"set {SITE_KEY} to <org>/{PROJECT}/<core stack>, list this stack "
                        f"under the core's split.parts, and remove {CLUSTER_KEY} here")]
    if not split and naming:
        return [Problem("split", None, f"stacks {', '.join(naming)} are parts of this site "
                        f"(their {SITE_KEY} names {stack}), but this stack has no split: it "
                        "would build the whole site a second time beside them",
                        "restore split (part: core, with its parts), or retire those stacks "
                        "first")]
    listed = set(split.get("parts") or ()) if isinstance(split.get("parts"), Mapping) else set()
    return [Problem("split.parts", sorted(listed), f"stack {other} names this core in "
                    f"{SITE_KEY}, but is not one of its parts", f"add {other} to split.parts, "
                    f"or remove {SITE_KEY} from Pulumi.{other}.yaml")
            for other in naming if other not in listed]


def _part_cluster(stack: str, site: str, configs: Mapping[str, Mapping[str, Any]],
                  organization: str | None) -> dict[str, Any]:
    org, _, rest = site.partition("/")
    project, _, core = rest.partition("/")
    _check_organization(stack, site, configs, organization)
    cores = sorted(s for s, c in configs.items()
                   if _split(c.get(CLUSTER_KEY)).get("part") == "core")
    fix = (f"name the core stack of this site: {org}/{PROJECT}/<stack> with one of "
           f"{', '.join(cores)}" if cores else "add the core part's stack file (split.part: "
           "core)")
    cluster = configs.get(core, {}).get(CLUSTER_KEY) if project == PROJECT else None
    if not isinstance(cluster, Mapping):
        raise ConfigError([_site_problem(site, f"names no stack of this project with a "
                                         f"cluster config ({PROJECT}, stack files "
                                         "Pulumi.<stack>.yaml here)", fix)])
    split = _split(cluster)
    if split.get("part") != "core":
        raise ConfigError([_site_problem(site, f"names stack {core}, which is not a core part "
                                         f"(its split.part is {split.get('part')})", fix)])
    listed = split.get("parts")
    parts: Mapping[str, Any] = listed if isinstance(listed, Mapping) else {}
    mine = parts.get(stack)
    if not isinstance(mine, Mapping):
        raise ConfigError([_site_problem(site, f"stack {stack} is not one of {core}'s parts "
                                         f"({', '.join(sorted(parts)) or 'none'})",
                                         f"add `{stack}: {{part: nodes, sus: [<su>]}}` (or "
                                         "part: platform | workloads) to split.parts in "
                                         f"Pulumi.{core}.yaml")])
    if shared := _shared_sus(stack, mine, parts):
        raise ConfigError([_site_problem(site, f"SU {su} of this stack ({stack}) is also owned "
                                         f"by part {other} in {core}'s split.parts: both would "
                                         "join, and reset, its nodes",
                                         f"give SU {su} to exactly one nodes part in "
                                         f"Pulumi.{core}.yaml")
                           for su, other in shared])
    platform = next((s for s, p in sorted(parts.items())
                     if isinstance(p, Mapping) and p.get("part") == "platform"), None)
    own_split: dict[str, Any] = {**mine, "kubernetesStack": site}
    if mine.get("part") == "workloads" and platform is not None:
        own_split["platformStack"] = f"{org}/{project}/{platform}"
    return {**cluster, "split": own_split}


def _check_organization(stack: str, site: str, configs: Mapping[str, Mapping[str, Any]],
                        organization: str | None) -> None:
    """The core is a stack of this stack's organization (a stack reference reaches no other),
    and every part of the site names it alike: a misspelt organization would otherwise fail
    only when `pulumi up` resolves the reference."""
    org, _, rest = site.partition("/")
    core = rest.rpartition("/")[2]
    if organization is not None and org != organization:
        raise ConfigError([_site_problem(
            site, f"names organization {org}, but this stack is in organization "
            f"{organization}: a site's parts and its core are stacks of one organization",
            f"set {SITE_KEY} to {organization}/{PROJECT}/{core}")])
    others = sorted((s, str(c.get(SITE_KEY))) for s, c in configs.items()
                    if s != stack and str(c.get(SITE_KEY, "")).rpartition("/")[2] == core
                    and str(c.get(SITE_KEY)) != site)
    if others:
        raise ConfigError([_site_problem(
            site, f"stack {other} names {ref}: the parts of one site name their core alike "
            "(an organization or project mistyped in one would fail only at `pulumi up`)",
            f"write the core's one fully qualified name (<org>/{PROJECT}/{core}; on a DIY "
            f"backend organization/{PROJECT}/{core}) in every part's {SITE_KEY}")
            for other, ref in others])


def _shared_sus(stack: str, mine: Mapping[str, Any], parts: Mapping[str, Any]
                ) -> list[tuple[Any, str]]:
    """(SU, the other part) for each SU this nodes part shares with another nodes part."""
    if mine.get("part") != "nodes":
        return []
    own = set(mine.get("sus") or ())
    return sorted((su, other) for other, p in parts.items()
                  if other != stack and isinstance(p, Mapping) and p.get("part") == "nodes"
                  for su in own & set(p.get("sus") or ()))


def _site_problem(site: str, message: str, fix: str) -> Problem:
    return Problem("", site, message, fix, key=SITE_KEY)
