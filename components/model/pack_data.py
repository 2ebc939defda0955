"""The policy pack's data the stack reads too, loaded by path: the pack owns it (the CLI runs
the pack from policies/ alone, so it never imports the stack), and a name or a release table is
written once for both."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

PACK = Path(__file__).resolve().parents[2] / "policies" / "gpu_guardrails"


def load(name: str) -> ModuleType:
    """policies/gpu_guardrails/<name>.py, as a module of its own."""
    path = PACK / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpu_guardrails_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the policy pack's {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
