"""Encryption at rest: what the API servers encrypt Secrets with, and the KMS v2 option."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from support.project import prod_raw

from components.planning import kubeadm
from components.wiring.loading import validate_cluster

REPO = Path(__file__).resolve().parent.parent


def cluster(**kubernetes: object):
    raw = prod_raw()
    raw["kubernetes"].update(kubernetes)
    return validate_cluster(raw, REPO)


def _written(script: str) -> dict:
    """The EncryptionConfiguration the init script writes (its here-document)."""
    body = re.search(r"<<ENC\n(.*?)\nENC\n", script, re.S)
    assert body, "the init script writes no encryption configuration"
    return yaml.safe_load(body.group(1))


def test_secrets_are_written_with_a_local_key_by_default() -> None:
    c = cluster()
    providers = _written(kubeadm.init_script(c, c.control_plane[0]))["resources"][0]["providers"]
    assert [next(iter(p)) for p in providers] == ["secretbox", "identity"]
    # The key is generated on the host by the script, never rendered.
    assert providers[0]["secretbox"]["keys"][0]["secret"] == "${ENCRYPTION_KEY}"


def test_a_kms_v2_plugin_encrypts_new_writes_and_the_local_key_still_reads_old_ones() -> None:
    c = cluster(kms={"name": "hsm-1", "endpoint": "unix:///var/run/kms-hsm/socket.sock"})
    providers = _written(kubeadm.init_script(c, c.control_plane[0]))["resources"][0]["providers"]
    assert providers[0] == {"kms": {"apiVersion": "v2", "name": "hsm-1",
                                    "endpoint": "unix:///var/run/kms-hsm/socket.sock",
                                    "timeout": "3s"}}
    assert [next(iter(p)) for p in providers[1:]] == ["secretbox", "identity"]
    # The API server (a static pod) reaches the plugin's socket through a host mount.
    volumes = kubeadm.cluster_configuration(c)["apiServer"]["extraVolumes"]
    assert {"name": "kms-plugin", "hostPath": "/var/run/kms-hsm",
            "mountPath": "/var/run/kms-hsm", "pathType": "DirectoryOrCreate"} in volumes
