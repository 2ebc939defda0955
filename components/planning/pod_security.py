"""The admission policy that lets RDMA pods hold what the baseline Pod Security level otherwise
refuses, and nothing more (pure; CEL over every container).
"""

from __future__ import annotations

from collections.abc import Sequence

from components.model.cluster import Cluster
from components.planning.namespaces import RDMA_POLICY, training_namespaces

# Pod Security "baseline" (kubernetes.io/docs/concepts/security/pod-security-standards/) as CEL,
# plus exactly what RDMA training needs: IPC_LOCK (pinned memory for the HCAs' DMA) and the
# node's scratch array as a hostPath. The training namespaces enforce this instead of
# `baseline`, which forbids both. Every baseline check of k8s.io/pod-security-admission
# v0.35 (policy/check_*.go, Level baseline) is here, on every container the pod runs:
# containers, init containers and ephemeral containers (`kubectl debug` adds those through the
# pods/ephemeralcontainers subresource, which this policy matches too).
BASELINE_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT")
# check_sysctls.go, 1.32+ (the cluster runs a later minor).
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
                "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
# check_seLinuxOptions.go, 1.31+: the types a container may run as; user and role stay unset.
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# check_appArmorProfile.go: the field's types, and the deprecated annotation's values.
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _every_container(check: str) -> str:
    """`check` (of `c`) on containers, init containers and ephemeral containers: the last are
    another type in the API's schema, so CEL cannot join them into one list."""
    return (f"variables.containers.all(c, {check}) && (!has(object.spec.ephemeralContainers) "
            f"|| object.spec.ephemeralContainers.all(c, {check}))")


def _no_host(handler: str) -> str:
    """A probe or lifecycle handler of `c` that names no host (check_hostProbesAndhostLifecycle:
    its httpGet and tcpSocket `host` stay empty)."""
    guard = " && ".join(f"has(c.{'.'.join(handler.split('.')[:i])})"
                        for i in range(1, handler.count(".") + 2))
    return " && ".join(
        f"!({guard} && has(c.{handler}.{kind}) && has(c.{handler}.{kind}.host) && "
        f"c.{handler}.{kind}.host != '')" for kind in ("httpGet", "tcpSocket"))


def _selinux(ctx: str) -> str:
    return (f"!(has({ctx}) && has({ctx}.seLinuxOptions)) || "
            f"((!has({ctx}.seLinuxOptions.type) || {ctx}.seLinuxOptions.type in "
            f"{_cel_list(SELINUX_TYPES)}) && "
            f"(!has({ctx}.seLinuxOptions.user) || {ctx}.seLinuxOptions.user == '') && "
            f"(!has({ctx}.seLinuxOptions.role) || {ctx}.seLinuxOptions.role == ''))")


def _unset_or(ctx: str, field: str, test: str) -> str:
    """`ctx.field` unset, or passing `test` (of the field's value, `{}`)."""
    return f"!(has({ctx}) && has({ctx}.{field})) || " + test.format(f"{ctx}.{field}")


def _rdma_baseline_checks(cluster: Cluster) -> list[tuple[str, str]]:
    """(CEL expression, message) of every baseline check, with RDMA's two exceptions."""
    sc = "c.securityContext"
    pod = "object.spec.securityContext"
    caps = _cel_list([*BASELINE_CAPABILITIES, "IPC_LOCK"])
    scratch = cluster.storage.scratch.mount_point
    apparmor = _cel_list(APPARMOR_TYPES)
    return [
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && "
         "!(has(object.spec.hostPID) && object.spec.hostPID) && "
         "!(has(object.spec.hostIPC) && object.spec.hostIPC)",
         "host namespaces (hostNetwork, hostPID, hostIPC) are not allowed"),
        (_every_container(f"!(has({sc}) && has({sc}.privileged) && {sc}.privileged)"),
         "privileged containers are not allowed"),
        (_every_container(f"!(has({sc}) && has({sc}.capabilities) && "
                          f"has({sc}.capabilities.add)) || "
                          f"{sc}.capabilities.add.all(cap, cap in {caps})"),
         "capabilities beyond baseline and IPC_LOCK are not allowed"),
        (f"!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath) || "
         f"v.hostPath.path == '{scratch}')",
         f"hostPath volumes other than the scratch array ({scratch}) are not allowed"),
        (_every_container("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || "
                          "p.hostPort == 0)"),
         "host ports are not allowed"),
        (f"!(has({pod}) && has({pod}.seccompProfile) && "
         f"{pod}.seccompProfile.type == 'Unconfined') && "
         + _every_container(f"!(has({sc}) && has({sc}.seccompProfile) && "
                            f"{sc}.seccompProfile.type == 'Unconfined')"),
         "seccomp Unconfined is not allowed"),
        (_every_container(f"!(has({sc}) && has({sc}.procMount)) || "
                          f"{sc}.procMount == 'Default'"),
         "a procMount other than Default is not allowed"),
        (f"!(has({pod}) && has({pod}.sysctls)) || "
         f"{pod}.sysctls.all(s, s.name in {_cel_list(SAFE_SYSCTLS)})",
         "only the safe sysctls are allowed"),
        (f"({_unset_or(pod, 'appArmorProfile', '{}.type in ' + apparmor)}) && "
         + _every_container(_unset_or(sc, "appArmorProfile", "{}.type in " + apparmor))
         + " && (!has(object.metadata.annotations) || object.metadata.annotations.all(k, "
         f"!k.startsWith('{APPARMOR_ANNOTATION}') || object.metadata.annotations[k] in "
         "['', 'runtime/default'] || object.metadata.annotations[k].startsWith('localhost/')))",
         "AppArmor profiles other than RuntimeDefault and Localhost are not allowed"),
        (f"({_selinux(pod)}) && " + _every_container(_selinux(sc)),
         "SELinux options other than a container type are not allowed"),
        (f"!(has({pod}) && has({pod}.windowsOptions) && has({pod}.windowsOptions.hostProcess) "
         f"&& {pod}.windowsOptions.hostProcess) && "
         + _every_container(f"!(has({sc}) && has({sc}.windowsOptions) && "
                            f"has({sc}.windowsOptions.hostProcess) && "
                            f"{sc}.windowsOptions.hostProcess)"),
         "Windows hostProcess containers are not allowed"),
        ("variables.containers.all(c, " + " && ".join(
            _no_host(h) for h in ("livenessProbe", "readinessProbe", "startupProbe",
                                  "lifecycle.postStart", "lifecycle.preStop")) + ")",
         "probes and lifecycle handlers may not name a host"),
    ]


def rdma_pod_policy(cluster: Cluster) -> list[dict]:
    """A ValidatingAdmissionPolicy (built in, GA in 1.30) and its binding to the training
    namespaces: baseline, plus IPC_LOCK and the scratch hostPath, nothing else."""
    checks = _rdma_baseline_checks(cluster)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": RDMA_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers"]}]},
            "variables": [{"name": "containers", "expression":
                           "object.spec.containers + (has(object.spec.initContainers) ? "
                           "object.spec.initContainers : [])"}],
            "validations": [{"expression": e, "message": f"{m} (training namespaces: "
                             "Pod Security baseline plus IPC_LOCK and the scratch hostPath)"}
                            for e, m in checks],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": RDMA_POLICY},
        "spec": {"policyName": RDMA_POLICY, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchExpressions": [{
                     "key": "kubernetes.io/metadata.name", "operator": "In",
                     "values": training_namespaces(cluster)}]}}},
    }
    return [policy, binding]
