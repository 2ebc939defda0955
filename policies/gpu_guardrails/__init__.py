"""gpu-guardrails: policy rules for the gpu-cluster stack.

Import this package (not `policies/__main__.py`, which serves the pack and blocks). Adding a rule
is one decorated function in `rules.py` (see `registry.py`). Levels can be overridden per rule
with a policy config (`{"<rule>": "advisory" | {"enforcementLevel": "…"}}`): `INITIAL_CONFIG`
below, `pulumi preview --policy-pack-config`, or `python -m offline preview --policy-config`.
"""

from pulumi_policy import EnforcementLevel

from . import rules as _rules  # noqa: F401  (importing registers the rules)
from .registry import REGISTRY

POLICIES = list(REGISTRY)

# Level of a rule that does not set one.
DEFAULT_ENFORCEMENT_LEVEL = EnforcementLevel.ADVISORY

# The pack's own per-rule overrides, e.g. {"gpu-requests-equal-limits": EnforcementLevel.ADVISORY}.
INITIAL_CONFIG: dict = {}

__all__ = ["DEFAULT_ENFORCEMENT_LEVEL", "INITIAL_CONFIG", "POLICIES"]
