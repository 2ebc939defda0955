"""Where the cluster twin's control-plane binaries live (`make k8s-tools`), and the upstream
CRDs beside the checkout; tests that need either skip without them."""

from __future__ import annotations

import os
from pathlib import Path

from support.project import REPO

CACHE = Path(os.environ.get("GPU_CLUSTER_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-cluster")
# One bin-<versions> directory per build (kube-apiserver, scheduler, controller-manager,
# kubectl, etcd, kwok, ...), oldest first.
BINS = sorted((CACHE / "k8s").glob("bin-*"))
SHARED = REPO.parent / "shared"
