"""Host packages from repositories the stack configures (docs/hosts.md, "Package sources"):
DOCA-OFED and the Lustre client from flat apt repositories whose signing keys are pinned,
installed in the order the Lustre DKMS build needs, and a repository that cannot serve them
refused before the GPU node's preparation changes anything.

The scripts run in the sandbox (tests/support/sandbox.py): its curl answers only the URLs a test
serves (the prod stack's mirrors, with the real package names; anything else does not
resolve), its apt-get records what it installs and its dkms reports a module built once its
-dkms package is installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.sandbox import (
    DGX_H100_HCAS,
    DOCA_PACKAGES,
    Run,
    Sandbox,
    dgx_h100,
    ok,
    prod_cluster,
    unavailable,
)

from components.model.fields import CLUSTER_KEY
from components.planning import host_scripts

pytestmark = [pytest.mark.skipif(unavailable() is not None, reason=unavailable() or ""),
              pytest.mark.slow]

CLUSTER = prod_cluster()
NODE = CLUSTER.nodes[0]
DOCA = CLUSTER.platform.network_operator.doca_source
LUSTRE = CLUSTER.storage.lustre_client.source
VERSION = CLUSTER.storage.lustre_client.version
LUSTRE_PACKAGES = (f"lustre-client-utils={VERSION}", f"lustre-client-modules-dkms={VERSION}")


def node(tmp_path: Path, doca: bool = False) -> Sandbox:
    """Stock DGX OS (its kernel's own RDMA stack unless `doca`), the site's mirrors up."""
    sb = Sandbox(tmp_path / NODE.hostname, NODE.hostname, DGX_H100_HCAS)
    dgx_h100(sb, data_array=True, doca=doca)
    return sb


def prepare(sb: Sandbox) -> Run:
    return sb.run(host_scripts.prepare_gpu_node(CLUSTER, NODE, CLUSTER_KEY))


def unchanged(sb: Sandbox, run: Run) -> bool:
    """Nothing changed on the host: no call that changes it, and the downloads' temporary
    directory gone again."""
    return run.changes == [] and not list(sb.path("/tmp").iterdir())


def at(run: Run, *call: str) -> int:
    return next(i for i, c in enumerate(run.calls) if c[:len(call)] == call)


def test_doca_ofed_then_the_lustre_client_from_their_pinned_repositories(tmp_path: Path) -> None:
    sb = node(tmp_path)
    run = ok(prepare(sb))
    # Each repository written with its pinned key, as apt reads a flat repository.
    assert sb.path("/etc/apt/sources.list.d/gpu-cluster-doca.list").read_text() == (
        f"deb [signed-by=/etc/apt/keyrings/gpu-cluster-doca.gpg] {DOCA.url} ./\n")
    assert sb.path("/etc/apt/sources.list.d/gpu-cluster-lustre.list").read_text() == (
        f"deb [signed-by=/etc/apt/keyrings/gpu-cluster-lustre.gpg] {LUSTRE.url} ./\n")
    for keyring, source in (("doca", DOCA), ("lustre", LUSTRE)):
        assert sb.path(f"/etc/apt/keyrings/gpu-cluster-{keyring}.gpg").read_text() == \
            f"stub-key {source.key_fingerprint}\n"
    # The order the Lustre DKMS build needs: DOCA-OFED installed and its mlnx-ofed-kernel
    # built for this kernel before lustre-client-modules-dkms is installed; the Lustre build
    # is then checked too (its postinst ignores a failed build).
    doca = at(run, "apt-get", "install", "-y", "doca-ofed")
    ofed_built = at(run, "dkms", "status", "-m", "mlnx-ofed-kernel")
    lustre = at(run, "apt-get", "install", "-y", "--allow-change-held-packages",
                *LUSTRE_PACKAGES)
    lustre_built = at(run, "dkms", "status", "-m", "lustre-client-modules")
    assert doca < ofed_built < lustre < lustre_built, run.explain()
    # DOCA's modules replace the kernel's own only at the boot: LNet waits for it.
    assert (sb.path("/var/lib/gpu-cluster/reboot.pending")).exists()
    assert not run.find("lnetctl", "import")
    assert "(DOCA-OFED not loaded)" in run.stdout
    # Installed once: a second run fetches nothing and installs nothing.
    again = ok(prepare(sb))
    assert not again.find("curl") and not [c for c in again.calls if c[:2] == (
        "apt-get", "install")], again.explain()


@pytest.mark.parametrize("case", ["not-served", "other-key", "version-missing"])
def test_a_repository_that_cannot_serve_the_client_is_refused_before_any_change(
        tmp_path: Path, case: str) -> None:
    """A site that forbids the host to reach the mirror, a key that is not the pinned one, or
    a mirror without the pinned version: the preparation stops before it changes anything,
    naming the config key, the URL and what it must serve."""
    sb = node(tmp_path, doca=True)
    if case == "not-served":
        sb.serve(LUSTRE.url + "Packages", None)
    elif case == "other-key":
        sb.serve_apt_source(LUSTRE, dict(p.split("=") for p in LUSTRE_PACKAGES),
                            key_fingerprint="0123456789ABCDEF0123456789ABCDEF01234567")
    else:
        sb.serve_apt_source(LUSTRE, {"lustre-client-utils": "2.15.6-1",
                                     "lustre-client-modules-dkms": "2.15.6-1"})
    run = prepare(sb)
    assert run.returncode == 1 and unchanged(sb, run), run.explain()
    assert "package source storage.lustreClient.source:" in run.stderr
    assert {
        "not-served": f"{LUSTRE.url} or its key {LUSTRE.key_url} cannot be fetched from this "
                      "host",
        "other-key": f"its fingerprint is 0123456789ABCDEF0123456789ABCDEF01234567, the "
                     f"pinned one {LUSTRE.key_fingerprint}",
        "version-missing": f"{LUSTRE.url} does not serve {' '.join(LUSTRE_PACKAGES)}",
    }[case] in run.stderr, run.stderr


def test_a_site_without_the_doca_repository_is_refused_before_any_change(tmp_path: Path) -> None:
    sb = node(tmp_path)
    sb.serve(DOCA.url + "Packages", None)
    run = prepare(sb)
    assert run.returncode == 1 and unchanged(sb, run), run.explain()
    assert (f"package source platform.networkOperator.docaSource: {DOCA.url} or its key "
            f"{DOCA.key_url} cannot be fetched") in run.stderr
    assert "serves: doca-ofed" in run.stderr


def test_no_ofed_build_for_the_kernel_stops_before_the_lustre_client(tmp_path: Path) -> None:
    """mlnx-ofed-kernel without a DKMS build for the running kernel (no headers): the Lustre
    client would build ko2iblnd against the kernel's own RDMA stack, so it is not installed."""
    sb = node(tmp_path)
    (sb.state / "dkms-failed-mlnx-ofed-kernel").touch()
    run = prepare(sb)
    assert run.returncode == 1
    assert "mlnx-ofed-kernel has no DKMS build for kernel" in run.stderr
    assert not [c for c in run.calls if c[:2] == ("apt-get", "install")
                and any(a.startswith("lustre-client") for a in c)]
    assert set(DOCA_PACKAGES) & {p.name for p in (sb.state / "pkgs").iterdir()}


def test_a_failed_lustre_dkms_build_fails_the_preparation(tmp_path: Path) -> None:
    sb = node(tmp_path, doca=True)
    (sb.state / "dkms-failed-lustre-client-modules").touch()
    run = prepare(sb)
    assert run.returncode == 1
    assert "lustre-client-modules has no DKMS build for kernel" in run.stderr
    assert "make.log" in run.stderr
