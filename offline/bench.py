"""Scaling benchmark: offline previews of 8…1024 GPU nodes against the SDK floor.

The floor is a child process that registers the same number of trivial ConfigMaps under the
same mocks and monitor and does nothing else: what the Pulumi SDK alone costs. It runs twice:
as is, and with the program's own garbage-collector settings
(`components/wiring/collector.py`), so a reader can tell what the program saves by tuning
the collector from what it costs per resource.
"Program" is the time the program runs under the mocks (the `program` phase of the preview); the
whole preview adds rendering, policies, the diff and writing build/. Every run is a fresh child
process; its peak RSS is the largest sum of its process tree's proportional resident memory
(PSS, sampled from /proc every 0.5 s: a preview works in several processes at once, some of
them forked copies sharing pages), or the largest single process `os.wait4` reports, if that
is more. Each size runs `--repeat` times and every time is the
fastest of those runs. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import ipaddress
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .proc_tree import TreeSampler

CLUSTER_KEY = "gpu-cluster:cluster"
SU_SIZE = 32  # nodes per scalable unit (one range per SU)
BENCH_STACK = "bench"
ONCE_FROM = 1024  # sizes from here up are previewed once, whatever --repeat says
OFFLINE_ROOT = Path(__file__).resolve().parent.parent  # makes `-m offline` importable


# ---------------------------------------------------------------- config generator


def _bump(ip: str, su_index: int) -> str:
    """Give SU k its own /24: the start address moved by k × 256."""
    return str(ipaddress.ip_address(ip) + su_index * 256)


def sm_slots(cluster: dict[str, Any]) -> int:
    """Slots SU 1 keeps for the subnet-manager hosts: one for all of them (on different
    leaves), the planner's convention (DGX SuperPOD: 31 nodes and the UFM slot)."""
    return 1 if (cluster.get("fabric") or {}).get("subnetManagers") else 0


def scale_gpu_nodes(
    stack_doc: dict[str, Any], slots: int, su_size: int = SU_SIZE, free_slots: int = 0
) -> dict[str, Any]:
    """A copy of a `Pulumi.<stack>.yaml` document filling `slots` GPU node slots.

    SUs 1..ceil(slots / su_size), each a range with its own /24 of management and BMC
    addresses; every other field of the first range is kept. When SU 1 is full, its last slot
    stays empty for the subnet-manager hosts (`sm_slots`), and `free_slots` of the last SU stay
    empty (room to grow). Keys that name individual nodes (`gpuNodes.overrides`,
    `inventoryFile`) are dropped so per-node facts fall back to placeholders (`_bench_project`
    writes an inventory of host keys). Adjust here when the config schema changes.
    """
    doc = copy.deepcopy(stack_doc)
    cluster = doc["config"][CLUSTER_KEY]
    gpu = cluster["gpuNodes"]
    reserve = sm_slots(cluster) if slots >= su_size else 0
    nodes = slots - free_slots - reserve
    counts = [min(su_size - reserve, nodes)]
    while sum(counts) < nodes:
        counts.append(min(su_size, nodes - sum(counts)))
    first = dict(gpu["ranges"][0])
    start = int(first.get("start", 0))
    last = start + (len(counts) - 1) * su_size + counts[-1] - 1  # the highest node number
    digits = max(int(first.get("digits", 2)), len(str(last)))
    per_rack = int(first.get("nodesPerRack", 4))
    ranges = []
    for k, count in enumerate(counts):
        r = dict(first)
        r.update(start=start + k * su_size, count=count, su=k + 1)
        if digits != 2 or "digits" in first:
            r["digits"] = digits
        for key in ("managementIpStart", "bmcAddressStart"):
            if key in first:
                r[key] = _bump(first[key], k)
        if "racks" in first:
            r["racks"] = [f"su{k + 1}-r{j + 1:02d}" for j in range(math.ceil(count / per_rack))]
        if "firstSlot" in first:
            r["firstSlot"] = 0
        ranges.append(r)
    gpu["ranges"] = ranges
    gpu.pop("overrides", None)
    cluster.pop("inventoryFile", None)
    # The fabric pins describe the original site's size; the planner derives them for this one.
    for key in ("railsPerLeaf", "spines"):
        (cluster.get("fabric") or {}).pop(key, None)
    # kubeadm gives every node a /24 of the pod CIDR: a larger site needs a wider one (10.128/9
    # and below stay clear of the management 10.10/16 and service 10.96/12 ranges), counting
    # the free slots too (the site grows into them) and every control plane.
    kubelets = nodes + free_slots + sum(1 for h in cluster.get("hosts", ())
                                        if h["role"] == "control-plane")
    prefix = 24 - (kubelets - 1).bit_length()
    kube = cluster.get("kubernetes", {})
    if "podCidr" in kube and ipaddress.ip_network(kube["podCidr"]).prefixlen > prefix:
        kube["podCidr"] = f"10.128.0.0/{prefix}"
    # nv-ipam gives every GPU node a block of 64 RDMA pod addresses (and one spare block):
    # widen the RDMA range from its own base (192.168/16 grows into 192.168/14).
    net = cluster.get("network", {})
    rdma_prefix = 32 - ((nodes + 1) * 64 - 1).bit_length()
    if "rdmaCidr" in net and ipaddress.ip_network(net["rdmaCidr"]).prefixlen > rdma_prefix:
        net["rdmaCidr"] = str(ipaddress.ip_network(f"{net['rdmaCidr'].split('/')[0]}/"
                                                   f"{rdma_prefix}", strict=False))
    _fitting_switch_facts(cluster)
    return doc


SWITCH_FACTS = ("switchGuids", "switchManagementIps", "switchHostKeys")


def _fitting_switch_facts(cluster: dict[str, Any]) -> None:
    """Keep the switch facts (GUIDs, addresses, host keys) of the switches the scaled fabric
    still has: the others name the original site's switches, which the config refuses. Every
    switch gets a host key (`host_key`)."""
    from components.model.fields import ConfigError
    from components.planning import placement
    from components.wiring.loading import validate_cluster

    fabric = cluster.get("fabric") or {}
    facts = {key: fabric.pop(key) for key in SWITCH_FACTS if key in fabric}
    if not facts:
        return
    try:
        plan = placement.plan(validate_cluster(copy.deepcopy(cluster), OFFLINE_ROOT))
        names = {sw.name for sw in plan.switches}
    except ConfigError:  # left as it was: the scaled config's own error is the caller's
        names = {name for known in facts.values() for name in known}
    for key, known in facts.items():
        fabric[key] = {name: value for name, value in known.items() if name in names}
    # A real site pins every switch's key; the new switches get a stand-in one each.
    if "switchHostKeys" in fabric:
        fabric["switchHostKeys"] = {name: fabric["switchHostKeys"].get(name) or host_key(name)
                                    for name in sorted(names)}


# ---------------------------------------------------------------- child processes


@dataclass
class Sample:
    seconds: float
    max_rss_mib: float
    returncode: int
    output: str


def run_child(cmd: list[str], cwd: Path) -> Sample:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(OFFLINE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    # A preview works in more than one process at once (the program in one, the plan in
    # another, forked copies of it): its peak is their proportional sum, sampled, or wait4's
    # largest single process (KiB).
    sampler = TreeSampler(proc.pid, 0.5, proportional=True)
    sampler.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    sampler.done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = max(usage.ru_maxrss * 1024, sampler.peak_rss)
    return Sample(time.perf_counter() - t0, peak / 2**20, proc.returncode, out)


FLOOR_PROGRAM = """\
import pulumi_kubernetes as k8s
{tune}for i in range({count}):
    k8s.core.v1.ConfigMap(f"cm-{{i:05d}}", data={{"k": "v"}})
"""
# The program's collector settings, applied after the imports as `__main__.py` does.
TUNE = "from components.wiring.collector import tune_collector\ntune_collector()\n"


def synthetic_project(root: Path, count: int, tune: bool = False) -> Path:
    """A project that registers `count` ConfigMaps: the floor program and the 4000-CM check."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "Pulumi.yaml").write_text("name: gpu-cluster\nruntime: python\n")
    (root / f"Pulumi.{BENCH_STACK}.yaml").write_text("config: {}\n")
    (root / "__main__.py").write_text(
        FLOOR_PROGRAM.format(count=count, tune=TUNE if tune else ""))
    return root


def floor_main(count: int, collector_of: str | None = None) -> int:
    """Child: register `count` ConfigMaps under the runner's mocks/monitor, nothing else."""
    from .runtime import run_program
    from .stackconfig import load_stack_config

    if collector_of:
        sys.path.insert(0, str(Path(collector_of).resolve()))
    with tempfile.TemporaryDirectory() as tmp:
        project = synthetic_project(Path(tmp), count, tune=bool(collector_of))
        t0 = time.perf_counter()
        result = run_program(project, load_stack_config(project, BENCH_STACK))
        seconds = time.perf_counter() - t0
        print("floor " + json.dumps({"registered": len(result.registrations), "seconds": seconds}))
    return 0


def _floor(count: int, cwd: Path, collector_of: Path | None = None) -> Sample:
    extra = ["--collector-of", str(collector_of)] if collector_of else []
    return run_child([sys.executable, "-m", "offline", "floor", str(count), *extra], cwd)


def _preview(project: Path, stack: str) -> Sample:
    return run_child([sys.executable, "-m", "offline", "preview", "--stack", stack,
                      "--project-dir", str(project), "--quiet", "--timings"], project)


def _reported(sample: Sample, prefix: str) -> dict[str, Any]:
    """The JSON a child printed after `prefix` (the floor's result, the preview's timings)."""
    for line in sample.output.splitlines():
        if line.startswith(prefix):
            return json.loads(line[len(prefix):])
    raise SystemExit(f"no '{prefix}' line in the child's output:\n{sample.output[-3000:]}")


# ---------------------------------------------------------------- drivers


SKIP = {"build", "rendered", ".git", "__pycache__", ".venv", "venv"}


def _bench_project(src: Path, dst: Path, doc: dict[str, Any]) -> None:
    """The project linked into `dst`, with `doc` as its stack file and, for a generated site,
    its inventory of host keys (`write_inventory`; `doc` then names it)."""
    dst.mkdir(parents=True)
    for entry in src.iterdir():
        if entry.name in SKIP or (entry.name.startswith("Pulumi.") and entry.name != "Pulumi.yaml"):
            continue
        (dst / entry.name).symlink_to(entry.resolve())
    cluster = (doc.get("config") or {}).get(CLUSTER_KEY)
    if isinstance(cluster, dict) and "inventoryFile" not in cluster:
        cluster["inventoryFile"] = BENCH_INVENTORY
        write_inventory(dst, doc)
    (dst / f"Pulumi.{BENCH_STACK}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


BENCH_INVENTORY = "inventory-bench.csv"


def host_key(host: str) -> str:
    """A well-formed ed25519 public host key of the host's own. A stand-in for the key
    `ssh-keyscan` reads: a real site pins every host's, and the pack refuses a command that
    pins none."""
    blob = b"".join(len(x).to_bytes(4, "big") + x
                    for x in (b"ssh-ed25519", hashlib.sha256(host.encode()).digest()))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"


def write_inventory(dst: Path, doc: dict[str, Any]) -> None:
    """`BENCH_INVENTORY` under `dst`: the SSH host key of every GPU node `doc` defines."""
    rows = ["hostname,sshHostKey", *(f"{h},{host_key(h)}" for h in _hosts(doc))]
    (dst / BENCH_INVENTORY).write_text("\n".join(rows) + "\n")


def _plan(project: Path) -> dict[str, Any]:
    """The plan's resource names and summary, read a line at a time (`render.plan_json`
    writes one resource per line): a 2,048-node plan read whole would raise this process's
    peak RSS to about a GiB, and Linux counts a parent's peak in every child it starts after
    (the split site's parts would all report it)."""
    resources: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    with (project / "build" / BENCH_STACK / "plan.json").open() as f:
        for line in f:
            if line.startswith("    {"):
                resources.append({"name": json.loads(line.rstrip().removesuffix(","))["name"]})
            elif line.startswith('  "summary": '):  # the rest, less the plan's closing brace
                summary = json.loads(line.removeprefix('  "summary": ') + f.read()[:-2])
    return {"resources": resources, "summary": summary}


# Why each resource a GPU node brings exists (by the name it takes after the hostname), and
# why it is a resource of its own: each runs on another host or connection than its
# neighbours, or its own replace or re-run would do something the others must not.
PER_NODE = {
    "": "BareMetalNode: the component that groups the host's resources (no engine step; "
        "every other one's parent: without it their URNs, and so every node's, change)",
    "-prepare": "host preparation (drivers, DOCA-OFED, kernel arguments, LNet, scratch RAID), "
                "on the node",
    "-ssh-keys": "the authorized keys the stack manages, so a key rotation re-runs only this",
    "-bmc": "Redfish power and boot settings, through the BMC (another connection, not the "
            "host)",
    "-join-token": "a short-lived token for this join alone, made on the control plane: adding "
                   "a node touches no other",
    "-kubeadm-join": "the join, on the node; its delete resets the host, only after the drain",
    "-member": "membership, on the control plane; its delete drains the node first",
    "-placement": "the fabric placement labels (SU, rack, rails' leaves) kubelets cannot set; "
                  "apart from the membership, whose replace would drain the node, so a "
                  "re-cabled node is relabelled in place",
    "-reboot-check": "planned reboot, on the node: does the boot still lack what preparation "
                     "staged (the drain reads its verdict)",
    "-reboot-drain": "planned reboot: drain on the control plane (the reboot lock)",
    "-reboot": "planned reboot: the reboot, on the node, only once drained",
    "-reboot-wait": "planned reboot: a new SSH session to the new boot, which it checks",
    "-reboot-uncordon": "planned reboot: uncordon on the control plane, release the lock",
    "-upgrade-drain": "Kubernetes upgrade: drain on the control plane, gangs waited for",
    "-kubernetes-upgrade": "Kubernetes upgrade: kubeadm upgrade node, kubelet, on the node",
    "-upgrade-uncordon": "Kubernetes upgrade: uncordon on the control plane",
}


def per_node(plan: Mapping[str, Any], hosts: Iterable[str]) -> dict[str, float]:
    """Resources per GPU node by what they are for (PER_NODE's suffixes; "other" for any
    resource named after a GPU node that the table does not know)."""
    hosts = set(hosts)
    counts = dict.fromkeys([*PER_NODE, "other"], 0)
    for r in plan["resources"]:
        name = str(r["name"])
        host = next((h for h in (name, name.rsplit("-", 1)[0], name.rsplit("-", 2)[0],
                                 name.rsplit("-", 3)[0]) if h in hosts), None)
        if host is not None:
            suffix = name[len(host):]
            counts[suffix if suffix in PER_NODE else "other"] += 1
    return {k: v / max(len(hosts), 1) for k, v in counts.items() if v}


def _hosts(doc: dict[str, Any]) -> list[str]:
    return [f"{r['prefix']}{int(r.get('start', 0)) + i:0{int(r.get('digits', 2))}d}"
            for r in doc["config"][CLUSTER_KEY]["gpuNodes"]["ranges"]
            for i in range(int(r["count"]))]


def _gpu_nodes(doc: dict[str, Any]) -> int:
    return sum(int(r["count"]) for r in doc["config"][CLUSTER_KEY]["gpuNodes"]["ranges"])


def bench_sizes(project: Path, stack: str, sizes: list[int], repeat: int = 1,
                generate: Callable[[dict[str, Any], int], dict[str, Any]] = scale_gpu_nodes
                ) -> list[dict[str, Any]]:
    base = yaml.safe_load((project / f"Pulumi.{stack}.yaml").read_text())
    rows = []
    with tempfile.TemporaryDirectory(prefix="offline-bench-") as tmp:
        for n in sizes:
            dst = Path(tmp) / f"n{n}"
            doc = generate(base, n)
            # One node upgraded at a time per SU: the longest chains a site can have.
            doc["config"][CLUSTER_KEY].setdefault("kubernetes", {})["upgradeBatch"] = 1
            _bench_project(project, dst, doc)
            runs = []
            count = 0
            breakdown: dict[str, float] = {}
            # Minutes each from 1,024 nodes up, where a run's noise is small beside it.
            for _ in range(repeat if n < ONCE_FROM else 1):  # interleaved: a slow spell hits all
                run = _preview(dst, BENCH_STACK)
                if run.returncode not in (0, 3):  # 3 = mandatory violations: a full run too
                    raise SystemExit(f"{n} nodes: preview failed (exit {run.returncode}):\n"
                                     f"{run.output[-3000:]}")
                if not count:  # the same plan every run
                    plan = _plan(dst)
                    count, breakdown = int(plan["summary"]["total"]), per_node(plan, _hosts(doc))
                floor = _floor(count, Path(tmp))
                tuned = _floor(count, Path(tmp), collector_of=project)
                runs.append(_row(n, count, run, floor, tuned))
            row = best(runs) | {"gpu_nodes": _gpu_nodes(doc), "per_node": breakdown}
            rows.append(row)
            print(f"  {n} nodes: {count} resources, program {row['program']:.1f}s "
                  f"(floor {row['floor']:.1f}s), preview {row['seconds']:.1f}s",
                  file=sys.stderr)
    return rows


TIMES = ("seconds", "program", "floor", "floor_process", "floor_tuned")


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each time as the fastest of repeated runs (noise on a shared machine only adds time);
    peak RSS as the largest."""
    out = dict(runs[0])
    for key in TIMES:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = min(values) if values else None
    out["rss"] = max(r["rss"] for r in runs)
    return out


def bench_synthetic(count: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="offline-bench-") as tmp:
        project = synthetic_project(Path(tmp) / "synthetic", count)
        run = _preview(project, BENCH_STACK)
        if run.returncode != 0:
            raise SystemExit(f"synthetic preview failed:\n{run.output[-3000:]}")
        floor = _floor(count, Path(tmp))
        return [_row("-", count, run, floor, None)]


def _row(nodes: int | str, count: int, run: Sample, floor: Sample, tuned: Sample | None
         ) -> dict[str, Any]:
    return {"nodes": nodes, "resources": count, "seconds": run.seconds, "rss": run.max_rss_mib,
            "program": _reported(run, "timings ")["program"],
            "floor": _reported(floor, "floor ")["seconds"], "floor_process": floor.seconds,
            "floor_tuned": _reported(tuned, "floor ")["seconds"] if tuned else None,
            "floor_rss": floor.max_rss_mib}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| GPU nodes (slots) | resources | resources/node | program s | floor s | program/floor "
        "| floor, same GC s | program/same-GC floor | preview s | floor process s "
        "| preview/floor process | ms/resource | peak RSS MiB | floor RSS MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        real = r.get("gpu_nodes", r["nodes"])
        per_node = f"{r['resources'] / real:.1f}" if isinstance(real, int) else "-"
        label = f"{real} ({r['nodes']})" if real != r["nodes"] else str(real)
        tuned = r["floor_tuned"]
        lines.append(
            f"| {label} | {r['resources']} | {per_node} | {r['program']:.2f} "
            f"| {r['floor']:.2f} | {r['program'] / r['floor']:.2f} "
            + (f"| {tuned:.2f} | {r['program'] / tuned:.2f} " if tuned else "| - | - ")
            + f"| {r['seconds']:.2f} | {r['floor_process']:.2f} "
            f"| {r['seconds'] / r['floor_process']:.2f} "
            f"| {1000 * r['seconds'] / r['resources']:.2f} | {r['rss']:.0f} "
            f"| {r['floor_rss']:.0f} |"
        )
    by_n = {r["nodes"]: r for r in rows}
    for small, big in ((128, 1024), (256, 2048)):
        if small in by_n and big in by_n:
            a, b = by_n[small], by_n[big]
            t, n = b["seconds"] / a["seconds"], b["resources"] / a["resources"]
            lines += ["", f"time({big})/time({small}) = {t:.2f} (program "
                      f"{b['program'] / a['program']:.2f}) for {big // small}x the slots and "
                      f"{n:.2f}x the resources (scaling exponent "
                      f"{math.log(t) / math.log(n):.2f}; 1.00 = linear)"]
    largest = max((r for r in rows if r.get("per_node")), key=lambda r: r["resources"],
                  default=None)
    if largest is not None:
        lines += ["", f"Resources per GPU node at {largest['gpu_nodes']} nodes "
                      f"({sum(largest['per_node'].values()):.1f}):", "",
                  "| resource | per node | why |", "|---|---:|---|"]
        lines += [f"| `<host>{k}` | {v:.2f} | {PER_NODE.get(k, 'not in the table')} |"
                  for k, v in largest["per_node"].items()]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.synthetic:
        rows = bench_synthetic(args.synthetic)
    else:
        sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
        rows = bench_sizes(Path(args.project_dir).resolve(), args.stack, sizes, args.repeat)
    print(table(rows))
    return 0
