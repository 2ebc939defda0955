"""hardware layer: one BareMetalNode per host, preparing it over SSH."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command

from components.layers.remote import connection, remote_command
from components.planning import names, reboot


@dataclass(frozen=True)
class BareMetalNodeArgs:
    hostname: str
    role: str
    address: str
    ssh_user: str
    ssh_private_key: Any  # a Pulumi secret
    ssh_host_key: str | None
    prepare_script: str
    bmc_command: str | None = None  # Redfish settings, run where `pulumi up` runs
    bmc_password: Any = None  # a Pulumi secret
    authorized_keys_script: str | None = None  # the managed authorized_keys of ssh_user
    # The board and addresses, for the preview's readers (planning/facts.py host_facts)
    facts: dict[str, Any] = field(default_factory=dict)


class BareMetalNode(pulumi.ComponentResource):
    """A racked, OS-installed server, prepared by an idempotent script pushed over SSH.

    The script travels on stdin so its full text is an input: a changed kernel parameter or a
    new NVMe drive shows in the preview diff line by line, and only when its inputs change.
    """

    def __init__(self, name: str, args: BareMetalNodeArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(names.HOST_TYPE, name, {"facts": args.facts} if args.facts else None,
                         opts)
        self.hostname = args.hostname
        self.role = args.role
        self.address = args.address
        # The board's identity: a replaced board (new SSH host key) re-runs what was done once
        # per board (its BMC settings, its join with a fresh token).
        self.board = args.ssh_host_key or ""
        self.connection = connection(args.address, args.ssh_user, args.ssh_private_key,
                                     args.ssh_host_key)
        # For the check after a planned reboot: dialled until the host is back.
        self.boot_connection = connection(args.address, args.ssh_user, args.ssh_private_key,
                                          args.ssh_host_key, reboot.BOOT_WAIT_DIALS)
        self.prepared = remote_command(
            names.name(names.PREPARE, name),
            connection=self.connection,
            create="sudo bash -s",
            stdin=args.prepare_script,
            # No delete action: removing a host from the stack never wipes it.
            opts=pulumi.ResourceOptions(parent=self),
        )
        if args.authorized_keys_script:
            # Its own command: a key rotation touches only this one, and the stack never logs
            # in with a key this command has not authorised in an earlier `pulumi up`.
            self.ssh_keys = remote_command(
                names.name(names.SSH_KEYS, name), connection=self.connection, create="sudo bash -s",
                stdin=args.authorized_keys_script, opts=pulumi.ResourceOptions(parent=self))
        if args.bmc_command:
            self.bmc = command.local.Command(
                names.name(names.BMC, name),
                create=args.bmc_command,
                environment={"BMC_PASSWORD": args.bmc_password},
                triggers=[self.board],
                logging=command.local.Logging.STDERR,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"hostname": args.hostname, "address": args.address})


class Hardware(pulumi.ComponentResource):
    """Every host of the inventory, keyed by hostname."""

    def __init__(self, name: str, nodes: dict[str, BareMetalNodeArgs],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:hardware:Hardware", name, None, opts)
        self.nodes = {
            host: BareMetalNode(host, args, pulumi.ResourceOptions(parent=self))
            for host, args in sorted(nodes.items())
        }
        self.register_outputs({"hosts": sorted(self.nodes)})
