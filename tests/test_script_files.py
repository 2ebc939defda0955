"""The bash kept as files (components/planning/scripts/): every file passes shellcheck as it is,
is rendered by some renderer, and the loader fills placeholders strictly."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from components.planning import script_files
from components.planning.script_files import SCRIPTS, body, template

REPO = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in SCRIPTS.rglob("*.sh"))


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed "
                    "(`make test` installs it)")
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_each_file_passes_shellcheck_as_it_is(path: Path) -> None:
    run = subprocess.run(["shellcheck", "-S", "style", str(path)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout


def test_each_file_is_rendered_somewhere() -> None:
    """A file no renderer names (or includes) is stale."""
    code = "\n".join(p.read_text() for p in (REPO / "components").rglob("*.py"))
    included = {str((p.parent / m).resolve().relative_to(SCRIPTS))
                for p in FILES for m in re.findall(r"^# include: (\S+)$", p.read_text(), re.M)}
    for path in FILES:
        name = str(path.relative_to(SCRIPTS))
        top_level = path.parent == SCRIPTS  # programs installed as they are
        # Named whole, or by its stem beside an f-string of its directory ("reboot/{name}.sh").
        by_stem = f'"{path.stem}"' in code and f'f"{path.parent.name}/{{' in code
        assert top_level or f'"{name}"' in code or by_stem or name in included, name


def _with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(script_files, "SCRIPTS", tmp_path)
    body.cache_clear()


def test_placeholders_fill_lines_and_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with(tmp_path, monkeypatch, {
        "t.sh": "#!/usr/bin/env bash\n#: a note for the file\necho @host@\n"
                "cat <<'EOF'\n# @doc@\nEOF\n  # shellcheck disable=SC2034\nx=1\n"
                "# include: lib/h.sh\n",
        "lib/h.sh": "# shellcheck shell=bash\nh() { :; }\n"})
    out = template("t.sh", host="n-1 @x@", doc="a: 1\nb: 2\n")
    assert out == ("#!/usr/bin/env bash\necho n-1 @x@\ncat <<'EOF'\na: 1\nb: 2\nEOF\nx=1\n"
                   "h() { :; }\n")
    assert template("t.sh", host="n", doc="") == ("#!/usr/bin/env bash\necho n\ncat <<'EOF'\n"
                                                  "EOF\nx=1\nh() { :; }\n")
    body.cache_clear()


def test_a_missing_or_unused_value_is_an_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _with(tmp_path, monkeypatch, {"t.sh": "echo @host@\ncat <<'EOF'\n# @doc@\nEOF\n"})
    with pytest.raises(KeyError, match="no value for @doc@"):
        template("t.sh", host="n")
    with pytest.raises(TypeError, match=r"no placeholder for \['extra'\]"):
        template("t.sh", host="n", doc="", extra=1)
    with pytest.raises(ValueError, match="@doc@ takes whole lines"):
        template("t.sh", host="n", doc="no newline")
    body.cache_clear()
