"""Redfish BMC settings: the right PATCH, and the password never on a command line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from components.config import Bmc
from components.planning.bmc import redfish_command

PASSWORD = "s3cret-Bmc-pw"


def run_with_fake_curl(tmp_path: Path, bmc: Bmc) -> tuple[list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(
        "#!/bin/bash\nprintf '%s\\n' \"$@\" > \"$OUT/argv\"\ncat > \"$OUT/stdin\"\n")
    (bin_dir / "curl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path),
           "BMC_PASSWORD": PASSWORD}
    subprocess.run(["bash", "-c", redfish_command(bmc, "10.11.1.100")], env=env, check=True)
    return (tmp_path / "argv").read_text().splitlines(), (tmp_path / "stdin").read_text()


def test_patches_the_power_restore_policy(tmp_path: Path) -> None:
    argv, _ = run_with_fake_curl(tmp_path, Bmc(power_restore_policy="AlwaysOff"))
    assert argv[argv.index("-X") + 1] == "PATCH"
    assert json.loads(argv[argv.index("-d") + 1]) == {"PowerRestorePolicy": "AlwaysOff"}
    assert argv[-1] == "https://10.11.1.100/redfish/v1/Systems/1"
    assert "--fail" in argv and "-k" not in argv and "--insecure" not in argv


def test_credentials_travel_on_stdin_only(tmp_path: Path) -> None:
    argv, stdin = run_with_fake_curl(tmp_path, Bmc(username="ops", ca_bundle="/etc/bmc-ca.pem"))
    assert PASSWORD not in " ".join(argv)
    assert stdin == f'user = "ops:{PASSWORD}"\n'
    assert argv[argv.index("--cacert") + 1] == "/etc/bmc-ca.pem"
