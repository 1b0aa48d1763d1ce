"""Ctrl-C in ``make ui`` and ``make demo``, and ``kerr local down``, leave no process of the stack behind.

Real parts: the command's whole stack (embedded broker, a Kafka Connect JVM, ``airflow
standalone`` and its components), started by the command as a person starts it. The
Ctrl-C is a SIGINT to the command's process group, as a terminal sends it. The 10 s are
the product's own deadline (:func:`~airflow_kerr.local.process.stop_stack` kills what
outlives its graces and says so in the report the command prints); the test checks that
every process recorded before the stop is gone and that the report was printed. How long
the stop takes is measured in ``benchmarks/stack_stop.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kerr.local.broker import port_free
from airflow_kerr.local.process import Process, pid_alive, process_tree

pytestmark = pytest.mark.connect

REPORT = re.compile(r"stopped in (\d+\.\d) s(, every process cleanly|; killed after the grace: (.+))")


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until the command printed ``text``; fail with its output when it exits first or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"the command exited with {process.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} after {timeout_s:.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def unlikely_port() -> int:
    """A free port below the ephemeral range: one the stack's own servers (ephemeral ports) cannot take first."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return next(port for port in range(low - 3000, low) if port_free(port))


def wait_for_commands(command: subprocess.Popen[bytes], wanted: list[str], timeout_s: float = 120) -> list[Process]:
    """The processes below ``command`` once each of ``wanted`` is in one of their command lines."""
    deadline = time.monotonic() + timeout_s
    while True:
        stack = process_tree(command.pid)[1:]
        lines = []
        for pid, _ in stack:
            with contextlib.suppress(OSError):
                lines.append(Path(f"/proc/{pid}/cmdline").read_text(errors="replace"))
        if all(any(word in line for line in lines) for word in wanted):
            return stack
        assert command.poll() is None and time.monotonic() < deadline, f"no {wanted} below the command: {lines}"
        time.sleep(0.1)


def start_ui(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """``make ui``'s command, in a process group of its own as a terminal's foreground job is.

    It starts with SIGINT ignored, as a job a script puts in the background does (Python then
    keeps it ignored): the command must still stop on it.
    """
    log = tmp_path / "ui.out"
    command = [sys.executable, "-m", "airflow_kerr.local.ui", "--home", str(tmp_path / "ui"), "--port"]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, str(unlikely_port())],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    return process, log


def test_ctrl_c_in_make_ui_leaves_no_process_of_the_stack(tmp_path: Path) -> None:
    ui, log = start_ui(tmp_path)
    try:
        wait_for_line(log, "Press Ctrl-C to stop everything.", ui, timeout_s=400)
        stack = process_tree(ui.pid)[1:]
        commands = " ".join(Path(f"/proc/{pid}/cmdline").read_text(errors="replace") for pid, _ in stack)
        assert "airflow" in commands and "ConnectDistributed" in commands and "noida" in commands

        os.killpg(ui.pid, signal.SIGINT)
        assert ui.wait(timeout=120) == 0
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
    output = log.read_text(errors="replace")
    assert "Stopping Airflow, Kafka Connect, the Schema Registry and the broker" in output
    assert (report := REPORT.search(output)), output[-2000:]
    left = [process for process in stack if pid_alive(process)]
    assert not left, f"left running after the stop ({report.group(0)}): {left}"


def test_kerr_local_down_leaves_no_process_of_the_stack(tmp_path: Path) -> None:
    env = {**os.environ, "KERR_HOME": str(tmp_path / "state")}
    kerr = [sys.executable, "-m", "airflow_kerr.local.cli", "local"]
    started = subprocess.run([*kerr, "up"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert started.returncode == 0, started.stdout + started.stderr
    state = json.loads((tmp_path / "state" / "local.json").read_text())
    stack: list[Process] = [process for entry in state.values() for process in process_tree(int(entry["pid"]))]
    assert {"broker", "connect"} <= set(state) and len(stack) >= 3  # the shim, noida-db and the Connect JVM

    stopped = subprocess.run([*kerr, "down"], capture_output=True, text=True, env=env, timeout=120, check=False)

    assert stopped.returncode == 0, stopped.stderr
    assert "stopped broker" in stopped.stdout and "stopped connect" in stopped.stdout
    assert (report := REPORT.search(stopped.stdout)), stopped.stdout
    left = [process for process in stack if pid_alive(process)]
    assert not left, f"left running after down ({report.group(0)}): {left}"


def test_ctrl_c_in_make_demo_leaves_no_process_of_the_stack(tmp_path: Path) -> None:
    """The Ctrl-C comes while the demo's Connect JVM starts: the demo stops it and the broker, then reports."""
    log = tmp_path / "demo.out"
    env = {**os.environ, "KERR_HOME": str(tmp_path / "state")}
    with open(log, "wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "airflow_kerr.local.demo"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        wait_for_line(log, "starting Kafka Connect", demo, timeout_s=300)
        stack = wait_for_commands(demo, ["ConnectDistributed", "noida"])

        os.killpg(demo.pid, signal.SIGINT)
        assert demo.wait(timeout=120) == 130
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    output = log.read_text(errors="replace")
    assert (report := REPORT.search(output)), output[-2000:]
    left = [process for process in stack if pid_alive(process)]
    assert not left, f"left running after the stop ({report.group(0)}): {left}"
