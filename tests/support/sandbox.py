"""Run rendered host scripts for real, in a throw-away root, against recording stub binaries.

Isolation (bubblewrap): the sandbox's `/` is a temporary directory; only /usr is bound from this
machine, read-only. /proc/cmdline is a fake file, /sys is a fake tree (InfiniBand devices with
`device` links to fake PCI functions; NVMe namespaces and md arrays under /sys/block with
size, model, holders and slaves), /dev is bubblewrap's minimal devtmpfs with /dev/md and
/dev/disk (the by-id links) bound from the sandbox root and the block devices bound from the
stubs' state, so drives and arrays "survive" between runs (`dgx_h100` builds a DGX H100's ten
NVMe drives). The host kernel may lack md, so /proc/mdstat cannot be faked; scripts read the
same facts from sysfs. Every namespace is unshared (no
network) and every capability is dropped, so even a real binary reached by absolute path can
neither mount, load a module nor touch this machine's /etc.

Stubs: every command with side effects (kubeadm, systemctl, mdadm, mkfs.xfs, apt-get, ...) is a
small bash script in /stub/bin, first on PATH: tests/support/stubs/prelude.sh, then the stub's
own stubs/bin/<name>.sh (tests/test_shellcheck.py checks both). Each appends its argv to a call
log and keeps just enough state in /stub/state (or in the sandbox's own /etc) for a second run
to see what the first run did: `kubeadm init` writes admin.conf, `apt-get install` makes `dpkg -s`
succeed, `mdadm --create` leaves superblocks that `mdadm --examine` reports, and so on.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import uuid as uuid_lib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.project import REPO

STUB_BIN = "/stub/bin"
STUB_STATE = "/stub/state"
SANDBOX_PATH = f"{STUB_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Credentials the kubeadm stub prints when a script lets it (the real one prints them too).
STUB_CERT_KEY = "9f3c1a7e5b2d4c6a8e0f1b3d5c7a9e2f4b6d8c0a1e3f5b7d9c2a4e6f8b0d1c3e"
STUB_INIT_TOKEN = "stubin.itt0kenprinted0"
FSTAB = "UUID=0f1e2d3c / ext4 errors=remount-ro 0 1\n/swap.img none swap sw 0 0\n"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=0f1e2d3c ro quiet\n"
# The fingerprint of the key that signs pkgs.k8s.io, as `gpg --show-keys` prints it for
# core:/stable:/v1.XX/deb/Release.key (kubernetes/kubernetes#128609): what the curl stub serves.
K8S_KEY_FPR = "DE15B14486CD377B9E876E1A234654DA9A296436"
# Ubuntu 22.04's /etc/ssh/sshd_config as shipped (comments left out): the drop-ins come first.
SSHD_CONFIG = """Include /etc/ssh/sshd_config.d/*.conf
KbdInteractiveAuthentication no
UsePAM yes
X11Forwarding yes
PrintMotd no
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""

STUB_DIR = Path(__file__).resolve().parent / "stubs"
# Every stub starts with the prelude: it logs the call, fails it when the test asked for that,
# and has the helpers that keep state per device.
PRELUDE = (STUB_DIR / "prelude.sh").read_text()
# The values the stubs print or serve, filled in where their text names them.
_STUB_VALUES = {"__CERT_KEY__": STUB_CERT_KEY, "__INIT_TOKEN__": STUB_INIT_TOKEN,
                "__K8S_KEY_FPR__": K8S_KEY_FPR}
_STUB_SHELL = "# shellcheck shell=bash\n"  # each stubs/bin file's first line, for the file alone


def _stub_body(path: Path) -> str:
    text = path.read_text()
    if not text.startswith(_STUB_SHELL):
        raise ValueError(f"{path} does not start with {_STUB_SHELL!r}")
    return text.removeprefix(_STUB_SHELL)


# name -> what the stub does after the prelude (tests/support/stubs/bin/<name>.sh).
STUBS: dict[str, str] = {p.name.removesuffix(".sh"): _stub_body(p)
                         for p in sorted((STUB_DIR / "bin").glob("*.sh"))}


def stub_script(name: str) -> str:
    """/stub/bin/<name> as the sandbox installs it: the prelude, then the stub's body."""
    text = PRELUDE + STUBS[name]
    for placeholder, value in _STUB_VALUES.items():
        text = text.replace(placeholder, value)
    return text


# Calls that only read state; every other stubbed call changes the host.
# curl only downloads, into a temporary directory the script removes again (a repository's key
# and index, checked before anything is installed).
READ_ONLY = {"curl", "dkms", "dpkg-query", "lsmod", "mountpoint", "blkid", "openssl", "findmnt",
             "sminfo", "sleep", "ofed_info", "ss"}
READ_ONLY_VERBS = {
    "systemctl": {"is-enabled", "is-active", "status", "show", "cat"},
    "dpkg": {"-s", "--status", "-l", "-L"},
    "mdadm": {"--examine", "-E", "--detail", "-D"},
    "kubectl": {"get", "wait", "version"},
    "kubeadm": {"version"},
    "containerd": {"config"},
    "swapon": {"--show", "-s"},
    "lnetctl": {"export", "show"},
    "gpg": {"--show-keys"},
    "nft": {"-c", "--check", "list"},
    "sshd": {"-t", "-T"},
    "sysctl": {"-n"},
    "ip": {"show", "list", "get"},
}

Call = tuple[str, ...]


def _verb(call: Call) -> str:
    args = list(call[1:])
    if call[0] == "ip":  # ip [options] OBJECT [COMMAND]: the command, `show` when none
        args = [a for a in args if not a.startswith("-")]
        return args[1] if len(args) > 1 else "show"
    while args and args[0].startswith("-") and call[0] in ("systemctl", "kubectl"):
        opt = args.pop(0)
        if opt in ("--kubeconfig", "-n", "--namespace") and args:
            args.pop(0)
    return args[0].split("=")[0] if args else ""


def changes_state(call: Call) -> bool:
    if call[0] in READ_ONLY:
        return False
    return _verb(call) not in READ_ONLY_VERBS.get(call[0], set())


@dataclass
class Run:
    """One script run: exit status, output and the stub calls it made, in order."""

    returncode: int
    stdout: str
    stderr: str
    calls: list[Call]

    def count(self, *prefix: str) -> int:
        """Calls whose argv starts with `prefix` (`count("kubeadm", "init")`)."""
        return sum(1 for c in self.calls if c[: len(prefix)] == prefix)

    def find(self, *prefix: str) -> list[Call]:
        return [c for c in self.calls if c[: len(prefix)] == prefix]

    @property
    def changes(self) -> list[Call]:
        """Every state-changing call of this run."""
        return [c for c in self.calls if changes_state(c)]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def explain(self) -> str:
        calls = "\n".join("  " + " ".join(c) for c in self.calls)
        return (f"exit {self.returncode}\n--- calls\n{calls}\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


@functools.cache
def unavailable() -> str | None:
    """Why sandboxed runs cannot work here, or None when they can."""
    if shutil.which("bwrap") is None:
        return ("bubblewrap (bwrap) is not installed: apt-get install bubblewrap "
                "(`make test` installs it)")
    proc = subprocess.run(["bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
                           "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr", "--symlink",
                           "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink",
                           "usr/lib64", "/lib64", "--dev", "/dev", "--proc", "/proc",
                           "/usr/bin/true"], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"bubblewrap cannot create a sandbox here: {proc.stderr.strip()}"
    return None


@dataclass
class Sandbox:
    """A fake host: a root directory, stub binaries and their state, run with bubblewrap."""

    base: Path
    hostname: str = "host"
    hcas: Mapping[str, str] = field(default_factory=dict)  # HCA name -> PCI address
    boot_arrays: set[str] = field(default_factory=set)  # md arrays the OS assembles at boot
    # The management interface's MAC (/sys/class/net/eno1/address); by default the inventory's
    # for a prod GPU node of this name.
    management_mac: str | None = None
    # Directories of this machine bound over paths of the sandbox (path there -> path here):
    # state several hosts share, as the simulated data centre's cluster is.
    shared: Mapping[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.base / "root"
        self.bin = self.base / "bin"
        self.state = self.base / "state"
        self.cmdline = self.base / "cmdline"
        self.boot_id = self.base / "boot_id"
        for d in ("etc/modules-load.d", "etc/sysctl.d", "etc/modprobe.d", "etc/default",
                  "etc/systemd/network", "var/lib", "var/log", "run", "root", "dev/md",
                  "sys/class/infiniband", "sys/block", "dev/disk/by-id", "stub/bin",
                  "stub/state"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (self.root / "tmp").chmod(0o1777)
        (self.root / "etc/fstab").write_text(FSTAB)
        (self.root / "etc/hostname").write_text(self.hostname + "\n")
        (self.root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
        (self.root / "etc/ssh/sshd_config").write_text(SSHD_CONFIG)
        self.cmdline.write_text(CMDLINE)
        self.boot_id.write_text("5f1c8e2a-7b3d-4e6f-9a0b-1c2d3e4f5a6b\n")
        for d in ("pkgs", "held", "units", "modules", "disks", "fs", "mounts", "fail",
                  "cluster/nodes", "dev", "boot-mounts"):
            (self.state / d).mkdir(parents=True, exist_ok=True)
        (self.state / "calls.log").touch()
        (self.state / "swap").touch()  # the installer left a swap file active
        # The stack reaches every host over SSH: sshd is installed and running.
        (self.state / "pkgs/openssh-server").write_text("1:8.9p1-3ubuntu0.10\n")
        (self.state / "units/ssh.enabled").touch()
        (self.state / "units/ssh.active").touch()
        self.bin.mkdir(exist_ok=True)
        for name in STUBS:
            stub = self.bin / name
            stub.write_text(stub_script(name))
            stub.chmod(0o755)
        for hca, pci in self.hcas.items():
            self.add_hca(hca, pci)
        mac = self.management_mac or _prod_macs().get(self.hostname)
        if mac:
            self.add_nic("eno1", mac)

    # --- arranging the host -------------------------------------------------------------------
    def add_nic(self, name: str, mac: str) -> None:
        """An Ethernet interface (the management network's) with its MAC address."""
        nic = self.root / "sys/class/net" / name
        nic.mkdir(parents=True, exist_ok=True)
        (nic / "address").write_text(mac + "\n")

    def add_hca(self, hca: str, pci: str) -> None:
        """/sys/class/infiniband/<hca> -> ../../devices/.../<pci>/infiniband/<hca>, whose
        `device` link points at the fake PCI function (so `readlink -f` resolves it), and the
        port's IPoIB interface under <pci>/net and /sys/class/net (named as at boot)."""
        fn = self.root / "sys/devices/pci0000:00" / pci
        (fn / "infiniband" / hca).mkdir(parents=True, exist_ok=True)
        (fn / "infiniband" / hca / "device").symlink_to("../../../" + pci)
        (self.root / "sys/class/infiniband" / hca).symlink_to(
            f"../../devices/pci0000:00/{pci}/infiniband/{hca}")
        self.hcas = {**self.hcas, hca: pci}
        self._name_netdev(pci)

    def add_storage_card(self, hca: str, pci: str) -> None:
        """A dual-port storage ConnectX-7 (DGX H100 slots 1 and 2): port 1 (function 0) the
        InfiniBand HCA `hca`, port 2 (function 1) Ethernet. Being multi-function, udev names
        port 1's interface with its function (ibp170s0f0)."""
        (self.root / "sys/devices/pci0000:00" / (pci[:-1] + "1")).mkdir(parents=True,
                                                                        exist_ok=True)
        self.add_hca(hca, pci)

    def netdev(self, hca: str) -> str:
        """The IPoIB interface of an HCA, as the fake kernel named it at the last boot."""
        return next((self.root / "sys/devices/pci0000:00" / self.hcas[hca] / "net").iterdir()).name

    def _name_netdev(self, pci: str) -> None:
        """Name a port's interface the way udev does at boot: a systemd .link file matching
        `Path=pci-<pci>` sets it, else net_id's predictable name (ib + p<bus>s<slot>, DGX OS:
        0000:18:00.0 is ibp24s0). A stand-in for udev, enough for the names the stack reads."""
        net = self.root / "sys/devices/pci0000:00" / pci / "net"
        for old in net.iterdir() if net.exists() else ():
            (self.root / "sys/class/net" / old.name).unlink(missing_ok=True)
            old.rmdir()
        _, bus, slot_fn = pci.split(":")
        slot, fn = slot_fn.split(".")
        name = f"ibp{int(bus, 16)}s{int(slot, 16)}"
        if any(f.name != pci for f in net.parent.parent.glob(pci[:-1] + "*")):
            name += f"f{int(fn, 16)}"  # net_id: a multi-function device's names say the function
        for link in sorted((self.root / "etc/systemd/network").glob("*.link")):
            text = link.read_text()
            if f"Path=pci-{pci}\n" in text and (m := re.search(r"^Name=(\S+)$", text, re.M)):
                name = m.group(1)
        (net / name).mkdir(parents=True)
        (self.root / "sys/class/net").mkdir(parents=True, exist_ok=True)
        (self.root / "sys/class/net" / name).symlink_to(
            f"../../devices/pci0000:00/{pci}/net/{name}")

    def add_nvme(self, drive: Nvme) -> None:
        """An NVMe namespace the way the kernel and udev show it: /dev/<name> (and its
        partitions), /sys/block/<name>/{size,device/model,device/serial,holders}, and the
        /dev/disk/by-id links of 60-persistent-storage.rules: nvme-<model>_<serial>,
        nvme-<model>_<serial>_<nsid>, nvme-eui.<eui>, each with -part<N> for partitions."""
        block = self.root / "sys/block" / drive.name
        (block / "device").mkdir(parents=True)
        (block / "holders").mkdir()
        (block / "size").write_text(f"{drive.sectors}\n")
        # The NVMe model field is 40 bytes, space-padded; sysfs shows it trimmed.
        (block / "device/model").write_text(drive.model + "\n")
        (block / "device/serial").write_text(drive.serial + "\n")
        (self.state / "dev" / drive.name).touch()
        names = [f"nvme-{drive.model.replace(' ', '_')}_{drive.serial}",
                 f"nvme-{drive.model.replace(' ', '_')}_{drive.serial}_1", f"nvme-eui.{drive.eui}"]
        by_id = self.root / "dev/disk/by-id"
        for link in names:
            (by_id / link).symlink_to(f"../../{drive.name}")
        for number, sectors in enumerate(drive.partitions, start=1):
            part = f"{drive.name}p{number}"
            (block / part / "holders").mkdir(parents=True)
            (block / part / "size").write_text(f"{sectors}\n")
            (block / part / "partition").write_text(f"{number}\n")
            (self.state / "dev" / part).touch()
            for link in names:
                (by_id / f"{link}-part{number}").symlink_to(f"../../{part}")

    def add_array(self, md: str, level: int, members: Iterable[str], fs: str | None = None,
                  boot: bool = True) -> str:
        """A running md array over members (kernel names of disks or partitions), as
        /proc/mdstat and sysfs would show it, with superblocks on the members and, optionally,
        a filesystem. Returns the array's UUID."""
        members = list(members)
        uuid = ":".join(hashlib.md5(f"{md} {members}".encode()).hexdigest()[i:i + 8]
                        for i in range(0, 32, 8))
        block = self.root / "sys/block" / md
        for d in ("slaves", "holders", "md"):
            (block / d).mkdir(parents=True)
        (block / "md/level").write_text(f"raid{level}\n")
        (block / "md/uuid").write_text(uuid + "\n")
        total = 0
        for member in members:
            disk = self._disk_of(member)
            path = f"{disk}/{member}" if disk != member else member
            (block / "slaves" / member).symlink_to(f"../../{path}")
            up = "../" * (path.count("/") + 2)
            (self.root / "sys/block" / path / "holders" / md).symlink_to(f"{up}{md}")
            (self.state / "disks" / f"_dev_{member}").write_text(f"{uuid} raid{level}\n")
            total += int((self.root / "sys/block" / path / "size").read_text())
        (block / "size").write_text(f"{total}\n")
        (self.state / "dev" / md).touch()
        if fs:
            fs_uuid = str(uuid_lib.UUID(hashlib.md5(md.encode()).hexdigest()))
            (self.state / "fs" / f"_dev_{md}").write_text(f"{fs} {fs_uuid} /dev/{md}\n")
        if boot:
            self.boot_arrays.add(md)
        return uuid

    def fs_uuid(self, dev: str) -> str:
        """The UUID of the filesystem on a device (/dev/<kernel name>)."""
        return (self.state / "fs" / dev.replace("/", "_")).read_text().split()[1]

    def mount_at_boot(self, dev: str, mount_point: str) -> None:
        """A filesystem the OS mounts by itself, mounted now and after every reboot."""
        entry = f"{dev} {mount_point}\n"
        name = mount_point.replace("/", "_")
        for d in ("mounts", "boot-mounts"):
            (self.state / d / name).write_text(entry)
        self.path(mount_point).mkdir(parents=True, exist_ok=True)

    def _disk_of(self, name: str) -> str:
        """Kernel name of a partition -> its disk; a disk's name -> itself."""
        return next((p.parent.name for p in (self.root / "sys/block").glob(f"*/{name}")),
                    name)

    def _stop_array(self, md: str) -> None:
        block = self.root / "sys/block" / md
        for slave in (block / "slaves").iterdir():
            disk = self._disk_of(slave.name)
            path = f"{disk}/{slave.name}" if disk != slave.name else slave.name
            (self.root / "sys/block" / path / "holders" / md).unlink(missing_ok=True)
        shutil.rmtree(block)
        (self.state / "dev" / md).unlink(missing_ok=True)

    def serve(self, url: str, text: str | None) -> None:
        """What an HTTPS URL answers (curl); None, or a URL never served: it does not resolve,
        as on a site that forbids the host to reach it."""
        page = self.state / "web" / url.replace("/", "_").replace(":", "_")
        page.parent.mkdir(exist_ok=True)
        if text is None:
            page.unlink(missing_ok=True)
        else:
            page.write_text(text)

    def serve_apt_source(self, source: Any, packages: Mapping[str, str],
                         key_fingerprint: str | None = None) -> None:
        """A flat apt repository (config.AptSource): its signing key (by default the pinned
        one) and its index listing `packages` (name -> version)."""
        self.serve(source.key_url, "\n".join([
            "-----BEGIN PGP PUBLIC KEY BLOCK-----",
            f"stub-key {key_fingerprint or source.key_fingerprint}",
            "-----END PGP PUBLIC KEY BLOCK-----"]) + "\n")
        self.serve(source.url + "Packages", "".join(
            f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n\n"
            for name, version in packages.items()))

    def serve_release_key(self, *keys: tuple[str, int | None]) -> None:
        """What pkgs.k8s.io serves as Release.key: these (fingerprint, expiry) primary keys."""
        lines = [f"stub-key {fpr}" + (f" {expiry}" if expiry else "") for fpr, expiry in keys]
        (self.state / "release-key").write_text("\n".join(
            ["-----BEGIN PGP PUBLIC KEY BLOCK-----", *lines,
             "-----END PGP PUBLIC KEY BLOCK-----"]) + "\n")

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """The host's IPv4 addresses (interface -> address/length), as `ip addr` shows them;
        by default eno1 holds the management address."""
        (self.state / "addresses").write_text(
            "".join(f"{name} {cidr}\n" for name, cidr in addresses.items()))

    def ssh_clients(self, *addresses: str) -> None:
        """The peers of the host's established SSH connections (`ss`); by default none."""
        (self.state / "ssh-clients").write_text("".join(f"{a}\n" for a in addresses))

    def install_packages(self, *names: str) -> None:
        for n in names:
            (self.state / "pkgs" / n).write_text("1.0-stub\n")

    def add_node(self, name: str) -> None:
        """A Node object the kubectl stub knows (the API server's view)."""
        (self.state / "cluster/nodes" / name).write_text("")

    def nodes(self) -> set[str]:
        return {p.name for p in (self.state / "cluster/nodes").iterdir()}

    def fail_next(self, command: str) -> None:
        """The next call of `command` ("kubeadm join", "systemctl restart", "mkfs.xfs") fails."""
        (self.state / "fail" / command).touch()

    def sm_state(self, state: str | None) -> None:
        """What the local opensm reports to `sminfo -D 0` (None: a lone master)."""
        path = self.state / "sm-state"
        if state is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(state + "\n")

    def api_down(self, down: bool = True) -> None:
        flag = self.state / "api-down"
        if down:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def install_gpu_driver(self, version: str) -> None:
        """A GPU driver release installed (its driver, fabric manager and NSCQ packages, as
        DGX OS installs them), loaded, and its fabric manager running."""
        branch = version.split(".")[0]
        for pkg in (f"nvidia-driver-{branch}-server-open", f"nvidia-fabricmanager-{branch}",
                    f"libnvidia-nscq-{branch}"):
            (self.state / "pkgs" / pkg).write_text(f"{version}-0ubuntu1\n")
        for flag in ("enabled", "active"):
            (self.state / "units" / f"nvidia-fabricmanager.{flag}").touch()
        self.load_gpu_driver(version)

    def load_gpu_driver(self, version: str) -> None:
        """The NVIDIA kernel module of this boot (/sys/module/nvidia/version)."""
        module = self.root / "sys/module/nvidia"
        module.mkdir(parents=True, exist_ok=True)
        (module / "version").write_text(version + "\n")

    def reboot(self) -> None:
        """Power-cycle: arrays, mounts, modules and /tmp go; disks, /etc and packages stay.
        A kernel command line staged with update-grub takes effect; fstab swap comes back.
        The OS's own arrays and mounts (`boot=True`: DGX OS's md0 and md1, /, /boot/efi,
        /raid) come back as the initramfs and systemd would bring them."""
        for md in sorted((self.root / "sys/block").glob("md*")):
            if md.name not in self.boot_arrays:
                self._stop_array(md.name)
        for d in ("dev/md", "tmp", "run"):
            for p in (self.root / d).iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        for d in ("mounts", "modules"):
            for p in (self.state / d).iterdir():
                p.unlink()
        for p in (self.state / "boot-mounts").iterdir():
            shutil.copy(p, self.state / "mounts" / p.name)
        (self.state / "swap").unlink(missing_ok=True)
        # The kernel's ruleset goes; gpu-cluster-firewall.service loads its file at boot.
        (self.state / "nft-loaded").unlink(missing_ok=True)
        rules = self.root / "etc/nftables.d/gpu-cluster.nft"
        if (self.state / "units/gpu-cluster-firewall.enabled").exists() and rules.exists():
            shutil.copy(rules, self.state / "nft-loaded")
        if re.search(r"^[^#].*\sswap\s", (self.root / "etc/fstab").read_text(), re.M):
            (self.state / "swap").touch()
        self.boot_id.write_text(str(uuid_lib.uuid4()) + "\n")
        (self.state / "shutdown-scheduled").unlink(missing_ok=True)
        # The boot loads the installed NVIDIA driver's module and starts the enabled units.
        for pkg in (self.state / "pkgs").glob("nvidia-driver-*-server-open"):
            self.load_gpu_driver(pkg.read_text().strip().split("-")[0])
        for unit in (self.state / "units").glob("*.enabled"):
            unit.with_suffix(".active").touch()
        for pci in self.hcas.values():
            self._name_netdev(pci)
        grub = self.root / "etc/default/grub.d/90-gpu-cluster.cfg"
        if (self.state / "grub-updated").exists() and grub.exists():
            m = re.search(r'\$GRUB_CMDLINE_LINUX_DEFAULT ([^"]*)"', grub.read_text())
            if m:
                self.cmdline.write_text(self.cmdline.read_text().rstrip("\n") + " "
                                        + m.group(1) + "\n")

    # --- running ------------------------------------------------------------------------------
    def command(self) -> list[str]:
        local = self.root / "usr/local/sbin"  # where the stack installs its own programs
        local.mkdir(parents=True, exist_ok=True)
        return [
            "bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
            "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--hostname", self.hostname,
            "--bind", str(self.root), "/",
            "--ro-bind", "/usr", "/usr", "--bind", str(local), "/usr/local/sbin",
            *self._top_dirs(),
            "--proc", "/proc", "--ro-bind", str(self.cmdline), "/proc/cmdline",
            "--ro-bind", str(self.boot_id), "/proc/sys/kernel/random/boot_id",
            "--dev", "/dev", "--bind", str(self.root / "dev/md"), "/dev/md",
            "--bind", str(self.root / "dev/disk"), "/dev/disk", *self._device_nodes(),
            "--ro-bind", str(self.bin), STUB_BIN, "--bind", str(self.state), STUB_STATE,
            *(arg for there, here in sorted(self.shared.items())
              for arg in ("--bind", str(here), there)),
            "--chdir", "/root", "--clearenv",
            "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/root",
            "--setenv", "LANG", "C.UTF-8",
        ]

    def _device_nodes(self) -> list[str]:
        """Block devices (NVMe namespaces, partitions, md arrays) as files bound into /dev.
        They live in the stubs' state, where `mdadm` adds the arrays it starts."""
        args: list[str] = []
        for node in sorted((self.state / "dev").iterdir()):
            args += ["--bind", str(node), f"/dev/{node.name}"]
        return args

    def _top_dirs(self) -> list[str]:
        """/bin, /lib, ... as on this machine: links into /usr (merged /usr) or bound dirs.
        /etc/alternatives too, read-only: /usr/bin/awk and friends point into it."""
        args = ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_symlink():
                link = self.root / name
                if not link.is_symlink():
                    link.symlink_to(os.readlink(host))
            elif host.is_dir():
                args += ["--ro-bind", str(host), "/" + name]
        return args

    def run(self, script: str, env: Mapping[str, str] | None = None, timeout: float = 60,
            credentials: Iterable[str] | None = None) -> Run:
        """The script the way the stack runs it over SSH: `bash -s` with the script on stdin,
        or, for a script that reads credentials, `bash -c <script>` with them on stdin, one per
        line (a join)."""
        log = self.state / "calls.log"
        log.write_text("")
        cmd = self.command()
        for k, v in (env or {}).items():
            cmd += ["--setenv", k, v]
        if credentials is None:
            argv, stdin = ["bash", "-s"], script
        else:
            argv, stdin = ["bash", "-c", script, "kubeadm-join"], "".join(
                f"{c}\n" for c in credentials)
        proc = subprocess.run([*cmd, *argv], input=stdin, capture_output=True,
                              text=True, timeout=timeout)
        calls = [tuple(line.split("\t")) for line in log.read_text().splitlines() if line]
        return Run(proc.returncode, proc.stdout, proc.stderr, calls)

    # --- inspecting -------------------------------------------------------------------------
    def path(self, p: str) -> Path:
        """A path as the script sees it, on this machine."""
        return self.root / p.lstrip("/")

    def files(self) -> Iterator[Path]:
        """Every file the scripts could have left (the root, and the stubs' state)."""
        for top in (self.root, self.state):
            for p in sorted(top.rglob("*")):
                if p.is_file() and not p.is_symlink():
                    yield p

    def files_containing(self, needle: str) -> list[Path]:
        data = needle.encode()
        return [p for p in self.files() if data in p.read_bytes()]

    def snapshot(self) -> dict[str, tuple[int, str, int] | str]:
        """Content, mode and mtime of every file and link under the root; the set of dirs."""
        snap: dict[str, tuple[int, str, int] | str] = {}
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if p.is_symlink():
                snap[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                st = p.stat()
                snap[rel] = (st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest(),
                             st.st_mtime_ns)
            else:
                snap[rel] = "dir"
        return snap


def diff_snapshots(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [k for k in keys if before.get(k) != after.get(k)]


def stub_names() -> Iterable[str]:
    return STUBS.keys()


# --- DGX H100 local storage ---------------------------------------------------------------------
@dataclass(frozen=True)
class Nvme:
    """One NVMe namespace: kernel name, what the drive reports, size in 512-byte sectors."""

    name: str
    model: str
    serial: str
    sectors: int
    eui: str
    partitions: tuple[int, ...] = ()  # sizes in sectors, p1 first

    @property
    def by_id(self) -> str:
        """The link the host script names the drive by: nvme-<model>_<serial>."""
        return f"/dev/disk/by-id/nvme-{self.model.replace(' ', '_')}_{self.serial}"


# DGX H100: 2 x 1.92 TB M.2 NVMe for DGX OS (RAID1) and 8 x 3.84 TB U.2 NVMe for storage/cache
# (NVIDIA DGX BasePOD reference architecture, "Core Components"). The sizes are the standard
# LBA counts of 1.92 TB and 3.84 TB drives. The model strings are illustrative Samsung PM9A3
# part numbers (M.2 and U.2): what a given DGX ships varies by vendor and was not verified.
M2_MODEL, M2_SECTORS = "SAMSUNG MZ1L21T9HCLS-00A07", 3_750_748_848
U2_MODEL, U2_SECTORS = "SAMSUNG MZQL23T8HCLS-00A07", 7_501_476_528
EFI_SECTORS = 1_048_576  # 512 MiB
# Kernel names as enumeration could hand them out: the OS drives are nvme0n1 and nvme5n1, so
# nvme0n1..nvme7n1 is not the data set; the data drives' serials do not follow kernel order.
DGX_OS_NAMES = ("nvme0n1", "nvme5n1")
DGX_DATA_NAMES = ("nvme8n1", "nvme3n1", "nvme1n1", "nvme9n1", "nvme6n1", "nvme2n1", "nvme7n1",
                  "nvme4n1")


@dataclass(frozen=True)
class DgxStorage:
    os_drives: tuple[Nvme, ...]
    data_drives: tuple[Nvme, ...]

    @property
    def data_ids(self) -> list[str]:
        """The data drives' by-id links in the order the script passes them to mdadm."""
        return sorted(d.by_id for d in self.data_drives)

    @property
    def os_names(self) -> set[str]:
        """Every way a call could name an OS drive: kernel names (and partitions), serials."""
        return {d.name for d in self.os_drives} | {d.serial for d in self.os_drives}


def dgx_h100_drives(missing: Iterable[str] = ()) -> DgxStorage:
    """The NVMe drives of one DGX H100; `missing`: data drives (kernel names) not there."""
    os_drives = tuple(Nvme(name, M2_MODEL, f"S6L2NE0W10{i:04d}", M2_SECTORS, f"002538b1{i:08x}",
                           (EFI_SECTORS, M2_SECTORS - EFI_SECTORS - 2048))
                      for i, name in enumerate(DGX_OS_NAMES))
    data = tuple(Nvme(name, U2_MODEL, f"S64HNE0T50{i:04d}", U2_SECTORS, f"002538b5{i:08x}")
                 for i, name in enumerate(DGX_DATA_NAMES))
    return DgxStorage(os_drives, tuple(d for d in data if d.name not in set(missing)))


# The DGX H100's compute ConnectX-7s and their PCI functions, from the user guide's network
# module table (RDMA device -> DGX OS interface: mlx5_0 ibp24s0 ... mlx5_11 ibp220s0; the bus
# is the interface name's p<bus>, in hex here).
DGX_H100_HCAS = {"mlx5_0": "0000:18:00.0", "mlx5_3": "0000:40:00.0", "mlx5_4": "0000:4f:00.0",
                 "mlx5_5": "0000:5e:00.0", "mlx5_6": "0000:9a:00.0", "mlx5_9": "0000:c0:00.0",
                 "mlx5_10": "0000:ce:00.0", "mlx5_11": "0000:dc:00.0"}
# The storage ports (port 1 of the ConnectX-7 in storage slots 1 and 2) and their PCI functions,
# DGX OS naming them ibp170s0f0 and ibp41s0f0.
DGX_H100_STORAGE_HCAS = {"mlx5_7": "0000:aa:00.0", "mlx5_1": "0000:29:00.0"}
# Rail r's interface on DGX OS (the same table, GPU r's ConnectX in rail order).
DGX_H100_RAIL_NETDEVS = ("ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0",
                         "ibp206s0", "ibp220s0")


# What the prod stack's package mirrors serve, by the real package names: DOCA 2.9.3 LTS's
# (doca-ofed, with mlnx-ofed-kernel-dkms, the DKMS build that puts the host OFED's headers under
# /usr/src/ofa_kernel) and the Lustre client lustre-release's debian/control names.
DOCA_PACKAGES = {"doca-ofed": "2.9.3-0.4.2", "mlnx-ofed-kernel-dkms": "24.10.OFED.24.10.3.2.5.1-1"}


def site_mirrors(sb: Sandbox) -> None:
    """The prod stack's DOCA and Lustre repositories, answering this host."""
    cluster = prod_cluster()
    sb.serve_apt_source(cluster.platform.network_operator.doca_source, DOCA_PACKAGES)
    version = cluster.storage.lustre_client.version
    sb.serve_apt_source(cluster.storage.lustre_client.source, {
        "lustre-client-utils": version, "lustre-client-modules-dkms": version})


# The GPU driver a DGX OS install came with (a stand-in release of the R570 branch), until the
# stack installs the pinned one.
DGX_OS_GPU_DRIVER = "570.172.08"


def dgx_h100(sb: Sandbox, *, data_array: bool = True, missing: Iterable[str] = (),
             gpu_driver: str = DGX_OS_GPU_DRIVER, doca: bool = True) -> DgxStorage:
    """DGX OS on a DGX H100: / on md0, a RAID1 of the M.2 drives' second partitions, the EFI
    partition of the first at /boot/efi; its GPU driver and fabric manager running, and (with
    `doca`) DOCA-OFED installed and built for its kernel; the site's mirrors answer. With
    `data_array` (DGX OS's default) the U.2 data drives are md1, a RAID0 with ext4 mounted at
    /raid; without it they are blank. `missing`:
    data drives (kernel names) that are not there (failed, unseated)."""
    drives = dgx_h100_drives(missing)
    os_drives, present = drives.os_drives, drives.data_drives
    sb.install_gpu_driver(gpu_driver)
    if doca:
        for name, version in DOCA_PACKAGES.items():
            (sb.state / "pkgs" / name).write_text(version + "\n")
    site_mirrors(sb)
    for drive in os_drives + present:
        sb.add_nvme(drive)
    sb.add_array("md0", 1, [f"{d.name}p2" for d in os_drives], fs="ext4")
    sb.mount_at_boot("/dev/md0", "/")
    sb.mount_at_boot(f"/dev/{os_drives[0].name}p1", "/boot/efi")
    if data_array and len(present) < len(DGX_DATA_NAMES):
        # A RAID0 short of a member does not start: its superblocks stay on the others.
        for d in present:
            (sb.state / "disks" / f"_dev_{d.name}").write_text("6e5c1f0a:9d3b2e71:0c4f8a6d:"
                                                                "51b7e293 raid0\n")
    elif data_array:
        sb.add_array("md1", 0, [d.name for d in present], fs="ext4")
        with sb.path("/etc/fstab").open("a") as fstab:
            fstab.write(f"UUID={sb.fs_uuid('/dev/md1')} /raid ext4 defaults,nofail 0 0\n")
        sb.mount_at_boot("/dev/md1", "/raid")
    return drives


# --- the prod stack's scripts, rendered the way components/wiring/blueprint.py renders them --


@functools.cache
def _prod_macs() -> dict[str, str]:
    return {n.hostname: n.management_mac for n in prod_cluster().nodes if n.management_mac}


def prod_cluster():
    import yaml

    from components.wiring.loading import validate_cluster

    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]
    return validate_cluster(raw["gpu-cluster:cluster"], REPO)


def prod_scripts() -> dict[str, str]:
    """`<host>/<name>.sh` -> text: every script `offline preview` writes under scripts/."""
    from components.model.fields import CLUSTER_KEY
    from components.planning import (
        acceptance,
        host_scripts,
        inference,
        kubeadm,
        reboot,
        ssh_keys,
        upgrade,
    )
    from components.planning.subnet_manager import sm_apply_script, sm_rejoin_script

    cluster = prod_cluster()
    scripts = {f"{h.hostname}/prepare-host.sh": host_scripts.prepare_host(cluster, h, CLUSTER_KEY)
               for h in cluster.hosts}
    scripts |= {f"{n.hostname}/prepare-host.sh":
                host_scripts.prepare_gpu_node(cluster, n, CLUSTER_KEY) for n in cluster.nodes}
    for host, (files, ca, master) in sm_setups().items():
        scripts[f"{host}/apply-opensm.sh"] = sm_apply_script(files, ca, master)
        if not master:
            scripts[f"{host}/rejoin-opensm.sh"] = sm_rejoin_script(ca)
    init_host = cluster.control_plane[0]
    scripts[f"{init_host.hostname}/kubeadm-init.sh"] = kubeadm.init_script(cluster, init_host)
    scripts |= {f"{h.hostname}/kubeadm-join-control-plane.sh":
                kubeadm.control_plane_join_script(cluster, h) for h in cluster.control_plane[1:]}
    scripts |= {f"{h.hostname}/identities.sh": kubeadm.identities_script(cluster, h)
                for h in cluster.control_plane}
    scripts[f"{init_host.hostname}/kubelet-config.sh"] = kubeadm.kubelet_config_script(
        cluster, init_host)
    scripts |= {f"{n.hostname}/kubeadm-join.sh": kubeadm.join_script(cluster, n)
                for n in cluster.nodes}
    for n in cluster.nodes:
        h = n.hostname
        driver = cluster.platform.gpu_operator.host_driver
        scripts |= {f"{h}/planned-reboot/1-check.sh": reboot.check_script(n, driver),
                    f"{h}/planned-reboot/2-drain.sh": reboot.drain_script(
                        h, cluster.kubernetes.gang_wait_minutes * 60),
                    f"{h}/planned-reboot/3-reboot.sh": reboot.reboot_script(n, driver),
                    f"{h}/planned-reboot/4-after-boot.sh": reboot.after_boot_script(n, driver),
                    f"{h}/planned-reboot/5-uncordon.sh": reboot.uncordon_script(h)}
    creds = cluster.credentials
    keys = ssh_keys.authorized_keys_script(
        cluster.ssh_user, (creds.ssh_public_key, *creds.ssh_authorized_keys))
    scripts |= {f"{h}/ssh-keys.sh": keys
                for h in [h.hostname for h in cluster.hosts] + [n.hostname for n in cluster.nodes]}
    for h in cluster.control_plane:
        scripts[f"{h.hostname}/kubernetes-upgrade.sh"] = upgrade.control_plane_script(
            cluster, h.hostname, h == init_host)
    for n in cluster.nodes:
        h = n.hostname
        scripts |= {f"{h}/kubernetes-upgrade/1-drain.sh": upgrade.drain_script(cluster, h, (h,)),
                    f"{h}/kubernetes-upgrade/2-node.sh": upgrade.node_script(cluster, h),
                    f"{h}/kubernetes-upgrade/3-uncordon.sh": upgrade.uncordon_script(cluster, h)}

    for svc in cluster.workloads.inference:
        scripts[f"{init_host.hostname}/{svc.name}-api-key.sh"] = inference.api_key_script(svc)
    if cluster.workloads.nccl_test is not None:
        scripts[f"{init_host.hostname}/nccl-acceptance.sh"] = acceptance.nccl_gate_script(
            cluster, cluster.workloads.nccl_test)
    return dict(sorted(scripts.items()))


def sm_setups() -> dict[str, tuple[dict[str, str], str, bool]]:
    """SM host -> (the files apply-opensm.sh installs (absolute path -> text), its HCA,
    whether it is the master), as blueprint.py renders them."""
    from components.planning import placement
    from components.planning.fabric.render import render_fabric_files
    from components.planning.subnet_manager import sm_host_files, sm_restart_order

    plan = placement.plan(prod_cluster())
    fabric_files = render_fabric_files(plan)
    master = sm_restart_order({sm.hostname: sm.priority for sm in plan.sm})[-1]
    return {sm.hostname: (sm_host_files(fabric_files, sm.hostname), sm.hca,
                          sm.hostname == master) for sm in plan.sm}


def sm_files() -> dict[str, dict[str, str]]:
    """SM host -> the files apply-opensm.sh installs (absolute path -> text)."""
    return {host: files for host, (files, _, _) in sm_setups().items()}


def ok(run: Run) -> Run:
    assert run.returncode == 0, run.explain()
    return run


def run_twice(sb: Sandbox, script: str, credentials: tuple[str, ...] | None = None) -> Run:
    """Run, run again; the second run changes nothing at all. Returns the first run."""
    first = ok(sb.run(script, credentials=credentials))
    before = sb.snapshot()
    second = ok(sb.run(script, credentials=credentials))
    assert second.changes == [], "second run changed state:\n" + second.explain()
    assert diff_snapshots(before, sb.snapshot()) == [], "second run changed files"
    return first
