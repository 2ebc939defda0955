"""The stand-in for what the NCCL acceptance launcher prints on a healthy fabric, for a job of
any size: KWOK runs no container, so the e2e's launcher has no output of its own.

It is the recorded healthy 8-node run (tests/data/nccl: the per-rail `ib_write_bw` check, then
`all_reduce_perf`) laid out for the job's workers: one rail pair per node and rail in a ring,
with the recording's reports in turn, and one `# Using devices` line per rank, each worker's
eight GPUs at the recording's PCI addresses. The bus bandwidth curve is the recording's: a
ring's bus bandwidth does not depend on the number of nodes. The gate's checker
(components/planning/nccl.py) judges it as it would a real run."""

from __future__ import annotations

import re
from itertools import cycle

from support.project import REPO

DATA = REPO / "tests" / "data" / "nccl"
GPUS = 8
RAIL = re.compile(r"^# rail-check: rail (\d+) client (\S+) (\S+) server (\S+) (\S+)$")
RANK = re.compile(r"^#  Rank +(\d+) Group  0 Pid +(\d+) on (\S+) device +(\d) (\[\S+\]) (.*)$")


def healthy_run(job: str, nodes: list[str]) -> str:
    """The launcher's log of MPIJob `job` over `nodes` (its workers' nodes, in worker order)."""
    return _rails(nodes) + _all_reduce(job, len(nodes))


def _rails(nodes: list[str]) -> str:
    lines = (DATA / "rails-8node.log").read_text().splitlines()
    devices: dict[int, str] = {}
    reports = []
    for i, line in enumerate(lines):
        if m := RAIL.match(line):
            devices[int(m.group(1))] = m.group(3)
            reports.append(lines[i + 1:i + 3])  # the report's header and result
    start = lines[0].replace("x 8 nodes", f"x {len(nodes)} nodes")
    out, report = [start], cycle(reports)
    for client, server in zip(nodes, [*nodes[1:], nodes[0]], strict=True):
        for rail, device in sorted(devices.items()):
            out += [f"# rail-check: rail {rail} client {client} {device} server {server} "
                    f"{device}", *next(report),
                    f"# rail-check: end rail {rail} client {client} exit 0"]
    return "\n".join([*out, "# rail-check: done"]) + "\n"


def _all_reduce(job: str, workers: int) -> str:
    lines = (DATA / "good-8node.log").read_text().splitlines()
    ranks = [RANK.match(line) for line in lines]
    first = next(i for i, m in enumerate(ranks) if m)
    last = max(i for i, m in enumerate(ranks) if m)
    device = {int(m.group(4)): (m.group(2), m.group(5), m.group(6)) for m in ranks if m}
    using = [f"#  Rank {r:2d} Group  0 Pid {device[r % GPUS][0]:>6} on {job}-worker-{r // GPUS}"
             f" device {r % GPUS:2d} {device[r % GPUS][1]} {device[r % GPUS][2]}"
             for r in range(workers * GPUS)]
    head = [line.replace("nRanks 64 nNodes 8", f"nRanks {workers * GPUS} nNodes {workers}")
            .replace("nccl-allreduce-worker", f"{job}-worker")
            .replace("63[7] -> 0[0]", f"{workers * GPUS - 1}[7] -> 0[0]")
            for line in lines[:first]]
    return "\n".join([*head, *using, *lines[last + 1:]]) + "\n"
