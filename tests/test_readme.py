"""The README's rules table is the pack's own, so reviewers read what actually runs."""

from __future__ import annotations

import sys

from conftest import REPO


def test_readme_lists_every_rule_with_its_level_and_reason() -> None:
    sys.path.insert(0, str(REPO / "policies"))
    from gpu_guardrails.docs import table

    readme = (REPO / "README.md").read_text()
    begin = readme.index("<!-- rules:begin")
    body = readme[readme.index("\n", begin) + 1: readme.index("<!-- rules:end -->")]
    assert body.strip() == table().strip(), "README rules table is stale: paste docs.table()"
    assert body.count("| `") >= 30
