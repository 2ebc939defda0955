"""node-problem-detector as the stack deploys it (components/planning/health_detector.py;
docs/health.md, "How it runs"): its objects pass the strict schemas, its pods land on every GPU
node whatever taints the stack gives one and on nothing else, its ConfigMaps stay under the API
server's limit at the largest site the repository plans, and (slow) the DaemonSet's own command,
environment and volumes, laid out as the kubelet lays them out from the rendered ConfigMaps, run
the real node-problem-detector over a fixture DGX H100 with faults injected: the conditions of
docs/health.md appear, through the host-path, ConfigMap and projected volumes, the downward
API's node name and HOST_EXEC."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.node_health import SHARED, Detector, free_port, npd_binary
from support.project import REPO, prod_raw
from support.sandbox import prod_cluster

from components.model.fields import CLUSTER_KEY
from components.planning import health, health_detector, kubeadm
from components.planning.labels import CONTROL_PLANE_LABEL, CONTROL_PLANE_TAINT, GPU_TAINT
from components.planning.quarantine import TAINT as QUARANTINE_TAINT
from components.planning.scheduling import homes, tolerates
from components.wiring.loading import validate_cluster
from offline.bench import scale_gpu_nodes
from twin.node_health import FixtureNode

NODE = "gpu-node-03"
VALIDATOR = SHARED / "tools" / "validate_manifests.py"


@pytest.fixture(scope="module")
def cluster() -> Any:
    return prod_cluster()


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def pod_spec(objects: list[dict]) -> dict:
    (ds,) = by_kind(objects, "DaemonSet")
    return dict(ds["spec"]["template"]["spec"])


# ---------------------------------------------------------------- the objects


@pytest.mark.skipif(not VALIDATOR.is_file(), reason=f"{VALIDATOR} is absent (../shared)")
def test_every_object_passes_the_strict_schemas(cluster: Any, tmp_path: Path) -> None:
    objects = health_detector.objects(cluster)
    path = tmp_path / "node-problem-detector.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    out = subprocess.run([sys.executable, str(VALIDATOR), "--k8s", "1.35", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    assert out.stdout.strip().splitlines()[-1] == f"{len(objects)} objects checked, 0 invalid"


def test_its_identity_is_the_role_upstream_binds(cluster: Any) -> None:
    """The service account the pods run as, bound to the API server's own role (the one
    tests/test_node_health_cluster.py proves enough for conditions and events)."""
    objects = health_detector.objects(cluster)
    (account,) = by_kind(objects, "ServiceAccount")
    (binding,) = by_kind(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "system:node-problem-detector"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    spec = pod_spec(objects)
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert "--enable-k8s-exporter=true" in spec["containers"][0]["command"]


def test_a_new_threshold_restarts_the_pods_and_nothing_else_does(cluster: Any) -> None:
    """The detector reads its monitors once: their digest is in the pod template."""
    def digest(c: Any) -> str:
        (ds,) = by_kind(health_detector.objects(c), "DaemonSet")
        return str(ds["spec"]["template"]["metadata"]["annotations"][
            health_detector.CONFIG_DIGEST])

    assert health_detector.objects(cluster) == health_detector.objects(prod_cluster())
    raw = prod_raw()
    raw["health"] = {"checkIntervalSeconds": 60}
    assert digest(validate_cluster(raw, REPO)) != digest(cluster)


# ---------------------------------------------------------------- where it runs


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]


def test_it_lands_on_every_gpu_node_whatever_its_taints_and_nowhere_else(cluster: Any) -> None:
    """The taints are the stack's own: the GPU taint kubeadm's join registers, the one the
    quarantine puts on an unfit node (a node must keep reporting to be released), a drain's
    cordon; the labels kubeadm's node labels. Control planes and other hosts get none."""
    spec = pod_spec(health_detector.objects(cluster))
    quarantined = {"key": QUARANTINE_TAINT, "value": "InfinibandRailDown", "effect": "NoSchedule"}
    cordoned = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    gpu = [Node(n.hostname, kubeadm.node_labels(cluster, n),
                (*kubeadm.join_configuration(cluster, n)["nodeRegistration"]["taints"],
                 *((quarantined, cordoned) if i % 2 else ())))
           for i, n in enumerate(cluster.nodes)]
    assert any(GPU_TAINT in n.taints for n in gpu) and any(quarantined in n.taints for n in gpu)
    others = [Node(h.hostname, {CONTROL_PLANE_LABEL: ""} if h.role == "control-plane" else {},
                   (CONTROL_PLANE_TAINT,) if h.role == "control-plane" else ())
              for h in cluster.hosts]
    assert homes(spec, [*gpu, *others]) == [n.hostname for n in cluster.nodes]
    assert all(tolerates(spec["tolerations"], t) for t in (GPU_TAINT, quarantined, cordoned))


# ---------------------------------------------------------------- at the largest site


def test_every_config_map_fits_at_the_largest_site() -> None:
    """2,048 slots (offline/bench.py's largest, as tests/test_offline_bench.py plans it): every
    ConfigMap under the API server's 1 MiB of data, the rails one per SU, named by the SU."""
    doc = scale_gpu_nodes(yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), 2048,
                          free_slots=0)
    big = validate_cluster(doc["config"][CLUSTER_KEY], REPO)
    assert len(big.nodes) > 2000
    maps = by_kind(health_detector.objects(big), "ConfigMap")
    for m in maps:  # the API server counts each key and value (ValidateConfigMap)
        size = sum(len(k) + len(v.encode()) for k, v in m["data"].items())
        assert size < health_detector.CONFIG_MAP_LIMIT, m["metadata"]["name"]
    rails = {m["metadata"]["name"]: m["data"] for m in maps if "-rails-" in m["metadata"]["name"]}
    assert {health_detector.rails_name(n.su) for n in big.nodes} == set(rails)
    assert all(n.hostname in rails[health_detector.rails_name(n.su)] for n in big.nodes)
    sources = {v["name"]: v for v in pod_spec(health_detector.objects(big))["volumes"]}
    assert [s["configMap"]["name"] for s in sources["rails"]["projected"]["sources"]] == \
        sorted(rails, key=lambda name: int(name.rsplit("su", 1)[1]))


# ---------------------------------------------------------------- run as the kubelet would


def materialise(volume: Mapping[str, Any], config_maps: Mapping[str, dict],
                hosts: Mapping[str, Path], root: Path) -> Path:
    """One pod volume as the kubelet lays it out: a ConfigMap's keys (or its items' paths) as
    files with their modes, a projected volume's sources side by side, a host path from
    `hosts` (a host path the test has no stand-in for fails here)."""
    if "hostPath" in volume:
        return hosts[volume["hostPath"]["path"]]
    if "configMap" in volume:
        sources, mode = [volume["configMap"]], volume["configMap"].get("defaultMode", 0o644)
    else:
        projected = volume["projected"]
        sources = [s["configMap"] for s in projected["sources"]]
        mode = projected.get("defaultMode", 0o644)
    out = root / volume["name"]
    out.mkdir(parents=True)
    for source in sources:
        data = config_maps[source["name"]]["data"]
        for item in source.get("items") or [{"key": k, "path": k} for k in data]:
            path = out / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
            path.chmod(item.get("mode", mode))
    return out


def resolve_env(env: list[Mapping[str, Any]], node: str) -> dict[str, str]:
    """The container's environment, the downward API's fields filled as the kubelet does."""
    fields = {"spec.nodeName": node}
    return {e["name"]: e["value"] if "value" in e else fields[
        e["valueFrom"]["fieldRef"]["fieldPath"]] for e in env}


def sandbox(binds: list[tuple[Path, str, bool]], binary: Path) -> list[str]:
    """bubblewrap as the pod: this machine's /usr for the image's tools (bash, awk, nsenter),
    the detector's binary where the image has it, each volume at its mount path; the host's
    network (hostNetwork) and a PID namespace whose PID 1 HOST_EXEC enters."""
    args = ["bwrap", "--die-with-parent", "--unshare-all", "--share-net", "--unshare-user",
            "--uid", "0", "--gid", "0", "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--ro-bind", "/etc/alternatives", "/etc/alternatives",  # awk, as Debian links it
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--ro-bind", str(binary), health_detector.BINARY]
    for source, target, read_only in binds:
        args += ["--ro-bind" if read_only else "--bind", str(source), target]
    return [*args, "--"]


XID_79 = ("NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
          "off the bus.")


def kmsg_record(message: str) -> str:
    """One /dev/kmsg record (PRIORITY,SEQUENCE,MICROSECONDS_SINCE_BOOT,-;MESSAGE), stamped now:
    a regular file standing in for the device gives it to the detector in one read."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return f"2,1,{int(uptime * 1e6)},-;{message}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (`make "
                    "deps` installs it)")
def test_the_daemonsets_pod_reports_the_faults_of_its_node(cluster: Any, tmp_path: Path) -> None:
    """Nothing of the pod is rewritten: a wrong mount path, key, mode, variable or argument
    leaves a fault unreported (the rails file unread, a check not executable, the tools out
    of reach, the kernel log unopened)."""
    binary = npd_binary()
    assert health_detector.IMAGE.endswith(":" + subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True).stdout.strip())
    objects = health_detector.objects(cluster)
    config_maps = {m["metadata"]["name"]: m for m in by_kind(objects, "ConfigMap")}
    spec = pod_spec(objects)
    (ctr,) = spec["containers"]
    assert spec["hostPID"] and spec["hostNetwork"] and ctr["securityContext"]["privileged"]

    # The node: rail 3 down, an NVLink of GPU 2 down, the scratch array broken, Xid 79 logged.
    su = next(n.su for n in cluster.nodes if n.hostname == NODE)
    rails = config_maps[health_detector.rails_name(su)]["data"][NODE]
    fixture = FixtureNode(tmp_path / "node", [r.split("\t")[1] for r in rails.splitlines()])
    fixture.rail_down("mlx5_5")
    fixture.nvlinks_inactive(2, {7})
    fixture.scratch_broken()
    (tmp_path / "kmsg").write_text(kmsg_record(XID_79))
    state = tmp_path / "state"
    state.mkdir()
    hosts = {"/": fixture.root, health_detector.KMSG: tmp_path / "kmsg",
             health_detector.STATE: state}
    volumes = {v["name"]: materialise(v, config_maps, hosts, tmp_path / "volumes")
               for v in spec["volumes"]}
    binds = [(tmp_path, str(tmp_path), False)]  # the stand-in tools' own files
    binds += [(volumes[m["name"]], m["mountPath"], bool(m.get("readOnly")))
              for m in ctr["volumeMounts"]]

    # Its own command, standalone: the exporter off, metrics on a loopback port to read.
    port = free_port()
    argv = [*ctr["command"], *ctr.get("args", []), "--enable-k8s-exporter=false",
            "--prometheus-address=127.0.0.1", f"--prometheus-port={port}"]
    env = {**resolve_env(ctr["env"], NODE), "LC_ALL": "C",
           "PATH": f"{fixture.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    # The container's own mount namespace, where the host's tools are not: only HOST_EXEC
    # (PID 1's, the sandbox's "host") reaches the stand-ins.
    container = ["unshare", "--mount", "--", "bash", "-c",
                 'mount -t tmpfs -o ro tools "$0" && exec "$@"', str(fixture.bin)]
    log = tmp_path / "npd.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["timeout", "-s", "KILL", "120", *sandbox(binds, binary),
                                 *container, *argv],
                                env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        d = Detector(proc, port, log)
        want = {("problem_gauge", "RailPortDown", "InfinibandRailDown"),
                ("problem_gauge", "NVLinkInactive", "NVLinkDown"),
                ("problem_gauge", "MDArrayDegraded", "RAIDDegraded"),
                ("problem_gauge", "GPUFellOffBus", "GPUFallenOffBus")}

        def raised(seen: Mapping[tuple[str, ...], float]) -> set[tuple[str, ...]]:
            return {k for k, v in seen.items() if v > 0 and k[0] == "problem_gauge"}

        d.wait_for(lambda seen: want <= raised(seen), timeout=60)
        time.sleep(2)  # every check has run once (the DCGM and fabric ones stay healthy)
        assert raised(d.problems()) == want, d.log_text()[-4000:]
        text = d.log_text()
        assert ("rail 3 mlx5_5: port DOWN, Disabled (leaf-su1-r2-3 port 20, cable "
                "leaf-su1-r2-3:20, node port OSFP4P1)") in text
        assert "no such port" not in text and "no planned rails" not in text
        assert "GPU 2: 17 of 18 NVLinks active (inactive: 7)" in text
        # The error counters' baseline, kept in the host directory between runs.
        assert {p.name for p in state.iterdir()} == {
            r.split("\t")[1] for r in rails.splitlines()}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_pod_mounts_what_the_monitors_name(cluster: Any) -> None:
    """The paths inside the monitors (health.Layout, the kernel log) are the container's."""
    objects = health_detector.objects(cluster)
    (ctr,) = pod_spec(objects)["containers"]
    mounts = {m["mountPath"] for m in ctr["volumeMounts"]}
    assert {health_detector.LAYOUT.plugins, health_detector.LAYOUT.rails,
            health_detector.MONITORS, health.kernel_monitor()["logPath"]} <= mounts
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["HEALTH_ROOT"] in mounts and env["HEALTH_STATE"] in mounts
