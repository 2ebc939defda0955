"""The shape the code keeps: no function anywhere in the tree longer than a screen, so each has
one job a reader can hold (McCabe complexity <= 15 is ruff's, in pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 80


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`<file>:<line> <name> (<n> lines)` of every function longer than `limit`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} "
                                 f"({length} lines)")
    return found


CODE = ("components", "offline", "twin", "policies", "e2e", "tests", "tools")


def test_no_function_is_longer_than_a_screen() -> None:
    folders = [p for p in REPO.iterdir()
               if p.is_dir() and p.name not in {".venv", ".git", "build", "rendered"}]
    assert {p.name for p in folders if any(p.rglob("*.py"))} <= set(CODE), \
        "a code folder the guard does not read"
    assert [f for root in CODE for f in long_functions(REPO / root)] == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"def f():\n{body}\n")
    assert long_functions(tmp_path / "pkg") == [f"pkg/m.py:1 f ({MAX_LINES + 1} lines)"]
