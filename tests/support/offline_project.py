"""A tiny stand-in Pulumi project that follows the program contract (Pulumi.yaml,
Pulumi.prod.yaml, a ConfigError from a `components.` module, `cluster.artifacts`), so the
offline runner is tested independently of the real components (the `offline_project`
fixture)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from support.project import REPO

OFFLINE_CONFIG_PY = '''
import pulumi


class ConfigError(Exception):
    pass


def load_config():
    conf = pulumi.Config("gpu-cluster")
    cfg = conf.require_object("cluster")
    if cfg["replicas"] < 1:
        raise ConfigError(
            f"gpu-cluster:cluster.replicas: {cfg['replicas']} is not allowed\\n"
            "  fix: set replicas to 1 or more"
        )
    return cfg, conf.require_secret("sshPrivateKey")
'''

OFFLINE_MAIN_PY = '''
import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.config import load_config

cfg, key = load_config()
opts = pulumi.ResourceOptions


class BareMetalNode(pulumi.ComponentResource):
    def __init__(self, name, args, opts=None):
        super().__init__("gpucluster:hardware:BareMetalNode", name, None, opts)
        conn = command.remote.ConnectionArgs(
            host=args["ip"], user="ubuntu", private_key=key, host_key="ssh-ed25519 AAAA" + name)
        self.prepare = command.remote.Command(
            f"{name}-prepare", connection=conn, create="bash /opt/prepare-host.sh",
            environment={"SSH_KEY": key, "RAILS": "8"},
            opts=pulumi.ResourceOptions(parent=self, protect=True))
        self.register_outputs({})


nodes = [BareMetalNode(n["name"], n) for n in cfg["nodes"]]
fabric = pulumi.ComponentResource("gpucluster:fabric:InfinibandFabric", "fabric")
command.remote.Command("opensm", connection={"host": cfg["smHost"], "hostKey": "ssh-ed25519 SM"},
                       create="systemctl restart opensm", opts=opts(parent=fabric))
boot = pulumi.ComponentResource("gpucluster:bootstrap:KubeadmCluster", "kubeadm")
kubeconfig = command.remote.Command(
    "admin-kubeconfig", connection={"host": "10.0.0.10", "hostKey": "ssh-ed25519 CP"},
    create="cat /etc/kubernetes/admin.conf",
    opts=opts(parent=boot, additional_secret_outputs=["stdout"],
              depends_on=[n.prepare for n in nodes]))
provider = k8s.Provider("k8s", kubeconfig=kubeconfig.stdout, opts=opts(parent=boot))
platform = pulumi.ComponentResource("gpucluster:platform:Platform", "platform")
ns = k8s.core.v1.Namespace("training", metadata={"name": "training"},
                           opts=opts(parent=platform, provider=provider))
k8s.core.v1.Secret("registry", metadata={"name": "registry", "namespace": "training"},
                   string_data={"token": "registry-token-value"},
                   opts=opts(parent=platform, provider=provider))
k8s.core.v1.ConfigMap("nccl-env", metadata={"namespace": "training"},
                      data={"NCCL_DEBUG": "WARN"}, opts=opts(parent=platform, provider=provider))
k8s.apps.v1.Deployment(
    "vllm", metadata={"name": "vllm", "namespace": "training"},
    spec={"replicas": cfg["replicas"], "selector": {"match_labels": {"app": "vllm"}},
          "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [
              {"name": "vllm", "image": cfg["image"],
               "resources": {"limits": {"cpu": cfg["cpu"], "nvidia.com/gpu": 8}}}]}}},
    opts=opts(parent=platform, provider=provider))
k8s.helm.v3.Release(
    "gpu-operator", name="gpu-operator", chart="gpu-operator", version=cfg["chartVersion"],
    repository_opts={"repo": "https://helm.ngc.nvidia.com/nvidia"}, namespace="gpu-operator",
    values={"driver": {"enabled": False}, "dcgmExporter": {"interval": 1.5}},
    opts=opts(parent=platform, provider=provider))
if cfg.get("leak"):
    # A secret read with get() is plain text: the runner must refuse to render it.
    k8s.core.v1.ConfigMap("leak", data={"k": pulumi.Config().get("sshPrivateKey")},
                          opts=opts(provider=provider))
if cfg.get("invoke"):
    # Provider functions go through Mocks.call, which returns no outputs.
    assert pulumi.runtime.invoke("kubernetes:kubernetes:test", {}).value == {}
if cfg.get("crash"):
    raise RuntimeError("the program crashed on purpose")


class Cluster:
    def __init__(self):
        self.artifacts = {"fabric/opensm.conf": "routing_engine ftree\\n"}
        for n in cfg["nodes"]:
            self.artifacts[f"scripts/{n['name']}/prepare-host.sh"] = (
                f"#!/bin/bash\\nset -eu\\nhostnamectl set-hostname {n['name']}\\n")


cluster = Cluster()
pulumi.export("nodes", len(nodes))
'''

SECRET_CIPHERTEXT = "v1:AAAA:c2VjcmV0"
# Only the starter rules, at fixed levels: rules added to the pack later must not change what
# these tests expect of the runner.
STARTER_RULES = {
    "all": "disabled",
    "no-latest-image": "mandatory",
    "helm-chart-pinned": "mandatory",
    "checkpoint-volume-retained": "mandatory",
    "checkpoint-volume-protected": "mandatory",
    "ssh-host-key-pinned": "mandatory",
    "gpu-requests-equal-limits": "mandatory",
}


def offline_stack(**cluster: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "nodes": [{"name": "node-a", "ip": "10.0.1.1"}, {"name": "node-b", "ip": "10.0.1.2"}],
        "smHost": "10.0.0.5",
        "replicas": 2,
        "cpu": 1.5,
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "chartVersion": "v26.3.2",
    }
    base.update(cluster)
    return {
        "config": {
            "pulumi:disable-default-providers": ["kubernetes"],
            "gpu-cluster:sshPrivateKey": {"secure": SECRET_CIPHERTEXT},
            "gpu-cluster:cluster": base,
        }
    }


def write_offline_stack(project: Path, **cluster: Any) -> None:
    (project / "Pulumi.prod.yaml").write_text(yaml.safe_dump(offline_stack(**cluster)))


def make_offline_project(root: Path) -> Path:
    project = root / "project"
    (project / "components").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: gpu-cluster\nruntime: python\n")
    (project / "components" / "__init__.py").write_text("")
    (project / "components" / "config.py").write_text(OFFLINE_CONFIG_PY)
    (project / "__main__.py").write_text(OFFLINE_MAIN_PY)
    shutil.copytree(REPO / "policies", project / "policies",
                    ignore=shutil.ignore_patterns("__pycache__", "policy-config.*.json"))
    (project / "policies" / "policy-config.prod.json").write_text(json.dumps(STARTER_RULES))
    write_offline_stack(project)
    return project
