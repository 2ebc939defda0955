"""Node labels and taints the stack sets and every layer selects on, in one place."""

from __future__ import annotations

# Work outside the stack's own (GPU Operator, training, serving) lands on GPU nodes only when it
# tolerates this taint; kubeadm join gives every GPU node it.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# The prefix of the stack's own labels and annotations on objects (on nodes: UNTESTED_LABEL).
LABEL_PREFIX = "gpucluster.io"
# Node labels that place work (role, SU, rack, the rails' leaves) live under the prefix the
# NodeRestriction admission plugin keeps kubelets from setting or changing: a node whose
# credentials leak cannot claim the GPU-worker role or a seat in another SU's gang. The stack
# sets them through the API (`<host>-placement`).
NODE_LABEL_PREFIX = "node-restriction.kubernetes.io"
# A GPU node's kubelet registers it with this label (kubeadm join); training and serving never
# land on a node that carries it, and the acceptance gate removes it once the node passed
# (components/planning/acceptance_run.py). A plain prefix: NodeRestriction refuses a kubelet
# the restricted one, and a node that drops the label itself only skips its own test.
UNTESTED_LABEL = "gpucluster.io/untested"
# kubeadm labels control-plane nodes with this, and (init/join --control-plane) taints them
# with it unless told otherwise.
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TAINT = {"key": CONTROL_PLANE_LABEL, "value": "", "effect": "NoSchedule"}


def node_label(name: str) -> str:
    return f"{NODE_LABEL_PREFIX}/gpucluster-{name}"


ROLE_LABEL = node_label("role")
SU_LABEL = node_label("su")
