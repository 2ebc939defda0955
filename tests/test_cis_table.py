"""docs/cis.md maps the policy pack's rules to CIS Kubernetes Benchmark items: the rules it
names exist, every mandatory security rule (rules_hardening.py, rules_exposure.py) is either
mapped to an item or listed as having none, and every item is a benchmark number."""

from __future__ import annotations

import re
import sys

from support.project import REPO

if str(REPO / "policies") not in sys.path:
    sys.path.insert(0, str(REPO / "policies"))

import gpu_guardrails
from gpu_guardrails.registry import DOCS
from pulumi_policy import EnforcementLevel

DOC = REPO / "docs" / "cis.md"
MAPPING = ("CIS item", "title (short)", "how this stack meets it", "pack rule(s)")
NOT_MET = ("CIS item", "title (short)", "why not")
NO_ITEM = ("pack rule", "what it guards")
SECURITY_MODULES = ("gpu_guardrails.rules_hardening", "gpu_guardrails.rules_exposure")
CIS_ID = re.compile(r"\d+(\.\d+)+")
RULE_ID = re.compile(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`")


def _cells(line: str) -> list[str]:
    # A cell may hold an escaped pipe (`curl … \| bash`).
    return [c.strip().replace("\\|", "|")
            for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _tables() -> dict[tuple[str, ...], list[list[str]]]:
    """Every Markdown table of the document: header -> body rows (as cells)."""
    tables: dict[tuple[str, ...], list[list[str]]] = {}
    rows: list[list[str]] = []
    for line in [*DOC.read_text().splitlines(), ""]:
        if line.lstrip().startswith("|"):
            rows.append(_cells(line))
            continue
        if rows:
            header, body = tuple(rows[0]), rows[1:]
            assert body and set("".join(body[0])) <= set("-: "), f"malformed table {header}"
            assert header not in tables, f"two tables headed {header}"
            tables[header] = body[1:]
            rows = []
    return tables


def _table(header: tuple[str, ...]) -> list[list[str]]:
    tables = _tables()
    assert header in tables, f"docs/cis.md has no table headed {' | '.join(header)}"
    for row in tables[header]:
        assert len(row) == len(header), f"row {row} has {len(row)} cells, not {len(header)}"
    return tables[header]


def _mapped_rules() -> dict[str, list[str]]:
    """Rule id -> the CIS items the mapping table names it for."""
    out: dict[str, list[str]] = {}
    for row in _table(MAPPING):
        rules = row[-1]
        assert rules == "—" or RULE_ID.search(rules), f"{row[0]}: rule column {rules!r}"
        for rule in RULE_ID.findall(rules):
            out.setdefault(rule, []).append(row[0])
    return out


def _unmapped_rules() -> list[str]:
    """The rules the document lists as having no CIS item."""
    out = []
    for row in _table(NO_ITEM):
        m = RULE_ID.fullmatch(row[0])
        assert m, f"not a rule id: {row[0]!r}"
        out.append(m.group(1))
    return out


def test_every_rule_named_in_the_tables_is_in_the_pack() -> None:
    pack = {p.name for p in gpu_guardrails.POLICIES}
    named = [*_mapped_rules(), *_unmapped_rules()]
    assert len(named) >= 10
    assert sorted(set(named) - pack) == [], "docs/cis.md names rules the pack does not have"


def test_every_mandatory_security_rule_is_mapped() -> None:
    mapped, unmapped = _mapped_rules(), _unmapped_rules()
    assert not set(mapped) & set(unmapped), "a rule is both mapped and listed as unmapped"
    security = [p.name for p in gpu_guardrails.POLICIES
                if DOCS[p.name].__module__ in SECURITY_MODULES
                and p.enforcement_level == EnforcementLevel.MANDATORY]
    assert len(security) >= 10
    missing = [r for r in security if r not in mapped and r not in unmapped]
    assert missing == [], ("map these rules to CIS items in docs/cis.md, or list them under "
                           f"'Security rules with no CIS item': {missing}")


def test_cis_items_are_benchmark_numbers() -> None:
    met = [row[0] for row in _table(MAPPING)]
    not_met = [row[0] for row in _table(NOT_MET)]
    for item in (*met, *not_met):
        assert CIS_ID.fullmatch(item), f"not a CIS item number: {item!r}"
    assert len(met) == len(set(met)), "an item appears twice among the items met"
    assert len(not_met) == len(set(not_met)), "an item appears twice among the items not met"
    # Items the pack's anonymous-request and kubelet rules enforce are mapped to them.
    mapped = _mapped_rules()
    assert "1.2.1" in mapped["apiserver-anonymous-limited"]
    assert {"4.2.1", "4.2.2", "4.2.4"} <= set(mapped["kubelet-authenticated"])
