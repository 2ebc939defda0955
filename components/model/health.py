"""The `health` section of the cluster model: the thresholds node-problem-detector's checks on
the GPU nodes hold each node to (docs/health.md). Every default follows a vendor's document,
named beside it; the section may be left out of the stack file."""

from __future__ import annotations

from pydantic import Field

from components.model.fields import Model


class InfinibandHealth(Model):
    """Each rail's error counters (/sys/class/infiniband/<hca>/ports/1/counters)."""

    # Symbol errors per bit the rail carried at its planned rate since the last check. Each
    # symbol error is at least one bit in error, so above 1e-12 the bit error rate is past the
    # 10^-12 an InfiniBand link must stay under (IBTA; NVIDIA's ibdiagnet user manual, "Bit
    # Error Rate (BER)": default threshold 10^-12). On NDR the counter holds the errors left
    # after forward error correction (same manual), the ones applications see.
    symbol_error_ber: float = Field(1e-12, gt=0, le=1e-6)
    # LinkDownedCounter increases allowed between two checks. Each one is a failed link error
    # recovery that took the link down (IBTA PortCounters), which breaks every connection
    # NCCL has on the rail: none is allowed.
    link_downed_per_check: int = Field(0, ge=0, le=255)


class NvlinkHealth(Model):
    """The GPUs' NVLinks (`nvidia-smi nvlink --status`)."""

    # Active NVLinks each GPU must show: H100 SXM5 has 18 fourth-generation NVLinks, 900 GB/s
    # in all (NVIDIA H100 Tensor Core GPU datasheet; DGX H100 user guide).
    links_per_gpu: int = Field(18, ge=1, le=18)


class QuarantineHealth(Model):
    """What the control planes' quarantine may do with a node a check finds unfit."""

    # Nodes out of service at once. More sick nodes than this at one time is seldom as many
    # independent faults: a shared cause (a leaf switch, a power feed, a driver roll, a check
    # gone wrong) is likelier, and quarantining them all would take the cluster's capacity
    # for nothing. NVIDIA's NVSentinel stops quarantining past a limit for the same reason
    # (its "circuit breaker"). Two of prod's eight nodes leaves the four-node job and both
    # serving replicas their nodes.
    max_nodes: int = Field(2, ge=1)
    # How long one drain may wait for evictions a PodDisruptionBudget holds back before the
    # pass reports it unfinished (`kubectl drain --timeout`); the next pass tries again.
    drain_timeout_minutes: int = Field(10, ge=1, le=120)


class Health(Model):
    # Whether the GPU nodes run the detector and the control planes the quarantine. Off: the
    # stack leaves health to something else (NVSentinel, a site's own checks); turning it off
    # removes both, and the taints the quarantine set stay until a person releases them.
    enabled: bool = True
    # How often each check runs (node-problem-detector's invoke_interval): 30 s, as in its own
    # config/custom-plugin-monitor.json. The symbol error rate is measured over this window.
    check_interval_seconds: int = Field(30, ge=10, le=3600)
    # The DCGM host engine the DCGM check asks for its health watches: nv-hostengine on the
    # node itself at DCGM's port 5555 (DCGM user guide, "Standalone Mode": DGX OS's
    # nvidia-dcgm service; the detector runs on the node's network). Why not the GPU
    # Operator's standalone DCGM: docs/health.md, "How it runs".
    dcgm_host_engine: str = Field("localhost:5555", pattern=r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")
    infiniband: InfinibandHealth = InfinibandHealth()
    nvlink: NvlinkHealth = NvlinkHealth()
    quarantine: QuarantineHealth = QuarantineHealth()
