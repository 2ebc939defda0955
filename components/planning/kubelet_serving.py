"""Kubelet serving certificates the API server can verify (pure, no pulumi).

With `serverTLSBootstrap` every kubelet asks for a serving certificate from the cluster CA (CSR
signer kubernetes.io/kubelet-serving), so the API server checks whom it dials for logs, exec and
port-forward (`--kubelet-certificate-authority`, CIS 1.2.5) instead of trusting any certificate
on a node's port 10250. kube-controller-manager signs those CSRs but never approves them
(kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/
#certificate-rotation): a timer on every control-plane host approves what the inventory vouches
for (kubelet_serving_approver.py says exactly what, reading each request with an X.509 parser),
with its own identity that may do nothing else, renewals included.
"""

from __future__ import annotations

from pathlib import Path

from components.model.cluster import Cluster
from components.planning.script_files import template

SIGNER = "kubernetes.io/kubelet-serving"
APPROVER_USER = "gpu-cluster:kubelet-serving-approver"
APPROVER_KUBECONFIG = "/etc/kubernetes/kubelet-serving-approver.conf"
# `name address...` for every host that runs a kubelet: what the approver checks a CSR against.
KUBELETS_FILE = "/etc/kubernetes/gpu-cluster-kubelets"
APPROVER = "/usr/local/sbin/gpu-cluster-approve-kubelet-serving"
UNIT = "gpu-cluster-kubelet-serving"
SCRIPT = (Path(__file__).parent / "kubelet_serving_approver.py").read_text()
# What the approver parses requests with: Ubuntu's package (3.4 on 22.04, 41 on 24.04).
PACKAGE = "python3-cryptography"

SERVICE = f"""\
[Unit]
Description=Approve kubelet serving certificates the inventory vouches for (gpu-cluster)
After=network-online.target

[Service]
Type=oneshot
ExecStart={APPROVER} {APPROVER_KUBECONFIG} {KUBELETS_FILE}
"""

# A joining kubelet waits for its certificate (no logs or exec until then), so often; a run with
# nothing pending is one LIST.
TIMER = f"""\
[Unit]
Description=Approve kubelet serving certificates every 30 s (gpu-cluster)

[Timer]
OnBootSec=30s
OnUnitActiveSec=30s
AccuracySec=5s
Unit={UNIT}.service

[Install]
WantedBy=timers.target
"""


def approver_rbac() -> list[dict]:
    """Read CSRs and approve (or deny) those of the kubelet-serving signer, nothing else
    (kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/
    #authorization)."""
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole",
         "metadata": {"name": APPROVER_USER},
         "rules": [
             {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["certificates.k8s.io"],
              "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
             {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
              "resourceNames": [SIGNER], "verbs": ["approve"]},
         ]},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": APPROVER_USER},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": APPROVER_USER},
         "subjects": [{"apiGroup": rbac, "kind": "User", "name": APPROVER_USER}]},
    ]


def kubelets(cluster: Cluster) -> str:
    """Every host with a kubelet and the address it serves on (its `node-ip`), by name."""
    hosts = {h.hostname: h.management_ip for h in cluster.control_plane}
    hosts |= {n.hostname: n.management_ip for n in cluster.nodes}
    return "".join(f"{name} {ip}\n" for name, ip in sorted(hosts.items()))


def install_script(cluster: Cluster) -> str:
    """Bash (after CHANGE_TRACKING and the approver's kubeconfig): the approver, its timer and
    the kubelets it vouches for, each written only when it differs."""
    files = ((APPROVER, SCRIPT, "0755"), (f"/etc/systemd/system/{UNIT}.service", SERVICE, "0644"),
             (f"/etc/systemd/system/{UNIT}.timer", TIMER, "0644"))
    return template(
        "kubelet-serving/install.sh", package=PACKAGE, kubelets_file=KUBELETS_FILE, unit=UNIT,
        files="".join(template("host/unit-file.sh", path=path, mode=mode,
                               program="kubelet-serving", text=text.rstrip() + "\n")
                      for path, text, mode in files),
        kubelets=kubelets(cluster).rstrip() + "\n")
