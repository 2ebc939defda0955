"""bootstrap layer: KubeadmCluster — init, joins, node placement labels, the Kubernetes provider."""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.layers.hardware import BareMetalNode
from components.layers.kube import cluster_provider
from components.layers.remote import remote_command
from components.planning import kubeadm, names, reboot

# Commands whose stdout carries a credential: kept secret in state and never logged.
QUIET = command.remote.Logging.NONE


@dataclass(frozen=True)
class ControlPlaneHost:
    """Where join tokens are minted: the first control-plane host, possibly prepared by
    another stack of a split site (then `prepared` is None)."""

    hostname: str
    connection: Any
    prepared: Any = None


@dataclass(frozen=True)
class PlannedReboot:
    """A GPU node's reboot commands (components/planning/reboot.py), re-run when what its boot
    must apply (`fingerprint`) changes."""

    fingerprint: str
    check: str
    drain: str
    reboot: str
    after_boot: str
    uncordon: str


@dataclass(frozen=True)
class KubernetesUpgrade:
    """kubeadm's upgrade as commands (components/planning/upgrade.py), each a no-op where the
    packages already are at the target: the control planes in order, then the GPU nodes in
    batches, one lane of batches per SU, each node drained (control plane), upgraded (node)
    and uncordoned (control plane)."""

    control_planes: dict[str, str]  # host -> script; the init host is first
    drains: dict[str, str]
    nodes: dict[str, str]
    uncordons: dict[str, str]
    batches: dict[int, list[tuple[str, ...]]]  # SU -> its batches, in order


@dataclass(frozen=True)
class KubeadmClusterArgs:
    cluster_name: str
    init_host: ControlPlaneHost
    # None when another stack (a split site's core) initialises the control plane; `kubeconfig`
    # (a secret, e.g. that stack's output) then builds the provider.
    init_script: str | None
    token_ttl_minutes: int
    workers: dict[str, BareMetalNode]
    join_scripts: dict[str, str]
    # Further control-plane hosts (HA) and their join scripts, joined one at a time.
    control_planes: dict[str, BareMetalNode] = field(default_factory=dict)
    control_plane_scripts: dict[str, str] = field(default_factory=dict)
    # Per control plane, run once it serves the API: the cluster's own identities' RBAC,
    # kube-vip's own kubeconfig, super-admin.conf off the host (kubeadm.identities_script).
    identities_scripts: dict[str, str] = field(default_factory=dict)
    # Prints the stack's own kubeconfig (kubeadm.stack_kubeconfig_command).
    stack_kubeconfig_command: str | None = None
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    kubeconfig: Any = None
    # Uploads the KubeletConfiguration joining nodes read (with the init, in the same stack).
    kubelet_config_script: str | None = None
    # Per worker: drained, rebooted and checked before it joins or after a boot change.
    reboots: dict[str, PlannedReboot] = field(default_factory=dict)
    # Per worker: the worker before it in its SU's queue for the reboot lock (reboot_queue).
    reboot_queue: dict[str, str] = field(default_factory=dict)
    # Workers being decommissioned: cordoned and drained in this update (removed in a later one).
    decommission: frozenset[str] = frozenset()
    upgrade: KubernetesUpgrade | None = None
    # What the cluster publishes (planning/facts.py: the Kubernetes release, the GPU driver's
    # owner; the quarantine's limits): for the pack's rules and the preview's readers.
    facts: dict[str, str] | None = None


def _present(*resources: Any) -> list[Any]:
    return [r for r in resources if r is not None]


def run_script(script: str, name: str) -> str:
    """The command that runs `script` as root with the SSH channel's stdin left for the
    credentials it reads (`bash -c`, not `bash -s`, so the script is not read from stdin)."""
    return f"sudo bash -c {shlex.quote(script)} {name}"


def join_credentials(*values: Any) -> pulumi.Output[str]:
    """The stdin of a join: one credential per line, in the order the script reads them
    (kubeadm.WORKER_CREDENTIALS / CONTROL_PLANE_CREDENTIALS). Secret end to end."""
    return pulumi.Output.secret(pulumi.Output.all(*values).apply(
        lambda vs: "".join(f"{v}\n" for v in vs)))


def _secret_opts(parent: pulumi.Resource, depends_on: list[Any]) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=depends_on,
                                  additional_secret_outputs=["stdout"])


class KubeadmCluster(pulumi.ComponentResource):
    """A kubeadm cluster whose kubeconfig (a secret) creates the stack's one Kubernetes provider."""

    def __init__(self, name: str, args: KubeadmClusterArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        facts = {"facts": args.facts} if args.facts else None
        super().__init__(names.CLUSTER_TYPE, name, facts, opts)
        cp = args.init_host
        self._init_control_plane(args, cp)
        after_init = _present(self.init)
        # The init host's upgrade first: the kubelet-config upload below is then the new
        # kubeadm's, and the other control planes follow once they have joined.
        self.control_plane_upgrades: dict[str, command.remote.Command] = {}
        self._upgrade_control_planes(args, cp, first=True)
        self.kubelet_config = self._upload_kubelet_config(args, cp, after_init)
        # Joins wait for it: a node joining in the same update gets the new kubelet settings.
        # Workers also wait for the init host's identities: its approver must list a node
        # before the node's serving-certificate CSR can be approved.
        self._before_join = _present(self.kubelet_config)
        self._before_worker_join = _present(self.kubelet_config, self.identities.get(cp.hostname))
        self.ca_cert_hash = remote_command(
            names.CA_CERT_HASH,
            connection=cp.connection,
            create=kubeadm.root_pipeline(kubeadm.CA_HASH_COMMAND),
            opts=pulumi.ResourceOptions(parent=self, depends_on=after_init),
        )
        self._ca_hash = self.ca_cert_hash.stdout.apply(str.strip)  # one Output for every join
        kubeconfig = (self.stack_kubeconfig.stdout if self.stack_kubeconfig is not None
                      else args.kubeconfig)
        self.provider = cluster_provider(args.cluster_name, kubeconfig,
                                         pulumi.ResourceOptions(parent=self))
        self.control_plane_joins = self._join_control_planes(args, cp)
        self._upgrade_control_planes(args, cp, first=False)
        self.members: dict[str, command.remote.Command] = {}
        self._reboot_uncordons: dict[str, Any] = {}
        self._reboot_drains: dict[str, Any] = {}
        for host, node in sorted(args.workers.items()):
            self.members[host] = self._join(node, args, cp)
        self.node_upgrades = self._upgrade_nodes(args, cp)
        self._place_workers(args, cp)
        # The engine shows stack policies a component's registered outputs, not its inputs.
        self.register_outputs({"workers": sorted(self.members), **(facts or {})})

    def _init_control_plane(self, args: KubeadmClusterArgs, cp: ControlPlaneHost) -> None:
        """`kubeadm init` on the first control plane (only the stack that owns it), its
        identities and the stack's own kubeconfig."""
        self.init: command.remote.Command | None = None
        self.stack_kubeconfig: command.remote.Command | None = None
        self.identities: dict[str, command.remote.Command] = {}
        if args.init_script is None:
            return
        # `kubeadm init` is guarded in the script, protected here, and has no delete
        # action: nothing the stack does can reset a live control plane.
        self.init = remote_command(
            names.name(names.KUBEADM_INIT, cp.hostname),
            connection=cp.connection,
            create="sudo bash -s",
            stdin=args.init_script,
            opts=pulumi.ResourceOptions(parent=self, depends_on=_present(cp.prepared),
                                        protect=True),
        )
        self._identities(cp.hostname, cp.connection, args, self.init)
        # Its own identity (gpu-cluster:stack), so the audit log names `pulumi up`; no
        # copy of admin.conf leaves the host. Valid a year: renew by replacing this command.
        if args.stack_kubeconfig_command is not None:
            self.stack_kubeconfig = remote_command(
                names.STACK_KUBECONFIG,
                connection=cp.connection,
                create=args.stack_kubeconfig_command,
                logging=QUIET,
                opts=_secret_opts(self, _present(self.identities.get(cp.hostname))),
            )

    def _upload_kubelet_config(self, args: KubeadmClusterArgs, cp: ControlPlaneHost,
                               after_init: list[pulumi.Resource]
                               ) -> command.remote.Command | None:
        """The KubeletConfiguration joining nodes read. Re-run whenever it changes; there is
        nothing to undo on delete. After the control plane's upgrade: the upload is the new
        kubeadm's."""
        if args.kubelet_config_script is None:
            return None
        return remote_command(
            names.KUBELET_CONFIG,
            connection=cp.connection,
            create="sudo bash -s",
            stdin=args.kubelet_config_script,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                *after_init, *self.control_plane_upgrades.values()]),
        )

    def _place_workers(self, args: KubeadmClusterArgs, cp: ControlPlaneHost) -> None:
        """Drains of the nodes being decommissioned, and every node's placement labels."""
        # What depends on this component (platform, workloads: the jobs sized by node count)
        # waits for these drains. No delete action: removing the node later drains (a no-op
        # by then), deletes the Node and resets the host through `<host>-member`.
        self.decommissions = {
            host: remote_command(
                names.name(names.DECOMMISSION, host), connection=cp.connection,
                create=f"sudo bash -c {shlex.quote(kubeadm.decommission_script(host))}",
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.members[host]]))
            for host in sorted(args.decommission) if host in self.members
        }
        self.node_patches = {
            host: k8s.core.v1.NodePatch(
                names.name(names.PLACEMENT, host),
                metadata={"name": host, "labels": labels},
                opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                            depends_on=[self.members[host]]),
            )
            for host, labels in sorted(args.node_labels.items())
            if host in self.members
        }

    def _upgrade_control_planes(self, args: KubeadmClusterArgs, cp: ControlPlaneHost,
                                first: bool) -> None:
        """`kubeadm upgrade apply` on the init host (`first`), then `upgrade node` on each
        other control plane, one at a time after it (kubeadm's order). Only the stack that
        inits the cluster runs them."""
        if args.upgrade is None or self.init is None:
            return
        done = self.control_plane_upgrades
        for host, script in args.upgrade.control_planes.items():
            if (host == cp.hostname) != first:
                continue
            node = None if first else args.control_planes[host]
            after = ([self.init, *_present(cp.prepared)] if node is None else
                     [node.prepared, self.control_plane_joins[host], list(done.values())[-1]])
            done[host] = remote_command(
                names.name(names.KUBERNETES_UPGRADE, host),
                connection=cp.connection if node is None else node.connection,
                create="sudo bash -s", stdin=script,
                opts=pulumi.ResourceOptions(parent=self, depends_on=after))

    def _upgrade_nodes(self, args: KubeadmClusterArgs,
                       cp: ControlPlaneHost) -> dict[str, command.remote.Command]:
        """Each batch of GPU nodes after the control planes and the batch before it in its
        SU's lane (the lanes side by side): drained on the control plane, upgraded on the
        node, uncordoned on the control plane."""
        if args.upgrade is None:
            return {}
        up = args.upgrade
        done: dict[str, command.remote.Command] = {}
        for lane in up.batches.values():
            self._upgrade_lane(up, args.workers, cp, lane, done)
        return done

    def _upgrade_lane(self, up: KubernetesUpgrade, workers: dict[str, BareMetalNode],
                      cp: ControlPlaneHost, lane: list[tuple[str, ...]],
                      done: dict[str, command.remote.Command]) -> None:
        previous: list[Any] = list(self.control_plane_upgrades.values())
        for batch in lane:
            finished = []
            for host in batch:
                if host not in self.members:
                    continue
                node = workers[host]
                drain = remote_command(
                    names.name(names.UPGRADE_DRAIN, host), connection=cp.connection,
                    create=f"sudo bash -c {shlex.quote(up.drains[host])}",
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[
                        self.members[host], *_present(self._reboot_uncordons.get(host)),
                        *previous]))
                done[host] = remote_command(
                    names.name(names.KUBERNETES_UPGRADE, host), connection=node.connection,
                    create="sudo bash -s", stdin=up.nodes[host],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[drain, node.prepared]))
                finished.append(remote_command(
                    names.name(names.UPGRADE_UNCORDON, host), connection=cp.connection,
                    create=f"sudo bash -c {shlex.quote(up.uncordons[host])}",
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[done[host]])))
            previous = finished or previous

    def _read_secret(self, name: str, cp: ControlPlaneHost, create: str,
                     triggers: list[Any] | None = None,
                     after: list[Any] | None = None) -> command.remote.Command:
        """A command on the control plane whose stdout is a credential: secret, never logged."""
        return remote_command(
            name, connection=cp.connection, create=create, logging=QUIET, triggers=triggers,
            opts=_secret_opts(self, [*_present(self.init), *(after or [])]))

    def _join_control_planes(self, args: KubeadmClusterArgs,
                             cp: ControlPlaneHost) -> dict[str, command.remote.Command]:
        """HA: etcd grows one member at a time, so each join waits for the previous one.

        There is no delete action: the stack never resets a control-plane host."""
        if not args.control_planes:
            return {}
        encryption = self._read_secret(
            names.ENCRYPTION_CONFIG, cp, "sudo cat /etc/kubernetes/encryption-config.yaml")
        joins: dict[str, command.remote.Command] = {}
        previous: list[Any] = _present(self.init)
        for host, node in sorted(args.control_planes.items()):
            token = self._join_token(host, cp, args)
            # Re-uploads the control-plane certificates under a fresh key (valid two hours).
            # One Secret holds them, replaced by each upload: a key uploaded before the
            # previous join would leave that join a key that no longer decrypts them.
            cert_key = self._read_secret(
                names.name(names.CERTIFICATE_KEY, host), cp,
                kubeadm.root_pipeline(kubeadm.CERTIFICATE_KEY_COMMAND), after=previous)
            joins[host] = remote_command(
                names.name(names.KUBEADM_JOIN, host),
                connection=node.connection,
                create=run_script(args.control_plane_scripts[host], "kubeadm-join"),
                stdin=join_credentials(
                    token.stdout.apply(str.strip), self._ca_hash,
                    cert_key.stdout.apply(str.strip),
                    # The command's stdout comes without the file's last newline: the same
                    # file, byte for byte, on every control plane.
                    encryption.stdout.apply(lambda t: base64.b64encode(
                        (t.rstrip("\n") + "\n").encode()).decode())),
                # A fresh token later must not re-run a join that happened.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[
                    node.prepared, token, cert_key, encryption, *previous, *self._before_join],
                    ignore_changes=["stdin"], protect=True),
            )
            previous = [joins[host]]
            self._identities(host, node.connection, args, joins[host])
        return joins

    def _identities(self, host: str, connection: Any, args: KubeadmClusterArgs,
                    after: Any) -> None:
        script = args.identities_scripts.get(host)
        if script is None:
            return
        self.identities[host] = remote_command(
            names.name(names.IDENTITIES, host),
            connection=connection,
            create="sudo bash -s",
            stdin=script,
            opts=pulumi.ResourceOptions(parent=self, depends_on=_present(after)))

    def _join_token(self, host: str, cp: ControlPlaneHost, args: KubeadmClusterArgs,
                    board: str | None = None) -> command.remote.Command:
        # One short-lived token per join: adding a node never touches the other nodes' joins.
        # A new board (`board`: its host key) gets a fresh one: the first has long expired.
        return self._read_secret(
            names.name(names.JOIN_TOKEN, host), cp,
            "sudo " + kubeadm.TOKEN_COMMAND.format(ttl=args.token_ttl_minutes, host=host),
            triggers=[board] if board is not None else None)

    def _planned_reboot(self, node: BareMetalNode, plan: PlannedReboot | None,
                        cp: ControlPlaneHost, queued_after: Any = None) -> Any:
        """Check → drain (control plane) → reboot → wait and check → uncordon, each re-run
        when the boot fingerprint changes; returns what the join waits for. Every step is a
        no-op when the node needs no reboot; members take a lock so only one is out at a time,
        and a drain starts only once the one before it in its SU's queue (`queued_after`) has
        drained: one waiter per SU holds an engine slot, never one per node.
        """
        if plan is None:
            return node.prepared
        host = node.hostname

        def opts(*after: Any) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(after))

        check = remote_command(names.name(names.REBOOT_CHECK, host), connection=node.connection,
                               create="sudo bash -s", stdin=plan.check,
                               triggers=[plan.fingerprint], opts=opts(node.prepared))
        # The drain acts on the check's verdict (its argument); the steps after it re-run
        # whenever the verdict does.
        verdict = check.stdout.apply(
            lambda out: "reboot" if reboot.REBOOT_REQUIRED in (out or "") else "none")
        triggers = [plan.fingerprint, verdict]
        drain = remote_command(
            names.name(names.REBOOT_DRAIN, host), connection=cp.connection,
            create=pulumi.Output.concat(f"sudo bash -c {shlex.quote(plan.drain)} drain ",
                                        verdict),
            triggers=triggers, opts=opts(check, *_present(self.init, queued_after)))
        self._reboot_drains[host] = drain
        restart = remote_command(names.name(names.REBOOT, host), connection=node.connection,
                                 create="sudo bash -s", stdin=plan.reboot, triggers=triggers,
                                 opts=opts(drain))
        booted = remote_command(names.name(names.REBOOT_WAIT, host),
                                connection=node.boot_connection, create="sudo bash -s",
                                stdin=plan.after_boot, triggers=triggers, opts=opts(restart))
        self._reboot_uncordons[host] = remote_command(
            names.name(names.REBOOT_UNCORDON, host), connection=cp.connection,
            create=f"sudo bash -c {shlex.quote(plan.uncordon)}", triggers=triggers,
            opts=opts(booted))
        return booted

    def _join(self, node: BareMetalNode, args: KubeadmClusterArgs,
              cp: ControlPlaneHost) -> command.remote.Command:
        host = node.hostname
        booted = self._planned_reboot(node, args.reboots.get(host), cp,
                                      self._reboot_drains.get(args.reboot_queue.get(host, "")))
        token = self._join_token(host, cp, args, node.board)
        join = remote_command(
            names.name(names.KUBEADM_JOIN, host),
            connection=node.connection,
            create=run_script(args.join_scripts[host], "kubeadm-join"),
            stdin=join_credentials(token.stdout.apply(str.strip), self._ca_hash),
            # Runs only after `<host>-member` was deleted, i.e. after the drain succeeded.
            delete="sudo bash -c 'test ! -f /etc/kubernetes/kubelet.conf || "
                   "kubeadm reset --force --cleanup-tmp-dir'",
            # A new token (a new board) re-runs it with that token: on a joined node the
            # guarded script does nothing, on a new board it joins.
            opts=pulumi.ResourceOptions(parent=self,
                                        depends_on=[booted, token,
                                                    *self._before_worker_join]),
        )
        # Lives on the control plane; deleting it cordons and drains the node before the
        # worker's own reset runs (Pulumi deletes dependents first). It waits for the Node to
        # register, not to be Ready: a node is NotReady until the CNI runs, and the CNI is
        # installed by the platform layer, which waits for this command.
        return remote_command(
            names.name(names.MEMBER, host),
            connection=cp.connection,
            create=f"sudo kubectl --kubeconfig /etc/kubernetes/admin.conf wait --for=create "
                   f"node/{host} --timeout=15m",
            delete=f"sudo bash -c {shlex.quote(kubeadm.drain_script(host))}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[join]),
        )
