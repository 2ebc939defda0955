"""Which GPU nodes one run of the NCCL acceptance test covers, and its MPIJob.

Standard library only and no project imports: the gate ships this file to the control plane
beside the checker (nccl.py) and runs it there with a plain `python3`; the twin imports it to
play the gate the same way (docs/acceptance.md).

A GPU node joins carrying UNTESTED (its kubelet registers the label); training and serving
never land on such a node, and the gate removes the label once the node passed. A run covers:

- the untested nodes and, for each SU among them, one node of that SU that passed (a free one
  when there is one): it shares every rail's leaf with them, so each rail of a new node is
  tested against a known-good port. A cluster's first run: every node (all are untested);
- when no node is untested but the test changed since its record (or there is none yet): two
  nodes of one SU that passed (free ones when there are), the new test across the fabric at a
  size a busy cluster can free. Every node again is a maintenance window: label them untested
  and re-run the gate (docs/acceptance.md);
- nothing when every node has passed this test (a node removed, say).

A cordoned node is never in a run: its worker could not be scheduled there. An untested one
stays untested (closed to training and serving) until it is uncordoned and the gate re-runs;
the gate names it.

A run that passes clears its nodes' UNTESTED and records the test's definition.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Must equal components/planning/labels.py UNTESTED_LABEL (a test holds them equal).
UNTESTED = "gpucluster.io/untested"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
RUN_SUFFIX = "-run"
# A definition's record: the gate keeps it in a ConfigMap named <test>-passed.
RECORD_SUFFIX = "-passed"


@dataclass(frozen=True)
class Selection:
    hosts: tuple[str, ...]  # where the run's workers go, by name
    untested: tuple[str, ...]  # marked tested when the run passes
    why: str
    missing: tuple[str, ...] = ()  # planned GPU nodes the API server has no Node for
    cordoned: tuple[str, ...] = ()  # untested nodes left for a run after their uncordon


def _labels(node: Mapping) -> Mapping[str, str]:
    return node.get("metadata", {}).get("labels") or {}


def gpu_holders(pods: Sequence[Mapping]) -> set[str]:
    """Nodes a pod that asks for GPUs is bound to and not finished on."""
    out = set()
    for pod in pods:
        spec, phase = pod.get("spec", {}), pod.get("status", {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            continue
        if any(GPU in (c.get("resources", {}).get("requests") or {})
               or GPU in (c.get("resources", {}).get("limits") or {})
               for c in spec.get("containers", [])):
            out.add(spec["nodeName"])
    return out


def _cordoned(node: Mapping) -> bool:
    return bool(node.get("spec", {}).get("unschedulable"))


def _best(hosts: Sequence[str], busy: set[str]) -> list[str]:
    """Free nodes first, then by name."""
    return sorted(hosts, key=lambda h: (h in busy, h))


def select(sus: Mapping[str, str], nodes: Sequence[Mapping], pods: Sequence[Mapping],
           changed: bool) -> Selection:
    """The run's nodes: `sus` maps each GPU node the stack plans to its SU; `nodes` and `pods`
    are the API's; `changed` when the test is not the one its record names."""
    registered = {n["metadata"]["name"]: n for n in nodes}
    missing = tuple(h for h in sorted(sus) if h not in registered)
    if missing:  # the gate runs after every join: a node gone is no node to vouch for
        return Selection((), (), f"no Node for {' '.join(missing)}: it cannot be tested",
                         missing)
    cordoned = tuple(h for h in sorted(sus) if _cordoned(registered[h]))
    present = [h for h in sorted(sus) if h not in cordoned]
    untested = tuple(h for h in present if UNTESTED in _labels(registered[h]))
    waiting = tuple(h for h in cordoned if UNTESTED in _labels(registered[h]))
    later = (f"; {' '.join(waiting)} untested but cordoned: tested once uncordoned and the "
             "gate re-run" if waiting else "")
    tested = [h for h in present if h not in untested]
    busy = gpu_holders(pods)
    if untested:
        chosen = set(untested)
        for su in sorted({sus[h] for h in untested}):
            pool = [h for h in tested if sus[h] == su] or tested
            if pool:
                chosen.add(_best(pool, busy)[0])
        peers = sorted(chosen - set(untested))
        return Selection(tuple(sorted(chosen)), untested, f"the untested node(s) "
                         f"{' '.join(untested)}" + (f" with {' '.join(peers)}, which passed "
                                                    "before" if peers else "") + later,
                         cordoned=waiting)
    if not changed:
        return Selection((), (), ("nothing to run now" + later) if waiting
                         else "every GPU node has passed this test: nothing to run",
                         cordoned=waiting)
    pairs = [_best([h for h in tested if sus[h] == su], busy)[:2]
             for su in sorted({sus[h] for h in tested})]
    pair = min((p for p in pairs if len(p) == 2), default=_best(tested, busy)[:2],
               key=lambda p: sum(h in busy for h in p))
    return Selection(tuple(sorted(pair)), (), f"the test changed: {' and '.join(sorted(pair))}"
                     ", which passed before (every node again is a maintenance window)" + later,
                     cordoned=waiting)


def instance(template: Mapping, hosts: Sequence[str]) -> dict:
    """The stack's (suspended) MPIJob as a run on `hosts`: one worker per node, pinned there."""
    job = json.loads(json.dumps(template))
    meta = job["metadata"]
    notes = {k: v for k, v in (meta.get("annotations") or {}).items()
             if not k.startswith(("kubectl.kubernetes.io/", "pulumi.com/"))}
    job["metadata"] = {"name": meta["name"] + RUN_SUFFIX, "namespace": meta["namespace"],
                       "labels": meta.get("labels") or {}, "annotations": notes}
    job.pop("status", None)
    policy = job["spec"]["runPolicy"]
    policy.pop("suspend", None)
    policy["schedulingPolicy"]["minAvailable"] = len(hosts) + 1  # and the launcher
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["replicas"] = len(hosts)
    pod = worker["template"]["spec"]
    pod["affinity"] = {**(pod.get("affinity") or {}), "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME, "operator": "In",
                                   "values": list(hosts)}]}]}}}
    return job


def record(template: Mapping, definition: str) -> dict:
    """The ConfigMap that names the test definition the last passed run ran."""
    meta = template["metadata"]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": meta["name"] + RECORD_SUFFIX, "namespace": meta["namespace"],
                         "labels": meta.get("labels") or {}},
            "data": {"definition": definition}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="choose the acceptance test's nodes and write "
                                 "its MPIJob; prints shell assignments of the choice")
    ap.add_argument("--template", required=True, help="the stack's MPIJob (JSON)")
    ap.add_argument("--nodes", required=True, help="kubectl get nodes -o json")
    ap.add_argument("--pods", required=True, help="kubectl get pods -A -o json")
    ap.add_argument("--gpu-nodes", required=True, help="host=su,... the stack plans")
    ap.add_argument("--definition", required=True, help="this test's definition digest")
    ap.add_argument("--passed", default="", help="the digest its last passed run recorded")
    ap.add_argument("--run", required=True, help="where to write the run's MPIJob")
    ap.add_argument("--record", required=True, help="where to write the run's record")
    a = ap.parse_args(argv)
    read = lambda path: json.loads(open(path).read())  # noqa: E731
    sus = dict(pair.split("=", 1) for pair in a.gpu_nodes.split(",") if pair)
    template = read(a.template)
    chosen = select(sus, read(a.nodes)["items"], read(a.pods)["items"],
                    changed=a.passed != a.definition)
    if chosen.hosts:
        with open(a.run, "w") as out:
            json.dump(instance(template, chosen.hosts), out)
    with open(a.record, "w") as out:
        json.dump(record(template, a.definition), out)
    for key, value in (("hosts", " ".join(chosen.hosts)),
                       ("untested", " ".join(chosen.untested)), ("why", chosen.why),
                       ("missing", " ".join(chosen.missing))):
        print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
