"""How much of this machine others use while a benchmark runs: a figure is reported only from a quiet machine.

Shared by the benchmarks that wait for quiet before each run and record what others used
during it (``watcher_latency.py``, ``dlq_summary.py``).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any


class CpuMeter:
    """CPU used on this machine by processes outside this benchmark's own process tree, in cores.

    The stack (broker, Connect, every Airflow process and its tasks) descends from this
    process; the rest of the machine's busy time (``/proc/stat``) is someone else's. Reaped
    children count in their parent's ``cutime``/``cstime``, so short-lived tasks stay ours.
    """

    def __init__(self, components: dict[str, int] | None = None) -> None:
        self.hz = os.sysconf("SC_CLK_TCK")
        self.root = os.getpid()
        #: name → pid of a process whose tree is one part of the stack (broker, Connect, Airflow).
        self.components = components or {}
        self.last_idle: dict[str, float] = {}
        self._components: dict[str, int] = {}

    def adopt_orphans(self) -> None:
        """Make this process the subreaper of its tree, so a grandchild that outlives its parent stays ours.

        Spark's JVM outlives its Python driver by a second or two and would be reparented to init,
        its CPU then counted as someone else's (connect_peer.py's first run read that as ~1 core
        of "others" in each Spark row). Adopted orphans stay zombies until this process exits.
        """
        import ctypes

        pr_set_child_subreaper = 36
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)

    def tree_ticks(self) -> dict[int, int]:
        """Each process's ticks, its own and its reaped children's, summed over its tree."""
        children: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            pid = int(entry.name)
            children.setdefault(int(stat[1]), []).append(pid)
            ticks[pid] = sum(int(value) for value in stat[11:15])  # utime, stime, cutime, cstime

        def total(root: int) -> int:
            found, pending = 0, [root]
            while pending:
                pid = pending.pop()
                found += ticks.get(pid, 0)
                pending.extend(children.get(pid, []))
            return found

        return {pid: total(pid) for pid in {self.root, *self.components.values()}}

    def sample(self) -> tuple[float, int, int]:
        """(monotonic time, the machine's busy ticks, this tree's ticks)."""
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
        busy = user + nice + system + irq + softirq + steal
        trees = self.tree_ticks()
        self._components = {name: trees[pid] for name, pid in self.components.items()}
        return time.monotonic(), busy, trees[self.root]

    def foreign_cores(self, before: tuple[float, int, int], after: tuple[float, int, int]) -> float:
        elapsed = after[0] - before[0]
        foreign = (after[1] - before[1]) - (after[2] - before[2])
        return max(0.0, foreign / self.hz / elapsed) if elapsed > 0 else 0.0

    def wait_quiet(self, limit: float, timeout_s: float) -> tuple[float, float]:
        """Wait until two 3 s spans in a row saw less than ``limit`` cores used by others (at most ``timeout_s``);
        the seconds waited and the last reading."""
        started = time.monotonic()
        quiet_spans = 0
        told = False
        foreign = 0.0
        while quiet_spans < 2 and time.monotonic() - started < timeout_s:
            before = self.sample()
            parts = dict(self._components)
            time.sleep(3.0)
            after = self.sample()
            foreign = self.foreign_cores(before, after)
            # What the idle stack itself uses, by part (the rest of "mine" is this process).
            self.last_idle = {
                name: (ticks - parts[name]) / self.hz / (after[0] - before[0])
                for name, ticks in self._components.items()
            }
            self.last_idle["whole_stack"] = (after[2] - before[2]) / self.hz / (after[0] - before[0])
            quiet_spans = quiet_spans + 1 if foreign < limit else 0
            if foreign >= limit and not told:
                print(f"  waiting for a quiet machine (others use {foreign:.2f} cores)", flush=True)
                told = True
        return time.monotonic() - started, foreign


def spread(values: list[float]) -> dict[str, float]:
    """Median with min, max and the number of runs: the figure every benchmark reports."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def within_round_ratio(by_mode: dict[str, list[dict[str, Any]]], mode: str, base: str) -> dict[str, float] | None:
    """``mode``'s throughput over ``base``'s, one ratio per round (runs pair up in order); None if either is absent.

    Taken within a round so that a round on a slower moment of the machine slows both sides alike.
    """
    if mode not in by_mode or base not in by_mode:
        return None
    pairs = zip(by_mode[mode], by_mode[base], strict=True)
    return spread([other["seconds"] / this["seconds"] for this, other in pairs])
