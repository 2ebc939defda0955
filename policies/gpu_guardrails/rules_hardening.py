"""Security regressions a review would miss: the control plane's audit, encryption and
authentication settings, what host scripts may run, and what workload containers may ask for.
Resource rules read the exact scripts and objects the stack sends (`stdin`, `create`, specs)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import yaml
from pulumi_policy import EnforcementLevel, ResourceValidationArgs

from .common import KUBEADM_INIT, TRAINING_JOB_TYPES, containers, pod_containers, pod_templates
from .registry import Report, chart_name, get, is_list, is_map, resource_rule

MANDATORY = EnforcementLevel.MANDATORY
COMMAND = ("command:remote:Command",)
# User workloads (node agents, DaemonSets in the operators' namespaces, are judged by
# privileged-only-operator-namespaces).
SERVING = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")
USER_WORKLOADS = (*TRAINING_JOB_TYPES, *SERVING, "kubernetes:batch/v1:Job",
                  "kubernetes:core/v1:Pod")
# libyaml's safe loader where PyYAML has it: every node's scripts are read at a large site.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
HEREDOC = re.compile(r"<<'?(?P<tag>[A-Z]+)'?\n(?P<body>.*?)\n(?P=tag)\n", re.S)


def _scripts(args: Any) -> list[str]:
    return [v for v in (get(args.props, "create"), get(args.props, "stdin"))
            if isinstance(v, str)]


@lru_cache(maxsize=256)  # several rules read the same script's documents
def _documents(text: str) -> tuple[dict[str, Any], ...]:
    """Every YAML document a script writes with a here-document (configs it hands kubeadm,
    the API server or the kubelet)."""
    docs: list[dict[str, Any]] = []
    for m in HEREDOC.finditer(text):
        try:
            docs += [d for d in yaml.load_all(m.group("body"), Loader=_LOADER)
                     if isinstance(d, dict)]
        except yaml.YAMLError:
            continue
    return tuple(docs)


def _of_kind(args: Any, kind: str, in_init: bool = False) -> list[dict[str, Any]]:
    """The documents of `kind` the command's scripts write; `in_init`: only from a script
    that runs `kubeadm init` itself (another may carry a ClusterConfiguration for a phase)."""
    return [d for text in _scripts(args) if not in_init or KUBEADM_INIT.search(text)
            for d in _documents(text) if d.get("kind") == kind]



def _audit_level(policy: dict[str, Any], group: str, resource: str) -> str:
    """The level the first matching rule gives a request for `resource` (any user, verb)."""
    for rule in policy.get("rules") or []:
        if not isinstance(rule, dict) or rule.get("users") or rule.get("userGroups") \
                or rule.get("verbs") or rule.get("namespaces") or rule.get("nonResourceURLs"):
            continue  # narrower than "every request for it": not the rule that decides
        kinds = rule.get("resources")
        if kinds is None or any(
                isinstance(k, dict) and k.get("group", "") == group
                and (not k.get("resources") or resource in k["resources"]) for k in kinds):
            return str(rule.get("level", "None"))
    return "None"


@resource_rule(
    "audit-policy-no-secret-bodies",
    "The audit policy logs Secrets and ConfigMaps at Metadata at most",
    MANDATORY,
    COMMAND,
)
def audit_policy_no_secret_bodies(args: ResourceValidationArgs,
                                  report: Report) -> None:
    """At Request or RequestResponse every Secret's data (join tokens, the inference API key,
    TLS keys) is written in clear to the audit log and its backups."""
    for policy in _of_kind(args, "Policy"):
        if policy.get("apiVersion", "").startswith("audit.k8s.io/"):
            for resource in ("secrets", "configmaps"):
                level = _audit_level(policy, "", resource)
                if level in ("Request", "RequestResponse"):
                    report(f"the audit policy logs {resource} at {level}: their data in clear")


@resource_rule(
    "encryption-not-identity-first",
    "Secrets are encrypted by the first provider (never `identity` first)",
    MANDATORY,
    COMMAND,
)
def encryption_not_identity_first(args: ResourceValidationArgs,
                                  report: Report) -> None:
    """The API server writes with the first provider: `identity` first stores every new
    Secret unencrypted in etcd while the configuration still looks encrypted."""
    for config in _of_kind(args, "EncryptionConfiguration"):
        for i, entry in enumerate(config.get("resources") or []):
            providers = entry.get("providers") if isinstance(entry, dict) else None
            if is_list(providers) and providers and is_map(providers[0]) \
                    and "identity" in providers[0]:
                report(f"resources[{i}] ({', '.join(entry.get('resources') or [])}): "
                       "identity is the first provider, so writes are not encrypted")


@resource_rule(
    "kubelet-authenticated",
    "Kubelets refuse anonymous requests, authorize by webhook and serve no read-only port",
    MANDATORY,
    COMMAND,
)
def kubelet_authenticated(args: ResourceValidationArgs, report: Report) -> None:
    """An anonymous or AlwaysAllow kubelet lets any pod on the network exec into every pod on
    the node (training and serving containers with the GPUs, the API key in their env); the
    read-only port 10255 lists every pod spec without authentication."""
    for kc in _of_kind(args, "KubeletConfiguration"):
        if get(kc, "authentication", "anonymous", "enabled") is True:
            report("KubeletConfiguration authentication.anonymous.enabled is true")
        mode = get(kc, "authorization", "mode")
        if mode not in (None, "Webhook"):
            report(f"KubeletConfiguration authorization.mode is {mode}, not Webhook")
        if get(kc, "readOnlyPort") not in (None, 0):
            report(f"KubeletConfiguration readOnlyPort is {get(kc, 'readOnlyPort')}, not 0")


@resource_rule(
    "kubelet-serving-verified",
    "The API server verifies the kubelets it dials against the cluster CA, and kubelets ask "
    "that CA for their serving certificates",
    MANDATORY,
    COMMAND,
)
def kubelet_serving_verified(args: ResourceValidationArgs, report: Report) -> None:
    """Without --kubelet-certificate-authority the API server accepts any certificate on a
    node's port 10250: whoever answers there (a rebuilt host, a spoofed address) receives
    `kubectl exec` sessions and their input, and serves forged logs (CIS 1.2.5). With it, a
    kubelet must hold a serving certificate from that CA (serverTLSBootstrap); a self-signed
    one fails every logs, exec and port-forward, the MPIJob launcher's exec included."""
    for cc in _of_kind(args, "ClusterConfiguration", in_init=True):
        given = {a.get("name"): str(a.get("value")) for a in
                 (get(cc, "apiServer", "extraArgs") or []) if is_map(a)}
        if not given.get("kubelet-certificate-authority"):
            report("the API server has no --kubelet-certificate-authority: it accepts any "
                   "certificate a kubelet's port presents")
            continue
        for kc in _of_kind(args, "KubeletConfiguration"):
            if get(kc, "serverTLSBootstrap") is not True:
                report("--kubelet-certificate-authority is set but the KubeletConfiguration "
                       "has no serverTLSBootstrap: true; self-signed kubelets fail logs/exec")


_UNSAFE_API_ARGS = {
    # kubeadm's defaults (Node,RBAC; NodeRestriction) hold unless a flag overrides them.
    "authorization-mode": (lambda v: "AlwaysAllow" in v or not {"Node", "RBAC"} <= set(
        v.split(",")), "includes AlwaysAllow or lacks Node or RBAC"),
    "enable-admission-plugins": (lambda v: "AlwaysAdmit" in v or "NodeRestriction" not in v,
                                 "includes AlwaysAdmit or lacks NodeRestriction"),
    "profiling": (lambda v: v.lower() != "false", "is not false"),
}


@resource_rule(
    "control-plane-hardened",
    "The API server, controller manager and scheduler keep authorization, admission and "
    "profiling locked down",
    MANDATORY,
    COMMAND,
)
def control_plane_hardened(args: ResourceValidationArgs, report: Report) -> None:
    """AlwaysAllow authorizes every request, AlwaysAdmit skips Pod Security and the admission
    policies, and the profiling endpoints give anyone with access a heap and CPU profile of
    the control plane."""
    for cc in _of_kind(args, "ClusterConfiguration", in_init=True):
        for component in ("apiServer", "controllerManager", "scheduler"):
            given = {a.get("name"): str(a.get("value")) for a in
                     (get(cc, component, "extraArgs") or []) if is_map(a)}
            for name, (bad, why) in _UNSAFE_API_ARGS.items():
                if name == "profiling" and name not in given:
                    report(f"{component}: profiling is not turned off (its default is on)")
                elif name in given and bad(given[name]):
                    report(f"{component}: --{name}={given[name]} {why}")


# What the API server may answer without credentials: health checks and the cluster-info
# ConfigMap `kubeadm join` discovers the cluster by (kubeadm.ANONYMOUS_PATHS in the stack).
_ANONYMOUS_OK = {"/livez", "/readyz", "/healthz",
                 "/api/v1/namespaces/kube-public/configmaps/cluster-info"}


@resource_rule(
    "apiserver-anonymous-limited",
    "The API server answers anonymous requests only on health checks and cluster-info",
    MANDATORY,
    COMMAND,
)
def apiserver_anonymous_limited(args: ResourceValidationArgs, report: Report) -> None:
    """By default every unauthenticated request reaches authorization as system:anonymous: one
    careless RoleBinding (or a discovery endpoint) away from an open cluster (CIS 1.2.1). The
    stack's AuthenticationConfiguration lets anonymous requests through on the paths the
    probes and `kubeadm join` need, and nowhere else."""
    for cc in _of_kind(args, "ClusterConfiguration", in_init=True):
        given = {a.get("name"): str(a.get("value")) for a in
                 (get(cc, "apiServer", "extraArgs") or []) if is_map(a)}
        if given.get("anonymous-auth", "").lower() == "false":
            continue
        if "authentication-config" not in given:
            report("the API server has no --authentication-config limiting anonymous requests "
                   "(anonymous-auth defaults to true: every path)")
            continue
        configs = _of_kind(args, "AuthenticationConfiguration")
        if not configs:
            report("--authentication-config is set but the script writes no "
                   "AuthenticationConfiguration")
        for ac in configs:
            anon = get(ac, "anonymous")
            if not is_map(anon) or get(anon, "enabled") is False:
                continue  # absent: anonymous off under structured authentication
            paths = {get(c, "path") for c in (get(anon, "conditions") or []) if is_map(c)}
            if not paths:
                report("anonymous requests are enabled on every path (no conditions)")
            for extra in sorted(str(x) for x in paths - _ANONYMOUS_OK):
                report(f"anonymous requests are allowed on {extra}; only health checks and "
                       "cluster-info need them")


_PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^\n|;]*\|\s*(sudo\s+)?(ba|z|da)?sh\b")
# (pattern, why, words any match contains, lower-cased: a script without one is not searched)
_SCRIPT_PATTERNS = (
    (_PIPE_TO_SHELL, "pipes a download into a shell (no checksum, no pinned key)",
     ("curl", "wget")),
    (re.compile(r"discovery-token-unsafe-skip-ca-verification|unsafeSkipCAVerification:\s*true"),
     "joins without verifying the cluster CA (anyone on the network can pose as it)",
     ("unsafe",)),
    (re.compile(r"^\s*PasswordAuthentication\s+yes\b", re.M | re.I),
     "turns on SSH password logins", ("passwordauthentication",)),
    # A credential file others can read: any local user (or a container with the host path)
    # takes the key, token or kubeconfig.
    (re.compile(r"\b(chmod|install\s+(-\S+\s+)*-m)\s+0?[0-7][0-7][4-7]\b[^\n]*"
                r"(\.key\b|admin\.conf|kube-vip\.conf|kubeconfig|encryption-config|token|"
                r"password|secret)", re.I),
     "makes a credential file readable by others", ("chmod", "install")),
    (re.compile(r"(--token[= ]|--password[= ]|--discovery-token[= ])\s*[A-Za-z0-9.]{6,}"),
     "puts a credential on a command line (any local user reads it in ps)",
     ("--token", "--password", "--discovery-token")),
)


@resource_rule(
    "host-scripts-safe",
    "Host scripts never pipe downloads into a shell, skip CA pinning, allow SSH passwords, "
    "leave credentials readable or pass them on a command line",
    MANDATORY,
    COMMAND,
)
def host_scripts_safe(args: ResourceValidationArgs, report: Report) -> None:
    """These scripts run as root on every host: a `curl | bash` runs whatever the network
    serves that day, an unpinned join trusts any API server, and a password login is a
    brute-force target on the management network."""
    for text in _scripts(args):
        lower = text.lower()
        for pattern, why, words in _SCRIPT_PATTERNS:
            m = any(w in lower for w in words) and pattern.search(text)
            if m:
                report(f"{m.group(0).strip()[:80]!r}: {why}")


# Capabilities no workload container gets: each one is (close to) root on the host.
_DANGEROUS_CAPS = {"ALL", "SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYS_MODULE", "SYS_RAWIO",
                   "DAC_READ_SEARCH", "BPF", "PERFMON", "SYS_BOOT", "NET_RAW"}


@resource_rule(
    "workload-containers-unprivileged",
    "Workload containers never escalate privileges, add host-level capabilities or run "
    "unconfined; servers never run as root",
    MANDATORY,
    USER_WORKLOADS,
)
def workload_containers_unprivileged(args: ResourceValidationArgs,
                                     report: Report) -> None:
    """Training and serving containers run user code with GPUs and the cluster's data: a
    setuid binary (allowPrivilegeEscalation), SYS_ADMIN or an unconfined seccomp profile
    turns a job into root on the node. IPC_LOCK (RDMA) is not among them. A server (a
    Deployment or StatefulSet, which answers clients) never runs as root."""
    serving = args.resource_type in SERVING
    for path, _, spec in pod_templates(args.resource_type, args.props):
        if get(spec, "securityContext", "seccompProfile", "type") == "Unconfined":
            report("the pod's seccompProfile is Unconfined")
        if serving:  # a server exposed to clients: never root (the pod's context is default)
            for cpath, c in pod_containers(path, spec):
                user, nonroot = (
                    next((v for v in (get(c, "securityContext", k),
                                      get(spec, "securityContext", k)) if v is not None), None)
                    for k in ("runAsUser", "runAsNonRoot"))
                if user == 0 or nonroot is not True:
                    report(f"{cpath} may run as root (runAsUser {user}, runAsNonRoot "
                           f"{nonroot}): a server's exploit would own the container's GPUs "
                           "and mounts as root")
    for path, c in containers(args.resource_type, args.props):
        sc = get(c, "securityContext")
        if get(sc, "allowPrivilegeEscalation") is True:
            report(f"{path}: allowPrivilegeEscalation is true")
        if get(sc, "seccompProfile", "type") == "Unconfined":
            report(f"{path}: seccompProfile is Unconfined")
        added = get(sc, "capabilities", "add")
        bad = sorted(set(added) & _DANGEROUS_CAPS) if is_list(added) else []
        if bad:
            report(f"{path}: adds {', '.join(bad)}")


@resource_rule(
    "ingress-redirects-to-tls",
    "Ingresses never turn off the HTTPS redirect",
    MANDATORY,
    ("kubernetes:networking.k8s.io/v1:Ingress",),
)
def ingress_redirects_to_tls(args: ResourceValidationArgs, report: Report) -> None:
    """With ssl-redirect off, a client that types http:// sends its API key in clear across
    the service network."""
    for key in ("nginx.ingress.kubernetes.io/ssl-redirect",
                "nginx.ingress.kubernetes.io/force-ssl-redirect"):
        if str(get(args.props, "metadata", "annotations", key)).lower() == "false":
            report(f"annotation {key}: \"false\"")


@resource_rule(
    "grafana-no-default-password",
    "The monitoring stack's Grafana is off or has an admin password from a Secret",
    MANDATORY,
    ("kubernetes:helm.sh/v3:Release",),
)
def grafana_no_default_password(args: ResourceValidationArgs,
                                report: Report) -> None:
    """kube-prometheus-stack enables Grafana with the published admin password
    `prom-operator`: every dashboard (and every data source's credentials) for anyone who
    reads the chart's README."""
    if chart_name(args.props) != "kube-prometheus-stack":
        return
    grafana = get(args.props, "values", "grafana")
    if get(grafana, "enabled") is False or get(grafana, "admin", "existingSecret"):
        return
    password = get(grafana, "adminPassword")
    if password in (None, "prom-operator"):
        report("grafana is enabled with the chart's published admin password "
               "(set grafana.enabled: false or grafana.admin.existingSecret)")
