"""The Kubernetes plumbing against what the real provider returns (under Pulumi's mocks, in a
fresh interpreter each, since mocks are process-wide)."""

from __future__ import annotations

import subprocess
import sys

from support.project import REPO

# The kubernetes provider answers a kustomize Directory with the URNs of what it created.
PROGRAM = """
import pulumi
import pulumi_kubernetes as k8s
from components.layers.kube import KustomizeDirectory

class Provider(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return [args.name + "-id", {**args.inputs, "resources": [
            "urn:pulumi:prod::gpu-cluster::kubernetes:apps/v1:Deployment::training-operator"]}]

    def call(self, args):
        return {}

pulumi.runtime.set_mocks(Provider(), preview=False)
directory = CLS("training-operator", directory="manifests")

@pulumi.runtime.test
def read():
    return directory.resources.apply(print)

read()
"""


def _run(cls: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROGRAM.replace("CLS", cls)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_the_training_operators_directory_reads_the_providers_resource_list() -> None:
    """pulumi-kubernetes 4.25.0 types the list as a string: the SDK's own class stops the
    program once a real provider answers; the stack's does not."""
    ours = _run("KustomizeDirectory")
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert "kubernetes:apps/v1:Deployment::training-operator" in ours.stdout
    sdk = _run("k8s.kustomize.v2.Directory")
    if sdk.returncode == 0:  # an SDK that types it right needs no subclass
        assert "training-operator" in sdk.stdout
    else:
        assert "Unexpected type. Expected 'list' got" in sdk.stderr, sdk.stderr[-3000:]
