"""Local NVMe scratch on a DGX H100, run for real in the sandbox (docs/hosts.md).

The fake host is DGX-shaped (tests/support/sandbox.py, `dgx_h100`): two 1.92 TB M.2 OS drives
in an md RAID1 that holds /, eight 3.84 TB U.2 data drives, the /dev/disk/by-id links udev makes for
each, and kernel names shuffled so that nvme0n1..nvme7n1 is not the data set. With DGX OS's
default the data drives are already md1, a RAID0 with ext4 mounted at /raid.

What must hold: the data drives are chosen by what they are, never by kernel name; an OS drive
is never named in any call; an existing array on exactly the data drives is adopted, never
re-created or formatted; a missing or non-blank drive stops the script before it has changed
anything; a second run changes nothing.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from support.sandbox import (
    DGX_DATA_NAMES,
    DGX_H100_HCAS,
    DgxStorage,
    Run,
    Sandbox,
    dgx_h100,
    diff_snapshots,
    ok,
    prod_cluster,
    run_twice,
    unavailable,
)

from components.model.cluster import Cluster
from components.model.fields import CLUSTER_KEY
from components.model.gpu_nodes import GpuNode
from components.model.gpu_nodes_section import DataDrives
from components.planning import host_scripts

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

CLUSTER = prod_cluster()
NODE = CLUSTER.nodes[0]
WRITES_TO_DRIVES = ("mdadm", "mkfs.xfs", "mkfs.ext4", "wipefs", "mount", "umount")


def host(tmp_path: Path, **layout) -> tuple[Sandbox, DgxStorage]:
    sb = Sandbox(tmp_path / NODE.hostname, NODE.hostname,
                 DGX_H100_HCAS)
    storage = dgx_h100(sb, **layout)
    sb.run(":\n")  # bubblewrap's own mount points exist before the first snapshot
    return sb, storage


def script(mount_point: str = "/scratch", filesystem: str = "xfs", **drives) -> str:
    """prepare-host.sh of a GPU node, with the scratch settings and data drives given here
    (prod's dataDrives unless overridden), whatever Pulumi.prod.yaml says about them."""
    storage = CLUSTER.storage.model_copy(update={"scratch": CLUSTER.storage.scratch.model_copy(
        update={"mount_point": mount_point, "filesystem": filesystem})})
    cluster: Cluster = CLUSTER.model_copy(update={"storage": storage})
    spec = NODE.template.data_drives or DataDrives(size_tb=3.84, count=8)
    node: GpuNode = dataclasses.replace(NODE, template=NODE.template.model_copy(
        update={"data_drives": spec.model_copy(update=drives)}))
    return host_scripts.prepare_gpu_node(cluster, node, CLUSTER_KEY)


def stopped_unchanged(sb: Sandbox, text: str) -> Run:
    """The run fails in the drive selection, before any state-changing call or file write."""
    before = sb.snapshot()
    run = sb.run(text)
    assert run.returncode != 0, run.explain()
    assert "scratch: stopped before changing anything on this host" in run.stderr, run.explain()
    assert run.changes == [], run.explain()
    assert diff_snapshots(before, sb.snapshot()) == []
    return run


def never_names_an_os_drive(run: Run, storage: DgxStorage) -> None:
    for call in run.calls:
        for arg in call[1:]:
            assert not any(name in arg for name in storage.os_names), call


def drive_writes(run: Run) -> list[tuple[str, ...]]:
    return [c for c in run.changes if c[0] in WRITES_TO_DRIVES]


# --- DGX OS as shipped: the data drives are md1, RAID0, ext4 at /raid ---------------------------
@pytest.mark.slow
def test_dgx_os_data_array_is_adopted_never_recreated_or_formatted(tmp_path: Path) -> None:
    sb, storage = host(tmp_path)
    fstab = sb.path("/etc/fstab").read_text()
    first = run_twice(sb, script(mount_point="/raid", filesystem="ext4"))
    assert drive_writes(first) == [], first.explain()
    assert not first.find("mdadm") and not first.find("mkfs.ext4"), first.explain()
    assert "scratch: adopt /dev/md1 on " + " ".join(storage.data_ids) in first.stdout
    # Only the swap line changed (kubelet needs swap off); no scratch line was added.
    assert sb.path("/etc/fstab").read_text() == fstab.replace("/swap.img", "# /swap.img")
    never_names_an_os_drive(first, storage)


@pytest.mark.slow
def test_the_configured_filesystem_never_reformats_an_adopted_array(tmp_path: Path) -> None:
    """storage.scratch.filesystem says xfs, DGX OS made ext4: the ext4 stays."""
    sb, _ = host(tmp_path)
    first = run_twice(sb, script(mount_point="/raid", filesystem="xfs"))
    assert drive_writes(first) == [] and not first.find("mkfs.xfs"), first.explain()


@pytest.mark.slow
def test_dgx_os_data_array_mounted_elsewhere_stops_with_the_fix(tmp_path: Path) -> None:
    """Adopting never unmounts DGX OS's /raid (cachefilesd or users may be on it)."""
    sb, storage = host(tmp_path)
    run = stopped_unchanged(sb, script(mount_point="/scratch"))
    assert "/dev/md1 (the array on the data drives) is mounted at /raid, not at /scratch" \
        in run.stderr
    assert "storage.scratch.mountPoint: /raid" in run.stderr
    never_names_an_os_drive(run, storage)


@pytest.mark.slow
def test_the_data_drives_are_found_by_model_when_one_is_given(tmp_path: Path) -> None:
    sb, _ = host(tmp_path)
    run_twice(sb, script(mount_point="/raid", models=("MZQL23T8",)))
    run = stopped_unchanged(sb, script(mount_point="/raid", models=("KIOXIA",)))
    assert "found 0 data drives of 3.84 TB, expected 8" in run.stderr
    assert run.stderr.count("model is not KIOXIA") == 8


# --- blank data drives (DGX OS installed without its data array, or a replaced set) -------------
@pytest.mark.slow
def test_blank_data_drives_become_one_raid0_chosen_by_id_not_kernel_order(
        tmp_path: Path) -> None:
    sb, storage = host(tmp_path, data_array=False)
    kernel_order = sorted(DGX_DATA_NAMES, key=lambda n: int(re.sub(r"\D", "", n[4:])))
    by_id_order = [d.name for d in sorted(storage.data_drives, key=lambda d: d.by_id)]
    assert by_id_order != kernel_order  # the fixture would prove nothing otherwise
    first = run_twice(sb, script())
    assert first.find("mdadm", "--create") == [(
        "mdadm", "--create", "/dev/md/scratch", "--run", "--level=0", "--raid-devices=8",
        *storage.data_ids)]
    assert first.find("mkfs.xfs") == [("mkfs.xfs", "/dev/md/scratch")]
    assert first.count("mount", "/scratch") == 1
    md = Path(sb.path("/dev/md/scratch").readlink()).name
    slaves = {p.name for p in sb.path(f"/sys/block/{md}/slaves").iterdir()}
    assert slaves == {d.name for d in storage.data_drives}
    fs_uuid = sb.fs_uuid(f"/dev/{md}")
    assert f"UUID={fs_uuid} /scratch xfs defaults,noatime,nofail 0 0\n" in \
        sb.path("/etc/fstab").read_text()
    never_names_an_os_drive(first, storage)


def test_the_rendered_script_names_no_kernel_device() -> None:
    text = script()
    assert not re.search(r"/dev/nvme\d", text) and "NVME_DEVICES" not in text
    assert 'DATA_DRIVE_COUNT="8"' in text and 'DATA_DRIVE_SIZE="3.84 TB"' in text


@pytest.mark.slow
@pytest.mark.parametrize("data_array", [False, True], ids=["blank", "dgx-os-array"])
def test_a_missing_data_drive_stops_before_any_change(tmp_path: Path, data_array: bool) -> None:
    sb, storage = host(tmp_path, data_array=data_array, missing=("nvme6n1",))
    run = stopped_unchanged(sb, script(mount_point="/raid"))
    assert "found 7 data drives of 3.84 TB, expected 8" in run.stderr
    assert "replace or reseat the missing drive" in run.stderr
    for drive in storage.data_drives:
        assert f"{drive.by_id} ({drive.name}, 3840 GB, {drive.model}): data drive" in run.stderr
    assert not run.find("mdadm") and not run.find("systemctl")
    never_names_an_os_drive(run, storage)


@pytest.mark.slow
def test_os_drives_are_never_taken_even_when_they_match(tmp_path: Path) -> None:
    """dataDrives describing the M.2 drives (1.92 TB, 2): both back / (md0), so neither is
    taken, and the script stops instead of building scratch on the OS."""
    sb, storage = host(tmp_path, data_array=False)
    run = stopped_unchanged(sb, script(size_tb=1.92, count=2))
    assert "found 0 data drives of 1.92 TB, expected 2" in run.stderr
    for drive in storage.os_drives:
        assert f"{drive.by_id} ({drive.name}, 1920 GB, {drive.model}): OS drive" in run.stderr


@pytest.mark.slow
def test_a_data_drive_that_is_not_blank_is_never_written_over(tmp_path: Path) -> None:
    sb, storage = host(tmp_path, data_array=False)
    victim = storage.data_drives[3]
    (sb.state / "fs" / f"_dev_{victim.name}").write_text(
        f"xfs 5d41402a-bc4b-2a76-b971-9d911017c592 /dev/{victim.name}\n")
    run = stopped_unchanged(sb, script())
    assert f"{victim.by_id}: " in run.stderr and 'TYPE="xfs"' in run.stderr
    assert "wipefs -a" in run.stderr


@pytest.mark.slow
def test_stale_superblocks_on_some_data_drives_stop_the_script(tmp_path: Path) -> None:
    sb, storage = host(tmp_path, data_array=False)
    for drive in storage.data_drives[:3]:
        (sb.state / "disks" / f"_dev_{drive.name}").write_text("0badc0de:0:0:0 raid0\n")
    run = stopped_unchanged(sb, script())
    assert "3 of 8 data drives carry md superblocks" in run.stderr


@pytest.mark.slow
def test_an_array_that_also_spans_another_drive_is_not_adopted(tmp_path: Path) -> None:
    """An md array over the data drives and something else (here an OS partition) belongs to
    someone: it is neither adopted nor touched."""
    sb, storage = host(tmp_path, data_array=False)
    sb.add_array("md2", 0, [d.name for d in storage.data_drives] + ["nvme5n1p1"], fs="xfs")
    run = stopped_unchanged(sb, script())
    assert "the data drives are held by md2" in run.stderr
    assert "adopted only when it is made of exactly the data drives" in run.stderr


@pytest.mark.slow
def test_a_reboot_reassembles_the_array_by_id(tmp_path: Path) -> None:
    sb, storage = host(tmp_path, data_array=False)
    ok(sb.run(script()))
    sb.reboot()
    run = ok(sb.run(script()))
    assert drive_writes(run) == [
        ("mdadm", "--assemble", "/dev/md/scratch", *storage.data_ids), ("mount", "/scratch")]
    assert not run.find("mkfs.xfs")
    never_names_an_os_drive(run, storage)
