"""InfiniBand partitions: one carries the data path at P_Key index 0, the others isolate.

NCCL uses the P_Key at index 0 of a port's table unless NCCL_IB_PKEY names another index; an
IPoIB parent interface (what the pods' attachment and LNet use) takes index 0 too. On the
Default partition every compute port is a limited member, and two limited members cannot talk
(IBA 10.9.1), so the data path must be a partition where every compute port is full, rendered
at index 0 (opensm `indx0`). `tests/test_fabric_sim.py` proves it with opensm and ibsim; these
tests hold the config and the rendered text to it.
"""

from __future__ import annotations

import copy

import pytest
from support.project import REPO, prod_raw

from components.model.fields import ConfigError
from components.planning import placement
from components.planning.fabric import PlanError, plan_fabric
from components.planning.fabric.model import FabricSpec, Partition
from components.planning.fabric.sm_files import render_partitions
from components.wiring.loading import validate_cluster


def _with_partitions(*parts: dict, storage_servers: bool = False) -> dict:
    """Prod with these partitions (and, unless `storage_servers`, no storage servers: the
    partitions' own portGuids then name the servers)."""
    raw = copy.deepcopy(prod_raw())
    raw["fabric"]["partitions"] = list(parts)
    if not storage_servers:
        raw["fabric"].pop("storageServers", None)
    return raw


def _problems(raw: dict) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_cluster(raw, REPO)
    return {p.path: f"{p.message} || {p.fix}" for p in info.value.problems}


DATA_PATH = {"name": "compute", "pkey": 0x0A01, "members": "compute", "dataPath": True}


def test_prod_renders_its_data_path_at_index_0_with_every_compute_port_full() -> None:
    plan = placement.plan(validate_cluster(prod_raw(), REPO))
    text, warnings = render_partitions(plan)
    assert warnings == []
    head = next(line for line in text.splitlines() if line.startswith("compute="))
    assert head == "compute=0x0a01, indx0, ipoib, mtu=5, defmember=full :"
    members = text.split(head)[1].split(";")[0]
    for n in plan.nodes:
        for r in n.rails:
            assert r.port_guid in members, (n.hostname, r.hca)
    # The Lustre servers (prod's fabric.storageServers) are full members: LNet reaches
    # them on it.
    servers = [g for st in plan.spec.storage_servers for g in st.port_guids]
    assert len(servers) == 4 and all(f"{g}=full" in members for g in servers)
    # Default: limited for all, full only for the subnet managers.
    assert "Default=0x7fff, ipoib, mtu=5 :" in text
    assert "ALL=limited, SELF=full" in text


@pytest.mark.parametrize("parts,path,words", [
    (({**DATA_PATH, "dataPath": False},), "fabric.partitions", "0 partitions are marked dataPath"),
    ((DATA_PATH, {**DATA_PATH, "name": "more", "pkey": 0x0A02}), "fabric.partitions",
     "2 partitions are marked dataPath"),
    (({**DATA_PATH, "members": "storage", "portGuids": ["0x0c42a10300b10001"]},),
     "fabric.partitions[0].members", "compute ports limited members"),
    (({**DATA_PATH, "ipoib": False},), "fabric.partitions[0].ipoib", "need IPoIB"),
    # The review's finding: training and inference over the same 64 ports isolate nothing.
    ((DATA_PATH, {"name": "inference", "pkey": 0x0A02, "members": "compute"}),
     "fabric.partitions[1].members", "isolates nothing"),
    ((DATA_PATH, {"name": "storage", "pkey": 0x0B01, "members": "storage"}),
     "fabric.partitions[1].portGuids", "nobody can talk"),
    ((DATA_PATH, {**DATA_PATH, "dataPath": False, "name": "x", "pkey": 0x0A01,
                  "portGuids": ["0x0c42a10300b10001"]}),
     "fabric.partitions[1].pkey", "pkey already used"),
    ((DATA_PATH, {"name": "compute", "pkey": 0x0A02, "members": "all"}),
     "fabric.partitions[1].name", "partition name already used"),
], ids=["no-data-path", "two-data-paths", "data-path-limited", "data-path-no-ipoib",
        "same-ports-twice", "storage-without-servers", "pkey-repeated", "name-repeated"])
def test_partitions_that_would_cut_or_isolate_nothing_are_refused(
        parts: tuple[dict, ...], path: str, words: str) -> None:
    problems = _problems(_with_partitions(*parts))
    assert path in problems, problems
    assert words in problems[path], problems[path]
    assert "||" in problems[path] and problems[path].split("||")[1].strip()


def test_near_misses_are_accepted() -> None:
    """A storage partition with its servers, an `all` management P_Key and the data path."""
    validate_cluster(_with_partitions(
        DATA_PATH,
        {"name": "storage", "pkey": 0x0B01, "members": "storage",
         "portGuids": ["0x0c42a10300b10001"]},
        {"name": "mgmt", "pkey": 0x0C01, "members": "all", "ipoib": True}), REPO)


def test_a_storage_server_port_listed_again_in_a_partition_is_refused() -> None:
    """Storage servers are members of every compute and storage partition already; listing
    a port again says the config and the plan disagree about what the port is."""
    problems = _problems(_with_partitions(
        {**DATA_PATH, "portGuids": ["0x0c42a10300b10001"]}, storage_servers=True))
    assert "is a port of fabric.storageServers[0]" in problems[
        "fabric.partitions[0].portGuids[0]"]


def test_the_renderer_refuses_a_plan_without_one_data_path() -> None:
    from support.fabric_sim import cluster
    for parts in ((Partition("a", 1),), (Partition("a", 1, data_path=True),
                                         Partition("b", 2, data_path=True)),
                  (Partition("a", 1, data_path=True, hosts=("gpu-node-00",)),)):
        plan = plan_fabric(cluster(2), (), FabricSpec(partitions=parts))
        with pytest.raises(PlanError, match="dataPath"):
            render_partitions(plan)
