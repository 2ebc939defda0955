"""What pydantic cannot see field by field: the relations between fields of a built model —
duplicates, overlaps, references, GPU arithmetic, SU slots, version pairs. Each theme is a module
(hosts, fabric, network, node_software, workloads, site; compat for versions); every check takes
the model and yields a Problem with its key path and fix, and nothing here builds or changes the
model or reads a plan (checks that need one run where the plan is made, `wiring/loading.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from components.model.checks import fabric, hosts, network, node_software, site, workloads
from components.model.cluster import Cluster
from components.model.compat import compatibility_problems
from components.model.fields import Problem

Check = Callable[[Cluster], Iterator[Problem]]

# Every check by name, in the order its problems are reported. Each takes the built model and
# yields Problems; none changes the model or depends on another's result.
CHECKS: dict[str, Check] = {
    "node-expansion": hosts.node_expansion,
    "decommissioned-nodes-exist": hosts.decommissioned_nodes_exist,
    "ssh-user-not-root": hosts.ssh_user_not_root,
    "ssh-keys": hosts.credential_problems,
    "unique-hostnames": hosts.unique_hostnames,
    "unique-addresses": hosts.unique_addresses,
    "known-hosts": hosts.known_hosts,
    "rail-hcas": fabric.rail_hcas,
    "unique-guids": fabric.unique_guids,
    "su-slots": fabric.su_slots,
    "control-plane-quorum": hosts.control_plane_quorum,
    "subnet-managers": fabric.subnet_managers,
    "storage-fabric": fabric.storage_fabric,
    "partitions": fabric.partitions,
    "address-plan": network.address_plan,
    "topology-manager-fits-gpus": node_software.topology_manager_fits_gpus,
    "training-jobs": workloads.training_jobs,
    "checkpoints": workloads.checkpoint_problems,
    "driver-pinned": node_software.driver_pinned,
    "gpudirect-storage": node_software.gpudirect_storage,
    "training-script": workloads.script_problems,
    "capacity": workloads.capacity,
    "nccl-test": workloads.nccl_test,
    "inference-services": workloads.inference_services,
    "unique-names": workloads.unique_names,
    "split-part": site.split_part,
    "versions": compatibility_problems,
}


def semantic_problems(c: Cluster) -> Iterator[Problem]:
    """Every check's problems, each tagged with the check's name."""
    for name, check in CHECKS.items():
        for problem in check(c):
            yield replace(problem, check=name)
