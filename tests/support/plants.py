"""Planted security regressions: each function makes one change to a scratch copy of the
repository, as a platform engineer would make it in a PR, that weakens the cluster's security.

A stack-file change goes through `edit_stack` (a YAML load and dump of Pulumi.prod.yaml); a code
change is one exact string replacement in a file under components/, which fails loudly if the
text it replaces is gone (the code moved on: the plant needs updating, not skipping).
`PLANTS` names them; a test applies one to a copy of the repository (`copy_repo` with prod's
committed rendering beside it) and previews it with `run_offline(project, "preview")`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.stack_edits import edit_stack


def _replace(project: Path, relpath: str, old: str, new: str) -> None:
    """Replace the one occurrence of `old` in the copy's `relpath` with `new`."""
    path = project / relpath
    text = path.read_text()
    count = text.count(old)
    assert count == 1, f"{relpath}: {old!r} occurs {count} times, want exactly once"
    path.write_text(text.replace(old, new))


# --- the stack file --------------------------------------------------------------------------


def old_vllm_from_mirror(project: Path) -> None:
    """The inference image from another registry, a vLLM release below the floor
    (components/model/compat.py VLLM_FLOOR)."""
    def change(cluster: dict[str, Any]) -> None:
        cluster["workloads"]["inference"][0]["image"] = (
            "registry.example.com/mirror/vllm-openai:v0.6.3")
    edit_stack(project, change)


def host_firewall_off(project: Path) -> None:
    """network.hostFirewall.enabled: false (every host removes the nftables allowlist)."""
    def change(cluster: dict[str, Any]) -> None:
        cluster["network"].setdefault("hostFirewall", {})["enabled"] = False
    edit_stack(project, change)


def admin_cidrs_anywhere(project: Path) -> None:
    """network.hostFirewall.adminCidrs: [0.0.0.0/0] (SSH and the API server from anywhere)."""
    def change(cluster: dict[str, Any]) -> None:
        cluster["network"].setdefault("hostFirewall", {})["adminCidrs"] = ["0.0.0.0/0"]
    edit_stack(project, change)


def training_in_kube_system(project: Path) -> None:
    """The training job and the NCCL acceptance test in kube-system."""
    def change(cluster: dict[str, Any]) -> None:
        cluster["workloads"]["training"][0]["namespace"] = "kube-system"
        cluster["workloads"]["ncclTest"]["namespace"] = "kube-system"
    edit_stack(project, change)


# --- the API server, admission and RBAC --------------------------------------------------------


def approver_any_kubernetes_signer(project: Path) -> None:
    """The kubelet-serving approver may approve CSRs of every kubernetes.io/* signer."""
    _replace(project, "components/planning/kubelet_serving.py",
             '"resourceNames": [SIGNER], "verbs": ["approve"]}',
             '"resourceNames": ["kubernetes.io/*"], "verbs": ["approve"]}')


def rdma_policy_warn_only(project: Path) -> None:
    """The rdma-pods-baseline ValidatingAdmissionPolicyBinding warns and audits, never denies."""
    _replace(project, "components/planning/pod_security.py",
             '"validationActions": ["Deny"]', '"validationActions": ["Warn", "Audit"]')


def training_pod_security_exempt(project: Path) -> None:
    """The training namespace exempted from Pod Security admission by name."""
    _replace(project, "components/planning/kubeadm.py",
             '"namespaces": privileged_namespaces(cluster)}',
             '"namespaces": [*privileged_namespaces(cluster), "training"]}')


def node_restriction_off(project: Path) -> None:
    """The API server's NodeRestriction admission plugin disabled."""
    old = 'extra_args = [{"name": "profiling", "value": "false"},\n'
    _replace(project, "components/planning/kubeadm.py", old,
             old + '                  {"name": "disable-admission-plugins",'
             ' "value": "NodeRestriction"},\n')


def approver_accepts_any_ip(project: Path) -> None:
    """The kubelet-serving approver accepts a CSR naming any IP address."""
    _replace(project, "components/planning/kubelet_serving_approver.py",
             "if name.value not in allowed:", "if False:")


def viewers_cluster_admin(project: Path) -> None:
    """The viewers' group bound to cluster-admin instead of the read-only `view`."""
    _replace(project, "components/planning/platform.py",
             '("gpu-cluster:viewers", "view", access.viewers)',
             '("gpu-cluster:viewers", "cluster-admin", access.viewers)')


# --- the inference service -------------------------------------------------------------------


def inference_policy_any_namespace(project: Path) -> None:
    """vLLM's client NetworkPolicy admits pods of every namespace."""
    _replace(project, "components/planning/inference.py",
             "clients = [_from_namespace(cluster.platform.ingress_nginx.namespace),\n"
             "               _from_namespace(cluster.platform.prometheus.namespace)]",
             'clients = [{"namespaceSelector": {}}]')


def inference_load_balancer(project: Path) -> None:
    """vLLM's Service a LoadBalancer: the server (and /metrics, /docs) outside the Ingress."""
    _replace(project, "components/planning/inference.py",
             '"spec": {"type": "ClusterIP", "selector": labels,',
             '"spec": {"type": "LoadBalancer", "selector": labels,')


def api_key_on_argv(project: Path) -> None:
    """The API key Secret created with the key on kubectl's command line, not stdin."""
    _replace(project, "components/planning/scripts/inference/api-key.sh",
             "openssl rand -hex 32 \\\n"
             '  | kubectl -n "$NS" create secret generic "$SECRET"'
             ' --from-file="$FIELD=/dev/stdin" \\\n',
             'KEY="$(openssl rand -hex 32)"\n'
             'kubectl -n "$NS" create secret generic "$SECRET"'
             ' --from-literal="$FIELD=$KEY" \\\n')


def vllm_trust_remote_code(project: Path) -> None:
    """vLLM runs the model repository's own Python (`--trust-remote-code`)."""
    _replace(project, "components/planning/inference.py",
             '"--dtype=bfloat16",\n',
             '"--dtype=bfloat16",\n            "--trust-remote-code",\n')


def vllm_as_root(project: Path) -> None:
    """vLLM's container runs as root (runAsUser 0, runAsNonRoot false)."""
    _replace(project, "components/planning/inference.py",
             '"runAsNonRoot": True, "runAsUser": VLLM_UID, "runAsGroup": VLLM_UID,\n'
             '            "capabilities"',
             '"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0,\n'
             '            "capabilities"')


# --- hosts and fabric --------------------------------------------------------------------------


def sshd_root_login(project: Path) -> None:
    """sshd's drop-in lets root log in with a key."""
    _replace(project, "components/planning/host_scripts.py",
             '("PermitRootLogin", "no")', '("PermitRootLogin", "prohibit-password")')


def default_partition_full(project: Path) -> None:
    """opensm's Default partition: every port a full member (port-to-port on P_Key 0x7fff)."""
    _replace(project, "components/planning/fabric/sm_files.py",
             'default = ["ALL=limited", "SELF=full"] + sm_full',
             'default = ["ALL=full", "SELF=full"] + sm_full')


# --- platform charts -------------------------------------------------------------------------


def ingress_snippets_allowed(project: Path) -> None:
    """ingress-nginx accepts configuration-snippet annotations (controller config injection)."""
    _replace(project, "components/planning/platform.py",
             '"controller": {\n                "service": {"type": "LoadBalancer",',
             '"controller": {\n                "allowSnippetAnnotations": True,\n'
             '                "service": {"type": "LoadBalancer",')


def grafana_literal_password(project: Path) -> None:
    """kube-prometheus-stack's Grafana turned on with a literal admin password (the stack file
    has no chart values, so in code)."""
    _replace(project, "components/planning/platform.py",
             '"grafana": {"enabled": False},',
             '"grafana": {"enabled": True, "adminPassword": "Grafana-h100-2024"},')


def pods_reach_the_management_network(project: Path) -> None:
    """The workload namespaces' egress no longer excepts the management and BMC networks."""
    _replace(project, "components/planning/network_policies.py",
             '"except": admin_networks(cluster)', '"except": []')


PLANTS: dict[str, Callable[[Path], None]] = {
    "old_vllm_from_mirror": old_vllm_from_mirror,
    "host_firewall_off": host_firewall_off,
    "admin_cidrs_anywhere": admin_cidrs_anywhere,
    "training_in_kube_system": training_in_kube_system,
    "approver_any_kubernetes_signer": approver_any_kubernetes_signer,
    "inference_policy_any_namespace": inference_policy_any_namespace,
    "rdma_policy_warn_only": rdma_policy_warn_only,
    "training_pod_security_exempt": training_pod_security_exempt,
    "node_restriction_off": node_restriction_off,
    "inference_load_balancer": inference_load_balancer,
    "sshd_root_login": sshd_root_login,
    "default_partition_full": default_partition_full,
    "ingress_snippets_allowed": ingress_snippets_allowed,
    "grafana_literal_password": grafana_literal_password,
    "api_key_on_argv": api_key_on_argv,
    "vllm_trust_remote_code": vllm_trust_remote_code,
    "approver_accepts_any_ip": approver_accepts_any_ip,
    "vllm_as_root": vllm_as_root,
    "viewers_cluster_admin": viewers_cluster_admin,
    "pods_reach_the_management_network": pods_reach_the_management_network,
}
