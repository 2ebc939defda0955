"""Serves the policy pack to `pulumi preview --policy-pack policies`.

Only assembles the pack: constructing PolicyPack starts the analyzer and blocks, so tests and the
offline preview import `gpu_guardrails` instead of this file.
"""

import gpu_guardrails
from pulumi_policy import PolicyPack

PolicyPack(
    name="gpu-guardrails",
    policies=gpu_guardrails.POLICIES,
    enforcement_level=gpu_guardrails.DEFAULT_ENFORCEMENT_LEVEL,
    initial_config=gpu_guardrails.INITIAL_CONFIG or None,
)
