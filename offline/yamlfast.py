"""A small, fast YAML emitter for JSON-shaped data (dict, list, str, int, float, bool, None).

PyYAML's representer is pure Python even with libyaml and dominated the runner's own time on
10k resources. This emitter writes block style with sorted keys, plain scalars only where they
are unambiguous (otherwise JSON-style double quotes, valid YAML), literal blocks for multi-line
text, and defers anything else to PyYAML. `yaml.safe_load(dump(x)) == x` is property-tested.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

# Plain only when a YAML 1.1 resolver cannot read it as anything but this string.
_WORD = r"[A-Za-z0-9_./@+=,()$*\[\]:-]"
_PLAIN = re.compile(rf"[A-Za-z_/]{_WORD}*(?: {_WORD}+)*")
_RESERVED = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})
# Characters YAML cannot carry raw inside double quotes; escaped as \uXXXX.
_ESCAPE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff]")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\r]")


def _quoted(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    return _ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)


def scalar(s: str) -> str:
    if (_PLAIN.fullmatch(s) and s.lower() not in _RESERVED and not s.endswith(":")
            and ": " not in s):
        return s
    return _quoted(s)


def _literal_ok(s: str) -> bool:
    if _UNPRINTABLE.search(s) or s[0] in " \t\n":
        return False
    # Trailing blanks on a line (or a blank-only line) are not reliably kept by block style.
    return " \n" not in s and "\t\n" not in s and not s.rstrip("\n").endswith((" ", "\t"))


def _literal(s: str, indent: int) -> str:
    body = s.rstrip("\n")
    trailing = len(s) - len(body)
    chomp = "-" if trailing == 0 else ("" if trailing == 1 else "+")
    pad = " " * indent
    lines = [pad + line if line else "" for line in body.split("\n")]
    tail = "\n" * (trailing - 1) if trailing > 1 else ""
    return f"|{chomp}\n" + "\n".join(lines) + "\n" + tail


def _float(f: float) -> str:
    if f != f or f in (float("inf"), float("-inf")):
        return yaml.safe_dump(f).split("\n", 1)[0]
    text = repr(f)
    if "." not in text and "e" in text:
        text = text.replace("e", ".0e")  # YAML 1.1 floats need a dot
    return text


class _Fallback(Exception):
    pass


def _inline(v: Any) -> str | None:
    """The text of a value that fits on its key's line (None for a nested block)."""
    if isinstance(v, str):
        return scalar(v) if ("\n" not in v) else None
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, dict):
        return "{}" if not v else None
    if isinstance(v, list):
        return "[]" if not v else None
    raise _Fallback


def _mapping(d: dict[str, Any], indent: int, out: list[str], first_lead: str = "") -> None:
    pad = " " * indent
    for i, key in enumerate(sorted(d, key=str)):
        if not isinstance(key, str):
            raise _Fallback
        k = scalar(key)
        prefix = first_lead if (i == 0 and first_lead) else pad
        value = d[key]
        inline = _inline(value)
        if inline is not None:
            out.append(f"{prefix}{k}: {inline}\n")
        elif isinstance(value, str):
            if _literal_ok(value):
                out.append(f"{prefix}{k}: {_literal(value, indent + 2)}")
            else:
                out.append(f"{prefix}{k}: {_quoted(value)}\n")
        elif isinstance(value, dict):
            out.append(f"{prefix}{k}:\n")
            _mapping(value, indent + 2, out)
        else:  # non-empty list: PyYAML's indentless style, "- " at the key's column
            out.append(f"{prefix}{k}:\n")
            _sequence(value, indent, out)


def _sequence(items: list[Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for item in items:
        inline = _inline(item)
        if inline is not None:
            out.append(f"{pad}- {inline}\n")
        elif isinstance(item, str):
            if _literal_ok(item):
                out.append(f"{pad}- {_literal(item, indent + 2)}")
            else:
                out.append(f"{pad}- {_quoted(item)}\n")
        elif isinstance(item, dict):
            _mapping(item, indent + 2, out, first_lead=f"{pad}- ")
        else:
            # A list in a list: "- " then the inner items one level deeper on the next lines.
            out.append(f"{pad}-\n")
            _sequence(item, indent + 2, out)


def dump(obj: Any, fallback: Any = None) -> str:
    """YAML text of `obj`; `fallback(obj)` (PyYAML) for anything this emitter does not handle."""
    out: list[str] = []
    try:
        if isinstance(obj, dict) and obj:
            _mapping(obj, 0, out)
        elif isinstance(obj, list) and obj:
            _sequence(obj, 0, out)
        else:
            inline = _inline(obj)
            if inline is None:
                raise _Fallback
            out.append(inline + "\n")
    except _Fallback:
        if fallback is None:
            raise TypeError(f"cannot emit {type(obj).__name__}") from None
        return fallback(obj)
    return "".join(out)
