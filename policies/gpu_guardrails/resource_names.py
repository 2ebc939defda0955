"""The names the stack gives the resources it registers. A resource that belongs to a host, a
switch, a Helm release or a workload (its subject) is named `<subject>-<role>`, the role saying
what it does there; a few are one per cluster and named alone. A name is the resource's
identity in the stack's state (its URN): a role spelled anew would replace every resource of
it, so these spellings stay.

The components mint every such name here (`name`); the preview's runbook and impact and the
pack's rules tell a resource's role by looking its name up in the same table (`role_of`), never
by a suffix of their own. The pack owns the table, because the CLI runs it from policies/ alone;
the stack loads this file by path (components/model/pack_data.py)."""

from __future__ import annotations

from functools import lru_cache

# hardware: per host
PREPARE = "prepare"  # its idempotent preparation, over SSH with the host key pinned
SSH_KEYS = "ssh-keys"  # the keys it authorises
BMC = "bmc"  # its BMC's power and boot settings (Redfish, a local command)
# fabric: per subnet manager's host, per switch
OPENSM = "opensm"  # the subnet manager's files, installed and restarted when they change
OPENSM_REJOIN = "opensm-rejoin"  # a standby an SM_Key change stopped, started again
SWITCH_CONFIG = "config"  # a switch's command set: hostname, SM off, every port's description
# bootstrap: per control plane
KUBEADM_INIT = "kubeadm-init"  # the guarded `kubeadm init` of the first control plane
IDENTITIES = "identities"  # the cluster's identities, once the host serves the API
CERTIFICATE_KEY = "certificate-key"  # the control-plane certificates uploaded for a join
# bootstrap: per control plane or GPU node
JOIN_TOKEN = "join-token"  # a short-lived token for this join alone
KUBEADM_JOIN = "kubeadm-join"  # the guarded join; a worker's delete resets the host
KUBERNETES_UPGRADE = "kubernetes-upgrade"  # kubeadm's upgrade on the host
# bootstrap: per GPU node
MEMBER = "member"  # membership, on the control plane; its delete drains the node first
PLACEMENT = "placement"  # the node's placement labels (SU, rack, the rails' leaves)
DECOMMISSION = "decommission"  # cordoned and drained before it is removed
REBOOT_CHECK = "reboot-check"  # planned reboot: does the boot lack what preparation staged
REBOOT_DRAIN = "reboot-drain"  # planned reboot: drained on the control plane (the lock)
REBOOT = "reboot"  # planned reboot: the reboot itself, re-created when boot settings change
REBOOT_WAIT = "reboot-wait"  # planned reboot: the new boot, dialled and checked
REBOOT_UNCORDON = "reboot-uncordon"  # planned reboot: uncordoned, the lock released
UPGRADE_DRAIN = "upgrade-drain"  # Kubernetes upgrade: drained, gang jobs waited for
UPGRADE_UNCORDON = "upgrade-uncordon"  # Kubernetes upgrade: uncordoned
# platform: per Helm release
ROLLOUT = "rollout"  # waits until the operator's policy reports ready
# workloads: per workload
SETUP = "setup"  # what the workload needs on the control plane first
ACCEPTANCE = "acceptance"  # the gate that fails `pulumi up` on a failed test

# Each role by the layer whose component registers it.
LAYERS: dict[str, str] = {
    **dict.fromkeys((PREPARE, SSH_KEYS, BMC), "hardware"),
    **dict.fromkeys((OPENSM, OPENSM_REJOIN, SWITCH_CONFIG), "fabric"),
    **dict.fromkeys((KUBEADM_INIT, IDENTITIES, CERTIFICATE_KEY, JOIN_TOKEN, KUBEADM_JOIN,
                     KUBERNETES_UPGRADE, MEMBER, PLACEMENT, DECOMMISSION, REBOOT_CHECK,
                     REBOOT_DRAIN, REBOOT, REBOOT_WAIT, REBOOT_UNCORDON, UPGRADE_DRAIN,
                     UPGRADE_UNCORDON), "bootstrap"),
    ROLLOUT: "platform",
    **dict.fromkeys((SETUP, ACCEPTANCE), "workloads"),
}

# One per cluster (bootstrap), named alone.
KUBELET_CONFIG = "kubelet-config"  # uploads the KubeletConfiguration joining nodes read
CA_CERT_HASH = "ca-cert-hash"  # the cluster CA's hash every join pins
ENCRYPTION_CONFIG = "encryption-config"  # the API server's encryption keys, for HA joins
STACK_KUBECONFIG = "stack-kubeconfig"  # the stack's own identity's kubeconfig
ALONE = frozenset({KUBELET_CONFIG, CA_CERT_HASH, ENCRYPTION_CONFIG, STACK_KUBECONFIG})


# The type tokens of the components whose published facts (their `facts` input) the pack and
# the preview read: a token is part of every child's URN, so it stays as spelled.
CLUSTER_TYPE = "gpucluster:bootstrap:KubeadmCluster"  # the kubeadm cluster
COMPUTE_FABRIC_TYPE = "gpucluster:fabric:InfinibandFabric"  # the compute rails
STORAGE_FABRIC_TYPE = "gpucluster:fabric:StorageFabric"  # fabric.storageFabric
SITE_FACTS_TYPE = "gpucluster:site:SiteFacts"  # what a split site's part reads of the others'
HOST_TYPE = "gpucluster:hardware:BareMetalNode"  # one host: its board and addresses
WORKLOAD_TYPE = "gpucluster:workloads:Workload"  # one workload: its acceptance gate's settings


def name(role: str, subject: str) -> str:
    """The name of `subject`'s resource of `role` (`name(OPENSM, "sm-01")` -> `sm-01-opensm`)."""
    return f"{subject}-{role}"


# The most words a role has (`reboot-uncordon`: two), for the lookup below.
_WORDS = max(role.count("-") + 1 for role in LAYERS)


@lru_cache(maxsize=1 << 16)
def role_of(resource: str, layer: str | None = None) -> tuple[str, str] | None:
    """(role, subject) of the resource named `resource`, looked up in the table above among
    `layer`'s roles when given (`gpu-node-03-reboot-wait` -> (REBOOT_WAIT, `gpu-node-03`): the
    longest role that ends the name); None for a name no role mints (one named alone, a
    Kubernetes object)."""
    if resource in ALONE:
        return None
    words = resource.split("-")
    for n in range(min(_WORDS, len(words) - 1), 0, -1):
        role = "-".join(words[-n:])
        if role in LAYERS and (layer is None or LAYERS[role] == layer):
            return role, "-".join(words[:-n])
    return None


def subject(resource: str, role: str, layer: str | None = None) -> str | None:
    """The host, switch, release or workload whose resource of `role` `resource` is, else
    None (`subject("gpu-node-03-prepare", PREPARE)` -> `gpu-node-03`)."""
    found = role_of(resource, layer)
    return found[1] if found is not None and found[0] == role else None
