"""The subnet managers' host side (pure): which files each SM host gets, the order they restart
in, and the script that installs the files and restarts opensm only when they changed.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from components.planning.fabric.sm_files import SECRET_OPTIONS
from components.planning.script_files import body, template

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


SM_SETTLE_SECONDS = 300  # a heavy sweep of a large fabric plus a master handover


def sm_restart_order(priorities: dict[str, int]) -> list[str]:
    """Standbys first (lowest priority first), the master (highest) last: a change never
    restarts both, and the fabric keeps a master while the standby rejoins."""
    return sorted(priorities, key=lambda h: (priorities[h], h))


STATE_DIR = "/var/lib/gpu-cluster"
RESTART_PENDING = f"{STATE_DIR}/opensm-restart-pending"
REJOIN_PENDING = f"{STATE_DIR}/opensm-rejoin-pending"
# The secret keys' line in an apply script (see with_sm_keys), as scripts/opensm/apply.sh has it.
_KEYS_LINE = next(line for line in body("opensm/apply.sh").splitlines()
                  if line.startswith("OPENSM_KEYS="))


def sm_apply_script(files: dict[str, str], ca: str, master: bool) -> str:
    """Install changed files (absolute path -> text), check them, restart opensm only then,
    and wait until it is back in its role (scripts/opensm/apply.sh).

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
    ordered = sorted(files.items())
    standby = not master  # tracks an SM_Key change (see above)
    stop = template("opensm/standby-stop.sh", rejoin_pending=REJOIN_PENDING,
                    pending=RESTART_PENDING)
    return template(
        "opensm/apply.sh", conf_dir=SM_CONF_DIR, state_dir=STATE_DIR,
        dropin_dir=SM_UNIT_DROPIN.rsplit("/", 1)[0], cache_dir=SM_CACHE_DIR,
        log_file=SM_LOG_FILE, pending=RESTART_PENDING,
        standby_init=body("opensm/standby-init.sh") if standby else "",
        stage="".join(_staged(i, path, text, master) for i, (path, text) in enumerate(ordered)),
        install="".join(template("opensm/install.sh", i=i, path=path, pending=RESTART_PENDING)
                        for i, (path, _) in enumerate(ordered)),
        standby_mark=template("opensm/standby-mark.sh", rejoin_pending=REJOIN_PENDING)
        if standby else "",
        standby_stop=stop if standby else "",
        role_wait="".join(f"  {line}\n" for line in sm_role_wait(ca, master)))


def _staged(i: int, path: str, text: str, master: bool) -> str:
    """Bash: one file staged as `$stage/<i>`, with the checks and additions of its kind."""
    out = template("opensm/stage.sh", i=i, text=text.rstrip("\n") + "\n")
    if path.endswith("/opensm.conf"):
        out += template("opensm/stage-keys.sh", i=i)
        if not master:
            out += template("opensm/standby-key-check.sh", i=i, path=path)
    if path.endswith("_guids.conf"):
        out += template("opensm/stage-guids.sh", i=i, path=path)
    return out


def sm_rejoin_script(ca: str) -> str:
    """On a standby, after the master's apply: start the opensm an SM_Key change stopped, and
    wait until it is STANDBY under the master (MASTER would be a second master)."""
    role_wait = "".join(f"{line}\n" for line in sm_role_wait(ca, False, standby_only=True))
    return template("opensm/rejoin.sh", rejoin_pending=REJOIN_PENDING, role_wait=role_wait)


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
    """Bash lines: poll the local SM's state until it is in its role; fail after `seconds`. A
    standby may also be MASTER (alone at first bring-up) unless `standby_only`."""
    want = ("SMINFO_MASTER" if master else
            "SMINFO_STANDBY" if standby_only else "SMINFO_STANDBY|SMINFO_MASTER")
    return template("opensm/role-wait.sh", polls=max(1, seconds // 5), ca=ca, want=want,
                    seconds=seconds, role="MASTER" if master else "STANDBY").splitlines()


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
