"""The tests' own layout: helpers live in tests/support/ and are imported as `support.<module>`;
no test module imports another test module or conftest.py (pytest imports those itself, and a
test module imported as a library runs its module-level code twice under two names)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module name) of every absolute import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_tests_holds_only_test_modules_and_conftest() -> None:
    """A helper module beside the tests would be importable by its bare name; it belongs in
    support/."""
    stray = [p.name for p in TESTS.glob("*.py")
             if p.name != "conftest.py" and not p.name.startswith("test_")]
    assert stray == [], f"move these into tests/support/: {stray}"
    assert (SUPPORT / "__init__.py").is_file()


def test_no_module_imports_a_test_module_or_conftest() -> None:
    siblings = {p.stem for p in TESTS.glob("*.py")}
    bad = [f"{path.relative_to(TESTS)}:{line}: imports {name}"
           for path in _python_files() for line, name in _imported(path)
           if name in siblings or name == "conftest" or name.startswith("test_")]
    assert bad == [], "import helpers from support.<module> instead:\n" + "\n".join(bad)


def test_support_modules_import_no_test_module() -> None:
    """support/ is a library for the tests, never the other way round: it imports only itself
    and the project's code."""
    assert SUPPORT.is_dir()
    modules = {p.stem for p in SUPPORT.glob("*.py")} - {"__init__"}
    assert modules, "tests/support/ holds no helper module"
    # The project's own packages (`twin`, `offline`, ...) are what a bare import finds, even
    # where a helper shares the name (support/twin.py runs the twin package).
    packages = {p.parent.name for p in TESTS.parent.glob("*/__init__.py")}
    for path in sorted(SUPPORT.glob("*.py")):
        names = {name for _, name in _imported(path)}
        assert not {n for n in names if n.startswith("test_") or n == "conftest"}, path.name
        assert not names & (modules - {"support"} - packages), (
            f"{path.name}: import sibling helpers as support.<module>")
