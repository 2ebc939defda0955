"""BMC settings through Redfish (pure): the command `pulumi up` runs for each host's BMC."""

from __future__ import annotations

import json
import shlex

from components.model.cluster import Bmc


def redfish_settings(bmc: Bmc) -> dict[str, str]:
    """The ComputerSystem properties the stack manages (Redfish ComputerSystem v1.6+)."""
    return {"PowerRestorePolicy": bmc.power_restore_policy}


def redfish_command(bmc: Bmc, address: str) -> str:
    """PATCH the system resource. Credentials reach curl on stdin (`--config -`), never argv,
    so they do not show in the process list; BMC_PASSWORD arrives as a secret environment.
    In curl's config syntax a double-quoted value unescapes \\ and \", so the password gets
    those two escaped (with sed: pulumi-command runs this under /bin/sh, not bash)."""
    url = f"https://{address}{bmc.system_path}"
    tls = f" --cacert {shlex.quote(bmc.ca_bundle)}" if bmc.ca_bundle else ""
    body = json.dumps(redfish_settings(bmc), sort_keys=True)
    return (
        f"printf 'user = \"%s:%s\"\\n' {shlex.quote(bmc.username)} "
        f"\"$(printf '%s' \"$BMC_PASSWORD\" | sed 's/[\\\\\"]/\\\\&/g')\" "
        f"| curl --config - --fail --silent --show-error{tls} -X PATCH "
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)} {shlex.quote(url)}"
    )
