"""Operator releases and component compatibility, as data: the one table the stack and the pack
both read (the pack owns it, because the CLI runs the pack from policies/ alone; the stack loads
this file by path). A new GPU or Network Operator release is one entry here and a config change.

Each entry cites its source, so a reviewer can check it against the vendor's matrix."""


def version_key(version: str) -> tuple[int, ...]:
    """A release's place in order: `v1.15.1` and `1.15.1-rc1` -> (1, 15, 1); () when the
    version is not numeric."""
    try:
        return tuple(int(p) for p in version.lstrip("v").split("-")[0].split("."))
    except ValueError:
        return ()


# Network Operator release -> the Kubernetes minors it supports (release notes, "Platform
# Support") and the DOCA-OFED driver container of its container image list
# (docs.nvidia.com/networking/display/kubernetes<release>/platform-support.html). The other
# components (RDMA shared device plugin, Multus, CNI plugins, IPoIB CNI, nv-ipam) are tagged
# network-operator-v<release> in the release's chart values, under `repository`.
NETWORK_OPERATOR_RELEASES: dict[str, dict] = {
    # 26.4.x: Kubernetes ">=1.31 and <=1.35", Ubuntu 22.04/24.04 upstream Kubernetes 1.31-1.35
    # (https://docs.nvidia.com/networking/display/kubernetes2640/platform-support.html, from
    # Mellanox/network-operator-docs docs/platform-support.rst); 26.4.1 changes DOCA-OFED and
    # dependencies, no Kubernetes minor
    # (https://github.com/Mellanox/network-operator/releases/tag/v26.4.1). docaDriver: the
    # Mofed version in hack/release.yaml at each tag.
    "26.4.0": {"kubernetes": (31, 35), "repository": "nvcr.io/nvidia/mellanox",
               "docaDriver": "doca3.4.0-26.04-0.8.6.0-0"},
    "26.4.1": {"kubernetes": (31, 35), "repository": "nvcr.io/nvidia/mellanox",
               "docaDriver": "doca3.4.1-26.04-1.1.0.0-1"},
    # 26.7.0: Kubernetes ">=1.32 and <=1.36", the first release to reach 1.36
    # (https://docs.nvidia.com/networking/display/kubernetes2670/platform-support.html,
    # "Prerequisites"). docaDriver: its container image list, "DOCA-OFED Driver Container
    # Images" (https://docs.nvidia.com/networking/display/kubernetes2670/advanced/
    # images-sha256.html, from network-operator-docs docs/advanced/images-sha256.rst, whose
    # network-operator v26.7.0 digest sha256:7647afe6... is the page's). Not read at the tag
    # itself: the stored network-operator history ends at v26.7.0-rc.2 (0.7.1.0-0, staging)
    # and its branch at 0.7.6.0-0.
    "26.7.0": {"kubernetes": (32, 36), "repository": "nvcr.io/nvidia/mellanox",
               "docaDriver": "doca3.5.0-26.07-0.7.7.0-0"},
}

# GPU Operator release -> the Kubernetes minors it supports (GPU Operator platform support
# matrix, "Supported Operating Systems and Kubernetes Platforms", the upstream Kubernetes
# column of Ubuntu 22.04 and 24.04, the bases of DGX OS 6 and 7; where they differ, the range
# both allow). Its images come from the chart itself (pinned by the chart version).
GPU_OPERATOR_RELEASES: dict[str, dict] = {
    # 26.3.2 "Added support for Kubernetes 1.36"
    # (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/release-notes.html,
    # 26.3.2); its platform support: Ubuntu 22.04 and 24.04, 1.32-1.36 (NVIDIA/cloud-native-docs
    # gpu-operator/platform-support.rst, "Add docs for 26.3.2", de99f9d3).
    "v26.3.2": {"kubernetes": (32, 36)},
    # 26.7.0: Ubuntu 24.04 1.32-1.36, Ubuntu 22.04 1.33-1.36
    # (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html;
    # NVIDIA/cloud-native-docs, "Release docs 26.7.0", 187a4a5b).
    "v26.7.0": {"kubernetes": (33, 36)},
}

# (GPU Operator, Network Operator) pairs whose GPUDirect RDMA integration is not supported.
RDMA_INCOMPATIBLE: dict[tuple[str, str], str] = {
    ("v26.3.2", "26.4.0"): "GPU Operator 26.3.2 does not support RDMA with Network Operator "
    "26.4.0 (fixed by Network Operator 26.4.1)",
}

# Volcano releases with the HyperNode (network-topology-aware scheduling) API the stack renders.
VOLCANO_HYPERNODE = ("1.12.0",)

# Kubeflow Training Operator: the v1 API (PyTorchJob, MPIJob kubeflow.org/v1) and the
# --gang-scheduler-name flag the platform sets live on the release-1.9 branch only; master is
# Trainer v2 (TrainJob). platform/training-operator/kustomization.yaml pins the same ref.
TRAINING_OPERATOR_SERIES = "v1.9."
# Release -> the commit its tag points to: the kustomization fetches the upstream overlay by
# this commit, never by the tag (a tag can be moved). Source: the Go module proxy,
# https://proxy.golang.org/github.com/kubeflow/training-operator/@v/<release>.info, whose
# Origin.Hash is the commit of Origin.Ref refs/tags/<release>. A release needs its entry here.
TRAINING_OPERATOR_COMMITS: dict[str, str] = {
    "v1.9.4": "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7",
}

# Calico (tigera-operator) minor series -> Kubernetes minor versions it is tested with
# (Calico's per-release system requirements, "Kubernetes requirements", "Supported versions":
# https://docs.tigera.io/calico/<series>/getting-started/kubernetes/requirements, from
# tigera/docs calico_versioned_docs/version-<series>/_includes/partials/_system-requirements.mdx).
CALICO_K8S: dict[str, tuple[int, int]] = {
    "v3.30": (31, 33),
    "v3.31": (32, 35),  # 1.32, 1.33, 1.34, 1.35
    "v3.32": (34, 36),  # 1.34, 1.35, 1.36
}

# vLLM: releases before this one have published security advisories against the OpenAI server
# or model loading that the stack's exposure must not carry. Read from the GitHub advisory
# database and OSV (PyPI `vllm`) on 2026-11-27: GHSA-2pc9-4j83-qjmr (auto_map code runs with
# trust_remote_code off, fixed 0.14.0), GHSA-4r2x-xpjr-7cvv (a crafted video_url, 0.14.1),
# GHSA-7972-pg2x-xr59 (trust_remote_code hard-coded on, 0.18.0), GHSA-3mwp-wvh9-7528 (an
# unbounded `n` exhausts memory, 0.19.0), GHSA-94f4-hr76-p5j6 (the API key check bypassed,
# 0.22.0), PYSEC-2026-4344 / GHSA-542m-9234-8gvf and PYSEC-2026-4349 (chat-template rendering
# and its trust check, 0.32.0). Later fixes reported only second-hand (GHSA-5r3c-5x4v-8gjh,
# 0.33.0) are not confirmed here: re-check https://osv.dev/list?q=vllm&ecosystem=PyPI.
VLLM_FLOOR = (0, 32, 0)

# The Kubernetes ranges alone, as the version rules read them.
NETWORK_OPERATOR_K8S: dict[str, tuple[int, int]] = {
    release: entry["kubernetes"] for release, entry in NETWORK_OPERATOR_RELEASES.items()}
GPU_OPERATOR_K8S: dict[str, tuple[int, int]] = {
    release: entry["kubernetes"] for release, entry in GPU_OPERATOR_RELEASES.items()}
