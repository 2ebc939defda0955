"""Redfish BMC settings: the right PATCH, and the password never on a command line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from components.model.cluster import Bmc
from components.planning.bmc import redfish_command

PASSWORD = "s3cret-Bmc-pw"


def run_with_fake_curl(tmp_path: Path, bmc: Bmc,
                       password: str = PASSWORD) -> tuple[list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(
        "#!/bin/bash\nprintf '%s\\n' \"$@\" > \"$OUT/argv\"\ncat > \"$OUT/stdin\"\n")
    (bin_dir / "curl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path),
           "BMC_PASSWORD": password}
    # pulumi-command's local Command runs its create under /bin/sh.
    subprocess.run(["/bin/sh", "-c", redfish_command(bmc, "10.11.1.100")], env=env, check=True)
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


def curl_config_value(line: str) -> str:
    """A `key = "value"` line of a curl config file, unquoted as curl reads it: inside double
    quotes a backslash escapes the next character (\\, \", \t, \n, \r, \v)."""
    raw = line.split(" = ", 1)[1].rstrip("\n")
    assert raw.startswith('"') and raw.endswith('"'), raw
    out, body, i = [], raw[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            out.append({"t": "\t", "n": "\n", "r": "\r", "v": "\v"}.get(nxt, nxt))
            i += 2
        else:
            assert ch != '"', f"an unescaped quote ends the value early: {raw}"
            out.append(ch)
            i += 1
    return "".join(out)


def test_a_password_with_quotes_and_backslashes_reaches_curl_intact(tmp_path: Path) -> None:
    """A generated password may hold any character; unescaped, a `"` would end curl's value
    early and a `\\` would eat the next character: the BMC would refuse the login."""
    tricky = 'p"a\\ss\\"w0rd$(x)`y`'
    _, stdin = run_with_fake_curl(tmp_path, Bmc(username="ops"), tricky)
    assert curl_config_value(stdin) == f"ops:{tricky}"
