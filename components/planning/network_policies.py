"""The network policies of the work namespaces: what they may reach, and never the management
networks (pure).
"""

from __future__ import annotations

from components.model.cluster import Cluster
from components.planning.namespaces import inference_namespaces, training_namespaces


def network_policies(cluster: Cluster) -> list[dict]:
    """Each workload namespace denies ingress by default; a training job's pods reach each
    other (MPI's SSH, the rendezvous, NCCL's bootstrap socket), and each inference service
    admits its own clients (workloads.inference_objects). Their egress stays off the
    management and BMC networks (hosts' SSH, kubelets, etcd, switch CLIs, BMCs) but for the
    API server. The RDMA rails are not pod traffic Calico polices: NCCL's data path is
    untouched."""
    workload = sorted({*training_namespaces(cluster), *inference_namespaces(cluster)})
    deny = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "default-deny-ingress", "namespace": ns},
             "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
            for ns in workload]
    peers = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "same-namespace", "namespace": ns},
              "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                       "ingress": [{"from": [{"podSelector": {}}]}]}}
             for ns in sorted(training_namespaces(cluster))]
    egress = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": EGRESS_POLICY, "namespace": ns},
               "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                        "egress": egress_rules(cluster)}}
              for ns in workload]
    return deny + peers + egress


EGRESS_POLICY = "egress-off-management"


def admin_networks(cluster: Cluster) -> list[str]:
    """The networks no workload pod reaches but for the API server: the hosts' management
    network and the BMCs'."""
    net = cluster.network
    return [str(c) for c in (net.management_cidr, net.bmc_cidr) if c is not None]


def egress_rules(cluster: Cluster) -> list[dict]:
    """Everywhere (pods, services, storage, model downloads) except the administrators'
    networks; there, only the API server's port on the control planes (and its VIP): the
    MPI launcher's kubectl and every client of the kubernetes Service go there (Calico judges
    a Service's traffic by the endpoint it is sent to)."""
    ep = cluster.kubernetes.control_plane_endpoint
    api = sorted({str(h.management_ip) for h in cluster.control_plane}
                 | ({str(ep.vip)} if ep.vip else set()))
    return [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": admin_networks(cluster)}}]},
        {"to": [{"ipBlock": {"cidr": f"{a}/32"}} for a in api],
         "ports": [{"protocol": "TCP", "port": ep.port}]},
    ]
