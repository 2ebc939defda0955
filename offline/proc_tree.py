"""A process and its descendants, sampled from /proc while they run: what the benches report
of a preview or an engine that works in more than one process."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


def children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:  # gone, or a kernel without the children files
        pass
    return out


class TreeSampler(threading.Thread):
    """Samples a process and its descendants from /proc until stopped: CPU seconds per pid
    (the last value seen), each pid's role (`role_of`), and the peak of their summed resident
    memory. With `proportional`, a page that forked processes share counts once among them
    (PSS, which costs the kernel a walk of each process's pages per sample); else each process
    counts all of its resident pages (RSS)."""

    def __init__(self, pid: int, interval: float = 0.2,
                 role_of: Callable[[int], str] = lambda _: "process",
                 proportional: bool = False) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.role_of = pid, interval, role_of
        self.proportional = proportional
        self.cpu: dict[int, float] = {}
        self.roles: dict[int, str] = {}
        self.peak_rss = 0
        self.done = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")

    def sample(self) -> None:
        todo, rss = [self.root], 0
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                rss += self._resident(pid)
            except (OSError, IndexError):
                continue
            # After the command's name: state is fields[0], utime and stime fields[11:13].
            self.cpu[pid] = (int(fields[11]) + int(fields[12])) / self.tick
            if pid not in self.roles:
                self.roles[pid] = self.role_of(pid)
            todo += children(pid)
        self.peak_rss = max(self.peak_rss, rss)

    def _resident(self, pid: int) -> int:
        if self.proportional:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * self.page

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, seconds in self.cpu.items():
            out[self.roles[pid]] = out.get(self.roles[pid], 0.0) + seconds
        return out
