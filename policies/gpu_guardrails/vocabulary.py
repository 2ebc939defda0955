"""Names the stack gives what it builds and the pack reads back: the labels on nodes and
objects. The pack owns them, because the CLI runs it from policies/ alone; the stack loads this
file by path (components/model/pack_data.py), so a name is spelled once for both."""

# The prefix of the stack's own labels and annotations on objects.
LABEL_PREFIX = "gpucluster.io"
# Node labels that place work (role, SU, rack, the rails' leaves) live under the prefix the
# NodeRestriction admission plugin keeps kubelets from setting or changing: a node whose
# credentials leak cannot claim the GPU-worker role or a seat in another SU's gang. The stack
# sets them through the API (`<host>-placement`).
NODE_LABEL_PREFIX = "node-restriction.kubernetes.io"


def node_label(name: str) -> str:
    return f"{NODE_LABEL_PREFIX}/gpucluster-{name}"


ROLE_LABEL = node_label("role")
SU_LABEL = node_label("su")  # a GPU node's scalable unit: "su<n>"
# What a Lustre volume holds (storage.lustre[].purpose): dataset, checkpoints, model-weights.
PURPOSE_LABEL = f"{LABEL_PREFIX}/purpose"
# A GPU node's kubelet registers it with this label (kubeadm join); training and serving never
# land on a node that carries it, and the acceptance gate removes it once the node passed
# (components/planning/acceptance_run.py). A plain prefix: NodeRestriction refuses a kubelet
# the restricted one, and a node that drops the label itself only skips its own test.
UNTESTED_LABEL = f"{LABEL_PREFIX}/untested"
# `"<rule>: <reason>"` (several separated by ';'): an object the pack judges with one of its
# annotation-suppressible rules passes that rule, and the preview lists it as suppressed.
POLICY_SUPPRESS_ANNOTATION = f"{LABEL_PREFIX}/policy-suppress"
