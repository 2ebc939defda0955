"""The subnet managers' host side (pure): which files each SM host gets, the order they restart
in, and the script that installs the files and restarts opensm only when they changed.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from components.planning.fabric.sm_files import SECRET_OPTIONS

SM_CONF_DIR = "/etc/opensm"
SM_CACHE_DIR = "/var/cache/opensm"  # guid2mkey there holds every port's M_Key
SM_LOG_FILE = "/var/log/opensm.log"  # opensm logs the keys of refused SM and SA requests
# Everything opensm writes (log, cache, guid2mkey) is created 0600 under this umask.
SM_UNIT_DROPIN = "/etc/systemd/system/opensm.service.d/10-gpu-cluster.conf"
SM_UNIT_DROPIN_TEXT = """\
# Rendered by gpu-cluster: opensm's files hold the management keys; none is world-readable.
[Service]
UMask=0077
"""
# The secret keys' line in an apply script (see with_sm_keys).
_KEYS_LINE = 'OPENSM_KEYS="${OPENSM_KEYS:?the subnet-manager keys come with this script from ' \
    'pulumi up (secrets fabricMKey, fabricSmKey, fabricSaKey)}"'


SM_SETTLE_SECONDS = 300  # a heavy sweep of a large fabric plus a master handover


def sm_restart_order(priorities: dict[str, int]) -> list[str]:
    """Standbys first (lowest priority first), the master (highest) last: a change never
    restarts both, and the fabric keeps a master while the standby rejoins."""
    return sorted(priorities, key=lambda h: (priorities[h], h))


REJOIN_PENDING = "/var/lib/gpu-cluster/opensm-rejoin-pending"


def sm_apply_script(files: dict[str, str], ca: str, master: bool) -> str:
    """Install changed files (absolute path -> text), check them, restart opensm only then,
    and wait until it is back in its role.

    Everything is staged and checked before the first file is installed. A change leaves a
    restart-pending mark that only a successful restart clears, so a run that fails between
    installing and restarting is finished by the next one. After a restart the local SM's
    state is read with `sminfo -D 0` (SMInfo over the directed route to this port): the master
    must be MASTER again; a standby STANDBY (or MASTER when it is alone: at first bring-up it
    runs before the master, which takes over by handover when it starts).

    A standby whose SM_Key changes is stopped, not restarted, until `sm_rejoin_script` runs
    after the master: opensm ignores an SM holding another SM_Key, so a standby restarted
    first with the new key would make itself a second master beside the old-key one.

    The management keys are not in `files`: `with_sm_keys` puts them in the script that
    `pulumi up` sends (a secret), and they are appended to the staged opensm.conf. Every file
    is installed 0600 and opensm runs under umask 0077 (its log and M_Key cache hold keys).
    """
    pending = "/var/lib/gpu-cluster/opensm-restart-pending"
    lines = [
        "#!/usr/bin/env bash",
        "# Subnet-manager configuration — rendered by gpu-cluster; do not edit.",
        "set -euo pipefail",
        _KEYS_LINE,
        f"install -d -m 0700 {SM_CONF_DIR}",
        f"install -d -m 0755 {pending.rsplit('/', 1)[0]} {SM_UNIT_DROPIN.rsplit('/', 1)[0]}",
        "stage=$(mktemp -d)",
        *([] if master else ["sm_key_changed=0"]),
        'trap \'rm -rf "$stage"\' EXIT',
    ]
    ordered = sorted(files.items())
    for i, (path, text) in enumerate(ordered):
        staged = f'"$stage/{i}"'
        lines += [
            f"cat > {staged} <<'GPU_CLUSTER_EOF'",
            text.rstrip("\n"),
            "GPU_CLUSTER_EOF",
        ]
        if path.endswith("/opensm.conf"):
            lines.append(f'printf \'%s\\n\' "$OPENSM_KEYS" >> {staged}')
            if not master:  # the key compared in place: never on a command line
                lines += [
                    f"if [ -e {path} ] && [ \"$(grep '^sm_key ' {staged} || true)\" != "
                    f"\"$(grep '^sm_key ' {path} || true)\" ]; then sm_key_changed=1; fi"]
        if path.endswith("_guids.conf"):
            # One 0x-prefixed GUID per line; opensm skips malformed lines silently.
            lines += [
                f"if grep -Evq '^(0x[0-9a-f]{{16}})?$' {staged}; then",
                f'  echo "malformed GUID file {path}; nothing installed" >&2; exit 1',
                "fi",
            ]
    for i, (path, _) in enumerate(ordered):
        staged = f'"$stage/{i}"'
        lines += [
            f"if ! cmp -s {staged} {path}; then",
            f"  install -m 0600 {staged} {path}; touch {pending}",
            "fi",
            f"chmod 0600 {path}",
        ]
    lines += [
        *([] if master else [
            f'if [ "$sm_key_changed" = 1 ]; then touch {REJOIN_PENDING}; fi']),
        f"chmod 0700 {SM_CONF_DIR}",
        f"if [ -d {SM_CACHE_DIR} ]; then chmod 0700 {SM_CACHE_DIR}; fi",
        f"if [ -e {SM_LOG_FILE} ]; then chmod 0600 {SM_LOG_FILE}; fi",
        *([] if master else _standby_stop_lines(pending)),
        f"if [ -e {pending} ]; then",
        '  echo "subnet-manager files changed; restarting opensm"',
        "  systemctl daemon-reload",
        "  systemctl restart opensm",
        *("  " + line for line in sm_role_wait(ca, master)),
        f"  rm -f {pending}",
        "fi",
        "systemctl is-enabled --quiet opensm || systemctl enable --now opensm",
    ]
    return "\n".join(lines) + "\n"


def _standby_stop_lines(pending: str) -> list[str]:
    """A standby whose SM_Key changed: stopped, its restart left to the rejoin."""
    return [
        f"if [ -e {REJOIN_PENDING} ]; then",
        '  echo "the SM_Key changes: opensm stays stopped until the master runs with the new '
        'key (rejoin-opensm.sh then starts it)"',
        "  systemctl daemon-reload",
        "  systemctl stop opensm",
        f"  rm -f {pending}",
        "fi",
    ]


def sm_rejoin_script(ca: str) -> str:
    """On a standby, after the master's apply: start the opensm an SM_Key change stopped, and
    wait until it is STANDBY under the master (MASTER would be a second master)."""
    return "\n".join([
        "#!/usr/bin/env bash",
        "# Subnet-manager rejoin after a key change — rendered by gpu-cluster; do not edit.",
        "set -euo pipefail",
        f"[ -e {REJOIN_PENDING} ] || exit 0",
        'echo "starting opensm with the new SM_Key under the master"',
        "systemctl restart opensm",
        *sm_role_wait(ca, False, standby_only=True),
        f"rm -f {REJOIN_PENDING}",
    ]) + "\n"


def with_sm_keys(script: str, keys: Sequence[str]) -> str:
    """The apply script as `pulumi up` sends it: `keys` (M_Key, SM_Key, SA_Key values) become
    opensm.conf lines in its first variable. The result is a secret; never render it."""
    head, sep, tail = script.partition(_KEYS_LINE)
    if not sep:
        raise ValueError("not an sm_apply_script: it has no keys line")
    return f"{head}OPENSM_KEYS={shlex.quote(sm_keys_conf(keys))}{tail}"


def sm_keys_conf(keys: Sequence[str]) -> str:
    """The opensm.conf lines of the keys, as the SM host's installed file ends."""
    return "\n".join(f"{option} {key}" for option, key in zip(SECRET_OPTIONS, keys, strict=True))


def sm_role_wait(ca: str, master: bool, seconds: int = SM_SETTLE_SECONDS,
                 standby_only: bool = False) -> list[str]:
    """Bash: poll the local SM's state until it is in its role; fail after `seconds`. A
    standby may also be MASTER (alone at first bring-up) unless `standby_only`."""
    want = ("SMINFO_MASTER" if master else
            "SMINFO_STANDBY" if standby_only else "SMINFO_STANDBY|SMINFO_MASTER")
    return [
        f"for _ in $(seq 1 {max(1, seconds // 5)}); do",
        f"  state=$(sminfo -C {ca} -P 1 -D 0 2>/dev/null | grep -o 'SMINFO_[A-Z]*' || true)",
        f'  case "$state" in {want}) break ;; esac',
        "  sleep 5",
        "done",
        f'case "$state" in {want}) ;; *)',
        f'  echo "opensm on {ca} is ${{state:-not answering}} {seconds} s after its restart, '
        f'not {"MASTER" if master else "STANDBY"}; the next run retries" >&2',
        "  exit 1 ;;",
        "esac",
        f'echo "opensm on {ca} is back: $state"',
    ]


def sm_host_files(fabric_files: dict[str, str], host: str, prefix: str = "fabric/"
                  ) -> dict[str, str]:
    """The rendered files of one fabric (under `prefix`) one SM host needs, keyed by where
    they go on the host."""
    shared = ("partitions.conf", "root_guids.conf", "cn_guids.conf", "io_guids.conf",
              "node-name-map")
    files = {f"{SM_CONF_DIR}/{name}": fabric_files[f"{prefix}{name}"] for name in shared
             if f"{prefix}{name}" in fabric_files}
    files[f"{SM_CONF_DIR}/opensm.conf"] = fabric_files[f"{prefix}sm/{host}/opensm.conf"]
    files["/etc/default/opensm"] = fabric_files[f"{prefix}sm/{host}/opensm.default"]
    files[SM_UNIT_DROPIN] = SM_UNIT_DROPIN_TEXT
    return files
