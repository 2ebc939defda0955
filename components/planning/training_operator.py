"""The Training Operator's kustomization, fetched by the commit of its tag or vendored (pure).
"""

from __future__ import annotations

from components.model.compat import (
    TRAINING_OPERATOR_COMMITS,
    training_operator_pin_fix,
    training_operator_unpinned,
)


def training_operator_kustomization(version: str, vendored: bool = False) -> str:
    """The Training Operator's kustomization: the upstream standalone overlay at the pinned
    release, plus --gang-scheduler-name=volcano so every PyTorchJob/MPIJob gets a Volcano
    PodGroup (minMember = runPolicy.schedulingPolicy.minAvailable). The overlay comes from
    GitHub by the commit the release's tag points to (TRAINING_OPERATOR_COMMITS), or, vendored,
    from the release's manifests copied into VENDORED_TRAINING_OPERATOR."""
    commit = TRAINING_OPERATOR_COMMITS.get(version)
    if commit is None:
        raise ValueError(f"platform.trainingOperator.version {version} "
                         f"{training_operator_unpinned(version)}: "
                         f"{training_operator_pin_fix(version)}")
    overlay = (TRAINING_OPERATOR_VENDORED_OVERLAY if vendored else
               TRAINING_OPERATOR_GITHUB_OVERLAY).format(version=version, commit=commit)
    return TRAINING_OPERATOR_KUSTOMIZATION.format(overlay=overlay)


def training_operator_dir(vendored: bool) -> str:
    return TRAINING_OPERATOR_VENDORED_DIR if vendored else TRAINING_OPERATOR_DIR


def check_training_operator_dir(text: str, version: str, vendored: bool = False) -> None:
    """The committed kustomization must pin the release the config names."""
    if text != training_operator_kustomization(version, vendored):
        raise ValueError(
            f"{training_operator_dir(vendored)}/kustomization.yaml does not match "
            f"platform.trainingOperator.version {version}: regenerate it with "
            "components.planning.training_operator.training_operator_kustomization(version, "
            f"vendored={vendored})")


TRAINING_OPERATOR_DIR = "platform/training-operator"
TRAINING_OPERATOR_VENDORED_DIR = "platform/training-operator-vendored"
# Where tools/vendor-training-operator.sh copies the release's manifests/ (and VERSION).
VENDORED_TRAINING_OPERATOR = "vendor/training-operator"
TRAINING_OPERATOR_GITHUB_OVERLAY = """\
  # {version}: the commit its tag points to (a tag can be moved, a commit cannot).
  - github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={commit}
"""
TRAINING_OPERATOR_VENDORED_OVERLAY = """\
  # {version}: the release's manifests/, copied from its Go module by
  # tools/vendor-training-operator.sh (vendor/training-operator/VERSION names the release).
  - ../../vendor/training-operator/manifests/overlays/standalone
"""
TRAINING_OPERATOR_KUSTOMIZATION = """\
# The Kubeflow Training Operator (PyTorchJob, MPIJob kubeflow.org/v1) from its release, with
# gang scheduling through Volcano: the operator creates a scheduling.volcano.sh PodGroup per job.
# Rendered by components/planning/training_operator.py::training_operator_kustomization (a
# test keeps the two equal) for the release platform.trainingOperator.version names, whose
# tag's commit is in policies/gpu_guardrails/compat_data.py::TRAINING_OPERATOR_COMMITS.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
{overlay}patches:
  - target:
      group: apps
      version: v1
      kind: Deployment
      name: training-operator
      namespace: kubeflow
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/command/-
        value: --gang-scheduler-name=volcano
      # The upstream Deployment has no tolerations: on a cluster whose every node is tainted it
      # would have no node. It runs on the control-plane hosts with the other controllers.
      - op: add
        path: /spec/template/spec/nodeSelector
        value:
          node-role.kubernetes.io/control-plane: ""
      - op: add
        path: /spec/template/spec/tolerations
        value:
          - key: node-role.kubernetes.io/control-plane
            operator: Exists
            effect: NoSchedule
      # A controller the jobs depend on: preempt workload pods before it is left pending.
      - op: add
        path: /spec/template/spec/priorityClassName
        value: system-cluster-critical
  # The operator's certificate rotator fills this Secret. kustomize's secretGenerator gives it
  # `data: {{}}`, which the API server drops, and the kubernetes provider replaces a Secret whose
  # data differs from what it applied: every `pulumi up` would delete the operator's webhook
  # certificates. Without the empty map the stack owns only the Secret's existence.
  - target:
      version: v1
      kind: Secret
      name: training-operator-webhook-cert
      namespace: kubeflow
    patch: |-
      - op: remove
        path: /data
"""
