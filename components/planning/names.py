"""The names of the resources the stack registers, minted from the policy pack's table of roles
(policies/gpu_guardrails/resource_names.py, loaded by path like its labels): the components
name every resource here, and the preview's readers look a name's role up in the same table."""

from __future__ import annotations

from components.model import pack_data

_NAMES = pack_data.load("resource_names")
PREPARE: str = _NAMES.PREPARE
SSH_KEYS: str = _NAMES.SSH_KEYS
BMC: str = _NAMES.BMC
OPENSM: str = _NAMES.OPENSM
OPENSM_REJOIN: str = _NAMES.OPENSM_REJOIN
SWITCH_CONFIG: str = _NAMES.SWITCH_CONFIG
KUBEADM_INIT: str = _NAMES.KUBEADM_INIT
IDENTITIES: str = _NAMES.IDENTITIES
CERTIFICATE_KEY: str = _NAMES.CERTIFICATE_KEY
JOIN_TOKEN: str = _NAMES.JOIN_TOKEN
KUBEADM_JOIN: str = _NAMES.KUBEADM_JOIN
KUBERNETES_UPGRADE: str = _NAMES.KUBERNETES_UPGRADE
MEMBER: str = _NAMES.MEMBER
PLACEMENT: str = _NAMES.PLACEMENT
DECOMMISSION: str = _NAMES.DECOMMISSION
REBOOT_CHECK: str = _NAMES.REBOOT_CHECK
REBOOT_DRAIN: str = _NAMES.REBOOT_DRAIN
REBOOT: str = _NAMES.REBOOT
REBOOT_WAIT: str = _NAMES.REBOOT_WAIT
REBOOT_UNCORDON: str = _NAMES.REBOOT_UNCORDON
UPGRADE_DRAIN: str = _NAMES.UPGRADE_DRAIN
UPGRADE_UNCORDON: str = _NAMES.UPGRADE_UNCORDON
ROLLOUT: str = _NAMES.ROLLOUT
SETUP: str = _NAMES.SETUP
ACCEPTANCE: str = _NAMES.ACCEPTANCE
KUBELET_CONFIG: str = _NAMES.KUBELET_CONFIG
CA_CERT_HASH: str = _NAMES.CA_CERT_HASH
ENCRYPTION_CONFIG: str = _NAMES.ENCRYPTION_CONFIG
STACK_KUBECONFIG: str = _NAMES.STACK_KUBECONFIG
CLUSTER_TYPE: str = _NAMES.CLUSTER_TYPE
COMPUTE_FABRIC_TYPE: str = _NAMES.COMPUTE_FABRIC_TYPE
STORAGE_FABRIC_TYPE: str = _NAMES.STORAGE_FABRIC_TYPE
SITE_FACTS_TYPE: str = _NAMES.SITE_FACTS_TYPE
HOST_TYPE: str = _NAMES.HOST_TYPE
WORKLOAD_TYPE: str = _NAMES.WORKLOAD_TYPE


def name(role: str, subject: str) -> str:
    """`subject`'s resource of `role` (`name(OPENSM, "sm-01")` -> `sm-01-opensm`)."""
    return str(_NAMES.name(role, subject))


def role_of(resource: str, layer: str | None = None) -> tuple[str, str] | None:
    """(role, subject) of the resource named `resource`, among `layer`'s roles when given;
    None for a name no role mints."""
    found = _NAMES.role_of(resource, layer)
    return None if found is None else (str(found[0]), str(found[1]))


def subject(resource: str, role: str, layer: str | None = None) -> str | None:
    """The host, switch, release or workload whose resource of `role` `resource` is, else
    None (`subject("gpu-node-03-prepare", PREPARE)` -> `gpu-node-03`)."""
    found = _NAMES.subject(resource, role, layer)
    return None if found is None else str(found)
