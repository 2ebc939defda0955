"""Every script the prod stack runs on a host, run for real (twice) in a sandbox.

The harness (tests/support/sandbox.py) gives each host a throw-away root and recording stubs
for every command with side effects. The first run must do the work; the second must make no
state-changing call and leave every file as it was: nothing is initialised, joined, formatted,
installed or restarted twice.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from support.sandbox import (
    DGX_H100_HCAS,
    STUB_CERT_KEY,
    STUB_INIT_TOKEN,
    Run,
    Sandbox,
    dgx_h100,
    dgx_h100_drives,
    diff_snapshots,
    ok,
    prod_cluster,
    prod_scripts,
    run_twice,
    sm_files,
    stub_names,
    unavailable,
)

from components.model.fields import CLUSTER_KEY
from components.planning import host_scripts, kubeadm, kubelet_serving, quarantine_setup
from components.planning.subnet_manager import (
    sm_apply_script,
    sm_keys_conf,
    sm_rejoin_script,
    with_sm_keys,
)

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

CLUSTER = prod_cluster()
SCRIPTS = prod_scripts()
NODES = {n.hostname: n for n in CLUSTER.nodes}
ROLES = {h.hostname: h.role for h in CLUSTER.hosts} | dict.fromkeys(NODES, "gpu-worker")
HOSTS = sorted({key.split("/")[0] for key in SCRIPTS})
# Deploy order on one host: prepared first (every other command depends on `<host>-prepare`).
ORDER = ("prepare-host.sh", "kubeadm-init.sh", "kubeadm-join-control-plane.sh", "identities.sh",
         "kubelet-config.sh", "kubeadm-join.sh", "apply-opensm.sh")
TOKEN = "abcdef.0123456789abcdef"
# What a worker's join reads from stdin (kubeadm.WORKER_CREDENTIALS), one per line.
JOIN = {"JOIN_TOKEN": TOKEN, "CA_CERT_HASH": "sha256:" + "5e" * 32}
JOIN_STDIN = tuple(JOIN.values())
# A further control plane's (kubeadm.CONTROL_PLANE_CREDENTIALS): the certificate key and the
# first control plane's encryption configuration, base64-encoded, besides.
ENCRYPTION = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"
CP_JOIN_STDIN = (*JOIN_STDIN, "7a" * 32, base64.b64encode(ENCRYPTION.encode()).decode())
CP = CLUSTER.control_plane[0].hostname
GPU = CLUSTER.nodes[0].hostname
SM = CLUSTER.fabric.subnet_managers[0].host
KUBE_PKG = f"{CLUSTER.kubernetes.version}-1.1"
# GPU nodes are DGX H100s with DGX OS on the M.2 RAID1 and blank data drives (DGX OS's own data
# array at /raid is adopted instead: tests/test_scratch_raid.py).
DATA_IDS = dgx_h100_drives().data_ids
SCRATCH = CLUSTER.storage.scratch


def sandbox(tmp_path: Path, host: str, drop_hca: str | None = None) -> Sandbox:
    node = NODES.get(host)
    hcas = {r.hca: DGX_H100_HCAS[r.hca] for r in node.rails if r.hca != drop_hca} if node else {}
    sb = Sandbox(tmp_path / host, host, hcas)
    if node:
        dgx_h100(sb, data_array=False)
    return sb


# Test values for the fabricMKey/fabricSmKey/fabricSaKey secrets `pulumi up` adds to the script.
SM_KEYS = ("0x1f2e3d4c5b6a7988", "0x2a3b4c5d6e7f8091", "0x3c4d5e6f708192a3")


def script(host: str, name: str) -> str:
    """The script as `pulumi up` sends it (the subnet manager's with its keys)."""
    text = SCRIPTS[f"{host}/{name}"]
    return with_sm_keys(text, SM_KEYS) if name == "apply-opensm.sh" else text


def prepared(tmp_path: Path, host: str) -> Sandbox:
    sb = sandbox(tmp_path, host)
    ok(sb.run(script(host, "prepare-host.sh")))
    return sb


# --- what a first run must have done, per script ------------------------------------------------
FIREWALL = ("nft", "-f", host_scripts.FIREWALL_FILE)


def check_hardening(sb: Sandbox, run: Run) -> None:
    """Every host: the sshd drop-in, reloaded once; the firewall checked, then loaded once."""
    dropin = sb.path("/etc/ssh/sshd_config.d/10-gpu-cluster.conf").read_text()
    assert dropin == host_scripts.sshd_config(CLUSTER_KEY) + "\n"
    assert run.count("systemctl", "reload", "ssh") == 1
    checks = [i for i, c in enumerate(run.calls) if c[:2] == ("nft", "-c")]
    loads = [i for i, c in enumerate(run.calls) if c == FIREWALL]
    assert len(checks) == 1 and len(loads) == 1 and checks[0] < loads[0], run.explain()
    assert sb.path(host_scripts.FIREWALL_FILE).read_text() == (
        sb.state / "nft-loaded").read_text()
    assert (sb.state / "units/gpu-cluster-firewall.enabled").exists()


def check_kube_prereqs(sb: Sandbox, run: Run) -> None:
    assert run.count("swapoff", "-a") == 1
    assert not re.search(r"^[^#].*\sswap\s", sb.path("/etc/fstab").read_text(), re.M)
    assert run.count("modprobe", "overlay") == run.count("modprobe", "br_netfilter") == 1
    assert run.count("sysctl", "--system") == 1
    assert run.count("systemctl", "restart", "containerd") == 1
    assert "SystemdCgroup = true" in sb.path("/etc/containerd/config.toml").read_text()
    installs = run.find("apt-get", "install")
    assert sum(f"kubeadm={KUBE_PKG}" in c for c in installs) == 1
    assert {f"kubelet={KUBE_PKG}", f"kubectl={KUBE_PKG}"} <= {a for c in installs for a in c}
    assert run.count("apt-mark", "hold", "kubeadm", "kubelet", "kubectl") == 1
    assert run.count("systemctl", "enable", "kubelet") == 1
    # The repository's key, pinned: fetched once and checked before it is installed. (A GPU
    # node also adds the Lustre client's repository: one more index update.)
    assert len([c for c in run.find("curl") if "pkgs.k8s.io" in c[-1]]) == 1
    assert run.count("apt-get", "update") == (2 if sb.hostname in NODES else 1)
    keyring = sb.path("/etc/apt/keyrings/kubernetes-apt-keyring.gpg").read_text()
    assert keyring == f"stub-key {host_scripts.KUBE_APT_KEY_FINGERPRINT}\n"
    check_hardening(sb, run)


def check_gpu_prepare(sb: Sandbox, run: Run) -> None:
    check_kube_prereqs(sb, run)
    node = NODES[sb.hostname]
    # The data drives by id, in by-id order, whatever the kernel called them.
    assert run.find("mdadm", "--create") == [(
        "mdadm", "--create", "/dev/md/scratch", "--run", "--level=0",
        f"--raid-devices={len(DATA_IDS)}", *DATA_IDS)]
    mkfs = f"mkfs.{SCRATCH.filesystem}"
    assert run.find(mkfs) == [(mkfs, "/dev/md/scratch")]
    assert run.count("mount", SCRATCH.mount_point) == 1
    assert re.search(rf"^UUID=[-0-9a-f]+ {SCRATCH.mount_point} {SCRATCH.filesystem} "
                     "defaults,noatime,nofail 0 0$", sb.path("/etc/fstab").read_text(), re.M)
    assert run.count("update-grub") == 1 and run.count("update-initramfs", "-u") == 1
    assert "iommu=pt" in sb.path("/etc/default/grub.d/90-gpu-cluster.cfg").read_text()
    # The rails keep the names DGX OS gives them: nothing renames an interface.
    assert not list(sb.path("/etc/systemd/network").glob("*.link"))
    assert [sb.netdev(r.hca) for r in node.rails] == [r.netdev for r in node.rails]
    # LNet: the pinned client, /etc/lnet.conf for `lnetctl import` on the rails as they are.
    assert not sb.path("/etc/modprobe.d/lustre.conf").exists()
    assert "- net type: o2ib0" in sb.path("/etc/lnet.conf").read_text()
    assert run.count("apt-get", "install", "-y", "--allow-change-held-packages",
                     f"lustre-client-utils={CLUSTER.storage.lustre_client.version}") == 1
    assert run.count("lnetctl", "import", "/etc/lnet.conf") == 1


def check_cp_prepare(sb: Sandbox, run: Run) -> None:
    check_kube_prereqs(sb, run)
    assert not run.find("mdadm") and not run.find("update-grub") and not run.find("mkfs.xfs")


def check_sm_prepare(sb: Sandbox, run: Run) -> None:
    assert run.changes == [("apt-get", "install", "-y", "opensm"),
                           ("apt-get", "install", "-y", "infiniband-diags"),
                           ("systemctl", "reload", "ssh"),
                           ("apt-get", "install", "-y", "nftables"),
                           ("systemctl", "daemon-reload"),
                           ("systemctl", "enable", "gpu-cluster-firewall"),
                           FIREWALL]
    check_hardening(sb, run)


def check_init(sb: Sandbox, run: Run) -> None:
    assert run.find("kubeadm", "init") == [(
        "kubeadm", "init", "--config", "/etc/kubernetes/kubeadm-init.yaml", "--upload-certs",
        "--skip-token-print", "--skip-certificate-key-print")]
    config = sb.path("/etc/kubernetes/kubeadm-init.yaml").read_text()
    assert "kind: InitConfiguration" in config and f"name: {sb.hostname}" in config
    enc = sb.path("/etc/kubernetes/encryption-config.yaml")
    assert enc.stat().st_mode & 0o077 == 0
    key = re.search(r"secret: (\S+)", enc.read_text())
    assert key and len(key.group(1)) == 44 and "ENCRYPTION_KEY" not in key.group(1)
    for secret in (STUB_CERT_KEY, STUB_INIT_TOKEN, key.group(1)):
        assert secret not in run.output


def check_identities(sb: Sandbox, run: Run) -> None:
    """The stack's own identity bound once; super-admin.conf (system:masters) off the host."""
    assert run.find("kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "apply") == [(
        "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "apply", "-f",
        "/etc/kubernetes/gpu-cluster-rbac.yaml")]
    assert "name: gpu-cluster:stack" in (sb.state / "cluster/applied").read_text()
    assert not sb.path("/etc/kubernetes/super-admin.conf").exists()
    # The approver of kubelet serving certificates (tests/test_kubelet_serving.py runs it
    # against a real API server), its own identity, and every kubelet it vouches for.
    assert run.changes[-5:] == [
        ("systemctl", "daemon-reload"),
        ("systemctl", "enable", "--now", f"{kubelet_serving.UNIT}.timer"),
        ("kubeadm", "kubeconfig", "user", "--config", kubeadm.IDENTITY_CONFIG, "--client-name",
         quarantine_setup.QUARANTINE_USER, "--validity-period", kubeadm.IDENTITY_VALIDITY),
        ("systemctl", "daemon-reload"),
        ("systemctl", "enable", "--now", f"{quarantine_setup.UNIT}.timer")]
    assert sb.path(kubelet_serving.APPROVER).read_text() == kubelet_serving.SCRIPT
    assert sb.path(kubelet_serving.APPROVER).stat().st_mode & 0o777 == 0o755
    assert f"name: {kubelet_serving.APPROVER_USER}" in (sb.state / "cluster/applied").read_text()
    assert "name: gpu-cluster:kubelet-serving-approver" in sb.path(
        kubelet_serving.APPROVER_KUBECONFIG).read_text()
    listed = dict(line.split() for line in sb.path(kubelet_serving.KUBELETS_FILE).read_text()
                  .splitlines())
    assert listed == {h.hostname: str(h.management_ip)
                      for h in (*CLUSTER.control_plane, *CLUSTER.nodes)}
    # The quarantine of unfit GPU nodes (tests/test_quarantine.py runs it against a real API
    # server): the program as it is, its policy (prod's control planes protected), its own
    # identity.
    assert sb.path(quarantine_setup.PROGRAM).read_text() == quarantine_setup.SCRIPT
    assert sb.path(quarantine_setup.PROGRAM).stat().st_mode & 0o777 == 0o755
    policy = json.loads(sb.path(quarantine_setup.POLICY_FILE).read_text())
    assert {"mgmt-01", "mgmt-02", "mgmt-03"} <= set(policy["protected"])
    assert f"name: {quarantine_setup.QUARANTINE_USER}" in (
        sb.state / "cluster/applied").read_text()
    assert f"name: {quarantine_setup.QUARANTINE_USER}" in sb.path(
        quarantine_setup.QUARANTINE_KUBECONFIG).read_text()
    # What `stack-kubeconfig` then runs: a kubeconfig of the stack's own identity.
    kubeconfig = ok(sb.run(kubeadm.stack_kubeconfig_command(CLUSTER).removeprefix("sudo ")))
    assert "name: gpu-cluster:stack" in kubeconfig.stdout


UPLOAD = ("kubeadm", "init", "phase", "upload-config", "kubelet", "--config",
          "/etc/kubernetes/gpu-cluster-kubelet.yaml")


def check_kubelet_config(sb: Sandbox, run: Run) -> None:
    assert run.changes == [UPLOAD]
    uploaded = (sb.state / "kubelet-config-configmap").read_text()
    kl = CLUSTER.kubernetes.kubelet
    assert "kind: KubeletConfiguration" in uploaded
    assert f"cpuManagerPolicy: {kl.cpu_manager_policy}" in uploaded
    assert f"maxPods: {kl.max_pods}" in uploaded


def check_join(sb: Sandbox, run: Run) -> None:
    assert run.find("kubeadm", "join") == [
        ("kubeadm", "join", "--config", "/etc/kubernetes/kubeadm-join.yaml")]
    assert (sb.state / "join-config-mode").read_text().strip() == "600"
    assert sb.path("/etc/kubernetes/kubelet.conf").exists()
    assert not sb.path("/etc/kubernetes/kubeadm-join.yaml").exists()
    assert TOKEN not in run.output and sb.files_containing(TOKEN) == []


def check_apply_opensm(sb: Sandbox, run: Run) -> None:
    assert run.count("systemctl", "restart", "opensm") == 1
    for path, text in sm_files()[sb.hostname].items():
        if path.endswith("/opensm.conf"):  # the keys end the installed file
            text = text.rstrip("\n") + "\n" + sm_keys_conf(SM_KEYS)
        assert sb.path(path).read_text() == text.rstrip("\n") + "\n"
        assert sb.path(path).stat().st_mode & 0o777 == 0o600, path
    assert sb.path("/etc/opensm").stat().st_mode & 0o777 == 0o700
    assert run.changes == [("systemctl", "daemon-reload"), ("systemctl", "restart", "opensm"),
                           ("systemctl", "enable", "--now", "opensm")]


def check_cp_join(sb: Sandbox, run: Run) -> None:
    """Joined once, with the first control plane's encryption key; kube-vip beside it."""
    assert run.count("kubeadm", "join") == 1
    assert sb.path("/etc/kubernetes/encryption-config.yaml").read_text() == ENCRYPTION
    assert sb.path("/etc/kubernetes/manifests/kube-vip.yaml").is_file()
    assert not sb.path("/etc/kubernetes/kubeadm-join.yaml").exists()
    assert "7a" * 32 not in run.output and sb.files_containing("7a" * 32) == []


CHECKS = {
    ("gpu-worker", "prepare-host.sh"): check_gpu_prepare,
    ("control-plane", "prepare-host.sh"): check_cp_prepare,
    ("sm-host", "prepare-host.sh"): check_sm_prepare,
    ("control-plane", "kubeadm-init.sh"): check_init,
    ("control-plane", "kubeadm-join-control-plane.sh"): check_cp_join,
    ("control-plane", "identities.sh"): check_identities,
    ("control-plane", "kubelet-config.sh"): check_kubelet_config,
    ("gpu-worker", "kubeadm-join.sh"): check_join,
    ("sm-host", "apply-opensm.sh"): check_apply_opensm,
}


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_every_script_of_a_host_twice(tmp_path: Path, host: str) -> None:
    """Each of the host's scripts, in deploy order: the first run does the work, the second
    changes nothing (no init, join, mdadm --create, mkfs, install, restart, grub, ...)."""
    sb = sandbox(tmp_path, host)
    names = [n for n in ORDER if f"{host}/{n}" in SCRIPTS]
    assert names[0] == "prepare-host.sh"
    for name in names:
        stdin = (CP_JOIN_STDIN if name == "kubeadm-join-control-plane.sh" else
                 JOIN_STDIN if "join" in name else None)
        first = run_twice(sb, script(host, name), stdin)
        CHECKS[ROLES[host], name](sb, first)


# Run in chain order with a reboot between them (and a second pass that changes nothing) by
# tests/test_planned_reboots.py: scripts/<node>/planned-reboot/*.sh.
CHAINED_SCRIPTS = {("gpu-worker", "planned-reboot")}
# Run in their own sandboxes, each in the situations it exists for.
ELSEWHERE = {
    # tests/test_kubernetes_upgrade.py: each step of the upgrade, and a second run
    ("gpu-worker", "kubernetes-upgrade"), ("control-plane", "kubernetes-upgrade.sh"),
    # tests/test_secret_rotation.py: adopt, authorise, swap, drop, never empty
    ("gpu-worker", "ssh-keys.sh"), ("control-plane", "ssh-keys.sh"), ("sm-host", "ssh-keys.sh"),
    # tests/test_workloads.py: minted once, never on a command line
    ("control-plane", "llama-70b-api-key.sh"),
    # tests/test_acceptance_gate.py: chooses the nodes, runs the test there, marks them tested;
    # run again, it finds nothing to test
    ("control-plane", "nccl-acceptance.sh"),
    # below, test_a_standby_whose_sm_key_changes_waits_stopped_for_the_master: after its
    # apply stopped it for a new SM_Key, and with nothing pending
    ("sm-host", "rejoin-opensm.sh"),
}


def test_every_rendered_script_is_covered() -> None:
    rendered = {(ROLES[k.split("/")[0]], k.split("/")[1]) for k in SCRIPTS}
    assert rendered == set(CHECKS) | CHAINED_SCRIPTS | ELSEWHERE


# --- GPU node: scratch array, kernel arguments, rails ----------------------------------------
@pytest.mark.slow
def test_reboot_assembles_the_scratch_array_and_never_formats_it(tmp_path: Path) -> None:
    """After a reboot (or an OS reinstall) the drives carry the array but /dev/md/scratch is not
    there: the script assembles it. Re-creating it, or mkfs, would wipe the staged data."""
    sb = prepared(tmp_path, GPU)
    sb.reboot()
    run = ok(sb.run(script(GPU, "prepare-host.sh")))
    assert run.changes == [
        ("mdadm", "--assemble", "/dev/md/scratch", *DATA_IDS),
        ("mount", SCRATCH.mount_point),
    ], run.explain()  # the staged iommu=pt is on the command line now: no update-grub either
    run_twice(sb, script(GPU, "prepare-host.sh"))


@pytest.mark.slow
def test_an_interrupted_mkfs_is_finished_by_the_next_run(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, GPU)
    mkfs = f"mkfs.{SCRATCH.filesystem}"
    sb.fail_next(mkfs)
    assert sb.run(script(GPU, "prepare-host.sh")).returncode != 0
    run = ok(sb.run(script(GPU, "prepare-host.sh")))
    assert run.count("mdadm", "--create") == 0 and run.count("mdadm", "--assemble") == 0
    assert run.count(mkfs) == 1 and run.count("mount", SCRATCH.mount_point) == 1


@pytest.mark.slow
def test_a_missing_hca_fails_before_lnet_binds_the_rails(tmp_path: Path) -> None:
    missing = NODES[GPU].rails[3].hca
    sb = sandbox(tmp_path, GPU, drop_hca=missing)
    run = sb.run(script(GPU, "prepare-host.sh"))
    assert run.returncode != 0 and f"HCA {missing} not found" in run.stderr
    assert not run.find("lnetctl") and not sb.path("/etc/lnet.conf").exists()


@pytest.mark.slow
def test_a_rail_named_otherwise_than_configured_fails_with_the_fix(tmp_path: Path) -> None:
    """A node cabled or enumerated differently from the template (e.g. not a DGX H100): the
    script names the rail, what the OS calls it and the key to fix, and binds nothing."""
    node = NODES[GPU]
    sb = sandbox(tmp_path, GPU)
    other = {**DGX_H100_HCAS, node.rails[2].hca: "0000:51:00.0"}  # ibp81s0, not ibp79s0
    sb.hcas = {}
    for d in ("sys/class/infiniband", "sys/class/net", "sys/devices"):
        shutil.rmtree(sb.path(d))
        sb.path(d).mkdir()
    for hca, pci in other.items():
        sb.add_hca(hca, pci)
    sb.add_nic("eno1", node.management_mac)
    run = sb.run(script(GPU, "prepare-host.sh"))
    assert run.returncode == 1
    assert (f"rail 2: {node.rails[2].hca}'s IPoIB interface is 'ibp81s0', the stack config "
            f"says {node.rails[2].netdev}") in run.stderr
    assert "set gpuNodes netdevs[2] to what `ibdev2netdev` prints" in run.stderr
    assert not run.find("lnetctl") and not run.find("netplan")


@pytest.mark.slow
def test_renamed_rails_from_an_earlier_rendering_get_their_names_back_at_the_reboot(
        tmp_path: Path) -> None:
    """Hosts prepared when the stack renamed rails to ib<r> (.link files, applied by a boot):
    the files go, a reboot is required, and LNet waits for the boot that restores the names."""
    node = NODES[GPU]
    sb = sandbox(tmp_path, GPU)
    for r in node.rails:
        sb.path(f"/etc/systemd/network/10-gpu-cluster-ib{r.index}.link").write_text(
            f"[Match]\nPath=pci-{DGX_H100_HCAS[r.hca]}\n[Link]\nName=ib{r.index}\n")
    sb.reboot()
    assert sb.netdev(node.rails[0].hca) == "ib0"
    run = ok(sb.run(script(GPU, "prepare-host.sh")))
    assert not list(sb.path("/etc/systemd/network").glob("*.link"))
    assert run.count("update-initramfs", "-u") == 1  # the initramfs carries .link files too
    assert sb.path("/var/lib/gpu-cluster/reboot.pending").exists()
    assert not run.find("lnetctl", "import")
    assert "LNet: not before the planned reboot: no" in run.stdout
    sb.reboot()
    assert [sb.netdev(r.hca) for r in node.rails] == [r.netdev for r in node.rails]


@pytest.mark.slow
def test_a_gpu_node_without_nvme_still_gets_the_gpu_steps(tmp_path: Path) -> None:
    node = NODES[GPU]
    bare = dataclasses.replace(node, template=node.template.model_copy(
        update={"data_drives": None}))
    text = host_scripts.prepare_gpu_node(CLUSTER, bare, CLUSTER_KEY)
    sb = sandbox(tmp_path, GPU)
    first = run_twice(sb, text)
    assert first.count("update-grub") == 1 and first.count("update-initramfs", "-u") == 1
    assert not first.find("mdadm") and not first.find("mkfs.xfs") and not first.find("mount")
    assert sb.path("/etc/lnet.conf").exists()
    assert not list(sb.path("/etc/systemd/network").glob("*.link"))


def test_variables_are_rendered_unindented() -> None:
    text = script(GPU, "prepare-host.sh")
    assert re.search(r"^MODULES=", text, re.M) and re.search(r"^KUBE_PKG_VERSION=", text, re.M)


# --- kubeadm init ------------------------------------------------------------------------------
@pytest.mark.slow
def test_init_runs_once_and_its_rerun_touches_nothing(tmp_path: Path) -> None:
    sb = prepared(tmp_path, CP)
    first = ok(sb.run(script(CP, "kubeadm-init.sh")))
    check_init(sb, first)
    second = ok(sb.run(script(CP, "kubeadm-init.sh")))
    assert second.calls == [] and "already initialised" in second.stdout


@pytest.mark.slow
def test_a_failed_init_is_retried_with_the_same_encryption_key(tmp_path: Path) -> None:
    sb = prepared(tmp_path, CP)
    sb.fail_next("kubeadm init")
    assert sb.run(script(CP, "kubeadm-init.sh")).returncode != 0
    key = sb.path("/etc/kubernetes/encryption-config.yaml").read_text()
    run = ok(sb.run(script(CP, "kubeadm-init.sh")))
    assert run.count("kubeadm", "init") == 1
    assert sb.path("/etc/kubernetes/encryption-config.yaml").read_text() == key


# --- the kubelet-config ConfigMap ---------------------------------------------------------------
def _kubelet_script(**changes: object) -> str:
    kubelet = CLUSTER.kubernetes.kubelet.model_copy(update=changes)
    kubernetes = CLUSTER.kubernetes.model_copy(update={"kubelet": kubelet})
    cluster = CLUSTER.model_copy(update={"kubernetes": kubernetes})
    return kubeadm.kubelet_config_script(cluster, CLUSTER.control_plane[0])


@pytest.mark.slow
def test_a_changed_kubelet_setting_is_uploaded_once(tmp_path: Path) -> None:
    """What `pulumi up` runs when the stack's KubeletConfiguration changes after init."""
    sb = prepared(tmp_path, CP)
    ok(sb.run(script(CP, "kubeadm-init.sh")))
    ok(sb.run(script(CP, "kubelet-config.sh")))
    changed = _kubelet_script(max_pods=64)
    assert changed != script(CP, "kubelet-config.sh")
    first = run_twice(sb, changed)
    assert first.changes == [UPLOAD]
    assert "maxPods: 64" in (sb.state / "kubelet-config-configmap").read_text()


@pytest.mark.slow
def test_a_failed_upload_is_retried_by_the_next_run(tmp_path: Path) -> None:
    sb = prepared(tmp_path, CP)
    ok(sb.run(script(CP, "kubeadm-init.sh")))
    sb.fail_next("kubeadm init")
    assert sb.run(script(CP, "kubelet-config.sh")).returncode != 0
    retry = ok(sb.run(script(CP, "kubelet-config.sh")))
    assert retry.changes == [UPLOAD]
    assert ok(sb.run(script(CP, "kubelet-config.sh"))).changes == []


# --- kubeadm join ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("missing", ["JOIN_TOKEN", "CA_CERT_HASH"])
def test_join_refuses_to_run_without_its_secrets(tmp_path: Path, missing: str) -> None:
    sb = prepared(tmp_path, GPU)
    # A credential missing from stdin (an empty line in its place), or given the old way, in
    # the environment: both stop the script before kubeadm runs.
    lines = tuple("" if k == missing else v for k, v in JOIN.items())
    run = sb.run(script(GPU, "kubeadm-join.sh"), credentials=lines)
    assert run.returncode != 0 and "expected JOIN_TOKEN, CA_CERT_HASH on stdin" in run.stderr
    environment = sb.run(script(GPU, "kubeadm-join.sh"), JOIN, credentials=())
    assert environment.returncode != 0 and not environment.find("kubeadm")
    assert not run.find("kubeadm")
    assert not sb.path("/etc/kubernetes/kubeadm-join.yaml").exists()


@pytest.mark.slow
def test_join_never_shows_or_leaves_the_token(tmp_path: Path) -> None:
    sb = prepared(tmp_path, GPU)
    first = ok(sb.run(script(GPU, "kubeadm-join.sh"), credentials=JOIN_STDIN))
    check_join(sb, first)
    second = ok(sb.run(script(GPU, "kubeadm-join.sh"), credentials=JOIN_STDIN))
    assert second.calls == [] and "already joined" in second.stdout
    assert TOKEN not in second.output and sb.files_containing(TOKEN) == []


@pytest.mark.slow
def test_a_failed_join_removes_the_token_file_and_is_retried(tmp_path: Path) -> None:
    sb = prepared(tmp_path, GPU)
    sb.fail_next("kubeadm join")
    failed = sb.run(script(GPU, "kubeadm-join.sh"), credentials=JOIN_STDIN)
    assert failed.returncode != 0 and failed.count("kubeadm", "join") == 1
    assert not sb.path("/etc/kubernetes/kubeadm-join.yaml").exists()
    assert TOKEN not in failed.output and sb.files_containing(TOKEN) == []
    check_join(sb, ok(sb.run(script(GPU, "kubeadm-join.sh"), credentials=JOIN_STDIN)))


# --- leaving: drain on the control plane, then reset on the worker ---------------------------
@pytest.mark.slow
def test_leave_does_nothing_on_a_node_that_never_joined(tmp_path: Path) -> None:
    sb = prepared(tmp_path, GPU)
    run = ok(sb.run(kubeadm.leave_script(GPU)))
    assert run.calls == [] and "not joined" in run.stdout


@pytest.mark.slow
def test_leave_resets_a_joined_node_once(tmp_path: Path) -> None:
    sb = prepared(tmp_path, GPU)
    ok(sb.run(script(GPU, "kubeadm-join.sh"), credentials=JOIN_STDIN))
    first = run_twice(sb, kubeadm.leave_script(GPU))
    assert first.changes == [("kubeadm", "reset", "--force", "--cleanup-tmp-dir")]
    assert not sb.path("/etc/kubernetes/kubelet.conf").exists()


@pytest.mark.slow
def test_drain_is_a_noop_for_a_node_that_is_not_a_member(tmp_path: Path) -> None:
    sb = prepared(tmp_path, CP)
    ok(sb.run(script(CP, "kubeadm-init.sh")))
    sb.add_node("gpu-node-01")
    run = ok(sb.run(kubeadm.drain_script(GPU)))
    assert run.changes == [] and "nothing to drain" in run.stdout
    assert sb.nodes() == {"gpu-node-01"}


@pytest.mark.slow
def test_drain_cordons_drains_and_deletes_a_member_once(tmp_path: Path) -> None:
    sb = prepared(tmp_path, CP)
    ok(sb.run(script(CP, "kubeadm-init.sh")))
    sb.add_node(GPU)
    first = run_twice(sb, kubeadm.drain_script(GPU))
    assert [c[:2] for c in first.changes] == [
        ("kubectl", "cordon"), ("kubectl", "drain"), ("kubectl", "delete")]
    assert first.find("kubectl", "drain")[0][2] == GPU
    assert sb.nodes() == set()


@pytest.mark.slow
def test_drain_fails_when_the_api_server_cannot_answer(tmp_path: Path) -> None:
    """"Cannot ask" is not "not a member": exiting 0 would let the worker reset undrained."""
    sb = prepared(tmp_path, CP)
    ok(sb.run(script(CP, "kubeadm-init.sh")))
    sb.add_node(GPU)
    sb.api_down()
    run = sb.run(kubeadm.drain_script(GPU))
    assert run.returncode != 0 and "nothing to drain" not in run.stdout, run.explain()
    assert run.changes == [] and sb.nodes() == {GPU}


# --- subnet manager ----------------------------------------------------------------------------
def sm_sandbox(tmp_path: Path) -> Sandbox:
    return prepared(tmp_path, SM)


def apply(files: dict[str, str], keys: tuple[str, ...] = SM_KEYS) -> str:
    """apply-opensm.sh for SM (sm-01, the master: priority 15), with its keys."""
    return with_sm_keys(sm_apply_script(files, "mlx5_0", master=True), keys)


@pytest.mark.slow
def test_opensm_restarts_only_when_a_file_changed(tmp_path: Path) -> None:
    sb = sm_sandbox(tmp_path)
    files = sm_files()[SM]
    first = run_twice(sb, apply(files))
    assert first.count("systemctl", "restart", "opensm") == 1
    path = "/etc/opensm/opensm.conf"
    changed = dict(files, **{path: files[path].replace("sm_priority 15", "sm_priority 13")})
    assert changed[path] != files[path]
    before = sb.snapshot()
    run = ok(sb.run(apply(changed)))
    assert run.changes == [("systemctl", "daemon-reload"), ("systemctl", "restart", "opensm")], \
        run.explain()
    assert diff_snapshots(before, sb.snapshot()) == ["etc/opensm/opensm.conf"]
    assert sb.run(apply(changed)).changes == []


@pytest.mark.slow
def test_the_keys_reach_only_the_installed_file_and_a_new_key_restarts_opensm(
        tmp_path: Path) -> None:
    """The rendered script holds no key and refuses to run without them (nothing changed);
    sent with the keys it ends opensm.conf with them, 0600; opensm runs under umask 0077 (its
    log and guid2mkey cache hold keys); a key rotation changes only opensm.conf."""
    sb = sm_sandbox(tmp_path)
    files = sm_files()[SM]
    rendered = SCRIPTS[f"{SM}/apply-opensm.sh"]
    assert not any(k in rendered for k in SM_KEYS)
    before = sb.snapshot()
    run = sb.run(rendered)
    assert run.returncode != 0 and "the subnet-manager keys come with this script" in run.stderr
    assert run.changes == [] and diff_snapshots(before, sb.snapshot()) == []
    ok(sb.run(apply(files)))
    conf = sb.path("/etc/opensm/opensm.conf").read_text()
    assert conf.endswith(f"m_key {SM_KEYS[0]}\nsm_key {SM_KEYS[1]}\nsa_key {SM_KEYS[2]}\n")
    assert "UMask=0077" in sb.path("/etc/systemd/system/opensm.service.d/10-gpu-cluster.conf"
                                   ).read_text()
    rotated = ("0x4d5e6f708192a3b4", *SM_KEYS[1:])
    before = sb.snapshot()
    run = ok(sb.run(apply(files, rotated)))
    assert run.changes == [("systemctl", "daemon-reload"), ("systemctl", "restart", "opensm")]
    assert diff_snapshots(before, sb.snapshot()) == ["etc/opensm/opensm.conf"]
    assert f"m_key {rotated[0]}\n" in sb.path("/etc/opensm/opensm.conf").read_text()


@pytest.mark.slow
def test_a_malformed_guid_file_installs_nothing(tmp_path: Path) -> None:
    sb = sm_sandbox(tmp_path)
    files = sm_files()[SM]
    ok(sb.run(apply(files)))
    before = sb.snapshot()
    path = "/etc/opensm/root_guids.conf"
    bad = dict(files, **{path: files[path] + "fc6a1c0300a10001\n",
                         "/etc/opensm/opensm.conf": files["/etc/opensm/opensm.conf"] + "#\n"})
    run = sb.run(apply(bad))
    assert run.returncode != 0 and f"malformed GUID file {path}" in run.stderr
    assert run.changes == [] and diff_snapshots(before, sb.snapshot()) == []


@pytest.mark.slow
def test_a_failed_restart_is_retried_by_the_next_run(tmp_path: Path) -> None:
    sb = sm_sandbox(tmp_path)
    sb.fail_next("systemctl restart")
    assert sb.run(apply(sm_files()[SM])).returncode != 0
    run = ok(sb.run(apply(sm_files()[SM])))
    assert run.count("systemctl", "restart", "opensm") == 1
    assert sb.run(apply(sm_files()[SM])).changes == []


@pytest.mark.slow
def test_a_restart_is_done_only_once_opensm_is_back_in_its_role(tmp_path: Path) -> None:
    """The master that comes back still sweeping (DISCOVERING) or as a standby fails the run
    with the state it is in and keeps the restart pending; the next run restarts it again and
    finishes once sminfo shows MASTER. A standby's script accepts STANDBY."""
    sb = sm_sandbox(tmp_path)
    files = sm_files()[SM]
    sb.sm_state("SMINFO_DISCOVERING")
    run = sb.run(apply(files))
    assert run.returncode == 1, run.explain()
    assert "opensm on mlx5_0 is SMINFO_DISCOVERING 300 s after its restart, not MASTER" \
        in run.stderr
    assert sb.path("/var/lib/gpu-cluster/opensm-restart-pending").exists()
    sb.sm_state("SMINFO_STANDBY")
    assert sb.run(apply(files)).returncode == 1  # a master that stays standby: not done
    sb.sm_state(None)
    run = ok(sb.run(apply(files)))
    assert run.count("systemctl", "restart", "opensm") == 1 and "is back: SMINFO_MASTER" \
        in run.stdout
    assert sb.run(apply(files)).changes == []
    standby = sm_sandbox(tmp_path / "standby")
    standby.sm_state("SMINFO_STANDBY")
    run = ok(standby.run(with_sm_keys(sm_apply_script(files, "mlx5_0", master=False), SM_KEYS)))
    assert "is back: SMINFO_STANDBY" in run.stdout


@pytest.mark.slow
def test_a_standby_whose_sm_key_changes_waits_stopped_for_the_master(tmp_path: Path) -> None:
    """opensm ignores an SM holding another SM_Key: a standby restarted with a new SM_Key
    before the master would make itself a second master. Its apply script stops it instead,
    and its rejoin script (after the master's apply) starts it and accepts only STANDBY. An
    M_Key-only change restarts it as any change does; the rejoin then does nothing."""
    files = sm_files()[SM]
    sb = sm_sandbox(tmp_path)
    sb.sm_state("SMINFO_STANDBY")

    def standby_apply(keys: tuple[str, ...]) -> str:
        return with_sm_keys(sm_apply_script(files, "mlx5_0", master=False), keys)

    ok(sb.run(standby_apply(SM_KEYS)))
    m_key_only = ("0x4d5e6f708192a3b4", *SM_KEYS[1:])
    run = ok(sb.run(standby_apply(m_key_only)))
    assert run.changes == [("systemctl", "daemon-reload"), ("systemctl", "restart", "opensm")]
    assert ok(sb.run(sm_rejoin_script("mlx5_0"))).changes == []
    new_sm_key = (m_key_only[0], "0x5e6f708192a3b4c5", m_key_only[2])
    run = ok(sb.run(standby_apply(new_sm_key)))
    assert run.changes == [("systemctl", "daemon-reload"), ("systemctl", "stop", "opensm")]
    assert "stays stopped until the master runs with the new key" in run.stdout
    assert ok(sb.run(standby_apply(new_sm_key))).count("systemctl", "restart", "opensm") == 0
    # After the master: back only as STANDBY; a second MASTER fails the run and is retried.
    sb.sm_state("SMINFO_MASTER")
    run = sb.run(sm_rejoin_script("mlx5_0"))
    assert run.returncode == 1 and "is SMINFO_MASTER 300 s after its restart, not STANDBY" \
        in run.stderr
    sb.sm_state("SMINFO_STANDBY")
    run = ok(sb.run(sm_rejoin_script("mlx5_0")))
    assert run.changes == [("systemctl", "restart", "opensm")]
    assert "is back: SMINFO_STANDBY" in run.stdout
    assert ok(sb.run(sm_rejoin_script("mlx5_0"))).changes == []


# --- the harness itself ------------------------------------------------------------------------
@pytest.mark.slow
def test_the_sandbox_shadows_every_side_effect_and_isolates_the_host(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, "probe")
    names = " ".join(stub_names())
    run = ok(sb.run(f"for c in {names}; do command -v \"$c\"; done\n"
                    "cat /etc/hostname /proc/cmdline\n"
                    "/usr/bin/mount -t tmpfs none /tmp && echo MOUNTED || true\n"))
    resolved = run.stdout.splitlines()
    assert resolved[: len(list(stub_names()))] == [f"/stub/bin/{n}" for n in stub_names()]
    assert "probe" in resolved and "MOUNTED" not in run.stdout
    assert resolved[-1].startswith("BOOT_IMAGE=") and "iommu=pt" not in resolved[-1]


@pytest.mark.slow
@pytest.mark.parametrize(("command", "call"), [
    ("sysctl", ("sysctl", "--system")),
    ("update-initramfs", ("update-initramfs", "-u")),
    ("systemctl restart", ("systemctl", "restart", "containerd")),
])
def test_a_failed_follow_up_action_is_retried_on_the_next_run(
        tmp_path: Path, command: str, call: tuple[str, ...]) -> None:
    """The file was written before its reload failed; the rerun must still do the reload."""
    sb = sandbox(tmp_path, GPU)
    sb.fail_next(command)
    assert sb.run(script(GPU, "prepare-host.sh")).returncode != 0
    retry = ok(sb.run(script(GPU, "prepare-host.sh")))
    assert retry.count(*call) == 1, retry.explain()
    assert ok(sb.run(script(GPU, "prepare-host.sh"))).count(*call) == 0


@pytest.mark.slow
def test_a_new_kubernetes_version_installs_nothing_on_a_running_host(tmp_path: Path) -> None:
    """A host at 1.34 prepared for 1.35: the script points apt at the new minor's repository
    but leaves kubeadm, kubelet and kubectl alone (the runbook's kubeadm upgrade moves them, the
    control plane first); a bump here would put the kubelet ahead of the API server."""
    sb = sandbox(tmp_path, CP)
    sb.install_packages("containerd")
    for pkg in ("kubeadm", "kubelet", "kubectl"):
        (sb.state / "pkgs" / pkg).write_text("1.34.2-1.1\n")
    run = ok(sb.run(script(CP, "prepare-host.sh")))
    assert not [c for c in run.find("apt-get", "install") if any("kube" in a for a in c)]
    assert "Kubernetes packages stay at 1.34.2-1.1" in run.stdout
    assert (sb.state / "pkgs" / "kubelet").read_text() == "1.34.2-1.1\n"
    sources = sb.path("/etc/apt/sources.list.d/kubernetes.list").read_text()
    assert "core:/stable:/v1.35/deb" in sources


@pytest.mark.slow
def test_a_board_whose_mac_is_not_the_inventorys_changes_nothing(tmp_path: Path) -> None:
    """A replaced board with the inventory row not yet updated (or a typo in it): its DHCP
    reservation (build/<stack>/network/dhcp-hosts) would hand the address to the wrong MAC at
    the next reinstall. The script stops first, before any change, naming the fix."""
    node = NODES[GPU]
    sb = Sandbox(tmp_path / GPU, GPU, DGX_H100_HCAS, management_mac="5c:25:73:99:99:01")
    run = sb.run(script(GPU, "prepare-host.sh"))
    assert run.returncode == 1 and not run.changes, run.explain()
    assert f"managementMac {node.management_mac}" in run.stderr
    assert "cat /sys/class/net/<interface>/address" in run.stderr


def test_the_dhcp_reservations_are_the_inventorys_macs() -> None:
    lines = host_scripts.dhcp_hosts(CLUSTER.nodes).splitlines()
    assert lines[0] == "5c:25:73:31:00:10,10.10.1.100,gpu-node-00"  # inventory/prod.csv row 1
    assert len(lines) == len(CLUSTER.nodes)
