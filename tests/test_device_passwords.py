"""Per-device switch and BMC passwords: a device named in `switchPasswords` / `bmcPasswords`
logs in with its own secret, every other one with the shared `switchPassword` / `bmcPassword`;
a name that is no device is refused before anything is registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.project import REPO, run_offline

SWITCH, OTHER_SWITCH = "leaf-su1-r0-1", "spine-01"
BMC_HOST, OTHER_BMC_HOST = "gpu-node-03", "gpu-node-04"

# The program run once under the offline runtime; prints each command's raw secret inputs.
PROBE = """
import json, sys
from pathlib import Path
from offline.runtime import run_program
from offline.stackconfig import load_stack_config
project = Path(sys.argv[1])
result = run_program(project, load_stack_config(project, "prod"))
def plain(v):
    return v.get("value") if isinstance(v, dict) else v
out = {}
for r in result.registrations:
    conn = plain(r.inputs.get("connection")) or {}
    if r.type == "command:remote:Command" and "password" in conn:
        out[r.name] = plain(conn["password"])
    if r.type == "command:local:Command" and r.name.endswith("-bmc"):
        out[r.name] = plain(r.inputs["environment"]["BMC_PASSWORD"])
print("PROBE " + json.dumps(out))
"""


def with_device_passwords(project: Path, switches: list[str], bmcs: list[str]) -> None:
    stack = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["gpu-cluster:switchPasswords"] = {n: {"secure": "v1:x"} for n in switches}
    doc["config"]["gpu-cluster:bmcPasswords"] = {n: {"secure": "v1:y"} for n in bmcs}
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))


def probe(project: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(project)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(line.removeprefix("PROBE "))


@pytest.mark.slow
def test_a_named_device_logs_in_with_its_own_password(project: Path) -> None:
    with_device_passwords(project, [SWITCH], [BMC_HOST])
    seen = probe(project)
    # Offline a secret is a placeholder named by its key (and its credentials version).
    assert seen[f"{SWITCH}-config"].startswith(f"offline-secret-switchPasswords.{SWITCH}#")
    assert seen[f"{OTHER_SWITCH}-config"].startswith("offline-secret-switchPassword#")
    assert seen[f"{BMC_HOST}-bmc"].startswith(f"offline-secret-bmcPasswords.{BMC_HOST}#")
    assert seen[f"{OTHER_BMC_HOST}-bmc"].startswith("offline-secret-bmcPassword#")


def test_a_name_that_is_no_device_is_refused(project: Path) -> None:
    with_device_passwords(project, ["leaf-su9-r0-1"], ["mgmt-99"])
    proc = run_offline(project, "preview")
    assert proc.returncode == 2, proc.stdout[-2000:]
    out = proc.stdout + proc.stderr
    assert "gpu-cluster:switchPasswords.leaf-su9-r0-1" in out
    assert "names no switch of the fabric plan" in out
    assert "gpu-cluster:bmcPasswords.mgmt-99" in out and "names no host with a BMC" in out
    assert "Traceback" not in out
