"""Where the platform's charts and manifests come from, checked before anything is registered.

Chart archives (`platform.charts.archives`): every chart the stack installs must be there as
`<chart>-<version>.tgz`, and be that chart at that version by its own Chart.yaml (a file renamed
by hand is not the pinned chart). The vendored Training Operator
(`platform.trainingOperator.source: vendored`): its manifests must be there, of the release the
config names."""

from __future__ import annotations

import tarfile
from pathlib import Path

import yaml

from components.model.cluster import Cluster
from components.model.fields import Problem
from components.planning.platform import archive_name, chart_paths, helm_releases
from components.planning.training_operator import VENDORED_TRAINING_OPERATOR

KEY = "platform.charts"


def source_problems(cluster: Cluster, project_dir: Path) -> list[Problem]:
    return [*_chart_problems(cluster, project_dir), *_operator_problems(cluster, project_dir)]


def _operator_problems(cluster: Cluster, project_dir: Path) -> list[Problem]:
    operator = cluster.platform.training_operator
    if operator.source != "vendored":
        return []
    root = project_dir / VENDORED_TRAINING_OPERATOR
    version = root / "VERSION"
    found = version.read_text().strip() if version.is_file() else None
    overlay = root / "manifests" / "overlays" / "standalone" / "kustomization.yaml"
    if found == operator.version and overlay.is_file():
        return []
    holds = f"the manifests of {found}" if found and overlay.is_file() else "no manifests"
    return [Problem(
        "platform.trainingOperator.source", operator.source,
        f"{VENDORED_TRAINING_OPERATOR} holds {holds}, not those of {operator.version}",
        f"run tools/vendor-training-operator.sh {operator.version} (it copies them from the "
        "Go module proxy or the site's mirror of it), or set source: github")]


def _chart_problems(cluster: Cluster, project_dir: Path) -> list[Problem]:
    source = cluster.platform.charts
    if source.archives is not None and source.mirror is not None:
        return [Problem(KEY, {"archives": source.archives, "mirror": source.mirror},
                        "names both archives and a mirror", "keep the one Helm should read")]
    if source.archives is None:
        return []
    root = project_dir / source.archives
    if not root.is_dir():
        return [Problem(f"{KEY}.archives", source.archives, "is not a directory",
                        "name the directory of chart archives, relative to the project")]
    paths = chart_paths(cluster.platform)
    problems = []
    for release in helm_releases(cluster):
        chart, key = release.chart, paths.get(id(release.chart), f"platform.{release.name}")
        name = archive_name(chart)
        if not (root / name).is_file():
            problems.append(Problem(
                f"{KEY}.archives", source.archives,
                f"has no {name}, the archive of {key} ({chart.chart} {chart.version})",
                f"add it (`helm pull {chart.chart} --repo {chart.repo} --version "
                f"{chart.version}` where the repository can be reached), or change "
                f"{key}.version to an archive that is there"))
            continue
        found = _chart_yaml(root / name, chart.chart)
        if found != (chart.chart, chart.version):
            holds = f"{found[0]} {found[1]}" if found else f"no readable {chart.chart}/Chart.yaml"
            problems.append(Problem(
                f"{KEY}.archives", source.archives,
                f"{name} holds {holds}, not {chart.chart} {chart.version} ({key})",
                "replace it with the archive of the pinned chart"))
    return problems


def _chart_yaml(archive: Path, chart: str) -> tuple[str, str] | None:
    """The name and version the archive's top-level Chart.yaml gives, if it has one."""
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:
                if member.name == f"{chart}/Chart.yaml" and member.isfile():
                    data = tf.extractfile(member)
                    doc = yaml.safe_load(data.read()) if data else None
                    if isinstance(doc, dict):
                        return str(doc.get("name")), str(doc.get("version"))
    except (OSError, tarfile.TarError, yaml.YAMLError):
        pass
    return None
