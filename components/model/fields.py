"""Building blocks of the cluster model: the problem report every config error becomes, the
constrained field types (hostnames, GUIDs, HCA names, pinned images, pkeys, …) and the frozen,
camelCase, unknown-keys-rejected base model."""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, cast

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

PROJECT = "gpu-cluster"
CLUSTER_KEY = f"{PROJECT}:cluster"

# ---------------------------------------------------------------- errors


@dataclass(frozen=True)
class Problem:
    path: str
    value: Any
    message: str
    fix: str
    check: str = ""  # the cross-field check that found it (checks.CHECKS), if one did
    key: str = CLUSTER_KEY  # the stack config key the path is in

    def render(self) -> str:
        found_by = f"  [check: {self.check}]" if self.check else ""
        where = f"{self.key}.{self.path}" if self.path else self.key
        return (
            f"  {where}: {self.message} (got {self.value!r}).\n"
            f"      Fix: {self.fix}{found_by}"
        )


class ConfigError(Exception):
    """Raised before any resource is registered; lists every problem with its fix."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [f"Invalid stack config: {len(problems)} problem(s); nothing was registered."]
        lines += [p.render() for p in problems]
        super().__init__("\n".join(lines))


def key_id(public_key: str) -> str:
    """`<type> <base64>`: an SSH public key without its comment (what sshd matches on)."""
    return " ".join(public_key.split()[:2])


# ---------------------------------------------------------------- field types

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_GUID = re.compile(r"^0x[0-9a-f]{16}$")
_HCA = re.compile(r"^mlx5_\d{1,3}$")
# A Linux interface name (IFNAMSIZ: 15 characters); ib<N> and eth<N> are the kernel's own
# enumeration names, which it may hand to another port at the next boot (systemd.link(5)).
_NETDEV = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,14}$")
_KERNEL_NETDEV = re.compile(r"^(ib|eth)\d+$")
_KERNEL_ARG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,:=/+-]*$")
_HOST_KEY = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp256|ssh-rsa) [A-Za-z0-9+/]+=*$")
# An authorized_keys entry: type, base64, optional comment (no options: the stack writes those).
_PUBLIC_KEY = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa|"
                         r"sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) "
                         r"[A-Za-z0-9+/]+=*( [^\n]*)?$")
_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
K8S_VERSION = re.compile(r"^1\.\d{2}\.\d{1,2}$")
_EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
_QUANTITY = re.compile(r"^\d+(Ki|Mi|Gi|Ti|Pi)$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _dns_label(v: str) -> str:
    if not DNS_LABEL.match(v):
        raise ValueError(
            "is not an RFC 1123 label || use lowercase letters, digits and '-', starting and "
            "ending with a letter or digit, at most 63 characters (e.g. gpu-node-00)"
        )
    return v


def check_guid(v: Any) -> str:
    if isinstance(v, int | float) and not isinstance(v, bool):
        # YAML reads an unquoted 0x… as an integer; the Pulumi CLI passes config numbers as
        # 64-bit floats, which keep 53 bits: two GUIDs of one switch batch would collide.
        raise ValueError("is a number, not a GUID || quote it in the stack file, e.g. "
                         "'0xb83fd20300a13c10' (unquoted, YAML reads it as an integer and "
                         "the Pulumi CLI rounds it to a float)")
    v = str(v).lower()
    if not _GUID.match(v):
        raise ValueError("is not a 64-bit GUID || write 0x followed by 16 hex digits, as "
                         "`ibstat` prints it (e.g. 0xb83fd20300a13c10)")
    return v


def check_hca(v: str) -> str:
    if not _HCA.match(v):
        raise ValueError("is not an RDMA device name || use the ConnectX device name that "
                         "`ibstat -l` lists, e.g. mlx5_0")
    return v


def _netdev(v: str) -> str:
    if not _NETDEV.match(v):
        raise ValueError("is not a network interface name || use the name `ibdev2netdev` "
                         "prints for the rail's HCA, e.g. ibp24s0 (at most 15 characters)")
    if _KERNEL_NETDEV.match(v):
        raise ValueError("is in the kernel's own ibN/ethN namespace, which it hands out in "
                         "probe order at every boot (and a DGX H100's storage ports use it too) "
                         "|| use the stable name DGX OS gives the port, as `ibdev2netdev` "
                         "prints it (mlx5_0 ==> ibp24s0)")
    return v


def _kernel_arg(v: str) -> str:
    if not _KERNEL_ARG.match(v):
        raise ValueError("is not one kernel command-line argument || write one word per list "
                         "item, e.g. iommu=pt or init_on_alloc=0 (no spaces or quotes)")
    return v


def check_host_key(v: str) -> str:
    if not _HOST_KEY.match(v):
        raise ValueError("is not an OpenSSH public host key || paste the key type and base64 "
                         "of `ssh-keyscan <host>`, e.g. 'ssh-ed25519 AAAA…'")
    return v


def _public_key(v: str) -> str:
    v = v.strip()
    if not _PUBLIC_KEY.match(v):
        raise ValueError("is not an OpenSSH public key || paste one line of the key's .pub file "
                         "(`ssh-keygen -y -f <private key>`), e.g. 'ssh-ed25519 AAAA… ops@site'")
    try:
        base64.b64decode(v.split()[1], validate=True)
    except ValueError:
        raise ValueError("has a key blob that is not base64 || paste the .pub line unchanged") \
            from None
    return v


def check_mac(v: str) -> str:
    v = v.lower()
    if not _MAC.match(v):
        raise ValueError("is not a MAC address || write six hex pairs, e.g. 5c:25:73:0a:00:01")
    return v


def _pinned_image(v: str) -> str:
    if "@" in v:
        if not _DIGEST.search(v):
            raise ValueError("has a malformed digest || use @sha256: followed by 64 hex digits")
        return v
    name, _, tag = v.rpartition(":")
    if not name or "/" in tag or not tag:
        raise ValueError("is not pinned || add a version tag (e.g. :v0.11.0) or an @sha256 "
                         "digest")
    if tag == "latest":
        raise ValueError(":latest is not reproducible || pin a version tag or an @sha256 digest")
    return v


_DRIVE_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}$")


def _drive_size_tb(v: float) -> float:
    if not 0.1 <= v <= 200:
        raise ValueError("is not an NVMe drive size in TB || write the drive's marketed "
                         "capacity in decimal terabytes, as `nvme list` shows it (e.g. 3.84 "
                         "for the U.2 data drives of a DGX H100)")
    return v


def _drive_model(v: str) -> str:
    if not _DRIVE_MODEL.match(v):
        raise ValueError("is not an NVMe model name || use all or part of the model "
                         "`nvme list` or /sys/block/<dev>/device/model shows: letters, "
                         "digits, spaces, '.', '_' and '-', at most 40 characters")
    return v


def _retired_nvme_key(v: Any) -> None:
    raise ValueError(
        "is retired: kernel NVMe names are enumeration order, not identities, and on a DGX "
        "H100 nvme0n1..nvme7n1 can include the two M.2 OS drives || delete nvmeDevices and "
        "nvmeSizeTb and describe the data drives instead, e.g. dataDrives: {sizeTb: 3.84, "
        "count: 8} (docs/hosts.md, 'Local NVMe scratch on DGX OS')")


def _exact_version(v: str) -> str:
    if not _EXACT_VERSION.match(v):
        raise ValueError("is not an exact version || pin one release like v26.3.2 (no "
                         "ranges, no 'latest')")
    return v


def _quantity(v: str) -> str:
    if not _QUANTITY.match(v):
        raise ValueError("is not a binary quantity || write a number with Ki/Mi/Gi/Ti/Pi, "
                         "e.g. 64Gi or 100Ti")
    return v


def _pkey(v: Any) -> int:
    if isinstance(v, str):
        try:
            v = int(v, 0)
        except ValueError:
            raise ValueError("is not a number || write the pkey as hex, e.g. 0x0a01") from None
    if isinstance(v, bool) or not isinstance(v, int) or not 0x0001 <= v <= 0x7FFE:
        shown = f"{v:#06x}" if isinstance(v, int) and not isinstance(v, bool) else repr(v)
        raise ValueError(
            f"pkey {shown} is outside 0x0001-0x7FFE || pick a free key in 0x0001-0x7FFE "
            "(0x7FFF is the Default partition; 0x8000 is the full-membership bit opensm sets "
            "per member)"
        )
    return v


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
Guid = Annotated[str, BeforeValidator(check_guid)]
HcaName = Annotated[str, AfterValidator(check_hca)]
NetdevName = Annotated[str, AfterValidator(_netdev)]
KernelArg = Annotated[str, AfterValidator(_kernel_arg)]
HostKey = Annotated[str, AfterValidator(check_host_key)]
Mac = Annotated[str, AfterValidator(check_mac)]
PublicKey = Annotated[str, AfterValidator(_public_key)]
PinnedImage = Annotated[str, AfterValidator(_pinned_image)]
ExactVersion = Annotated[str, AfterValidator(_exact_version)]
Quantity = Annotated[str, AfterValidator(_quantity)]
PKey = Annotated[int, BeforeValidator(_pkey)]
DriveSizeTb = Annotated[float, AfterValidator(_drive_size_tb)]
DriveModel = Annotated[str, AfterValidator(_drive_model)]
RetiredNvmeKey = Annotated[None, BeforeValidator(_retired_nvme_key)]


def read_only(v: dict) -> Mapping:
    """Mappings inside the frozen model cannot be changed after validation either."""
    return MappingProxyType(dict(v))


def empty_read_only() -> dict[Any, Any]:
    """The default of a `dict` field that `read_only` guards: declared as the dict pydantic
    validates, held as the read-only mapping `read_only` makes of every value."""
    return cast(dict[Any, Any], MappingProxyType({}))


IPv4 = ipaddress.IPv4Address
Cidr = ipaddress.IPv4Network


class Model(BaseModel):
    """Frozen, no unknown keys, camelCase in the stack file and snake_case in Python."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


