"""Classes of security regression a PR review must not let through, each a rule that names its
risk: a host reachable from anywhere, admission control weakened, a workload in a system
namespace, a service exposed outside the ingress, an identity with cluster rights, a fabric
partition opened, code from model repositories, secrets in clear, and a kubelet-serving
approver that vouches for what the inventory does not.

Each reads the exact scripts and objects the stack sends, so a change made in code or in the
stack file is judged alike."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel, ResourceValidationArgs, StackValidationArgs

from .common import (
    TRAINING_JOB_TYPES,
    config,
    container_gpus,
    containers,
    namespace_of,
    site_resources,
)
from .compat_data import VLLM_FLOOR
from .registry import Report, chart_name, get, is_list, is_map, resource_rule, stack_rule
from .rules_hardening import COMMAND, _documents, _of_kind, _scripts
from .rules_pods import DEFAULT_OPERATOR_NAMESPACES

MANDATORY = EnforcementLevel.MANDATORY
SERVING_TYPES = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")
WORKLOAD_TYPES = (*TRAINING_JOB_TYPES, *SERVING_TYPES, "kubernetes:batch/v1:Job",
                  "kubernetes:core/v1:Pod")
# Namespaces Kubernetes itself owns, beside the operators' (where Pod Security is exempt).
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "default")


# ---------------------------------------------------------------- a host reachable from anywhere

_SHELL_VALUE = re.compile(r'^(?P<key>HOST_FIREWALL|SSH_CIDRS)="(?P<value>[^"]*)"$', re.M)
_NFT_ADMIN = re.compile(r"define admin_nets = \{ (?P<nets>[^}]*) \}")
_ROOT_LOGIN = re.compile(r"^\s*PermitRootLogin\s+(?P<value>\S+)", re.M | re.I)
# sshd settings that let a guessed or empty password in (PasswordAuthentication: host-scripts-safe).
_SSHD_OPEN = re.compile(r"^\s*(?P<key>PermitEmptyPasswords|KbdInteractiveAuthentication|"
                        r"ChallengeResponseAuthentication)\s+yes\b", re.M | re.I)
# Shorter than this, a source is no administrators' network but a slice of the internet.
MIN_ADMIN_PREFIX = 8


def _wide(cidr: str) -> bool:
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return False
    return net.prefixlen < (MIN_ADMIN_PREFIX if net.version == 4 else 32)


@resource_rule(
    "hosts-reachable-only-from-admin-networks",
    "A host reachable from anywhere: the host firewall stays on, SSH and the API server admit "
    "only the management and administrators' networks, and root never logs in",
    MANDATORY,
    COMMAND,
)
def hosts_reachable_only_from_admin_networks(args: ResourceValidationArgs,
                                             report: Report) -> None:
    """Every host holds cluster credentials (kubelet, etcd, the subnet managers' keys) and
    the management network reaches BMCs and switch CLIs: the nftables allowlist, narrow SSH
    sources and no root login are what keep a scan or a stolen key from the internet off
    them."""
    for text in _scripts(args):
        for m in _SHELL_VALUE.finditer(text):
            if m["key"] == "HOST_FIREWALL" and m["value"] != "on":
                report(f'HOST_FIREWALL="{m["value"]}": the host firewall is off')
            if m["key"] == "SSH_CIDRS":
                for cidr in m["value"].split():
                    if _wide(cidr):
                        report(f"SSH is open to {cidr} (wider than /{MIN_ADMIN_PREFIX})")
        for m in _NFT_ADMIN.finditer(text):
            for cidr in m["nets"].split(","):
                if _wide(cidr):
                    report(f"the firewall's admin_nets include {cidr.strip()}: SSH and the "
                           "API server from anywhere")
        for m in _ROOT_LOGIN.finditer(text):
            if m["value"].lower() != "no":
                report(f"sshd PermitRootLogin {m['value']} (root logs in; want no)")
        for m in _SSHD_OPEN.finditer(text):
            report(f"sshd {m['key']} yes: a password prompt on every host")


# ---------------------------------------------------------------- admission control weakened

# Admission plugins the cluster's security rests on; none may be turned off.
_KEPT_ADMISSION = ("NodeRestriction", "PodSecurity", "ValidatingAdmissionPolicy",
                   "ValidatingAdmissionWebhook", "MutatingAdmissionWebhook", "ServiceAccount",
                   "Priority", "LimitRanger", "ResourceQuota")
_VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
_VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"


@resource_rule(
    "admission-controls-intact",
    "Admission control weakened: no admission plugin turned off, Pod Security exemptions only "
    "for the operators, admission policies that deny",
    MANDATORY,
    (*COMMAND, _VAP_BINDING, _VAP),
)
def admission_controls_intact(args: ResourceValidationArgs, report: Report) -> None:
    """NodeRestriction keeps a node's credentials from relabelling other nodes; Pod Security
    and the RDMA ValidatingAdmissionPolicy keep tenant pods off the host. A plugin disabled, a
    tenant namespace exempted or a policy that only warns lets a job own its node.
    Config: namespaces (the operators', which may be exempt)."""
    if args.resource_type == _VAP_BINDING:
        actions = get(args.props, "spec", "validationActions")
        if not is_list(actions) or "Deny" not in actions:
            report(f"validationActions {list(actions or [])}: the policy no longer denies")
        return
    if args.resource_type == _VAP:
        if get(args.props, "spec", "failurePolicy") == "Ignore":
            report("failurePolicy Ignore: a policy that fails to evaluate admits the pod")
        return
    for cc in _of_kind(args, "ClusterConfiguration"):
        given = {a.get("name"): str(a.get("value")) for a in
                 (get(cc, "apiServer", "extraArgs") or []) if is_map(a)}
        off = set(given.get("disable-admission-plugins", "").split(",")) & set(_KEPT_ADMISSION)
        for plugin in sorted(off):
            report(f"--disable-admission-plugins turns {plugin} off")
    allowed = set(config(args, "namespaces", DEFAULT_OPERATOR_NAMESPACES))
    for ac in _of_kind(args, "AdmissionConfiguration"):
        for plugin in ac.get("plugins") or []:
            conf = get(plugin, "configuration")
            if get(plugin, "name") != "PodSecurity" or not is_map(conf):
                continue
            exempt = get(conf, "exemptions") or {}
            for ns in sorted(set(get(exempt, "namespaces") or ()) - allowed):
                report(f"Pod Security exempts namespace {ns!r}, which is no operator's")
            for key in ("usernames", "runtimeClasses"):
                if get(exempt, key):
                    report(f"Pod Security exempts {key} {list(get(exempt, key))}")
            enforce = get(conf, "defaults", "enforce")
            if enforce not in ("baseline", "restricted"):
                report(f"Pod Security enforces {enforce!r} by default (want baseline)")


_NAMESPACE = "kubernetes:core/v1:Namespace"
_PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


def _denied_namespaces(binding: Any) -> set[str] | None:
    """The namespaces a binding that denies selects by name; None when it selects every one."""
    if "Deny" not in (get(binding, "spec", "validationActions") or ()):
        return set()
    selector = get(binding, "spec", "matchResources", "namespaceSelector")
    if not is_map(selector) or not (get(selector, "matchLabels")
                                     or get(selector, "matchExpressions")):
        return None
    names: set[str] = set()
    for e in get(selector, "matchExpressions") or ():
        if get(e, "key") == "kubernetes.io/metadata.name" and get(e, "operator") == "In":
            names |= set(get(e, "values") or ())
    return names


@stack_rule(
    "privileged-namespaces-policed",
    "Admission control weakened: a namespace whose Pod Security is `privileged` is covered by "
    "an admission policy that denies",
    MANDATORY,
)
def privileged_namespaces_policed(args: StackValidationArgs, report: Report) -> None:
    """The training namespaces carry Pod Security `privileged` (RDMA needs IPC_LOCK and the
    scratch hostPath) because rdma-pods-baseline enforces the rest of baseline there: a
    binding that no longer selects one of them leaves its pods with no admission check at all.
    Config: namespaces (the operators', exempt by design)."""
    operators = set(config(args, "namespaces", DEFAULT_OPERATOR_NAMESPACES))
    resources = site_resources(args.resources)
    privileged = sorted(
        str(get(r.props, "metadata", "name")) for r in resources
        if r.resource_type == _NAMESPACE
        and get(r.props, "metadata", "labels", _PSA_ENFORCE) == "privileged"
        and get(r.props, "metadata", "name") not in operators)
    covered: set[str] = set()
    for r in resources:
        if r.resource_type == _VAP_BINDING:
            names = _denied_namespaces(r.props)
            if names is None:
                return
            covered |= names
    for ns in privileged:
        if ns not in covered:
            report(f"namespace {ns!r} enforces Pod Security privileged and no admission policy "
                   "that denies selects it: its pods are admitted unchecked")


@resource_rule(
    "workloads-out-of-system-namespaces",
    "A workload in a system namespace: training, serving and their jobs never run where Pod "
    "Security is exempt",
    MANDATORY,
    WORKLOAD_TYPES,
)
def workloads_out_of_system_namespaces(args: ResourceValidationArgs, report: Report) -> None:
    """kube-system and the operators' namespaces are exempt from Pod Security, hold the
    cluster's own credentials (service account tokens of the CNI, the GPU Operator) and are
    trusted by every admission policy: a tenant job there runs outside all of it.
    Config: namespaces (the operators')."""
    ns = namespace_of(args.props)
    exempt = set(config(args, "namespaces", DEFAULT_OPERATOR_NAMESPACES)) | set(
        SYSTEM_NAMESPACES)
    user = args.resource_type in TRAINING_JOB_TYPES or any(
        container_gpus(c) for _, c in containers(args.resource_type, args.props))
    if user and ns in exempt:
        report(f"a GPU workload in namespace {ns!r}, which Pod Security exempts")


# ---------------------------------------------------------------- exposed outside the ingress

_SERVICE = "kubernetes:core/v1:Service"
_NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
_RELEASE = "kubernetes:helm.sh/v3:Release"


def _open_peer(peer: Any) -> str | None:
    """What makes one `from` entry admit everyone, or None."""
    ns, pods, block = (get(peer, k) for k in ("namespaceSelector", "podSelector", "ipBlock"))
    if is_map(ns) and not get(ns, "matchLabels") and not get(ns, "matchExpressions") \
            and not (is_map(pods) and (get(pods, "matchLabels") or get(pods,
                                                                        "matchExpressions"))):
        return "namespaceSelector: {} (every namespace)"
    if is_map(block) and _wide(str(get(block, "cidr"))):
        return f"ipBlock {get(block, 'cidr')}"
    return None


@resource_rule(
    "services-only-through-the-ingress",
    "A service exposed outside the ingress: no LoadBalancer, NodePort or external IP of the "
    "stack's own, network policies that admit named peers, no ingress snippets",
    MANDATORY,
    (_SERVICE, _NETPOL, _RELEASE),
)
def services_only_through_the_ingress(args: ResourceValidationArgs, report: Report) -> None:
    """The ingress publishes only the API prefix behind TLS and the API key; a Service of its
    own on the load balancer, or a policy admitting every namespace, reaches /metrics, /docs
    and /tokenize and every pod in the namespace. Snippet annotations let any Ingress author
    write nginx configuration (and read the controller's secrets: CVE-2021-25742)."""
    p = args.props
    if args.resource_type == _SERVICE:
        kind = get(p, "spec", "type")
        if kind in ("LoadBalancer", "NodePort"):
            report(f"spec.type {kind}: published beside the ingress")
        if get(p, "spec", "externalIPs"):
            report(f"spec.externalIPs {list(get(p, 'spec', 'externalIPs'))}")
    elif args.resource_type == _NETPOL:
        for i, rule in enumerate(get(p, "spec", "ingress") or ()):
            peers = get(rule, "from")
            if not is_list(peers) or not peers:
                report(f"spec.ingress[{i}] has no from: it admits every source")
                continue
            for j, peer in enumerate(peers):
                why = _open_peer(peer)
                if why:
                    report(f"spec.ingress[{i}].from[{j}] {why}")
    elif chart_name(p) == "ingress-nginx":
        controller = get(p, "values", "controller")
        if get(controller, "allowSnippetAnnotations") is True or str(
                get(controller, "config", "allow-snippet-annotations")).lower() == "true":
            report("ingress-nginx allows snippet annotations")


# ---------------------------------------------------------------- identities with cluster rights

_BINDINGS = ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
             "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
_ROLES = ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
          "kubernetes:rbac.authorization.k8s.io/v1:Role")
# The one signer the stack's approver may approve for (the kubelets' serving certificates):
# any other (kube-apiserver-client above all) mints credentials for any user.
_APPROVABLE_SIGNERS = ("kubernetes.io/kubelet-serving",)


# Verbs that grant more than they name: a role that may bind or escalate grants itself any
# role; impersonate acts as any user, system:masters included.
_ESCALATING_VERBS = ("bind", "escalate", "impersonate")
# Groups every client is in (or every unauthenticated one): a binding to them is a grant to all.
_EVERYONE = ("system:anonymous", "system:unauthenticated", "system:authenticated")


def _role_problems(role: Any) -> Iterator[str]:
    name = get(role, "metadata", "name")
    for i, rule in enumerate(get(role, "rules") or ()):
        for key in ("verbs", "resources"):
            if "*" in (get(rule, key) or ()):
                yield f"{name}: rules[{i}].{key} is '*'"
        for verb in sorted(set(get(rule, "verbs") or ()) & set(_ESCALATING_VERBS)):
            yield f"{name}: rules[{i}] may {verb}"
        if "signers" in (get(rule, "resources") or ()) and "approve" in (get(rule, "verbs")
                                                                        or ()):
            names = list(get(rule, "resourceNames") or ())
            bad = [n for n in names if n not in _APPROVABLE_SIGNERS] or ([] if names
                                                                        else ["(every signer)"])
            if bad:
                yield f"{name}: rules[{i}] may approve CSRs for {', '.join(bad)}"


# Who may hold cluster-admin, as `<kind>:<name>`: the administrators' group and the stack's own
# identity (`pulumi up` manages every object). The policy config names a stack's own.
DEFAULT_CLUSTER_ADMINS = ("Group:gpu-cluster:admins", "User:gpu-cluster:stack")


def _binding_problems(binding: Any, admins: set[str]) -> Iterator[str]:
    for s in get(binding, "subjects") or ():
        if get(s, "name") in _EVERYONE:
            yield (f"{get(binding, 'metadata', 'name')}: binds {get(binding, 'roleRef', 'name')}"
                   f" to {get(s, 'name')}, i.e. to every client")
    if get(binding, "roleRef", "name") != "cluster-admin":
        return
    for s in get(binding, "subjects") or ():
        who = f"{get(s, 'kind')}:{get(s, 'name')}"
        if who not in admins:
            yield (f"{get(binding, 'metadata', 'name')}: cluster-admin for {who}, which is "
                   "not an administrators' group")


@resource_rule(
    "identities-least-privilege",
    "An identity with cluster rights: cluster-admin only for the administrators' groups, no "
    "wildcard roles, CSR approval only for the kubelets' serving signer",
    MANDATORY,
    (*_BINDINGS, *_ROLES, *COMMAND),
)
def identities_least_privilege(args: ResourceValidationArgs, report: Report) -> None:
    """cluster-admin reads every Secret (the inference API keys, the stack's kubeconfig) and
    execs into every pod; a wildcard role is the same; a CSR approver for another signer mints
    a client certificate for any user, system:masters included. The stack's own RBAC (in
    Kubernetes objects and in the control planes' scripts) is judged alike.
    Config: clusterAdmins (`<kind>:<name>` of each subject that may hold cluster-admin)."""
    admins = set(config(args, "clusterAdmins", DEFAULT_CLUSTER_ADMINS))
    docs: list[Any] = ([d for text in _scripts(args) for d in _documents(text)]
                       if args.resource_type in COMMAND else [args.props])
    for doc in docs:
        kind = get(doc, "kind") or args.resource_type.rsplit(":", 1)[-1]
        if kind in ("ClusterRole", "Role"):
            for why in _role_problems(doc):
                report(why)
        elif kind in ("ClusterRoleBinding", "RoleBinding"):
            for why in _binding_problems(doc, admins):
                report(why)


# ---------------------------------------------------------------- a fabric partition opened

# A partition definition of opensm's partitions.conf: `<name>=<pkey>[,flags] : <members> ;`.
_PARTITION = re.compile(r"^\s*(?P<name>[\w.-]+)\s*=(?P<flags>[^:\n=]*(?:=[^:\n]*)?):"
                        r"(?P<members>[^;]*);", re.M)


@resource_rule(
    "fabric-partitions-closed",
    "A fabric partition opened: ALL ports are at most limited members of the Default "
    "partition; every other partition names its members",
    MANDATORY,
    COMMAND,
)
def fabric_partitions_closed(args: ResourceValidationArgs, report: Report) -> None:
    """Limited members of one partition cannot talk to each other: that is what keeps a
    tenant's ports from reaching every other port (and the storage servers) outside the
    partitions the stack grants. `ALL=full` (or a full default membership for ALL) puts every
    end port, a rogue one included, in one open partition (opensm(8), "Partition
    configuration"; a port specifier without membership is limited)."""
    for text in _scripts(args):
        for m in _PARTITION.finditer(text):
            default = re.search(r"defmember=(\w+)", m["flags"])
            for member in m["members"].split(","):
                port, _, level = member.strip().partition("=")
                if port.strip() != "ALL":
                    continue
                level = level.strip() or (default[1] if default else "limited")
                if m["name"] != "Default":
                    report(f"partition {m['name']} admits ALL ports ({level})")
                elif level != "limited":
                    report(f"the Default partition gives ALL ports {level} membership")


# ---------------------------------------------------------------- code from model repositories

_TRUST = re.compile(r"--trust[-_]remote[-_]code\b(?![= ](?:false|0)\b)|\"trust_remote_code\"\s*:"
                    r"\s*true", re.I)
_VERSION_TAG = re.compile(r":v?(\d+)\.(\d+)\.(\d+)(?:[-+][\w.]+)?(?:@sha256:[0-9a-f]{64})?$")


def _runs_vllm(c: Any) -> bool:
    image = str(get(c, "image") or "")
    words = [str(w) for w in (*(get(c, "command") or ()), *(get(c, "args") or ()))]
    name = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    # `vllm serve …`, `python3 -m vllm.entrypoints.openai.api_server …`, or vLLM's own
    # settings (VLLM_API_KEY, which inference-api-key requires of every server).
    return ("vllm" in name.lower()
            or any(w.split()[0].rsplit("/", 1)[-1].startswith("vllm") for w in words if w.strip())
            or any(str(get(e, "name")).startswith("VLLM_") for e in get(c, "env") or ()))


@resource_rule(
    "no-remote-code-from-models",
    "Code from model repositories: no --trust-remote-code, and vLLM at a release without "
    "published advisories, its version readable from the image wherever it comes from",
    MANDATORY,
    WORKLOAD_TYPES,
)
def no_remote_code_from_models(args: ResourceValidationArgs, report: Report) -> None:
    """--trust-remote-code runs the Python a model repository ships, in a container with GPUs,
    the API key and the training data mounts; an old vLLM runs it anyway (advisories fixed in
    later releases: compat_data.VLLM_FLOOR). A mirror's tag without the release, or a digest
    alone, hides which vLLM runs: the version must be in the tag (a digest may follow)."""
    floor = ".".join(map(str, VLLM_FLOOR))
    for path, c in containers(args.resource_type, args.props):
        words = " ".join(str(w) for w in (*(get(c, "command") or ()), *(get(c, "args") or ())))
        env = " ".join(f"{get(e, 'name')}={get(e, 'value')}" for e in get(c, "env") or ())
        if _TRUST.search(words) or re.search(r"TRUST_REMOTE_CODE=(true|1)\b", env, re.I):
            report(f"{path} runs with trust_remote_code: a model repository's code runs in it")
        if not _runs_vllm(c):
            continue
        image = str(get(c, "image") or "")
        m = _VERSION_TAG.search(image)
        if not m:
            report(f"{path} runs vLLM from {image!r}, whose tag names no release: tag it "
                   f"with the vLLM version (e.g. :v{floor}, a digest may follow)")
        elif tuple(int(g) for g in m.groups()) < VLLM_FLOOR:
            report(f"{path} runs vLLM {'.'.join(m.groups())}, before {floor} (published "
                   "security advisories)")


# ---------------------------------------------------------------- secrets in clear

_ON_ARGV = re.compile(r"create secret\b[^\n]*--from-literal[= ]|--from-literal[= ][^\n]*\bsecret\b"
                      r"|kubectl\b[^\n]*create secret generic[^\n]*\$\{?\w*(KEY|TOKEN|PASS)", re.I)
_SECRET_VALUE_KEYS = re.compile(r"(password|passwd|secret|token|apikey|api_key|privatekey)$",
                                re.I)
# Keys that name a Secret (a reference), not hold one.
_SECRET_REFERENCE_KEYS = re.compile(r"(existingsecret|secretname|secretref)$", re.I)


def _literal_secrets(values: Any, path: str = "values") -> Iterator[str]:
    """Helm values whose key names a secret and whose value is a literal string."""
    if is_map(values):
        for k, v in values.items():
            here = f"{path}.{k}"
            if isinstance(v, str) and v and _SECRET_VALUE_KEYS.search(str(k)) \
                    and not _SECRET_REFERENCE_KEYS.search(str(k)):
                yield here
            else:
                yield from _literal_secrets(v, here)
    elif is_list(values):
        for i, v in enumerate(values):
            yield from _literal_secrets(v, f"{path}[{i}]")


@resource_rule(
    "secrets-not-in-clear",
    "Secrets in clear: never on a command line, never a literal in chart values",
    MANDATORY,
    (*COMMAND, _RELEASE),
)
def secrets_not_in_clear(args: ResourceValidationArgs, report: Report) -> None:
    """A value on kubectl's command line is in every process listing and shell history of the
    control plane; a literal in chart values is in the Pulumi state and the Helm release
    Secret unencrypted by the stack's secrets provider. Secrets reach kubectl on stdin and
    charts through existingSecret references."""
    if args.resource_type == _RELEASE:
        for path in _literal_secrets(get(args.props, "values")):
            report(f"{path} is a literal secret in the chart's values (use its existingSecret)")
        return
    for text in _scripts(args):
        m = _ON_ARGV.search(text)
        if m:
            report(f"{m.group(0).strip()[:80]!r}: a secret on kubectl's command line")


# ---------------------------------------------------------------- the kubelet-serving approver

APPROVER_PATH = "/usr/local/sbin/gpu-cluster-approve-kubelet-serving"
_APPROVER = re.compile(r"<<'CONTENT'\n(?P<body>#!/usr/bin/python3\n.*?)\nCONTENT\n\)\"\n"
                       r"if write_if_changed " + re.escape(APPROVER_PATH), re.S)
# Run in a child interpreter (the shipped source imported as a module): CSRs a node's
# credentials could send, each of which the approver must object to; and the node's own, which
# it must approve. Prints one JSON list of verdicts.
_PROBE = r'''
import base64, importlib.util, ipaddress, json, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
spec = importlib.util.spec_from_file_location("approver", sys.argv[1])
approver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(approver)
def csr(node, names):
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "system:node:" + node)])
    req = (x509.CertificateSigningRequestBuilder().subject_name(subject)
           .add_extension(x509.SubjectAlternativeName(names), critical=False)
           .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256()))
    return base64.b64encode(req.public_bytes(serialization.Encoding.PEM)).decode()
ip = lambda a: x509.IPAddress(ipaddress.ip_address(a))
inventory = {"node-a": ["10.0.0.1"], "node-b": ["10.0.0.2"]}
usages = ["digital signature", "key encipherment", "server auth"]
cases = [
    ("own", "node-a", [x509.DNSName("node-a"), ip("10.0.0.1")]),
    ("another node's address", "node-a", [x509.DNSName("node-a"), ip("10.0.0.2")]),
    ("another node's name", "node-a", [x509.DNSName("node-b")]),
    ("an address outside the inventory", "node-a", [ip("10.9.9.9")]),
    ("a name hiding a line break", "node-a", [x509.DNSName("node-a\n"), ip("10.0.0.2")]),
    ("a wildcard", "node-a", [x509.DNSName("*.node-a")]),
]
out = []
for what, node, names in cases:
    item = {"spec": {"username": "system:node:" + node, "usages": usages,
                     "request": csr(node, names)}}
    out.append([what, approver.decide(item, inventory)[0]])
print(json.dumps(out))
'''


def approver_verdicts(source: str) -> list[tuple[str, str]]:
    """What the shipped approver decides on a node's own CSR and on the forged ones."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "approver.py"
        path.write_text(source)
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                              text=True, timeout=60)
    if proc.returncode != 0:
        return [("the approver could not be run", proc.stderr.strip()[-200:])]
    return [(what, verdict) for what, verdict in json.loads(proc.stdout)]


@resource_rule(
    "kubelet-serving-approver-vouches",
    "A kubelet-serving approver that vouches for what the inventory does not: the shipped "
    "approver approves a node's own certificate and denies another node's name or address",
    MANDATORY,
    COMMAND,
)
def kubelet_serving_approver_vouches(args: ResourceValidationArgs, report: Report) -> None:
    """A serving certificate for another node's address lets a node impersonate that kubelet
    to the API server: it then receives the `kubectl exec` sessions and logs meant for the
    other node's pods. The rule runs the approver the control planes install on CSRs a node's
    credentials could send (and on a node's own, which it must approve)."""
    for text in _scripts(args):
        m = _APPROVER.search(text)
        if not m:
            continue
        for what, verdict in approver_verdicts(m["body"]):
            want = "approve" if what == "own" else "deny"
            if verdict != want:
                report(f"the kubelet-serving approver says {verdict!r} to {what} "
                       f"(want {want})")


# ---------------------------------------------------------------- workloads on the admin networks

def _egress_holes(policy: Any, admin: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
                  api_ports: set[int]) -> Iterator[str]:
    """Egress peers of one policy that reach an administrators' network beyond the API port."""
    for i, rule in enumerate(get(policy, "spec", "egress") or ()):
        ports = {int(p) for p in (get(q, "port") for q in get(rule, "ports") or ())
                 if isinstance(p, (int, float))}
        peers = get(rule, "to")
        if not is_list(peers) or not peers:
            if not (ports and ports <= api_ports):
                yield f"egress[{i}] has no to: it reaches every address"
            continue
        for j, peer in enumerate(peers):
            block = get(peer, "ipBlock")
            if not is_map(block):
                continue
            try:
                net = ipaddress.ip_network(str(get(block, "cidr")), strict=False)
                kept = [ipaddress.ip_network(str(e), strict=False)
                        for e in get(block, "except") or ()]
            except ValueError:
                continue
            if ports and ports <= api_ports:
                continue
            if not kept and net.prefixlen < MIN_ADMIN_PREFIX:
                yield (f"egress[{i}].to[{j}] {net} excepts nothing: the administrators' "
                       "networks included")
                continue
            for a in admin:
                if (a.version == net.version and a.overlaps(net)
                        and not any(a.version == k.version
                                    and a.subnet_of(k)  # type: ignore[arg-type]
                                    for k in kept)):
                    yield (f"egress[{i}].to[{j}] {net} reaches the administrators' network "
                           f"{a} on {sorted(ports) or 'every port'}")


def _selects_every_pod(selector: Any) -> bool:
    """An empty podSelector (`{}`, however the engine hands it over) selects every pod."""
    return selector is None or (is_map(selector) and not get(selector, "matchLabels")
                                and not get(selector, "matchExpressions"))


@stack_rule(
    "workloads-off-admin-networks",
    "Workloads reaching the administrators' networks: every namespace with GPU workloads "
    "limits egress, and nothing but the API server's port on the management and BMC networks",
    MANDATORY,
)
def workloads_off_admin_networks(args: StackValidationArgs, report: Report) -> None:
    """The management network carries the hosts' SSH, the kubelets, etcd and the switches'
    CLIs, the BMC network every machine's power and console: a tenant pod that reaches them can
    try every password and every unpatched BMC. Pods need only the API server there.
    Config: adminNetworks (CIDRs; default: those excepted by the stack's own egress policies),
    apiPorts (default [6443])."""
    resources = site_resources(args.resources)
    policies = [r for r in resources if r.resource_type == _NETPOL
                and "Egress" in (get(r.props, "spec", "policyTypes") or ())]
    api_ports = {int(p) for p in config(args, "apiPorts", [6443])}
    named = config(args, "adminNetworks", None)
    if named is None:  # what the stack itself keeps pods off
        named = sorted({str(e) for r in policies for rule in get(r.props, "spec", "egress") or ()
                        for peer in get(rule, "to") or ()
                        for e in get(peer, "ipBlock", "except") or ()})
    admin = [ipaddress.ip_network(str(c), strict=False) for c in named]
    limited = {namespace_of(r.props) for r in policies
               if _selects_every_pod(get(r.props, "spec", "podSelector"))}
    seen: set[str] = set()
    for r in resources:
        # Judged where the objects are known: a first engine preview has no outputs yet.
        user = r.resource_type in (*TRAINING_JOB_TYPES, *SERVING_TYPES) and any(
            container_gpus(c) for _, c in containers(r.resource_type, r.props))
        ns = namespace_of(r.props)
        if user and ns not in limited and ns not in seen:
            seen.add(ns)
            report(f"namespace {ns!r} runs GPU workloads with no egress policy for all its pods: "
                   "they reach the management and BMC networks", r.urn)
    for r in policies:
        for why in _egress_holes(r.props, admin, api_ports):
            report(f"{namespace_of(r.props)}/{get(r.props, 'metadata', 'name')}: {why}", r.urn)
