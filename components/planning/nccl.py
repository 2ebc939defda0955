"""NCCL acceptance test: what the fabric should deliver, and a checker for its output.

Standard library only and no project imports: the same file is shipped to the control plane
and run there with a plain `python3` after the nccl-tests MPIJob finishes (see
`components/planning/workloads.py`), and imported by the tests and the stack.
docs/acceptance.md gives the figures with their sources, the order the test runs in and how
to read a failure.

The launcher log holds two things, in this order, and both are checked:

1. **Per-rail ib_write_bw** (perftest), rail by rail, each node writing to the next one in a
   ring over that rail's HCA: a rail below RAIL_WRITE_BW_FRACTION of its line rate, or a pair
   that produced no result, fails and is named (rail, HCA, client -> server node).
2. **all_reduce_perf** with NCCL_ALGO=Ring, which fails on:
   - **NET/Socket fallback** (`Using network Socket`, `via NET/Socket`): a wrong
     `NCCL_SOCKET_IFNAME` or missing RDMA devices make NCCL silently run over TCP, ~10x slower.
   - **GPUDirect RDMA disabled** (`GPU Direct RDMA Disabled for HCA`, or inter-node channels
     over `NET/IB` without `/GDRDMA`): every message is staged through host memory.
   - **An algorithm other than Ring** (`NCCL_ALGO set by environment to ...`, which NCCL
     prints under NCCL_DEBUG_SUBSYS=ENV, or no such line): NVLS/NVLSTree/Tree bus bandwidth
     is not what crosses the wire and can hide a slow rail.
   - **A missing rank**: fewer `#  Rank` lines than nodes x GPUs.
   - **Wrong results** (`#wrong` not 0, or out-of-bounds values): corruption, not slowness.
   - **Bus bandwidth below the floor** at messages >= 1 GiB (the seeds' 1-4 GB range).

The floor is what the rails deliver to NCCL, not their line rate: with rings, all-reduce bus
bandwidth across nodes is what goes through the NICs, and NCCL's maintainers quote 46-48 GB/s
per ConnectX-7 NIC at NDR 400 Gb/s (of a 50 GB/s line rate). The floor takes the low end, 46
GB/s, times the rails (8 x 46 = 368 GB/s on an H100 node), times the stack's `minEfficiency`
(0.97 by default: 357 GB/s, under the healthy band and above what seven rails deliver).
Within one node the bound is NVLink under Ring, ~370 GB/s. The seeds' inter-node example
(150-180 GB/s at 1-4 GB) is under half of that: a degraded fabric, not a target.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

GIB = 1 << 30

# All-reduce bus bandwidth NCCL gets out of one rail with NCCL_ALGO=Ring, by link speed (Gb/s).
# NDR 400 Gb/s (ConnectX-7): "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (NCCL
# maintainer, https://github.com/NVIDIA/nccl-tests/issues/290); "around 48GB/s from each CX7
# NIC at 400Gbps ... up to ~396GB/s with the RING protocol" (nccl-tests#319); "48-49GB/s per
# NIC" (nccl-tests#267). The floor takes the low end of the quoted range.
RAIL_ALLREDUCE_BUSBW_GBS = {400: 46.0}
# The top of the healthy band on 8 NDR rails: "up to ~396GB/s with the RING protocol" (#319).
NDR_RING_BUSBW_TOP_GBS = 396.0
# NVLink under Ring: 450 GB/s line rate less ~20 % protocol overhead, "an effective NVLink
# bandwidth of 370GB/s ... when running with NCCL_ALGO=RING" (nccl-tests#212). NVLS would
# report ~480 GB/s, which is why the acceptance test forces Ring.
NVLINK_RING_BUSBW_GBS = 370.0
# ib_write_bw per rail: NVIDIA's multi-node certification (Mellanox/ngc_multinode_perf,
# common.sh run_perftest_clients) passes a device at 90 % of its port rate per direction.
RAIL_WRITE_BW_FRACTION = 0.9
ALGO = "Ring"  # the NCCL_ALGO the acceptance test runs with


def nic_bandwidth_gbs(rails: int, link_gbps: int) -> float:
    """Aggregate unidirectional NIC line rate of one node in GB/s (8 x 400 Gb/s = 400 GB/s)."""
    return rails * link_gbps / 8


def rail_busbw_gbs(rails: int, link_gbps: int) -> float:
    """All-reduce bus bandwidth the rails deliver to NCCL under Ring (8 x 46 = 368 GB/s)."""
    if link_gbps not in RAIL_ALLREDUCE_BUSBW_GBS:
        raise ValueError(f"no per-rail all-reduce figure for {link_gbps} Gb/s links "
                         f"(known: {sorted(RAIL_ALLREDUCE_BUSBW_GBS)})")
    return rails * RAIL_ALLREDUCE_BUSBW_GBS[link_gbps]


def busbw_floor_gbs(nodes: int, rails: int, link_gbps: int, efficiency: float,
                    nvlink_gbs: float = NVLINK_RING_BUSBW_GBS) -> float:
    """The lowest acceptable Ring all-reduce bus bandwidth for a run over `nodes` nodes."""
    bound = nvlink_gbs if nodes == 1 else min(nvlink_gbs, rail_busbw_gbs(rails, link_gbps))
    return round(bound * efficiency, 1)


def rail_floor_gbps(link_gbps: int) -> float:
    """The lowest acceptable ib_write_bw average on one rail, in Gb/s (400 -> 360)."""
    return round(link_gbps * RAIL_WRITE_BW_FRACTION, 1)


@dataclass(frozen=True)
class Row:
    size: int
    busbw_out: float
    busbw_in: float
    wrong: int

    @property
    def busbw(self) -> float:
        return max(self.busbw_out, self.busbw_in)


@dataclass
class Result:
    ranks: dict[int, str] = field(default_factory=dict)  # rank -> host
    rows: list[Row] = field(default_factory=list)
    networks: set[str] = field(default_factory=set)  # "Using network X"
    transports: set[str] = field(default_factory=set)  # "via NET/IB/0/GDRDMA", "via P2P/CUMEM"
    gdr_disabled: list[str] = field(default_factory=list)
    algos: list[str] = field(default_factory=list)  # "NCCL_ALGO set by environment to X"
    out_of_bounds: int | None = None
    avg_busbw: float | None = None


_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+(.*)$")
_NETWORK = re.compile(r"NCCL INFO Using network (\w+)")
_VIA = re.compile(r"NCCL INFO Channel .* via (\S+)")
_GDR_OFF = re.compile(r"NCCL INFO (GPU Direct RDMA Disabled for HCA .*)")
# tuning.cc, every rank, NCCL_DEBUG_SUBSYS=ENV: INFO(NCCL_ENV, "NCCL_ALGO set by environment
# to %s", algoStr) -- the same text from NCCL 2.7 to 2.2x.
_ALGO = re.compile(r"NCCL INFO NCCL_ALGO set by environment to (\S+)")
_OOB = re.compile(r"^# Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*([\d.]+)")


def parse(text: str) -> Result:
    r = Result()
    for line in text.splitlines():
        if m := _RANK.match(line):
            r.ranks[int(m.group(1))] = m.group(2)
        elif m := _OOB.match(line):
            r.out_of_bounds = int(m.group(1))
        elif m := _AVG.match(line):
            r.avg_busbw = float(m.group(1))
        elif m := _ROW.match(line):
            # time algbw busbw #wrong (out-of-place), then the same in place; time may be "N/A"
            cols = m.group(3).split()
            if len(cols) >= 8:
                try:
                    r.rows.append(Row(int(m.group(1)), float(cols[2]), float(cols[6]),
                                      _wrong(cols[3]) + _wrong(cols[7])))
                except ValueError:
                    continue
        if m := _NETWORK.search(line):
            r.networks.add(m.group(1))
        if m := _VIA.search(line):
            r.transports.add(m.group(1))
        if m := _GDR_OFF.search(line):
            r.gdr_disabled.append(m.group(1).strip())
        if m := _ALGO.search(line):
            r.algos.append(m.group(1))
    return r


def _algo_is(value: str, algo: str) -> bool:
    """NCCL_ALGO is exactly `algo` (case-insensitive), or its per-collective form for
    all-reduce (allreduce:ring); lists, exclusions (^tree) and other algorithms are not."""
    v = value.strip().strip("'\"").lower()
    return v in (algo.lower(), f"allreduce:{algo.lower()}")


def _wrong(col: str) -> int:
    return int(col) if col.isdigit() else 0  # "N/A" when validation is off (-c 0)


def check(text: str, expected_ranks: int, min_busbw_gbs: float, nodes: int,
          min_bytes: int = GIB, algo: str | None = ALGO) -> list[str]:
    """Every reason the all_reduce_perf run is not acceptable; empty when it passes.

    `algo`: the NCCL_ALGO the run must show in NCCL's INFO log (None: not checked)."""
    r = parse(text)
    problems: list[str] = []
    if algo is not None:
        other = sorted({a for a in r.algos if not _algo_is(a, algo)})
        if not r.algos:
            problems.append(f"NCCL's log does not show NCCL_ALGO={algo} (no 'NCCL_ALGO set by "
                            "environment' line under NCCL_DEBUG_SUBSYS=ENV): NCCL may have "
                            "picked NVLS or Tree, whose bus bandwidth can hide a slow rail")
        elif other:
            problems.append(f"NCCL ran with NCCL_ALGO={other[0]}, not {algo}: only Ring bus "
                            "bandwidth is what crosses the rails")
    missing = sorted(set(range(expected_ranks)) - set(r.ranks))
    if missing:
        problems.append(f"{len(r.ranks)} of {expected_ranks} ranks reported; missing ranks "
                        f"{_span(missing)} (a node or GPU is not in the run)")
    hosts = set(r.ranks.values())
    if r.ranks and len(hosts) < nodes:
        problems.append(f"ranks ran on {len(hosts)} hosts, expected {nodes}")
    net_ib = {t for t in r.transports if t.startswith("NET/IB")}
    if "Socket" in r.networks or any(t.startswith("NET/Socket") for t in r.transports):
        problems.append("NCCL fell back to NET/Socket (TCP): check NCCL_SOCKET_IFNAME, "
                        "NCCL_IB_HCA and the pod's RDMA resource")
    elif nodes > 1 and not r.networks and not r.transports:
        problems.append("no NCCL transport lines in the log: run with NCCL_DEBUG=INFO so the "
                        "network path can be checked")
    elif nodes > 1 and not net_ib:
        problems.append(f"inter-node traffic does not use InfiniBand (networks "
                        f"{sorted(r.networks) or '-'}, transports {sorted(r.transports) or '-'})")
    if r.gdr_disabled:
        problems.append(f"GPUDirect RDMA disabled: {r.gdr_disabled[0]}")
    elif net_ib and not any(t.endswith("/GDRDMA") for t in net_ib):
        problems.append("GPUDirect RDMA not in use: inter-node channels run over "
                        f"{sorted(net_ib)[0]} without /GDRDMA (check nvidia-peermem/DMA-BUF)")
    wrong = [row.size for row in r.rows if row.wrong]
    if wrong or (r.out_of_bounds or 0) > 0:
        problems.append(f"wrong results (#wrong > 0 at {len(wrong)} sizes, out of bounds "
                        f"{r.out_of_bounds}): data corruption, not a performance problem")
    large = [row for row in r.rows if row.size >= min_bytes]
    if not r.rows:
        problems.append("no result rows: the test did not run to completion")
    elif not large:
        problems.append(f"no message size >= {min_bytes} bytes was measured; run with -e 4G")
    else:
        best = max(large, key=lambda row: row.busbw)
        if best.busbw < min_busbw_gbs:
            problems.append(f"bus bandwidth {best.busbw:.1f} GB/s at {best.size} bytes is below "
                            f"the fabric floor {min_busbw_gbs:.1f} GB/s")
    return problems


# ---------------------------------------------------------------- per-rail ib_write_bw

# Lines the launcher's rail check writes around each client run (workloads.rail_check_script).
_RAIL_BEGIN = re.compile(r"^# rail-check: rail (\d+) client (\S+) (\S+) server (\S+) (\S+)\s*$")
_RAIL_END = re.compile(r"^# rail-check: end rail (\d+) client (\S+) exit (-?\d+)")
_RAIL_ERROR = re.compile(r"^# rail-check: error(?: on (\S+))?: (.*)$")
_RAIL_START = re.compile(r"^# rail-check: start\b")
# perftest's report (src/perftest_parameters.h, linux-rdma/perftest): the header RESULT_FMT_G
# " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]" (MB/sec
# without --report_gbits), then REPORT_FMT " %-7lu    %-10lu       %-7.2lf            %-7.2lf
# \t\t   %-7.6lf": size, iterations, peak, average, message rate. Peak is 0.00 with -D.
_BW_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average")
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


@dataclass
class RailRun:
    rail: int
    client: str
    client_hca: str
    server: str
    server_hca: str
    gbps: float | None = None  # BW average of the client's report, Gb/s
    exit: int | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def pair(self) -> str:
        hca = self.client_hca if self.client_hca == self.server_hca else \
            f"{self.client_hca}/{self.server_hca}"
        return f"rail {self.rail} ({hca}): {self.client} -> {self.server}"


@dataclass
class Rails:
    started: bool = False
    runs: list[RailRun] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (node or "", message)


def parse_ib_write_bw(lines: list[str]) -> float | None:
    """BW average in Gb/s from one ib_write_bw report (MB/sec is converted), or None."""
    unit = None
    for line in lines:
        if m := _BW_HEADER.match(line):
            unit = m.group(1)
        elif unit and (m := _BW_ROW.match(line)):
            avg = float(m.group(4))
            return avg if unit == "Gb" else round(avg * 0x100000 * 8 / 1e9, 2)
    return None


def parse_rails(text: str) -> Rails:
    out = Rails()
    run: RailRun | None = None
    for line in text.splitlines():
        if _RAIL_START.match(line):
            out.started = True
        elif m := _RAIL_BEGIN.match(line):
            out.started = True
            run = RailRun(int(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5))
            out.runs.append(run)
        elif m := _RAIL_END.match(line):
            if run is not None:
                run.exit = int(m.group(3))
                run.gbps = parse_ib_write_bw(run.lines)
            run = None
        elif m := _RAIL_ERROR.match(line):
            out.errors.append((m.group(1) or "", m.group(2)))
        elif run is not None:
            run.lines.append(line)
    if run is not None:  # the block never ended: the launcher died in it
        run.gbps = parse_ib_write_bw(run.lines)
    return out


def _last_words(run: RailRun) -> str:
    said = [x.strip() for x in run.lines if x.strip() and not set(x.strip()) <= {"-"}]
    return said[-1] if said else "no output"


def check_rails(text: str, nodes: int, rails: int, min_gbps: float,
                listed: int = 16) -> list[str]:
    """Every reason the per-rail ib_write_bw check fails; empty when it passes.

    Each node writes to the next one in a ring on every rail, so `nodes` x `rails` runs are
    expected (none for one node). A rail that is slow both into and out of a node points at
    that node's HCA, cable or leaf port."""
    if nodes < 2 or rails < 1:
        return []
    r = parse_rails(text)
    expected = nodes * rails
    if not r.started:
        return ["no per-rail ib_write_bw check in the log (the launcher runs it before "
                "all_reduce_perf): the rails were not tested one by one"]
    bad: list[tuple[RailRun, str]] = []
    for run in r.runs:
        if run.gbps is None:
            exit_ = "no exit status" if run.exit is None else f"exit {run.exit}"
            bad.append((run, f"{run.pair}: no ib_write_bw result ({exit_}: {_last_words(run)})"))
        elif run.gbps < min_gbps:
            bad.append((run, f"{run.pair}: ib_write_bw {run.gbps:.1f} Gb/s, below the "
                             f"{min_gbps:.0f} Gb/s floor"))
    problems = [msg for _, msg in bad[:listed]]
    if len(bad) > listed:
        problems.append(f"... and {len(bad) - listed} more rail pairs below the floor or "
                        "without a result")
    slow_as: dict[tuple[int, str, str], set[str]] = {}
    for run, _ in bad:
        slow_as.setdefault((run.rail, run.client, run.client_hca), set()).add("client")
        slow_as.setdefault((run.rail, run.server, run.server_hca), set()).add("server")
    for (rail, node, hca), roles in sorted(slow_as.items()):
        if roles == {"client", "server"} and len(bad) < expected:
            problems.append(f"suspect: {node} rail {rail} ({hca}) is bad both as client and as "
                            "server: check that HCA, its cable and its leaf port")
    by_msg: dict[str, list[str]] = {}
    for where, msg in r.errors:
        by_msg.setdefault(" ".join(msg.split()), []).append(where)
    for msg, where in by_msg.items():
        on = sorted(w for w in where if w)
        problems.append(f"rail check: {msg}" + (f" (on {on[0]})" if len(on) == 1 else
                        f" (on {len(on)} nodes: {_span(on)})" if on else ""))
    seen = {(run.rail, run.client) for run in r.runs}
    if len(seen) < expected:
        problems.append(f"ib_write_bw ran {len(seen)} of {expected} rail pairs ({nodes} nodes "
                        f"x {rails} rails): the rail check did not run to completion")
    return problems


def rails_summary(text: str) -> str:
    r = parse_rails(text)
    done = [run for run in r.runs if run.gbps is not None]
    if not done:
        return f"rails: {len(r.runs)} ib_write_bw runs, none with a result"
    low = min(done, key=lambda run: run.gbps or 0.0)
    return (f"rails: {len(done)} of {len(r.runs)} ib_write_bw runs with a result, slowest "
            f"{low.gbps:.1f} Gb/s ({low.pair})")


def summary(text: str, min_bytes: int = GIB) -> str:
    r = parse(text)
    large = [row for row in r.rows if row.size >= min_bytes]
    best = max((row.busbw for row in large), default=0.0)
    return (f"ranks={len(r.ranks)} hosts={len(set(r.ranks.values()))} "
            f"networks={','.join(sorted(r.networks)) or '-'} peak_busbw_ge_1GiB={best:.1f}GB/s")


def _span(items: list) -> str:
    return ", ".join(map(str, items[:8])) + (" …" if len(items) > 8 else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Check the NCCL acceptance launcher log: per-rail ib_write_bw, then "
                    "nccl-tests all_reduce_perf.")
    ap.add_argument("log", nargs="?", help="launcher log (default: stdin)")
    ap.add_argument("--ranks", type=int, required=True, help="expected ranks (nodes x GPUs)")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--min-busbw", type=float, required=True, help="floor in GB/s")
    ap.add_argument("--min-bytes", type=int, default=GIB)
    ap.add_argument("--algo", default=ALGO, help="NCCL_ALGO the log must show ('' to skip)")
    ap.add_argument("--rails", type=int, default=0,
                    help="rails per node the ib_write_bw check must cover (0: no rail check)")
    ap.add_argument("--min-rail-gbps", type=float, default=0.0,
                    help="ib_write_bw floor per rail, Gb/s")
    a = ap.parse_args(argv)
    if a.log:
        with open(a.log, encoding="utf-8", errors="replace") as f:
            text = f.read()
    else:
        text = sys.stdin.read()
    problems = check_rails(text, a.nodes, a.rails, a.min_rail_gbps) if a.rails else []
    problems += check(text, a.ranks, a.min_busbw, a.nodes, a.min_bytes, a.algo or None)
    if a.rails and a.nodes > 1:
        print(rails_summary(text))
    print(summary(text, a.min_bytes))
    for p in problems:
        print(f"FAIL: {p}")
    if not problems:
        rails = (f"every rail >= {a.min_rail_gbps:.0f} Gb/s (ib_write_bw), "
                 if a.rails and a.nodes > 1 else "")
        print(f"PASS: {rails}all-reduce ({a.algo or 'any algorithm'}) over {a.ranks} ranks on "
              f"{a.nodes} nodes meets {a.min_busbw:.1f} GB/s over InfiniBand with GPUDirect RDMA")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
