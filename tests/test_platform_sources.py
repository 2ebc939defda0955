"""Where the platform comes from. Helm reads the charts (`platform.charts`) from each chart's
repository, a site's mirror, or a directory of chart archives for a site with no route out; an
archive must be the pinned chart at the pinned version by its own Chart.yaml. The Training
Operator's overlay comes from GitHub or, vendored, from the release's manifests in the project.
Anything missing is refused before a resource is registered. The archives here are the stack's
nine charts packaged from their upstream tags (../shared/upstream/charts); the vendored
manifests come from the operator's Go module, as tools/vendor-training-operator.sh fetches
them."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import REPO, run_offline
from support.stack_edits import edit_stack
from support.twin import BINS

ARCHIVES = REPO.parent / "shared" / "upstream" / "charts"
# Every chart prod pins, as `helm pull`/`helm package` name its archive (Pulumi.prod.yaml).
PINNED = {
    "calico": ("tigera-operator", "v3.31.3"), "gpu-operator": ("gpu-operator", "v26.3.2"),
    "network-operator": ("network-operator", "26.4.1"), "volcano": ("volcano", "1.15.1"),
    "metallb": ("metallb", "0.15.2"), "ingress-nginx": ("ingress-nginx", "4.13.3"),
    "cert-manager": ("cert-manager", "v1.19.1"),
    "prometheus": ("kube-prometheus-stack", "77.14.0"),
    "prometheus-adapter": ("prometheus-adapter", "5.1.0"),
}


def releases(project: Path) -> dict[str, dict[str, Any]]:
    plan = json.loads((project / "build" / "prod" / "plan.json").read_text())
    return {r["name"]: r["inputs"] for r in plan["resources"]
            if r["type"] == "kubernetes:helm.sh/v3:Release"}


def with_source(project: Path, source: dict[str, str]) -> None:
    def change(cluster: dict[str, Any]) -> None:
        cluster["platform"]["charts"] = source
    edit_stack(project, change)


@pytest.fixture()
def archives(project: Path) -> Path:
    if not ARCHIVES.is_dir():
        pytest.skip(f"no chart archives at {ARCHIVES}")
    shutil.copytree(ARCHIVES, project / "charts")
    return project / "charts"


def test_charts_from_archives_reach_helm_as_the_archive_paths(project: Path,
                                                               archives: Path) -> None:
    with_source(project, {"archives": "charts"})
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = releases(project)
    assert set(found) == set(PINNED)
    for name, (chart, version) in PINNED.items():
        assert found[name]["chart"] == f"charts/{chart}-{version}.tgz"
        assert found[name]["version"] == version
        assert "repositoryOpts" not in found[name], name  # nothing is fetched
        assert (archives / f"{chart}-{version}.tgz").is_file()
    assert ", 0 mandatory," in proc.stdout


def test_the_pack_knows_a_chart_by_name_however_helm_is_given_it() -> None:
    # The compatibility matrix and the Grafana rule look charts up by name.
    from policies.gpu_guardrails.registry import chart_name

    for chart in ("gpu-operator", "oci://registry.site.example/charts/gpu-operator",
                  "charts/gpu-operator-v26.3.2.tgz", "/srv/charts/gpu-operator-v26.3.2.tgz"):
        assert chart_name({"chart": chart, "version": "v26.3.2"}) == "gpu-operator", chart


def test_a_mirror_replaces_every_repository(project: Path) -> None:
    with_source(project, {"mirror": "oci://registry.site.example/charts"})
    assert (proc := run_offline(project, "preview")).returncode == 0, proc.stderr
    found = releases(project)
    assert found["gpu-operator"]["chart"] == "oci://registry.site.example/charts/gpu-operator"
    assert "repositoryOpts" not in found["gpu-operator"]
    with_source(project, {"mirror": "https://charts.site.example/stable/"})
    assert (proc := run_offline(project, "preview")).returncode == 0, proc.stderr
    found = releases(project)
    assert {r["repositoryOpts"]["repo"] for r in found.values()} == {
        "https://charts.site.example/stable"}
    assert found["prometheus"]["chart"] == "kube-prometheus-stack"


def refused(project: Path) -> str:
    proc = run_offline(project, "preview")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (project / "build" / "prod" / "plan.json").exists()
    return proc.stderr


def test_a_missing_archive_is_refused_naming_the_file_and_the_chart(project: Path,
                                                                   archives: Path) -> None:
    (archives / "volcano-1.15.1.tgz").unlink()
    with_source(project, {"archives": "charts"})
    err = refused(project)
    assert "gpu-cluster:cluster.platform.charts.archives: has no volcano-1.15.1.tgz, the " \
           "archive of platform.volcano (volcano 1.15.1)" in err
    assert "helm pull volcano --repo https://volcano-sh.github.io/helm-charts --version " \
           "1.15.1" in err


def test_an_archive_of_another_version_is_refused(project: Path, archives: Path) -> None:
    # An operator renames the archive of another release to the pinned name.
    src = archives / "metallb-0.15.2.tgz"
    with tarfile.open(src) as tf:
        chart_yaml = tf.extractfile("metallb/Chart.yaml")
        assert chart_yaml is not None and b"version: 0.15.2" in chart_yaml.read()
    src.rename(archives / "metallb-0.15.3.tgz")

    def bump(cluster: dict[str, Any]) -> None:
        cluster["platform"]["metallb"]["version"] = "0.15.3"
        cluster["platform"]["charts"] = {"archives": "charts"}
    edit_stack(project, bump)
    err = refused(project)
    assert "metallb-0.15.3.tgz holds metallb 0.15.2, not metallb 0.15.3 (platform.metallb)" in err


def test_archives_and_a_mirror_together_are_refused(project: Path) -> None:
    with_source(project, {"archives": "charts", "mirror": "https://charts.site.example"})
    assert "gpu-cluster:cluster.platform.charts: names both archives and a mirror" in \
        refused(project)


def test_an_archive_directory_that_is_not_there_is_refused(project: Path) -> None:
    with_source(project, {"archives": "no-such-dir"})
    assert "platform.charts.archives: is not a directory (got 'no-such-dir')" in refused(project)


def with_operator_source(project: Path, source: str) -> None:
    def change(cluster: dict[str, Any]) -> None:
        cluster["platform"]["trainingOperator"]["source"] = source
    edit_stack(project, change)


@pytest.mark.slow
def test_a_vendored_training_operator_builds_with_kustomize_from_the_project(
        project: Path) -> None:
    if not BINS:
        pytest.skip("no kubectl: make k8s-tools")
    vendor = subprocess.run(["bash", "tools/vendor-training-operator.sh", "v1.9.4"], cwd=project,
                            capture_output=True, text=True, timeout=600)
    if vendor.returncode != 0 and "go is not installed" in vendor.stderr:
        pytest.skip(vendor.stderr)
    assert vendor.returncode == 0, vendor.stderr
    with_operator_source(project, "vendored")
    assert (proc := run_offline(project, "preview")).returncode == 0, proc.stdout + proc.stderr
    plan = json.loads((project / "build" / "prod" / "plan.json").read_text())
    (operator,) = [r for r in plan["resources"] if r["name"] == "training-operator"]
    directory = operator["inputs"]["directory"]
    assert directory == "platform/training-operator-vendored"
    # What the provider's kustomize builds from that directory, with no network (the real
    # kustomize in kubectl): the release's CRDs and the operator patched for Volcano.
    built = subprocess.run([str(BINS[-1] / "kubectl"), "kustomize", directory], cwd=project,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    objects = [o for o in yaml.safe_load_all(built.stdout) if o]
    crds = {o["spec"]["names"]["kind"] for o in objects
            if o["kind"] == "CustomResourceDefinition"}
    assert {"PyTorchJob", "MPIJob"} <= crds
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert "--gang-scheduler-name=volcano" in \
        deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    # The webhook certificate's Secret, which the operator fills, without the empty `data`
    # the API server would drop: the kubernetes provider replaces a Secret whose data differs
    # from what it applied, deleting the operator's certificates on every `pulumi up`.
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert "data" not in secret and "stringData" not in secret


def test_a_vendored_training_operator_that_is_not_there_is_refused(project: Path) -> None:
    with_operator_source(project, "vendored")
    err = refused(project)
    assert "gpu-cluster:cluster.platform.trainingOperator.source: vendor/training-operator " \
           "holds no manifests, not those of v1.9.4 (got 'vendored')" in err
    assert "run tools/vendor-training-operator.sh v1.9.4" in err
    # Another release's manifests are refused too.
    (project / "vendor" / "training-operator" / "manifests" / "overlays" / "standalone").mkdir(
        parents=True)
    (project / "vendor" / "training-operator" / "manifests" / "overlays" / "standalone"
     / "kustomization.yaml").write_text("resources: []\n")
    (project / "vendor" / "training-operator" / "VERSION").write_text("v1.9.3\n")
    assert "holds the manifests of v1.9.3, not those of v1.9.4" in refused(project)
