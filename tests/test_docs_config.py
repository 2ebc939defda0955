"""docs/configuration.md is the reference of `gpu-cluster:cluster`: every key of the model
(walked from Cluster, by its camelCase alias) has a row there, and every row is a key of the
model, so the reference cannot go stale."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from support.project import REPO

from components.model.cluster import Cluster

DOC = REPO / "docs" / "configuration.md"


def _args(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation)


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in _args(annotation) for m in _models(a)]


def _has(annotation: Any, origin: type) -> bool:
    if typing.get_origin(annotation) is origin:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_has(a, origin) for a in _args(annotation))
    return False


def model_keys(model: type[BaseModel] = Cluster, prefix: str = "") -> list[str]:
    """Key paths as the reference writes them: `[]` for a list item, `<name>` for a map key."""
    keys = []
    for name, field in model.model_fields.items():
        if field.exclude:  # retired keys: rejected with a fix, not documented
            continue
        path = prefix + (field.alias or name)
        keys.append(path)
        sep = "[]." if _has(field.annotation, tuple) else (
            ".<name>." if _has(field.annotation, dict) else ".")
        for sub in _models(field.annotation):
            keys += model_keys(sub, path + sep)
    return keys


def documented_keys() -> list[str]:
    text = DOC.read_text()
    ref = text[text.index("## Reference"):text.index("## The inventory file")]
    return re.findall(r"^\| `([^`]+)` \|", ref, re.M)


def test_every_config_key_is_documented() -> None:
    keys = model_keys()
    assert len(keys) > 200
    missing = [k for k in keys if k not in set(documented_keys())]
    assert missing == [], f"add these keys to docs/configuration.md: {missing}"


def test_the_reference_names_no_key_the_model_lacks() -> None:
    extra = [k for k in documented_keys() if k not in set(model_keys())]
    assert extra == [], f"docs/configuration.md documents keys the model lacks: {extra}"


def test_the_inventory_columns_are_documented() -> None:
    from components.model.inventory import CSV_COLUMNS

    text = DOC.read_text()
    assert ",".join(CSV_COLUMNS) in text
    section = text[text.index("## The inventory file"):]
    for column in CSV_COLUMNS:
        assert f"| `{column}` |" in section, column
