"""fabric layer: InfinibandFabric — subnet-manager files on the SM hosts, switch settings.

Everything here changes the physical fabric's behaviour, so the preview lists it first as work
that needs a maintenance window.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command

from components.layers.hardware import BareMetalNode
from components.layers.remote import remote_command
from components.planning import names
from components.planning.facts import FabricGuids, fabric_facts
from components.planning.subnet_manager import with_sm_keys


@dataclass(frozen=True)
class SwitchArgs:
    address: str
    host_key: str | None
    cli: str
    password: Any = None  # its own (a Pulumi secret); None: FabricArgs.switch_password


@dataclass(frozen=True)
class SubnetManagerArgs:
    node: BareMetalNode
    files: dict[str, str]  # absolute path on the host -> text
    script: str  # sm_apply_script of the files
    rejoin_script: str | None = None  # a standby's sm_rejoin_script


@dataclass(frozen=True)
class FabricArgs:
    # host -> its subnet manager, in restart order: standbys first, the master last
    sm_hosts: dict[str, SubnetManagerArgs]
    switches: dict[str, SwitchArgs]
    switch_user: str
    switch_password: Any  # a Pulumi secret
    sm_keys: Sequence[Any] = ()  # M_Key, SM_Key, SA_Key: Pulumi secrets
    guids: FabricGuids | None = None  # what the subnet managers know each part by


# The compute fabric's type, and a storage fabric's: the pack reads the compute rails' cabling
# from the first alone, and checks its subnet managers, keys and switches on both.
COMPUTE_FABRIC_TYPE, STORAGE_FABRIC_TYPE = names.COMPUTE_FABRIC_TYPE, names.STORAGE_FABRIC_TYPE


class InfinibandFabric(pulumi.ComponentResource):
    def __init__(self, name: str, args: FabricArgs,
                 opts: pulumi.ResourceOptions | None = None,
                 type_: str = COMPUTE_FABRIC_TYPE) -> None:
        # What the switch commands and subnet-manager files configure, for the policy pack
        # (and a split site's other parts, through the core's `facts` output).
        facts = fabric_facts({sw: s.cli for sw, s in args.switches.items()},
                             {host: sm.files for host, sm in args.sm_hosts.items()},
                             master=next(reversed(args.sm_hosts), None), guids=args.guids)
        self.published_facts = facts
        super().__init__(type_, name, {"facts": facts}, opts)
        # One at a time, in the order given (standbys, then the master): each waits for the
        # previous one to be back in its role.
        self.subnet_managers: dict[str, command.remote.Command] = {}
        previous: list[pulumi.Resource] = []
        for host, sm in args.sm_hosts.items():
            self.subnet_managers[host] = remote_command(
                names.name(names.OPENSM, host),
                connection=sm.node.connection,
                create="sudo bash -s",
                stdin=pulumi.Output.secret(pulumi.Output.all(*args.sm_keys).apply(
                    functools.partial(with_sm_keys, sm.script))),
                opts=pulumi.ResourceOptions(parent=self,
                                            depends_on=[sm.node.prepared, *previous]),
            )
            previous = [self.subnet_managers[host]]
        # A standby an SM_Key change stopped starts again once the master has the new key;
        # the SM_Key (a secret) is the only trigger, so any other change leaves these alone.
        sm_key = args.sm_keys[1] if len(args.sm_keys) > 1 else None
        self.rejoins = {
            host: remote_command(
                names.name(names.OPENSM_REJOIN, host),
                connection=sm.node.connection,
                create="sudo bash -s",
                stdin=sm.rejoin_script,
                triggers=[pulumi.Output.secret(sm_key)] if sm_key is not None else None,
                opts=pulumi.ResourceOptions(parent=self, depends_on=previous),
            )
            for host, sm in args.sm_hosts.items() if sm.rejoin_script is not None
        }
        self.switches = {
            sw: remote_command(
                names.name(names.SWITCH_CONFIG, sw),
                connection=command.remote.ConnectionArgs(
                    host=s.address, user=args.switch_user,
                    password=s.password if s.password is not None else args.switch_password,
                    host_key=s.host_key),
                create="cli",
                stdin=s.cli,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for sw, s in sorted(args.switches.items())
        }
        # The engine shows stack policies a component's registered outputs, not its inputs.
        self.register_outputs({"switches": sorted(self.switches), "facts": facts})
