"""Bash kept as files under scripts/ (pure), so shellcheck reads it as it is: static bodies
(`body`) that the renderers put after a generated header of the values they read, and templates
(`template`) whose few values go in by `@key@` placeholders, never by escaping bash's braces.

Lines that start (after indentation) with `# shellcheck ` (directives) or `#: ` (notes on the
file) are for the file alone and are left out of the rendered script; a line
`# include: <name>` is replaced by that body.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@functools.cache
def body(name: str) -> str:
    """The bash of scripts/<name>, as it goes into a rendered script."""
    out = []
    for line in (SCRIPTS / name).read_text().splitlines(keepends=True):
        if line.lstrip().startswith(("# shellcheck ", "#: ")):
            continue
        if line.startswith("# include: "):
            included = Path(name).parent / line.removeprefix("# include: ").strip()
            out.append(body(os.path.normpath(included)))
        else:
            out.append(line)
    return "".join(out)


_BLOCK = re.compile(r"^# @([a-z][a-z0-9_]*)@\n", re.M)
_PLACEHOLDER = re.compile(r"@([a-z][a-z0-9_]*)@")


def template(name: str, /, **values: object) -> str:
    """scripts/<name> with its placeholders filled: a line that is only `# @key@` takes whole
    lines (values[key] is empty or ends with a newline, e.g. a here-document's body; a comment,
    so shellcheck reads the file as it is), any other `@key@` the value's text. A key without a
    value, or a value no placeholder uses, is an error: nothing renders half-filled."""
    used: set[str] = set()

    def value(key: str) -> str:
        if key not in values:
            raise KeyError(f"scripts/{name}: no value for @{key}@")
        used.add(key)
        return str(values[key])

    def block(m: re.Match[str]) -> str:
        text = value(m.group(1))
        if text and not text.endswith("\n"):
            raise ValueError(f"scripts/{name}: @{m.group(1)}@ takes whole lines, and its value "
                             "does not end with a newline")
        return text

    # One pass: a value's own text is never scanned for placeholders.
    pattern = re.compile(f"{_BLOCK.pattern}|{_PLACEHOLDER.pattern}", re.M)
    text = pattern.sub(lambda m: block(m) if m.group(1) else value(m.group(2)), body(name))
    if unused := sorted(set(values) - used):
        raise TypeError(f"scripts/{name}: no placeholder for {unused}")
    return text


def single_quoted(text: str, what: str) -> str:
    """`text` as one single-quoted shell word, verbatim (so a reader of the rendered script sees
    it as it is): it must hold no single quote, which would end the word."""
    if "'" in text:
        raise ValueError(f"{what} holds a single quote, so it cannot travel single-quoted in a "
                         "rendered script")
    return f"'{text}'"
