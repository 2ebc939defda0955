"""What the stack deployed last, read back from its own outputs, and the refusals against it:
the engine's `pulumi preview` fails on a change `pulumi up` must never make, as the offline
preview does (exit 4). Self-reference is a StackReference to this very stack: its outputs are
those of the last successful update (none before the first)."""

from __future__ import annotations

from typing import Any

import pulumi

from components.model.cluster import Cluster
from components.planning import kubeadm, refusals

VERSION, KEYS, ENDPOINT = "kubernetesVersion", "sshAuthorizedKeys", "controlPlaneEndpoint"


def guarded_exports(cluster: Cluster) -> None:
    """Export what the next update is judged against; fail this one if it is refused."""
    own = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    deployed = pulumi.StackReference(own)

    def judge(values: list[Any]) -> str:
        version, keys, endpoint = values
        refused = refusals.refusals(cluster, version, keys, endpoint)
        if refused:
            raise pulumi.RunError("refused against what is deployed:\n  "
                                  + "\n  ".join(refused))
        return cluster.kubernetes.version

    pulumi.export(VERSION, pulumi.Output.all(
        deployed.get_output(VERSION), deployed.get_output(KEYS),
        deployed.get_output(ENDPOINT)).apply(judge))
    pulumi.export(KEYS, refusals.authorised_keys(cluster))
    pulumi.export(ENDPOINT, kubeadm.endpoint(cluster))
