"""Node labels and taints the stack sets and every layer selects on, in one place. The labels
the policy pack reads back are its vocabulary's (policies/gpu_guardrails/vocabulary.py)."""

from __future__ import annotations

from components.model import pack_data

_VOCABULARY = pack_data.load("vocabulary")
LABEL_PREFIX: str = _VOCABULARY.LABEL_PREFIX
NODE_LABEL_PREFIX: str = _VOCABULARY.NODE_LABEL_PREFIX
ROLE_LABEL: str = _VOCABULARY.ROLE_LABEL
SU_LABEL: str = _VOCABULARY.SU_LABEL
PURPOSE_LABEL: str = _VOCABULARY.PURPOSE_LABEL
UNTESTED_LABEL: str = _VOCABULARY.UNTESTED_LABEL
POLICY_SUPPRESS_ANNOTATION: str = _VOCABULARY.POLICY_SUPPRESS_ANNOTATION


def node_label(name: str) -> str:
    """A label under NodeRestriction's prefix, which kubelets cannot set (the vocabulary's)."""
    return str(_VOCABULARY.node_label(name))


def su_value(su: int) -> str:
    """SU_LABEL's value on the nodes of SU `su`."""
    return f"su{su}"


# Work outside the stack's own (GPU Operator, training, serving) lands on GPU nodes only when it
# tolerates this taint; kubeadm join gives every GPU node it.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# Node affinity to GPU workers (by the role label the stack sets, not a kubelet's own).
GPU_NODE_TERM = {"matchExpressions": [{"key": ROLE_LABEL, "operator": "In",
                                       "values": ["gpu-worker"]}]}
# kubeadm labels control-plane nodes with this, and (init/join --control-plane) taints them
# with it unless told otherwise.
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TAINT = {"key": CONTROL_PLANE_LABEL, "value": "", "effect": "NoSchedule"}


def gpu_toleration() -> dict:
    """What a pod that belongs on GPU nodes tolerates: their taint, whatever its value."""
    return {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}
