"""How long the local stack takes to be gone: Ctrl-C in ``make ui``, and ``kerr local down``.

``ui``: ``python -m airflow_kerr.local.ui`` (``make ui``'s command: the embedded broker, a
Kafka Connect JVM, ``airflow standalone`` and its components) is started in a process group
of its own, as a terminal's foreground job; once it printed its banner, every process of its
tree is recorded and the group gets a SIGINT, as Ctrl-C sends it. ``down``: ``kerr local up``,
then ``kerr local down``, with every process of what ``up`` recorded. Measured from the
signal (or the start of ``down``) to the command's exit and to the last recorded process
gone (polled every 20 ms); the command's own stop report says what it had to kill.

The two kinds alternate, cycle after cycle; the CPU others used during each stop is
recorded (``machine_load.py``). Writes ``results/stack_stop.json`` and ``.png``.

    .venv/bin/python benchmarks/stack_stop.py --cycles 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine_load import CpuMeter, spread

from airflow_kerr.local.broker import port_free
from airflow_kerr.local.process import Process, pid_alive, process_tree

RESULTS = Path(__file__).resolve().parent / "results"
REPORT = re.compile(r"stopped in \d+\.\d s(?:, every process cleanly|; killed after the grace: (.+))")


def signal_masks(pid: int) -> str:
    """The process's blocked, ignored and caught signal masks, as /proc shows them."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return ", ".join(line.replace("\t", " ") for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


class StopHung(Exception):
    """The command did not exit after the signal: a defect to look at, never a start to try again."""


def gone_at(stack: list[Process], timeout_s: float = 120.0) -> float:
    """The monotonic time the last of ``stack`` was seen gone."""
    deadline = time.monotonic() + timeout_s
    while any(pid_alive(process) for process in stack):
        if time.monotonic() > deadline:
            raise RuntimeError(f"still running after {timeout_s:.0f} s: {[p for p in stack if pid_alive(p)]}")
        time.sleep(0.02)
    return time.monotonic()


def killed_names(output: str) -> list[str]:
    found = REPORT.search(output)
    if found is None:
        raise RuntimeError(f"no stop report in the output:\n{output[-2000:]}")
    return (
        [] if found.group(1) is None else [item.split(" (", 1)[-1].rstrip(")") for item in found.group(1).split("; ")]
    )


def settled_load(meter: CpuMeter, seconds: float = 5.0) -> float:
    """Cores others used over ``seconds`` just before the stop, the stack running and counted as ours."""
    before = meter.sample()
    time.sleep(seconds)
    return meter.foreign_cores(before, meter.sample())


def unlikely_port() -> int:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return next(port for port in range(low - 3000, low) if port_free(port))


def ui_cycle(work: Path, meter: CpuMeter) -> dict[str, Any]:
    log = work / "ui.out"
    command = [sys.executable, "-m", "airflow_kerr.local.ui", "--home", str(work / "ui"), "--port"]
    with open(log, "wb") as out:
        ui = subprocess.Popen(
            [*command, str(unlikely_port())],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A stop that hangs is shown, not guessed: SIGABRT then dumps every thread's Python stack.
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
    try:
        deadline = time.monotonic() + 600
        while "Press Ctrl-C" not in log.read_text(errors="replace"):
            if ui.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"make ui did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        # Settled (the stop of a UI in use, not of one starting); what others use meanwhile is the load
        # recorded: during the stop itself, killed processes' CPU leaves this process tree's count.
        load = settled_load(meter)
        stack = process_tree(ui.pid)
        masks = signal_masks(ui.pid)
        signalled = time.monotonic()
        os.killpg(ui.pid, signal.SIGINT)
        try:
            ui.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(ui.pid, signal.SIGABRT)
            ui.wait(timeout=10)
            kept = RESULTS / "stack_stop_hang.log"
            kept.write_bytes(log.read_bytes())
            raise StopHung(
                f"make ui did not exit within 60 s of the SIGINT ({masks}); its output is in {kept}"
            ) from None
        exited = time.monotonic()
        last = gone_at(stack)
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
    return {
        "kind": "ui",
        "processes": len(stack),
        "exit_s": exited - signalled,
        "all_gone_s": last - signalled,
        "killed": killed_names(log.read_text(errors="replace")),
        "others_cores": load,
    }


def down_cycle(work: Path, meter: CpuMeter) -> dict[str, Any]:
    env = {**os.environ, "KERR_HOME": str(work / "state")}
    kerr = [sys.executable, "-m", "airflow_kerr.local.cli", "local"]
    started = subprocess.run([*kerr, "up"], capture_output=True, text=True, env=env, timeout=300, check=False)
    if started.returncode != 0:
        subprocess.run([*kerr, "down"], capture_output=True, env=env, timeout=120, check=False)
        raise RuntimeError(f"kerr local up failed:\n{started.stdout}{started.stderr}")
    state = json.loads((work / "state" / "local.json").read_text())
    stack = [process for entry in state.values() for process in process_tree(int(entry["pid"]))]
    load = settled_load(meter)
    begun = time.monotonic()
    stopped = subprocess.run([*kerr, "down"], capture_output=True, text=True, env=env, timeout=120, check=False)
    exited = time.monotonic()
    last = gone_at(stack)
    return {
        "kind": "down",
        "processes": len(stack),
        "exit_s": exited - begun,
        "all_gone_s": last - begun,
        "killed": killed_names(stopped.stdout),
        "others_cores": load,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5, help="cycles of each kind (they alternate)")
    args = parser.parse_args()
    meter = CpuMeter()
    runs: list[dict[str, Any]] = []
    failed_starts: list[str] = []
    for cycle in range(args.cycles):
        kinds = (ui_cycle, down_cycle) if cycle % 2 == 0 else (down_cycle, ui_cycle)
        for run in kinds:
            for _attempt in range(3):  # a start that fails on a loaded machine is tried again, and counted
                try:
                    with tempfile.TemporaryDirectory(prefix="kerr-stop-") as work:
                        result = run(Path(work), meter) | {"cycle": cycle}
                    break
                except RuntimeError as error:
                    failed_starts.append(f"{run.__name__}: {str(error)[:300]}")
                    print(f"start failed, again: {str(error)[:300]}", flush=True)
            else:
                raise RuntimeError(f"{run.__name__} failed to start three times")
            print(json.dumps(result), flush=True)
            runs.append(result)
    summary = {
        kind: {
            "all_gone_s": spread([r["all_gone_s"] for r in runs if r["kind"] == kind]),
            "exit_s": spread([r["exit_s"] for r in runs if r["kind"] == kind]),
            "others_cores": spread([r["others_cores"] for r in runs if r["kind"] == kind]),
            "runs_that_killed": sum(1 for r in runs if r["kind"] == kind and r["killed"]),
        }
        for kind in ("ui", "down")
    }
    RESULTS.mkdir(exist_ok=True)
    result = {
        "benchmark": "stack_stop",
        "machine": {"cores": os.cpu_count()},
        "provisional": "measured while other engineers' jobs shared the machine; see others_cores",
        "summary": summary,
        "failed_starts": failed_starts,
        "runs": runs,
    }
    (RESULTS / "stack_stop.json").write_text(json.dumps(result, indent=2) + "\n")
    chart(runs, RESULTS / "stack_stop.png")
    print(json.dumps(summary, indent=2))
    return 0


def chart(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    labels = {"ui": "Ctrl-C in make ui", "down": "kerr local down"}
    for index, kind in enumerate(("ui", "down")):
        values = [r["all_gone_s"] for r in runs if r["kind"] == kind]
        axis.scatter([index] * len(values), values, label=labels[kind], alpha=0.7)
    axis.axhline(10, color="red", linestyle="--", label="10 s goal")
    axis.set_xticks([0, 1], [labels["ui"], labels["down"]])
    axis.set_ylabel("seconds until every process of the stack is gone")
    axis.set_ylim(bottom=0)
    axis.set_title("Stopping the local stack (provisional: shared machine)")
    axis.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
