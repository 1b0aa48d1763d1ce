"""The launcher base, parent-death signals and the process-tree killer every local process is stopped with."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_kerr.local.process import (
    Launcher,
    StopTarget,
    pid_alive,
    process_tree,
    stop_process,
    stop_stack,
    stop_tree,
)


def _wait_for(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_child_gets_the_chosen_signal_when_its_parent_dies(tmp_path: Path, sig: signal.Signals) -> None:
    """The owner is killed hard; its child must still get ``sig``, the signal it shuts down cleanly on."""
    got, ready = tmp_path / "got", tmp_path / "ready"
    child = textwrap.dedent(
        f"""
        import signal, sys, time
        def record(signum, frame):
            open({str(got)!r}, "w").write(signal.Signals(signum).name)
            sys.exit(0)
        signal.signal(signal.{sig.name}, record)
        open({str(ready)!r}, "w").write("1")
        time.sleep(60)
        """
    )
    owner = textwrap.dedent(
        f"""
        import signal, subprocess, sys, time
        from airflow_kerr.local.process import parent_death_signal
        subprocess.Popen([sys.executable, "-c", {child!r}], preexec_fn=parent_death_signal(signal.{sig.name}))
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", owner])
    try:
        _wait_for(ready)
        process.kill()
        process.wait(timeout=10)
        assert _wait_for(got, timeout_s=10) == sig.name
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_stop_process_reaps_a_child_that_exits_on_sigterm() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop_process(process, timeout_s=10)
    assert process.returncode == -signal.SIGTERM, "ended by the SIGTERM, not killed after the 10 s grace"


def test_stop_process_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(ready)!r}, 'w').write('1')\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code])
    _wait_for(ready)
    stop_process(process, timeout_s=0.5)
    assert process.returncode == -signal.SIGKILL


def _parent_of_a_stubborn_child(ready: Path) -> str:
    """A process that exits on SIGTERM but leaves behind a child that ignores it (as a careless server would)."""
    child = textwrap.dedent(
        f"""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(ready)!r}, "w").write("1")
        time.sleep(60)
        """
    )
    return f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}])\ntime.sleep(60)\n"


def test_stop_tree_kills_what_the_root_leaves_behind(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    root = subprocess.Popen([sys.executable, "-c", _parent_of_a_stubborn_child(ready)])
    _wait_for(ready)
    tree = process_tree(root.pid)
    assert len(tree) == 2
    stop_tree(root, grace_s=0.5)
    assert root.returncode == -signal.SIGTERM, "the root is reaped"
    assert not any(pid_alive(process) for process in tree)


def test_stop_tree_stops_a_process_it_knows_only_by_pid(tmp_path: Path) -> None:
    """What an earlier ``kerr local up`` started is stopped by pid, tree included."""
    ready = tmp_path / "ready"
    root = subprocess.Popen([sys.executable, "-c", _parent_of_a_stubborn_child(ready)], start_new_session=True)
    _wait_for(ready)
    tree = process_tree(root.pid)
    stop_tree(root.pid, grace_s=0.5)
    assert not any(pid_alive(process) for process in tree)
    root.wait(timeout=5)


def test_stop_tree_sends_the_first_signal_to_the_root_only(tmp_path: Path) -> None:
    got = tmp_path / "got"
    code = textwrap.dedent(
        f"""
        import signal, sys, time
        def record(signum, frame):
            open({str(got)!r}, "w").write(signal.Signals(signum).name)
            sys.exit(0)
        signal.signal(signal.SIGINT, record)
        open({str(got)!r} + ".ready", "w").write("1")
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code])
    _wait_for(Path(f"{got}.ready"))
    stop_tree(process, first=signal.SIGINT, grace_s=10)
    assert _wait_for(got) == "SIGINT"
    assert process.returncode == 0


def test_stop_stack_stops_clients_together_then_servers_and_reports_what_it_killed(tmp_path: Path) -> None:
    """A clean client, a stubborn one (its tree is killed after the grace, and named), then the server.

    The server records, when its SIGTERM comes, whether the clients were still there: the
    broker must outlive Kafka Connect's clean stop, which needs it.
    """
    clean = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn_ready = tmp_path / "stubborn"
    stubborn = subprocess.Popen([sys.executable, "-c", _parent_of_a_stubborn_child(stubborn_ready)])
    _wait_for(stubborn_ready)
    saw, ready = tmp_path / "saw", tmp_path / "server"
    watched = [*process_tree(clean.pid), *process_tree(stubborn.pid)]
    server_code = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from airflow_kerr.local.process import pid_alive
        def record(signum, frame):
            open({str(saw)!r}, "w").write(str(sum(pid_alive(p) for p in {watched!r})))
            sys.exit(0)
        signal.signal(signal.SIGTERM, record)
        open({str(ready)!r}, "w").write("1")
        time.sleep(60)
        """
    )
    server = subprocess.Popen([sys.executable, "-c", server_code])
    _wait_for(ready)
    everything = [*watched, *process_tree(server.pid)]

    report = stop_stack(
        [StopTarget("clean", clean), StopTarget("stubborn", stubborn)],
        [StopTarget("server", server)],
        clients_grace_s=0.5,
    )

    assert _wait_for(saw) == "0", "the server got its SIGTERM while a client still ran"
    assert len(report.killed) == 1 and report.killed[0].startswith(f"stubborn pid {watched[-1][0]} (python -c")
    assert "killed after the grace: stubborn pid" in str(report)
    assert not any(pid_alive(process) for process in everything)
    assert (clean.returncode, stubborn.returncode, server.returncode) == (-signal.SIGTERM, -signal.SIGTERM, 0)


class _Sleeper(Launcher):
    """A launcher of one ``sleep``-like child that is ready once ``ready_after`` checks have passed."""

    poll_interval_s = 0.01

    def __init__(self, ready_after: int | None, start_timeout_s: float = 5.0) -> None:
        super().__init__(detach=False, start_timeout_s=start_timeout_s)
        self.ready_after = ready_after
        self.checks = 0
        self.cleaned = 0

    def _launch(self) -> None:
        self._spawn([sys.executable, "-c", "import time; time.sleep(60)"], log_path=None)

    def _not_ready_because(self) -> str | None:
        self.checks += 1
        if self.ready_after is not None and self.checks > self.ready_after:
            return None
        return f"check {self.checks}"

    def _stopped(self) -> None:
        self.cleaned += 1


def test_a_launcher_is_ready_after_its_check_passes_and_stops_on_leaving_the_block() -> None:
    with _Sleeper(ready_after=3) as launcher:
        assert launcher.checks == 4
        process = launcher.process
        assert process is not None and process.poll() is None and launcher.pids == [process.pid]
    assert process.returncode == -signal.SIGTERM
    assert launcher.processes == [] and launcher.pid is None and launcher.cleaned == 1


def test_a_launcher_that_is_never_ready_stops_its_children_and_says_why() -> None:
    launcher = _Sleeper(ready_after=None, start_timeout_s=0.3)
    started: list[subprocess.Popen[bytes]] = []
    launcher._launch = lambda: started.append(  # type: ignore[method-assign]
        launcher._spawn([sys.executable, "-c", "import time; time.sleep(60)"], log_path=None)
    )
    with pytest.raises(RuntimeError, match=r"not ready within 0 s \(check \d+\)"):
        launcher.start()
    assert started[0].returncode is not None, "the child was not reaped"
    assert launcher.processes == [] and launcher.cleaned == 1


def test_a_child_that_exits_while_starting_ends_the_wait_at_once(tmp_path: Path) -> None:
    class Failing(_Sleeper):
        def _launch(self) -> None:
            self._spawn([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], log_path=tmp_path / "log")

    # The exit's own error, not the 30 s wait's "not ready within" one.
    with pytest.raises(RuntimeError, match="exited with code 3 while starting"):
        Failing(ready_after=None, start_timeout_s=30).start()
    assert (tmp_path / "log").read_text() == "boom\n"
