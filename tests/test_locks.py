"""The Python requirements are lock files: every package pip installs, transitive ones too, is
pinned to one release and to the sha256 of each of that release's files, and every install
refuses anything else (`--require-hashes`; pip also turns hash checking on by itself when a
requirement carries a hash, so the Pulumi CLI's own `pip install -r requirements.txt` checks
them too). The `.in` files say what the project asks for; `make lock` compiles each into its
lock file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# lock file -> the source it is compiled from
LOCKS = {
    "requirements.txt": "requirements.in",
    "requirements-dev.txt": "requirements-dev.in",
    "policies/requirements.txt": "policies/requirements.in",
}
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def logical_lines(path: Path) -> list[str]:
    """The lines pip reads: continuations joined, comments and blank lines dropped."""
    text = path.read_text().replace("\\\n", " ")
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


def package_lines(path: Path) -> list[str]:
    return [line for line in logical_lines(path) if not line.startswith("-")]


def pins(path: Path) -> dict[str, str]:
    """name -> version of each package line (every form but `name==version` is a failure)."""
    return parse_pins(package_lines(path), path)


def parse_pins(lines: list[str], path: Path) -> dict[str, str]:
    out = {}
    for line in lines:
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"{path.relative_to(REPO)}: not pinned with ==: {line}"
        out[normalize(m.group(1))] = m.group(2)
    return out


def top_level(path: Path) -> dict[str, str]:
    """The requirements an .in file names, following its -r includes (-c only constrains)."""
    out = parse_pins(package_lines(path), path)
    for line in logical_lines(path):
        if line.startswith(("-r ", "--requirement ")):
            out |= top_level(path.parent / line.split(maxsplit=1)[1])
    return out


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_locked_package_is_pinned_with_its_hashes(lock: str) -> None:
    path = REPO / lock
    lines = package_lines(path)
    assert lines, lock
    for line in lines:
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*==\S+", line), (lock, line)
        assert HASH.search(line), (lock, "no --hash=sha256:", line.split()[0])
    assert not [line for line in logical_lines(path)
                if line.startswith(("-r ", "-c ", "-e ", "--requirement", "--constraint"))], (
        lock, "a lock file includes nothing: it is complete by itself")
    # How to regenerate it is written in it.
    assert "make lock" in "".join(path.read_text().splitlines(keepends=True)[:8]), lock


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_top_level_requirement_is_locked_at_its_version(lock: str) -> None:
    wanted = top_level(REPO / LOCKS[lock])
    assert wanted, LOCKS[lock]
    locked = pins(REPO / lock)
    for name, version in wanted.items():
        assert locked.get(name) == version, (lock, name, version, locked.get(name))


def test_the_locks_agree_with_the_programs_lock() -> None:
    """The dev and policy-pack locks install the program's exact versions, so tests and the
    pack run what `pulumi up` runs."""
    program = pins(REPO / "requirements.txt")
    dev = pins(REPO / "requirements-dev.txt")
    assert program.items() <= dev.items()
    pack = pins(REPO / "policies/requirements.txt")
    assert pack.items() <= program.items()


def test_the_makefile_installs_the_lock_with_require_hashes() -> None:
    text = (REPO / "Makefile").read_text()
    rule = re.search(r"^\$\(VENV\)/\.installed:(.*)\n((?:\t.*\n)+)", text, re.M)
    assert rule, "no $(VENV)/.installed rule"
    assert {"requirements.txt", "requirements-dev.txt"} <= set(rule.group(1).split())
    installs = [line for line in rule.group(2).splitlines() if " install " in line]
    assert installs
    for line in installs:
        assert "--require-hashes" in line.split() and "-r requirements-dev.txt" in line, line
    lock = re.search(r"^lock:.*\n((?:\t.*\n)+)", text, re.M)
    assert lock, "no `make lock` target"
    assert "--generate-hashes" in text
    for target, source in LOCKS.items():
        assert f"--output-file {target} {source}" in lock.group(1), target
