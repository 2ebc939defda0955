"""ibsim + opensm + infiniband-diags harness for the fabric tests (recipe: shared/ibsim.md).

One ibsim per fabric, its own abstract socket name (IBSIM_SOCKNAME), clients preloaded with
umad2sim, a timeout on every client (a client without its simulator retries forever), and
SIGTERM + wait on exit so no simulator or client slot leaks.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from components.planning.fabric.ibnet import Topology, TopoNode
from components.planning.fabric.model import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    HcaPort,
    Partition,
    SmHost,
)
from components.planning.fabric.render import render_fabric_files
from components.planning.fabric.sm_files import render_opensm_conf

# ---------------------------------------------------------------- clusters used by the tests

DGX_HCAS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
STORAGE_GUID = "0xb83fd20300f30002"  # a Lustre server port outside the inventory


def cluster(n: int, per_su: int = 32, per_rack: int = 4, real_guids: bool = False,
            prefix: str = "gpu-node-") -> list[FabricNode]:
    """n DGX-like nodes filling SUs in slot order, `per_rack` nodes per rack."""
    return [
        FabricNode(
            f"{prefix}{i:04d}" if n > 100 else f"{prefix}{i:02d}", i // per_su + 1, i % per_su,
            f"r{i // per_rack + 1:02d}",
            tuple(HcaPort(r, DGX_HCAS[r], f"0x946dae0300{i:04x}{r * 2:02x}" if real_guids
                          else None) for r in range(8)),
        )
        for i in range(n)
    ]


PROD_SMS = (SmHost("sm-01", 15, "r01", "0xb83fd20300f10002"),
            SmHost("sm-02", 14, "r02", "0xb83fd20300f20002"))


def prod_spec(**kw: object) -> FabricSpec:
    """prod's fabric section (switches in r01, the data path partition with a Lustre server)
    plus the other member types: a tenant on two hosts, storage clients limited."""
    parts = (Partition("compute", 0x0A01, "compute", port_guids=(STORAGE_GUID,),
                       data_path=True),
             Partition("tenant", 0x0A02, "compute", hosts=("gpu-node-06", "gpu-node-07")),
             Partition("storage", 0x0B01, "storage", port_guids=(STORAGE_GUID,)))
    args: dict[str, object] = {"default_switch_rack": "r01", "partitions": parts}
    args.update(kw)
    return FabricSpec(**args)  # type: ignore[arg-type]


TOOLS = ("ibsim", "opensm", "ibnetdiscover", "dump_fts", "smpquery")
_counter = itertools.count()


def umad2sim() -> str | None:
    hits = sorted(glob.glob("/usr/lib/*/umad2sim/libumad2sim.so")
                  + glob.glob("/usr/lib/umad2sim/libumad2sim.so"))
    return hits[0] if hits else None


def missing_tools() -> list[str]:
    missing = [t for t in TOOLS if shutil.which(t) is None
               and not Path("/usr/sbin", t).exists()]
    if umad2sim() is None:
        missing.append("libumad2sim.so (ibsim-utils)")
    return missing


def skip_reason() -> str | None:
    missing = missing_tools()
    if not missing:
        return None
    return ("InfiniBand simulation tools missing: " + ", ".join(missing)
            + " (apt-get install ibsim-utils opensm infiniband-diags; `make test` does it)")


def sim_limits(plan: FabricPlan) -> dict[str, int | None]:
    """ibsim size flags for a plan, only where its 0.10 defaults are too small."""
    switches = len(plan.switches)
    cas = plan.hca_ports + len(plan.sm)
    nodes, ports = switches + cas, switches * (plan.spec.radix + 1) + cas
    return {"max_nodes": 2 * nodes if nodes > 2048 else None,
            "max_switches": 2 * switches if switches > 256 else None,
            "max_ports": 2 * ports if ports > 13312 else None}


def write_fabric(plan: FabricPlan, workdir: Path) -> Path:
    """Rendered files into `workdir`, plus opensm-sim.conf pointing at them."""
    workdir.mkdir(parents=True, exist_ok=True)
    for rel, text in render_fabric_files(plan, prefix="").items():
        path = workdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    conf = workdir / "opensm-sim.conf"
    conf.write_text(render_opensm_conf(plan, etc_dir=str(workdir),
                                       log_file=str(workdir / "osm.log")))
    return conf


@dataclass
class OpensmRun:
    rc: int
    log: str
    seconds: float

    @property
    def engine(self) -> str | None:
        m = re.findall(r"(\w+) tables configured on all switches", self.log)
        return m[-1] if m else None

    @property
    def errors(self) -> list[str]:
        return [line for line in self.log.splitlines() if " ERR " in line]


class SimFabric:
    """`with SimFabric(dir, net_text) as sim:` runs ibsim on the net for the block; with
    `console=True` its console reads commands from a pipe (`console`), not stdin at EOF, which
    would spin it (ibsim.md, section 5)."""

    def __init__(self, workdir: Path, net_text: str, max_nodes: int | None = None,
                 sim_host: str | None = None, max_switches: int | None = None,
                 max_ports: int | None = None, console: bool = False) -> None:
        self.workdir = workdir
        self.net_text = net_text
        self.limits = {"-N": max_nodes, "-S": max_switches, "-P": max_ports}
        self.sim_host = sim_host
        self.with_console = console
        self.sock = f"gcf{os.getpid()}x{next(_counter)}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SimFabric:
        self.workdir.mkdir(parents=True, exist_ok=True)
        net = self.workdir / "sim.net"
        net.write_text(self.net_text)
        args = ["ibsim", "-s"] + ([] if self.with_console else ["-n"])
        for flag, value in self.limits.items():
            if value:  # ibsim 0.10 defaults: 2048 nodes, 256 switches, 13312 ports
                args += [flag, str(value)]
        self.out = open(self.workdir / "ibsim.out", "wb")  # closed in __exit__
        self.proc = subprocess.Popen(args + [str(net)], cwd=self.workdir, env=self._env(False),
                                     stdin=subprocess.PIPE if self.with_console
                                     else subprocess.DEVNULL, stdout=self.out,
                                     stderr=subprocess.STDOUT)
        # The banner is printed before the ctl socket is bound: wait for the socket.
        deadline = time.monotonic() + 60
        needle = f"@{self.sock}:ctl@"
        while True:
            if needle in Path("/proc/net/unix").read_text():
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("ibsim did not start: "
                                   + (self.workdir / "ibsim.out").read_text()[-2000:])
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()  # only once it stopped: at EOF its console would spin
        self.out.close()

    def console(self, command: str) -> None:
        """One command on ibsim's console (`Unlink "<nodeid>"[port]`, `ReLink …`,
        `PerformanceSet …`); it runs once ibsim reads it: wait for its effect."""
        assert self.proc is not None and self.proc.stdin is not None, "no console: console=True"
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def _env(self, preload: bool) -> dict[str, str]:
        env = dict(os.environ)
        env.update(IBSIM_SOCKNAME=self.sock, OSM_CACHE_DIR=str(self.workdir),
                   OSM_TMP_DIR=str(self.workdir))
        env.pop("LD_PRELOAD", None)
        if preload:
            env["LD_PRELOAD"] = umad2sim() or ""
            if self.sim_host:
                env["SIM_HOST"] = self.sim_host[:31]
        return env

    def run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["timeout", "-s", "TERM", str(int(timeout))] + args,
                              cwd=self.workdir, env=self._env(True), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, check=False)

    def opensm(self, conf: Path, timeout: float = 180) -> OpensmRun:
        log = self.workdir / "osm.log"
        log.unlink(missing_ok=True)
        t = time.monotonic()
        res = self.run(["opensm", "-o", "-s", "0", "-F", str(conf), "-f", str(log)], timeout)
        return OpensmRun(res.returncode, log.read_text() if log.exists() else res.stdout,
                         time.monotonic() - t)

    def ibnetdiscover(self) -> str:
        res = self.run(["ibnetdiscover"], 120)
        if res.returncode:
            raise RuntimeError(f"ibnetdiscover failed: {res.stderr[-2000:]}")
        return res.stdout

    def dump_fts(self) -> str:
        res = self.run(["dump_fts"], 120)
        if res.returncode:
            raise RuntimeError(f"dump_fts failed: {res.stderr[-2000:]}")
        return res.stdout

    def route_check(self, topo: Topology) -> list[tuple[str, str]]:
        """LFT walk from every switch to every CA LID (see `unrouted`).

        infiniband-diags 44 (dump_fts, ibroute) stop one short of LinearFdbTop, so the
        highest LID never shows in a dump although ibsim holds and forwards it (opensm
        sends the block; `smpquery nodedesc <top>` and `ibtracert` reach it). Pairs missing
        only that LID are re-checked with ibtracert from the switch."""
        lfts, tops = _parse_fts(self.dump_fts())
        bad = unrouted(topo, lfts)
        if not bad:
            return bad
        by_desc = {n.desc: n for n in topo.nodes.values()}
        still = []
        for sw_desc, ca_desc in bad:
            sw, ca = by_desc[sw_desc], by_desc[ca_desc]
            if ca.lid == tops.get(sw.guid) and ca.lid not in lfts.get(sw.guid, {}):
                res = self.run(["ibtracert", str(sw.lid), str(ca.lid)], 30)
                if res.returncode == 0 and f'"{ca_desc}"' in res.stdout.splitlines()[-1]:
                    continue
            still.append((sw_desc, ca_desc))
        return still

    def pkey_table(self, lid: int) -> list[int]:
        """The port's P_Key table as `smpquery pkeys` reads it, index by index (0x0000 empty);
        bit 15 is full membership."""
        res = self.run(["smpquery", "pkeys", str(lid)], 30)
        if res.returncode:
            raise RuntimeError(f"smpquery pkeys {lid} failed: {res.stderr[-500:]}")
        return [int(x, 16) for line in res.stdout.splitlines()
                if re.match(r"^\s*\d+:", line) for x in re.findall(r"0x([0-9a-f]{4})", line)]

    def pkeys(self, lid: int) -> list[int]:
        return [k for k in self.pkey_table(lid) if k]

    def start_opensm(self, conf: Path, host: str | None = None) -> subprocess.Popen[bytes]:
        """opensm as a daemon on `host`'s port (default: the fabric's sim_host)."""
        env = self._env(True)
        if host:
            env["SIM_HOST"] = host[:31]
        return subprocess.Popen(["opensm", "-F", str(conf), "-f", str(conf) + ".log"],
                                cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def sm_state(self, host: str) -> str:
        """The state of the SM on `host`'s port, read over the directed route to itself."""
        res = self.run_on(host, ["sminfo", "-D", "0"], 10)
        m = re.search(r"SMINFO_[A-Z]+", res.stdout)
        return m.group(0) if m else "none"

    def run_on(self, host: str, args: list[str], timeout: float = 120
               ) -> subprocess.CompletedProcess[str]:
        saved, self.sim_host = self.sim_host, host
        try:
            return self.run(args, timeout)
        finally:
            self.sim_host = saved

    @contextlib.contextmanager
    def running_opensm(self, conf: Path, timeout: float = 120) -> Iterator[None]:
        """opensm as a daemon (SA queries need one), up once it is master."""
        proc = self.start_opensm(conf)
        try:
            deadline = time.monotonic() + timeout
            while self.sm_state(self.sim_host or "") != "SMINFO_MASTER":
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = Path(str(conf) + ".log")
                    raise RuntimeError("opensm did not become master: "
                                       + (log.read_text()[-2000:] if log.exists() else ""))
                time.sleep(0.5)
            yield
        finally:
            self.stop(proc)

    def path_pkey(self, slid: int, dlid: int) -> int | None:
        """The P_Key of the SA's path record from `slid` to `dlid` (None: the SA returns no
        path, i.e. the two ports share no P_Key in which one of them is a full member)."""
        res = self.run(["saquery", "-p", "--slid", str(slid), "--dlid", str(dlid)], 30)
        # saquery prints the source port's table entry without leading zeros: 0xA02 for a
        # limited member of 0x0a02.
        m = re.search(r"pkey\.+0x([0-9A-Fa-f]{1,4})\b", res.stdout)
        return int(m.group(1), 16) if m else None

    def ipoib_groups(self, host: str) -> dict[int, int]:
        """P_Key -> MTU code of each IPoIB broadcast group `host` (an end port) can see."""
        res = self.run_on(host, ["saquery", "-g"], 30)
        groups = {}
        for block in res.stdout.split("MCMemberRecord group dump:")[1:]:
            mgid = re.search(r"MGID\.+(\S+)", block)
            if mgid and mgid.group(1).startswith("ff12:401b:"):
                groups[int(re.search(r"pkey\.+0x(\w+)", block).group(1), 16)] = \
                    int(re.search(r"Mtu\.+0x(\w+)", block).group(1), 16) & 0x3F
        return groups


# ---------------------------------------------------------------- routing-table walk

_FT_HEAD = re.compile(r"^Unicast lids .* guid (0x[0-9a-f]+)")
_FT_ROW = re.compile(r"^(0x[0-9a-f]+) (\d+) :")


def parse_dump_fts(text: str) -> dict[str, dict[int, int]]:
    """switch node GUID -> {destination LID: output port}."""
    return _parse_fts(text)[0]


def _parse_fts(text: str) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
    lfts: dict[str, dict[int, int]] = {}
    tops: dict[str, int] = {}  # LinearFdbTop, the end of the printed range
    cur: dict[int, int] | None = None
    for line in text.splitlines():
        m = _FT_HEAD.match(line)
        if m:
            guid = f"0x{int(m.group(1), 16):016x}"
            cur = lfts.setdefault(guid, {})
            top = re.search(r"\[0x[0-9a-f]+-(0x[0-9a-f]+)\]", line)
            if top:
                tops[guid] = int(top.group(1), 16)
            continue
        m = _FT_ROW.match(line)
        if m and cur is not None:
            cur[int(m.group(1), 16)] = int(m.group(2))
    return lfts, tops


def unrouted(topo: Topology, lfts: dict[str, dict[int, int]], max_hops: int = 8
             ) -> list[tuple[str, str]]:
    """(switch, CA) pairs whose LFT walk from the switch does not end at that CA's port.

    CA LIDs come from the discovered topology, not the LFTs (a missing entry is the bug
    this looks for)."""
    switches = {nid: n for nid, n in topo.nodes.items() if n.kind == "switch"}
    targets = [(nid, n.lid) for nid, n in topo.nodes.items()
               if n.kind != "switch" and n.lid]
    ok: dict[tuple[str, int], bool] = {}
    bad: list[tuple[str, str]] = []
    for sw in sorted(switches):
        for ca, lid in targets:
            path: list[str] = []
            cur, result = sw, False
            for _ in range(max_hops):
                if (cur, lid) in ok:
                    result = ok[(cur, lid)]
                    break
                path.append(cur)
                port = lfts.get(switches[cur].guid, {}).get(lid)
                nxt = topo.links.get((cur, port)) if port else None
                if nxt is None:
                    break
                if nxt[0] == ca:
                    result = True
                    break
                if nxt[0] not in switches:
                    break
                cur = nxt[0]
            for p in path:
                ok[(p, lid)] = result
            if not result:
                bad.append((switches[sw].desc, topo.nodes[ca].desc))
    return bad


# ---------------------------------------------------------------- fault injection


def topo_to_net(topo: Topology) -> str:
    """Serialize a (possibly edited) topology back to an ibsim net file."""
    out: list[str] = []
    by_node: dict[str, list[tuple[int, tuple[str, int]]]] = {}
    for (nid, port), far in topo.links.items():
        by_node.setdefault(nid, []).append((port, far))
    for nid, node in topo.nodes.items():
        kind = "Switch" if node.kind == "switch" else "Ca"
        out.append(f"{'switchguid' if kind == 'Switch' else 'caguid'}={node.guid}")
        out.append(f'{kind}\t{node.nports} "{nid}"\t\t# "{node.desc}"')
        for port, (fid, fport) in sorted(by_node.get(nid, [])):
            own = node.port_guids.get(port) if kind == "Ca" else None
            guid = f"({own[2:]})" if own else ""
            out.append(f'[{port}]{guid}\t"{fid}"[{fport}]\t\t# "{topo.nodes[fid].desc}" '
                       "lid 0 4xHDR")
        out.append("")
    return "\n".join(out)


class Faults:
    """Edit a topology by names: ("leaf-su1-r0-3", 1) or ("gpu0001 mlx5_0", 1)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.ids: dict[str, str] = {}
        for nid, n in topo.nodes.items():
            name = n.desc
            m = re.match(r"^MF0;([^:]+):", name)
            self.ids[m.group(1) if m else name] = nid

    def end(self, name: str, port: int) -> tuple[str, int]:
        return (self.ids[name], port)

    def swap(self, a: tuple[str, int], b: tuple[str, int]) -> Faults:
        links = self.topo.links
        ea, eb = self.end(*a), self.end(*b)
        pa, pb = links.pop(ea), links.pop(eb)
        links.pop(pa)
        links.pop(pb)
        for x, y in ((ea, pb), (eb, pa)):
            links[x], links[y] = y, x
        return self

    def drop(self, a: tuple[str, int]) -> Faults:
        ea = self.end(*a)
        far = self.topo.links.pop(ea)
        self.topo.links.pop(far)
        return self

    def add(self, a: tuple[str, int], b: tuple[str, int]) -> Faults:
        ea, eb = self.end(*a), self.end(*b)
        assert ea not in self.topo.links and eb not in self.topo.links, "port in use"
        self.topo.links[ea], self.topo.links[eb] = eb, ea
        return self

    def attach_ca(self, desc: str, port_guid: str, switch: str) -> Faults:
        """A one-port CA (e.g. a Lustre server outside the inventory) on `switch`'s first free
        port; its node GUID is its port GUID minus one, as on a ConnectX."""
        sw = self.ids[switch]
        port = next(p for p in range(1, self.topo.nodes[sw].nports + 1)
                    if (sw, p) not in self.topo.links)
        node_guid = f"0x{int(port_guid, 16) - 1:016x}"
        nid = f"H-{node_guid[2:]}"
        self.topo.nodes[nid] = TopoNode(nid, "ca", 1, node_guid, desc,
                                        port_guids={1: port_guid})
        self.ids[desc] = nid
        return self.add((desc, 1), (switch, port))

    def remove_host(self, hostname: str) -> Faults:
        for name, nid in list(self.ids.items()):
            if name.split(" ")[0] == hostname and self.topo.nodes[nid].kind != "switch":
                for port in range(1, self.topo.nodes[nid].nports + 1):
                    far = self.topo.links.pop((nid, port), None)
                    if far:
                        self.topo.links.pop(far)
                del self.topo.nodes[nid]
        return self

    def net(self) -> str:
        return topo_to_net(self.topo)
