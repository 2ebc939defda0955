"""The cluster twin: the rendered stack applied to a real Kubernetes control plane on loopback
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from their Go modules),
with KWOK nodes standing in for the planned hosts. `python -m twin --stack prod`."""
