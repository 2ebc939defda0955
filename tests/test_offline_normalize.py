"""Normalisation, the stack-config reader and the YAML emitter."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline.normalize import ASSET_SIG, SECRET_SIG, SIG_KEY, Normaliser
from offline.stackconfig import build_config
from offline.yamlfast import dump

UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def secret(value: Any) -> dict[str, Any]:
    return {SIG_KEY: SECRET_SIG, "value": value}


def test_values_are_normalised() -> None:
    n = Normaliser("/work/project")
    out = n.inputs("kubernetes:apps/v1:Deployment", {
        "spec": {"replicas": 3.0, "ratio": 0.5, "env": [{"value": secret("hunter2-password")}],
                 "image": UNKNOWN, "both": secret(UNKNOWN)},
        "file": {SIG_KEY: ASSET_SIG, "path": "/work/project/scripts/a.sh"},
    })
    assert out == {"spec": {"replicas": 3, "ratio": 0.5, "env": [{"value": "[secret]"}],
                            "image": "[unknown]", "both": "[secret]"},
                   "file": {"asset": {"path": "scripts/a.sh"}}}
    assert type(out["spec"]["replicas"]) is int
    assert n.secret_strings == {"hunter2-password"}


def test_only_known_safe_fields_of_a_wrapped_connection_are_shown() -> None:
    conn = secret({"host": "10.0.0.1", "port": 22.0, "user": "ubuntu", "privateKey": "KEY-DATA",
                   "password": "pw", "proxy": {"host": "10.0.0.9", "privateKey": "K2"}})
    out = Normaliser().inputs("command:remote:Command", {"connection": conn, "env": conn})
    assert out["connection"] == {"host": "10.0.0.1", "port": 22, "user": "ubuntu",
                                 "privateKey": "[secret]", "password": "[secret]",
                                 "proxy": {"host": "10.0.0.9", "privateKey": "[secret]"}}
    assert out["env"] == "[secret]"  # other inputs: no exception
    other = Normaliser().inputs("kubernetes:core/v1:Secret", {"connection": conn})
    assert other["connection"] == "[secret]"  # other types: no exception


def test_stack_config_is_encoded_like_the_cli() -> None:
    cfg = build_config("gpu-cluster", "prod", {"config": {
        "gpu-cluster:cluster": {"replicas": 2, "flag": True, "pw": {"secure": "v1:x"}},
        "pulumi:disable-default-providers": ["kubernetes"],
        "debug": False,
        "gpu-cluster:count": 3,
        "gpu-cluster:sshPrivateKey": {"secure": "v1:abc"},
    }})
    assert cfg.config["gpu-cluster:debug"] == "false"  # namespaced, bool as Config.get_bool reads
    assert cfg.config["gpu-cluster:count"] == "3"
    assert json.loads(cfg.config["pulumi:disable-default-providers"]) == ["kubernetes"]
    assert cfg.config["gpu-cluster:sshPrivateKey"] == "offline-secret-sshPrivateKey"
    assert json.loads(cfg.config["gpu-cluster:cluster"]) == {
        "replicas": 2, "flag": True, "pw": "offline-secret-cluster.pw"}
    assert cfg.secret_keys == ["gpu-cluster:cluster", "gpu-cluster:sshPrivateKey"]
    assert cfg.placeholders == {"offline-secret-cluster.pw": "gpu-cluster:cluster",
                                "offline-secret-sshPrivateKey": "gpu-cluster:sshPrivateKey"}


_TEXT = st.one_of(
    st.text(),
    st.text(alphabet="ab:$*[] #-\n\t,{}&!|>'\"%@`?=.", max_size=12),
    st.sampled_from(["yes", "No", "~", "1:20", "0x1f", "-", "a: b", "#x", "x #y", " a", "a ",
                     "\n", "a\n\n", "a\nb\n  c", " \n", "a\r\nb", "2024-01-01", ".inf", "1e5",
                     "=", "<<", "a:", "a::b", "null", "10.0.0.1", "triggers[*]"]),
)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**62), 2**62),
                     st.floats(allow_nan=False, allow_infinity=False), _TEXT)
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(_DATA)
def test_yaml_emitter_round_trips(value: Any) -> None:
    text = dump(value, fallback=lambda v: yaml.safe_dump(v))
    assert yaml.safe_load(text) == value


def test_yaml_emitter_output_reads_well() -> None:
    text = dump({"b": {"script": "#!/bin/bash\nset -eu\n", "count": 2, "ip": "10.0.0.1"},
                 "a": ["x", {"k": "v", "l": []}], "c": "nvcr.io/nvidia/pytorch:25.01-py3"})
    assert text == (
        "a:\n- x\n- k: v\n  l: []\n"
        'b:\n  count: 2\n  ip: "10.0.0.1"\n  script: |\n    #!/bin/bash\n    set -eu\n'
        "c: nvcr.io/nvidia/pytorch:25.01-py3\n"
    )
