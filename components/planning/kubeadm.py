"""kubeadm configuration and bootstrap scripts rendered from the model (pure, no pulumi).

kubeadm v1beta4 (Kubernetes 1.31+). `kubeadm init` is not idempotent, so every script checks
for the state it creates first (admin.conf, kubelet.conf) and exits without side effects when it
is already there. Tokens and certificate keys never appear in rendered text: a join script is
the command itself (`bash -c`) and reads its credentials from stdin, one per line, which Pulumi
keeps secret — not from the environment, which a stock sshd refuses (`AcceptEnv`) and which
`/proc/<pid>/environ` would show.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from components.model.cluster import Cluster, Host
from components.model.gpu_nodes import GpuNode
from components.model.tunables import KUBELET_EVICTION_HARD
from components.planning import kubelet_serving, quarantine_setup
from components.planning.labels import (
    GPU_TAINT,
    ROLE_LABEL,
    SU_LABEL,
    UNTESTED_LABEL,
    node_label,
    su_value,
)
from components.planning.script_files import body, template

KUBEADM_API = "kubeadm.k8s.io/v1beta4"

def encryption_configuration(cluster: Cluster) -> dict:
    """Secrets encrypted by the first provider: the KMS v2 plugin when `kubernetes.kms` is set,
    else a secretbox key generated on the first control plane (it never leaves the control
    planes). The secretbox key stays second with a KMS: Secrets written before still read."""
    providers: list[dict[str, Any]] = [
        {"secretbox": {"keys": [{"name": "key1", "secret": "${ENCRYPTION_KEY}"}]}},
        {"identity": {}},
    ]
    kms = cluster.kubernetes.kms
    if kms is not None:
        providers.insert(0, {"kms": {"apiVersion": "v2", "name": kms.name,
                                     "endpoint": kms.endpoint, "timeout": kms.timeout}})
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
            "resources": [{"resources": ["secrets"], "providers": providers}]}


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # Secret payloads must never land in the audit log.
        {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets", "configmaps"]}]},
        {"level": "None", "users": ["system:kube-proxy"], "verbs": ["watch"]},
        {"level": "RequestResponse", "verbs": ["create", "update", "patch", "delete"],
         "resources": [{"group": "kubeflow.org"}, {"group": "batch.volcano.sh"},
                       {"group": "scheduling.volcano.sh"}]},
        {"level": "Metadata"},
    ],
}


ADMISSION_CONFIG = "/etc/kubernetes/admission-config.yaml"
AUTHENTICATION_CONFIG = "/etc/kubernetes/authentication-config.yaml"
# What the API server answers without credentials: health checks (the kubelet's probes of the
# static pod, load balancers) and the cluster-info ConfigMap `kubeadm join` reads before it
# has one (token discovery, checked against the CA pin). Everything else gets 401.
ANONYMOUS_PATHS = ("/livez", "/readyz", "/healthz",
                   "/api/v1/namespaces/kube-public/configmaps/cluster-info")

# Identities the cluster's own tools use, each a client certificate from the cluster CA with
# only the rights it needs (RBAC below), so the audit log names who did what.
STACK_USER = "gpu-cluster:stack"  # `pulumi up`'s Kubernetes provider: cluster-admin
KUBE_VIP_USER = "gpu-cluster:kube-vip"  # the control-plane VIP's leader election
KUBE_VIP_KUBECONFIG = "/etc/kubernetes/kube-vip.conf"
# The client configuration `kubeadm kubeconfig user` signs identities with (endpoint, name).
IDENTITY_CONFIG = "/etc/kubernetes/gpu-cluster-identity.yaml"
IDENTITY_VALIDITY = "8760h"  # kubeadm's own certificates' year; renewal: docs/security.md


def privileged_namespaces(cluster: Cluster) -> list[str]:
    """Namespaces of the operators whose node agents need the host (drivers, CNI, device
    plugins, LoadBalancer speakers, node exporters, the Lustre CSI node plugin)."""
    p = cluster.platform
    return sorted({"kube-system", p.calico.namespace, "calico-system", "calico-apiserver",
                   p.gpu_operator.namespace, p.network_operator.namespace, p.metallb.namespace,
                   p.prometheus.namespace, p.lustre_csi.namespace})


def admission_configuration(cluster: Cluster) -> dict:
    """The API server's Pod Security default: every namespace enforces `baseline` (warn and
    audit `restricted`) unless its labels say otherwise; the operators' namespaces are
    exempted by name (kubernetes.io/docs/tasks/configure-pod-container/
    enforce-standards-admission-controller/)."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{
            "name": "PodSecurity",
            "configuration": {
                "apiVersion": "pod-security.admission.config.k8s.io/v1",
                "kind": "PodSecurityConfiguration",
                "defaults": {"enforce": "baseline", "enforce-version": "latest",
                             "audit": "restricted", "audit-version": "latest",
                             "warn": "restricted", "warn-version": "latest"},
                "exemptions": {"usernames": [], "runtimeClasses": [],
                               "namespaces": privileged_namespaces(cluster)},
            },
        }],
    }


def admission_configuration_yaml(cluster: Cluster) -> str:
    return _yaml(admission_configuration(cluster))


def authentication_configuration(cluster: Cluster) -> dict:
    """The API server's structured authentication (apiserver.config.k8s.io/v1, GA in 1.34):
    anonymous requests only on ANONYMOUS_PATHS, and the people's OIDC issuer when one is set
    (kubernetes.io/docs/reference/access-authn-authz/authentication/
    #using-authentication-configuration)."""
    doc: dict[str, Any] = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "anonymous": {"enabled": True, "conditions": [{"path": p} for p in ANONYMOUS_PATHS]},
    }
    oidc = cluster.kubernetes.access.oidc
    if oidc is not None:
        issuer: dict[str, Any] = {"url": oidc.issuer_url, "audiences": [oidc.client_id]}
        if oidc.certificate_authority:
            issuer["certificateAuthority"] = oidc.certificate_authority
        doc["jwt"] = [{"issuer": issuer, "claimMappings": {
            "username": {"claim": oidc.username_claim, "prefix": oidc.username_prefix},
            "groups": {"claim": oidc.groups_claim, "prefix": oidc.groups_prefix}}}]
    return doc


def authentication_configuration_yaml(cluster: Cluster) -> str:
    return _yaml(authentication_configuration(cluster))


def identity_configuration(cluster: Cluster) -> dict:
    """What `kubeadm kubeconfig user` needs to write a kubeconfig: the cluster's name and
    endpoint (the CA comes from /etc/kubernetes/pki on the control plane)."""
    return {"apiVersion": KUBEADM_API, "kind": "ClusterConfiguration",
            "clusterName": cluster.name, "controlPlaneEndpoint": endpoint(cluster),
            "kubernetesVersion": f"v{cluster.kubernetes.version}"}


def kube_vip_rbac() -> list[dict]:
    """kube-vip in control-plane mode (services off) takes its VIP by a Lease in kube-system
    and reads Nodes; nothing else (kube-vip.io's manifest adds Services and Endpoints for its
    services mode)."""
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_VIP_USER}]
    name = KUBE_VIP_USER
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": "kube-system"},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": "kube-system"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": ["nodes"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": subject},
    ]


def stack_rbac() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": STACK_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": STACK_USER}]}


def endpoint(cluster: Cluster) -> str:
    ep = cluster.kubernetes.control_plane_endpoint
    address = ep.vip or cluster.control_plane[0].management_ip
    return f"{address}:{ep.port}"


def cluster_configuration(cluster: Cluster) -> dict:
    k = cluster.kubernetes
    extra_args = [{"name": "profiling", "value": "false"},
                  # Logs, exec and port-forward only to a kubelet whose serving certificate the
                  # cluster CA signed (kubelet_serving).
                  {"name": "kubelet-certificate-authority", "value": "/etc/kubernetes/pki/ca.crt"},
                  {"name": "admission-control-config-file", "value": ADMISSION_CONFIG},
                  {"name": "authentication-config", "value": AUTHENTICATION_CONFIG}]
    volumes = [{"name": "admission-config", "hostPath": ADMISSION_CONFIG,
                "mountPath": ADMISSION_CONFIG, "readOnly": True, "pathType": "File"},
               {"name": "authentication-config", "hostPath": AUTHENTICATION_CONFIG,
                "mountPath": AUTHENTICATION_CONFIG, "readOnly": True, "pathType": "File"}]
    if k.audit_logging:
        extra_args += [
            {"name": "audit-policy-file", "value": "/etc/kubernetes/audit-policy.yaml"},
            {"name": "audit-log-path", "value": "/var/log/kubernetes/audit.log"},
            {"name": "audit-log-maxage", "value": "30"},
            {"name": "audit-log-maxbackup", "value": "10"},
            {"name": "audit-log-maxsize", "value": "200"},
        ]
        volumes += [
            {"name": "audit-policy", "hostPath": "/etc/kubernetes/audit-policy.yaml",
             "mountPath": "/etc/kubernetes/audit-policy.yaml", "readOnly": True,
             "pathType": "File"},
            {"name": "audit-log", "hostPath": "/var/log/kubernetes",
             "mountPath": "/var/log/kubernetes", "pathType": "DirectoryOrCreate"},
        ]
    if k.encryption_at_rest:
        extra_args.append({"name": "encryption-provider-config",
                           "value": "/etc/kubernetes/encryption-config.yaml"})
        volumes.append({"name": "encryption-config",
                        "hostPath": "/etc/kubernetes/encryption-config.yaml",
                        "mountPath": "/etc/kubernetes/encryption-config.yaml",
                        "readOnly": True, "pathType": "File"})
        if k.kms is not None:  # the plugin's socket, where the API server dials it
            socket_dir = k.kms.endpoint.removeprefix("unix://").rsplit("/", 1)[0]
            volumes.append({"name": "kms-plugin", "hostPath": socket_dir,
                            "mountPath": socket_dir, "pathType": "DirectoryOrCreate"})
    return {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": cluster.name,
        "kubernetesVersion": f"v{k.version}",
        "controlPlaneEndpoint": endpoint(cluster),
        "networking": {
            "podSubnet": str(k.pod_cidr),
            "serviceSubnet": str(k.service_cidr),
            "dnsDomain": k.cluster_domain,
        },
        "apiServer": {"extraArgs": extra_args, "extraVolumes": volumes},
        # Their profiling endpoints are on by default: a heap and CPU profile for anyone who
        # reaches them.
        "controllerManager": {"extraArgs": [{"name": "profiling", "value": "false"}]},
        "scheduler": {"extraArgs": [{"name": "profiling", "value": "false"}]},
    }


def kubelet_configuration(cluster: Cluster) -> dict:
    kl = cluster.kubernetes.kubelet
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "cpuManagerPolicy": kl.cpu_manager_policy,
        # Align GPUs, NICs and CPUs per pod; best-effort/restricted admit 8-GPU pods that span
        # both sockets, where single-numa-node would reject them.
        "topologyManagerPolicy": kl.topology_manager_policy,
        "topologyManagerScope": kl.topology_manager_scope,
        "memoryManagerPolicy": "None",
        "systemReserved": {"cpu": kl.system_reserved_cpu, "memory": kl.system_reserved_memory},
        "kubeReserved": {"cpu": kl.kube_reserved_cpu, "memory": kl.kube_reserved_memory},
        "evictionHard": dict(KUBELET_EVICTION_HARD),
        "maxPods": kl.max_pods,
        # A serving certificate from the cluster CA, by CSR, so the API server can verify the
        # kubelet (--kubelet-certificate-authority); approved by the control planes' timer
        # (kubelet_serving), renewed the same way.
        "serverTLSBootstrap": True,
        "failSwapOn": True,
        # Stated, not left to defaults: no anonymous requests, the API server authorizes every
        # one, no unauthenticated read-only port.
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}},
        "authorization": {"mode": "Webhook"},
        "readOnlyPort": 0,
        # Refuse to start on kernel settings other than the kubelet's own instead of
        # changing them: host preparation sets them first (host_scripts' kubelet sysctls).
        "protectKernelDefaults": True,
    }


def node_labels(cluster: Cluster, node: GpuNode, leaves: dict[int, str] | None = None) -> dict:
    """Labels a GPU node carries: GPU product and its place in the fabric."""
    labels = {
        "nvidia.com/gpu.product": node.gpu.product_label,
        SU_LABEL: su_value(node.su),
        node_label("rack"): node.rack,
        ROLE_LABEL: "gpu-worker",
    }
    for rail, leaf in sorted((leaves or {}).items()):
        labels[node_label(f"rail{rail}-leaf")] = leaf
    return labels


def node_registration(name: str, address: str) -> dict:
    """The node's name and the one address its kubelet reports and serves on: the management
    network's, whatever other interfaces (storage, IPoIB) the host has. Its serving
    certificate names exactly these (kubelet_serving checks them against the inventory)."""
    return {"name": name, "criSocket": "unix:///run/containerd/containerd.sock",
            "kubeletExtraArgs": [{"name": "node-ip", "value": address}]}


def init_configuration(cluster: Cluster, host: Host) -> dict:
    return {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": str(host.management_ip),
                             "bindPort": cluster.kubernetes.control_plane_endpoint.port},
        "nodeRegistration": node_registration(host.hostname, str(host.management_ip)),
        # The bootstrap token of `kubeadm init` is not used: workers get their own short-lived
        # tokens, one per join.
        "bootstrapTokens": [],
    }


def join_configuration(cluster: Cluster, node: GpuNode) -> dict:
    return {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": endpoint(cluster),
                "token": "${JOIN_TOKEN}",
                "caCertHashes": ["${CA_CERT_HASH}"],
            }
        },
        "nodeRegistration": _gpu_node_registration(node, cluster.acceptance_gated),
    }


# What a GPU node's kubelet registers beyond its name and address: the GPU taint, and (with an
# acceptance gate) the label that keeps work off it until the acceptance test passed there.
REGISTERED_LABELS = {UNTESTED_LABEL: "true"}


def _gpu_node_registration(node: GpuNode, gated: bool) -> dict:
    reg = node_registration(node.hostname, str(node.management_ip))
    if not gated:  # no acceptance gate: nothing would ever mark the node tested
        return {**reg, "taints": [GPU_TAINT]}
    labels = ",".join(f"{k}={v}" for k, v in REGISTERED_LABELS.items())
    return {**reg, "kubeletExtraArgs": [*reg["kubeletExtraArgs"],
                                        {"name": "node-labels", "value": labels}],
            "taints": [GPU_TAINT]}


# libyaml's emitter when PyYAML has it: the same text in a fifth of the time (one per node).
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _yaml(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False)


def _docs(*docs: dict) -> str:
    return "---\n".join(_yaml(d) for d in docs)


def kube_vip_manifest(cluster: Cluster, kubeconfig: str = KUBE_VIP_KUBECONFIG) -> dict:
    """kube-vip as a static pod in ARP mode, holding the control-plane VIP by leader election,
    with its own identity (KUBE_VIP_USER: a Lease and Nodes, nothing else). Mounted where
    kube-vip looks by default (/etc/kubernetes/admin.conf inside the container)."""
    ep = cluster.kubernetes.control_plane_endpoint
    env = {
        "vip_arp": "true",
        "port": str(ep.port),
        **({"vip_interface": ep.interface} if ep.interface else {}),
        "vip_cidr": "32",
        "cp_enable": "true",
        "cp_namespace": "kube-system",
        "vip_leaderelection": "true",
        "vip_leasename": "plndr-cp-lock",
        "vip_leaseduration": "5",
        "vip_renewdeadline": "3",
        "vip_retryperiod": "1",
        "address": str(ep.vip),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "hostNetwork": True,
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "containers": [{
                "name": "kube-vip",
                "image": ep.kube_vip_image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["manager"],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                # Announcing an address needs exactly these two capabilities, nothing broader.
                "securityContext": {"capabilities": {"drop": ["ALL"],
                                                     "add": ["NET_ADMIN", "NET_RAW"]}},
                "volumeMounts": [{"name": "kubeconfig",
                                  "mountPath": "/etc/kubernetes/admin.conf"}],
            }],
            "volumes": [{"name": "kubeconfig",
                         "hostPath": {"path": kubeconfig, "type": "FileOrCreate"}}],
        },
    }


def _ha(cluster: Cluster) -> bool:
    return cluster.kubernetes.control_plane_endpoint.vip is not None


def init_script(cluster: Cluster, host: Host) -> str:
    """Guarded `kubeadm init`: a second run sees admin.conf and does nothing."""
    config = _docs(cluster_configuration(cluster), init_configuration(cluster, host),
                   kubelet_configuration(cluster))
    vip = ""
    if _ha(cluster):
        # Until init has created any RBAC, kube-vip must use super-admin.conf (kubeadm 1.29+);
        # `<host>-identities` switches it to its own identity right after and removes
        # super-admin.conf from the host.
        manifest = _yaml(kube_vip_manifest(cluster, "/etc/kubernetes/super-admin.conf"))
        vip = template("kubeadm/kube-vip-manifest.sh", manifest=manifest)
    return template(
        "kubeadm/init.sh", host=host.hostname, audit=_yaml(AUDIT_POLICY),
        encryption=_yaml(encryption_configuration(cluster)), config=config,
        admission=admission_configuration_yaml(cluster), admission_path=ADMISSION_CONFIG,
        authentication=authentication_configuration_yaml(cluster),
        authentication_path=AUTHENTICATION_CONFIG, vip=vip)


def kubelet_config_script(cluster: Cluster, host: Host) -> str:
    """Keep the cluster's `kubelet-config` ConfigMap equal to the stack's KubeletConfiguration.

    Every joining node reads its kubelet settings from that ConfigMap, which the guarded init
    writes only once; without this a changed setting would reach no node. Uploaded again only
    when the desired configuration changed; a failed upload is retried by the next run. Nodes
    already joined keep theirs until rolled (see the preview's runbook)."""
    # Only the cluster settings kubeadm derives kubelet defaults from (version, clusterDNS from
    # the service subnet, clusterDomain): a changed API server flag does not touch this command.
    cluster_doc = {k: v for k, v in cluster_configuration(cluster).items()
                   if k in ("apiVersion", "kind", "kubernetesVersion", "networking")}
    config = _docs(cluster_doc, init_configuration(cluster, host), kubelet_configuration(cluster))
    return template("kubeadm/kubelet-config.sh", host=host.hostname, config=config)


def control_plane_join_configuration(cluster: Cluster, host: Host) -> dict:
    return {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": endpoint(cluster),
                                         "token": "${JOIN_TOKEN}",
                                         "caCertHashes": ["${CA_CERT_HASH}"]}},
        "controlPlane": {
            "localAPIEndpoint": {"advertiseAddress": str(host.management_ip),
                                 "bindPort": cluster.kubernetes.control_plane_endpoint.port},
            "certificateKey": "${CERTIFICATE_KEY}",
        },
        "nodeRegistration": node_registration(host.hostname, str(host.management_ip)),
    }


def _credentials(name: str) -> tuple[str, ...]:
    """The names scripts/kubeadm/<name> reads from stdin, in its order."""
    return tuple(re.findall(r"^IFS= read -r (\w+)", body(f"kubeadm/{name}"), re.M))


# What a join reads from stdin, one line each, in this order (`join_credentials` in the
# bootstrap layer writes them). The encryption configuration is YAML, so it travels base64.
WORKER_CREDENTIALS = _credentials("worker-credentials.sh")
CONTROL_PLANE_CREDENTIALS = _credentials("control-plane-credentials.sh")


def control_plane_join_script(cluster: Cluster, host: Host) -> str:
    """Guarded control-plane join: token, CA hash, certificate key and the encryption
    configuration arrive on stdin; kube-vip is added once the node serves the API."""
    config = _docs(control_plane_join_configuration(cluster, host))
    manifest = _yaml(kube_vip_manifest(cluster))
    return template(
        "kubeadm/control-plane-join.sh", host=host.hostname, audit=_yaml(AUDIT_POLICY),
        config=config, manifest=manifest, admission=admission_configuration_yaml(cluster),
        admission_path=ADMISSION_CONFIG, authentication=authentication_configuration_yaml(cluster),
        authentication_path=AUTHENTICATION_CONFIG, identity=_kube_vip_identity(cluster))


def _identity_config(cluster: Cluster) -> str:
    """Bash: the configuration `kubeadm kubeconfig user` signs identities with, written only
    when it differs."""
    return template("kubeadm/identity-config.sh", identity_config=IDENTITY_CONFIG,
                    identity=_yaml(identity_configuration(cluster)))


def _user_kubeconfig(user: str, path: str) -> str:
    """Bash: a kubeconfig of `user` from the cluster CA at `path` (kept when present)."""
    return template("kubeadm/user-kubeconfig.sh", path=path, identity_config=IDENTITY_CONFIG,
                    user=user, validity=IDENTITY_VALIDITY)


def _kube_vip_identity(cluster: Cluster) -> str:
    """Bash: the identity configuration and kube-vip's kubeconfig (kept when present)."""
    return _identity_config(cluster) + _user_kubeconfig(KUBE_VIP_USER, KUBE_VIP_KUBECONFIG)


def identities_script(cluster: Cluster, host: Host) -> str:
    """On each control plane once it serves the API: the RBAC of the cluster's own
    identities, kube-vip moved to its own, the approver of kubelet serving certificates with
    the kubelets it vouches for, the quarantine of unfit GPU nodes (quarantine_setup.py), and
    super-admin.conf (system:masters, which no RBAC can limit) off the host. Idempotent; a
    cluster built before runs it too."""
    rbac = _docs(stack_rbac(), *kubelet_serving.approver_rbac(),
                 *quarantine_setup.quarantine_rbac(),
                 *(kube_vip_rbac() if _ha(cluster) else []))
    vip = _identity_config(cluster)
    if _ha(cluster):
        vip = _kube_vip_identity(cluster) + template(
            "kubeadm/kube-vip-kubeconfig.sh", kubeconfig=KUBE_VIP_KUBECONFIG, host=host.hostname,
            user=KUBE_VIP_USER)
    approver = _user_kubeconfig(kubelet_serving.APPROVER_USER,
                                kubelet_serving.APPROVER_KUBECONFIG)
    quarantine = _user_kubeconfig(quarantine_setup.QUARANTINE_USER,
                                  quarantine_setup.QUARANTINE_KUBECONFIG) \
        if cluster.health.enabled else ""
    return (template("kubeadm/identities.sh", host=host.hostname, rbac=rbac) + vip + approver
            + kubelet_serving.install_script(cluster) + quarantine
            + quarantine_setup.install_script(cluster)
            + template("kubeadm/remove-super-admin.sh", host=host.hostname))


def stack_kubeconfig_command(cluster: Cluster) -> str:
    """The command whose stdout is `pulumi up`'s kubeconfig: a client certificate for
    STACK_USER, signed by the cluster CA on the first control plane."""
    return (f"sudo kubeadm kubeconfig user --config {IDENTITY_CONFIG} --client-name {STACK_USER} "
            f"--validity-period {IDENTITY_VALIDITY}")


CERTIFICATE_KEY_COMMAND = (
    "kubeadm init phase upload-certs --upload-certs --kubeconfig /etc/kubernetes/admin.conf "
    "| tail -n 1"
)


def join_script(cluster: Cluster, node: GpuNode) -> str:
    """Guarded `kubeadm join`: the token and CA certificate hash arrive on stdin."""
    config = _docs(join_configuration(cluster, node))
    return template("kubeadm/join.sh", host=node.hostname, config=config)


def drain_script(node: str, remove: bool = True) -> str:
    """Run on the control plane before a worker leaves: cordon, drain, delete the Node (or,
    `remove=False`, only cordon and drain: a decommission)."""
    title = (f"Remove {node} from the cluster" if remove
             else f"Decommission {node}: cordon and drain")
    return template("kubeadm/drain.sh", title=title, node=node,
                    delete=template("kubeadm/delete-node.sh", node=node) if remove else "")


def decommission_script(node: str) -> str:
    """Run on the control plane when a node is marked for decommissioning: cordon and drain
    it now, in this update; its removal (delete the Node, kubeadm reset) comes in a later one.
    """
    return drain_script(node, remove=False)


def leave_script(node: str) -> str:
    """Run on the worker only after the drain succeeded (Pulumi deletes dependents first)."""
    return template("kubeadm/leave.sh", node=node)


TOKEN_COMMAND = (
    "kubeadm token create --ttl {ttl}m --description 'gpu-cluster join of {host}' "
    "--kubeconfig /etc/kubernetes/admin.conf"
)
# kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's SubjectPublicKeyInfo (DER), for
# an RSA or an ECDSA CA alike (`openssl pkey`).
CA_HASH_COMMAND = (
    "openssl x509 -pubkey -in /etc/kubernetes/pki/ca.crt | openssl pkey -pubin -outform der "
    "| openssl dgst -sha256 -hex | sed 's/^.* /sha256:/'"
)


def root_pipeline(pipeline: str) -> str:
    """`pipeline` as root under bash's pipefail: a failing stage fails the command. Under plain
    `sh` a missing CA file made the last stage hash empty input (sha256:e3b0c442…), a pin every
    later join fails on."""
    return f"sudo bash -o pipefail -c {shlex.quote(pipeline)}"
