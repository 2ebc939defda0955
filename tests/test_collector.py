"""The program runs with the garbage collector's automatic passes off (a program's heap only
grows, and the passes were a fifth of a large preview); the offline runner gives the process
back its collector afterwards, so a test process that runs many programs is not left with it
off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.project import REPO

PROBE = """
import gc, json, sys
from pathlib import Path
import pulumi
from offline.runtime import run_program
from offline.stackconfig import load_stack_config
seen = []
_register = pulumi.CustomResource.__init__
def register(self, *args, **kwargs):
    seen.append(gc.isenabled())
    _register(self, *args, **kwargs)
pulumi.CustomResource.__init__ = register
project = Path(sys.argv[1])
gc.set_threshold(1234, 5, 6)
before = gc.isenabled()
result = run_program(project, load_stack_config(project, "prod"))
print("PROBE " + json.dumps({
    "before": before, "during": sorted(set(seen)), "registered": len(result.registrations),
    "after": gc.isenabled(), "threshold": list(gc.get_threshold())}))
"""


def test_the_program_runs_without_automatic_collection_and_the_runner_restores_it(
        project: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(project)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    seen = json.loads(line.removeprefix("PROBE "))
    assert seen["registered"] > 100
    assert seen["before"] is True
    assert seen["during"] == [False], "every resource is registered with the collector off"
    assert seen["after"] is True and seen["threshold"] == [1234, 5, 6]
