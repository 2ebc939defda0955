"""What the quarantine (quarantine.py) runs with on the control-plane hosts (pure, no pulumi):
its own identity and the rights it needs, nothing more.

The rights are what its kubectl calls use: it reads nodes and pods, taints, annotates and
cordons nodes (a patch), evicts through the Eviction API (pods/eviction, which honours
PodDisruptionBudgets), reads a pod's DaemonSet (`kubectl drain --ignore-daemonsets` looks it
up) and suspends or resumes Kubeflow jobs (a patch). It cannot delete a pod, so it cannot
bypass a budget, and it cannot touch a Secret.
"""

from __future__ import annotations

QUARANTINE_USER = "gpu-cluster:quarantine"
RBAC = "rbac.authorization.k8s.io"


def quarantine_rbac() -> list[dict]:
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"],
         "verbs": ["get", "list", "patch"]},
    ]
    return [
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole",
         "metadata": {"name": QUARANTINE_USER}, "rules": rules},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": QUARANTINE_USER},
         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": QUARANTINE_USER},
         "subjects": [{"apiGroup": RBAC, "kind": "User", "name": QUARANTINE_USER}]},
    ]
