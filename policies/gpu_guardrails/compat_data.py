"""Component version compatibility as data (the pack cannot import the stack's code: the CLI
runs it from policies/ alone). Kept equal to components/planning/compat.py by a test."""

NETWORK_OPERATOR_K8S: dict[str, tuple[int, int]] = {
    "26.4.0": (31, 35),
    "26.4.1": (31, 35),
}
RDMA_INCOMPATIBLE: dict[tuple[str, str], str] = {
    ("v26.3.2", "26.4.0"): "GPU Operator 26.3.2 does not support RDMA with Network Operator "
    "26.4.0 (fixed by Network Operator 26.4.1)",
}
GPU_OPERATOR_K8S: dict[str, tuple[int, int]] = {
    "v26.3.2": (30, 35),
    "v26.7.0": (31, 35),
}
VOLCANO_HYPERNODE = ("1.12.0",)
