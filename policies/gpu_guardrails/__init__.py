"""gpu-guardrails: policy rules for the gpu-cluster stack.

Import this package (not `policies/__main__.py`, which serves the pack and blocks). A rule is
one decorated function (see `registry.py`) in the module of its domain:
- `rules.py`: images, charts, checkpoints, SSH, GPU requests;
- `rules_bootstrap.py`: kubeadm, providers, versions;
- `rules_exposure.py`: the inference API, network policies, load-balancer addresses;
- `rules_fabric.py`: InfiniBand;
- `rules_hardening.py`: audit, encryption, kubelet and control-plane settings, host scripts,
  workload privileges;
- `rules_inference.py`: inference services;
- `rules_pods.py`: privilege, secrets and GPU placement of every pod;
- `rules_rdma.py`: RDMA pods and NCCL;
- `rules_security.py`: classes of security regression (hosts open to the world, admission
  weakened, services outside the ingress, identities with cluster rights, the fabric's Default
  partition, code from model repositories, secrets in clear, the kubelet-serving approver);
- `rules_training.py`: training jobs and gang scheduling;
- `rules_deferred.py` (run last): the one finding that says which checks wait for
  `pulumi up` because the values they read are unknown in a preview.
Data the stack loads too (by path, since the pack never imports the stack): `compat_data.py`,
the release tables; `vocabulary.py`, the labels the stack sets and the rules read.
Levels can be overridden per rule with a policy config (`{"<rule>": "advisory" |
{"enforcementLevel": "…", <properties>}}`): `INITIAL_CONFIG` below, `pulumi preview
--policy-pack-config`, or `python -m offline preview --policy-config`. `python -m
gpu_guardrails.docs` (from policies/) prints the rules table written to policies/RULES.md.
"""

from pulumi_policy import EnforcementLevel

# Importing the rule modules registers the rules, in this order.
from . import rules as _rules  # noqa: F401
from . import rules_bootstrap as _rules_bootstrap  # noqa: F401
from . import rules_deferred
from . import rules_exposure as _rules_exposure  # noqa: F401
from . import rules_fabric as _rules_fabric  # noqa: F401
from . import rules_hardening as _rules_hardening  # noqa: F401
from . import rules_inference as _rules_inference  # noqa: F401
from . import rules_pods as _rules_pods  # noqa: F401
from . import rules_rdma as _rules_rdma  # noqa: F401
from . import rules_security as _rules_security  # noqa: F401
from . import rules_training as _rules_training  # noqa: F401
from .registry import REGISTRY

# The summary of deferred checks runs after every other rule (a stable sort keeps the rest).
POLICIES = sorted(REGISTRY, key=lambda p: p.name == rules_deferred.SUMMARY)

# Level of a rule that does not set one.
DEFAULT_ENFORCEMENT_LEVEL = EnforcementLevel.ADVISORY

# The pack's own per-rule overrides, e.g. {"gpu-requests-equal-limits": EnforcementLevel.ADVISORY}.
INITIAL_CONFIG: dict = {}

__all__ = ["DEFAULT_ENFORCEMENT_LEVEL", "INITIAL_CONFIG", "POLICIES"]
