"""The local stack's processes: one launcher base and one process-tree killer.

The broker, the Kafka Connect worker and the Spark cluster are each started the same
way: launch one or more children, wait until they answer, stop them if they never do,
and stop them again on leaving a ``with`` block. :class:`Launcher` is that sequence,
written once; each launcher says only what it runs and what "ready" means.

Every stop, of a child this process holds (a Popen) or of a pid an earlier
``kerr local up`` recorded, goes through :func:`stop_tree`: a server may have started
children of its own (the fetch shim runs noida-db, ``airflow standalone`` runs its
components), and stopping the top process alone could orphan them.

Processes are found through ``/proc``, so this module is for Linux, as the local stack is.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

_PR_SET_PDEATHSIG = 1
#: How often a stop checks whether the processes it signalled are gone.
_GONE_POLL_S = 0.05

#: A process as (pid, start time in clock ticks): a pid alone may be reused by an unrelated process.
Process = tuple[int, int]

#: How long the broker's clients (Airflow, Kafka Connect, Spark) get to stop cleanly in :func:`stop_stack`.
CLIENTS_GRACE_S = 6.0
#: How long the broker gets after them; with the kills, a stack stop stays within 10 s.
SERVERS_GRACE_S = 2.0
#: How long a stop waits for SIGKILLed processes to be gone (the kernel takes milliseconds).
_KILL_WAIT_S = 1.0


def parent_death_signal(sig: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when the process that started it dies.

    The signal is the one the child shuts down cleanly on, so nothing is orphaned
    even when the parent is killed hard.
    """

    def set_parent_death_signal() -> None:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, sig)

    return set_parent_death_signal


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _identity(pid: int) -> Process | None:
    fields = _stat(pid)
    return (pid, int(fields[19])) if fields else None


def _descendants(root: int) -> list[Process]:
    """Every process below ``root``, found through /proc, so a component that left the group is still stopped."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[Process] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if identity := _identity(child):
                found.append(identity)
            pending.append(child)
    return found


def pid_alive(process: Process) -> bool:
    """True while that very process runs (not a zombie, and its pid not reused)."""
    fields = _stat(process[0])
    return fields is not None and fields[0] != "Z" and int(fields[19]) == process[1]


def process_tree(root: int) -> list[Process]:
    """``root`` and every process below it, as identities :func:`pid_alive` can check later."""
    identity = _identity(root)
    return [*([identity] if identity else []), *_descendants(root)]


def wait_gone(processes: Iterable[Process], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for every one of ``processes`` to end; True when they all did.

    An exited child that is not reaped yet (a zombie) counts as gone, so a caller's
    Popen can be waited on afterwards for its exit code.
    """
    deadline = time.monotonic() + timeout_s
    pending = list(processes)
    while pending:
        pending = [process for process in pending if pid_alive(process)]
        if not pending:
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(_GONE_POLL_S)
    return True


def _send(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _leads_own_group(pid: int) -> bool:
    """True when ``pid`` leads a process group that is not ours (a child started with ``start_new_session``)."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return False
    return group == pid and group != os.getpgrp()


def stop_tree(
    root: subprocess.Popen[bytes] | int,
    *,
    first: signal.Signals = signal.SIGTERM,
    grace_s: float = 10.0,
    kill_wait_s: float = 10.0,
) -> None:
    """Send ``first`` to ``root`` alone; whatever of its tree is left after ``grace_s`` gets SIGTERM, then SIGKILL.

    ``root`` is a Popen (then it is reaped at the end, so no zombie is left and its
    exit code is known) or the pid of a process this one did not start. Only the
    root gets the first signal: a server that has children of its own stops them
    itself, and that is the shutdown they handle well (``airflow standalone`` on
    SIGINT; a scheduler that gets the SIGINT too hangs waiting for its executor's
    workers). The tree is collected before that signal, as (pid, start time), so
    what the root leaves behind is still found after the root is gone, and a reused
    pid is never signalled. When the root leads a process group of its own, the
    escalation also signals that group, which reaches members that left the tree.
    Each escalation waits up to ``kill_wait_s`` for the tree to be gone.
    """
    if isinstance(root, subprocess.Popen):
        popen: subprocess.Popen[bytes] | None = root
        pid = root.pid
        if root.poll() is not None:
            return
    else:
        popen, pid = None, root
    tree = process_tree(pid)
    if tree:
        group = _leads_own_group(pid)
        _send(pid, first)
        if not wait_gone(tree, grace_s):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if sig == first:
                    continue
                if group:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, sig)
                for member, _ in filter(pid_alive, tree):
                    _send(member, sig)
                if wait_gone(tree, kill_wait_s):
                    break
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)


def _command(pid: int) -> str:
    """What a process runs, short: ``airflow triggerer`` for ``/venv/bin/python /venv/bin/airflow triggerer``."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    args = [arg for arg in args if arg]
    if len(args) > 2 and Path(args[0]).name.startswith("python") and args[1] == "-m":
        args = args[2:]  # python -m airflow standalone: airflow standalone
    elif len(args) > 1 and Path(args[0]).name.startswith("python") and not args[1].startswith("-"):
        args = args[1:]  # python /venv/bin/airflow triggerer: airflow triggerer
    text = " ".join(" ".join([Path(args[0]).name, *args[1:]]).split()) if args else "?"
    return text if len(text) <= 60 else text[:59] + "\u2026"


@dataclass
class StopTarget:
    """One member of a stack to stop: a child (Popen) or a recorded pid, with the signal it stops cleanly on."""

    name: str
    root: subprocess.Popen[bytes] | int
    first: signal.Signals = signal.SIGTERM
    tree: list[Process] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.root.pid if isinstance(self.root, subprocess.Popen) else self.root


@dataclass
class StopReport:
    """How a :func:`stop_stack` went: its duration and what had to be killed after its grace."""

    seconds: float
    killed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.killed:
            return f"stopped in {self.seconds:.1f} s, every process cleanly"
        return f"stopped in {self.seconds:.1f} s; killed after the grace: {'; '.join(self.killed)}"


def stop_stack(
    clients: Sequence[StopTarget],
    servers: Sequence[StopTarget] = (),
    *,
    clients_grace_s: float = CLIENTS_GRACE_S,
    servers_grace_s: float = SERVERS_GRACE_S,
) -> StopReport:
    """Stop a stack in seconds: its clients all at once, then the servers they need to stop cleanly.

    Every client's root gets its clean-stop signal at the same moment (one stop after the
    other added their graces up: 42 s for ``make ui``); whatever of their trees is left after
    ``clients_grace_s`` is killed, and said so in the report. The servers (the broker) stop
    only then, because a Kafka Connect worker whose broker is gone waits on it instead of
    stopping; they get ``servers_grace_s``, then the same kill. So the whole stop takes at
    most the two graces plus two short kill waits.
    """
    started = time.monotonic()
    report = StopReport(0.0)
    for target in (*clients, *servers):
        running = not (isinstance(target.root, subprocess.Popen) and target.root.poll() is not None)
        target.tree = process_tree(target.pid) if running else []
    for targets, grace_s in ((clients, clients_grace_s), (servers, servers_grace_s)):
        for target in targets:
            if target.tree:
                _send(target.pid, target.first)
        trees = [process for target in targets for process in target.tree]
        if not wait_gone(trees, grace_s):
            for target in targets:
                left = [process for process in target.tree if pid_alive(process)]
                report.killed += [f"{target.name} pid {pid} ({_command(pid)})" for pid, _ in left]
                if left and _leads_own_group(target.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(target.pid, signal.SIGKILL)
                for pid, _ in left:
                    _send(pid, signal.SIGKILL)
            wait_gone(trees, _KILL_WAIT_S)
    for target in (*clients, *servers):
        if isinstance(target.root, subprocess.Popen):
            with contextlib.suppress(subprocess.TimeoutExpired):
                target.root.wait(timeout=_KILL_WAIT_S)
    report.seconds = time.monotonic() - started
    return report


def tail(log_path: Path, lines: int) -> str:
    """The last ``lines`` lines of a child's log, for the error that says why it failed; "(no log)" if unreadable."""
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Terminate a child and what it started, then kill what is left after ``timeout_s`` (see :func:`stop_tree`)."""
    stop_tree(process, grace_s=timeout_s)


class Launcher:
    """Local server processes that are started, waited on until ready, and stopped as one.

    A subclass launches its children in :meth:`_launch` (through :meth:`_spawn`) and
    says what ready means, either by answering :meth:`_not_ready_because` (polled
    every ``poll_interval_s`` until ``start_timeout_s``, failing early when a child
    exits) or by replacing :meth:`_wait_until_ready`. :meth:`start` stops whatever
    was launched when any of that fails, so a failed start leaves nothing running.

    ``detach=False`` (tests, the demo) ties the children's lives to this process:
    they are stopped on :meth:`stop`, on leaving the ``with`` block, and by the kernel
    (a parent-death SIGTERM) if this process dies. ``detach=True`` (``kerr local up``)
    starts them in sessions of their own, so they outlive the caller.
    """

    #: How long :meth:`stop` lets the children shut down cleanly before killing them.
    stop_timeout_s: float = 10.0
    #: The pause between two readiness checks of :meth:`_wait_until_ready`.
    poll_interval_s: float = 0.2

    def __init__(self, *, detach: bool, start_timeout_s: float) -> None:
        self.detach = detach
        self.start_timeout_s = start_timeout_s
        #: The children in start order; the first is the main one (:attr:`process`).
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The main child (the first started), or None while nothing runs."""
        return self.processes[0] if self.processes else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def start(self) -> Self:
        """Launch the children and return once they are ready; on any failure stop them first, then raise."""
        try:
            self._launch()
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        """Start the children with :meth:`_spawn`."""
        raise NotImplementedError

    def _preexec_fn(self) -> Callable[[], None] | None:
        """What a child runs before it execs: with ``detach=False``, a SIGTERM when this process dies.

        It also gets a process group of its own, so a terminal's Ctrl-C (sent to the whole
        foreground group) reaches only the command, which stops its children in order: a
        broker that stopped on the same Ctrl-C left Kafka Connect waiting on it.
        """
        if self.detach:
            return None
        on_parent_death = parent_death_signal(signal.SIGTERM)

        def own_group_then_parent_death() -> None:
            with contextlib.suppress(OSError):
                os.setpgid(0, 0)
            on_parent_death()

        return own_group_then_parent_death

    def _spawn(
        self,
        command: Sequence[str],
        *,
        log_path: Path | None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start one child with stdout and stderr appended to ``log_path`` (discarded when None) and record it."""
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                list(command),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.detach,
                preexec_fn=self._preexec_fn(),
            )
        finally:
            if not isinstance(log, int):
                log.close()
        self.processes.append(process)
        return process

    def _wait_until_ready(self) -> None:
        """Poll :meth:`_not_ready_because` until it answers None; raise when a child exits or time runs out."""
        deadline = time.monotonic() + self.start_timeout_s
        problem = "no answer yet"
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise self._exited(process)
            found = self._not_ready_because()
            if found is None:
                return
            problem = found
            time.sleep(self.poll_interval_s)
        raise self._timed_out(problem)

    def _not_ready_because(self) -> str | None:
        """None when the children are ready, else why not (it ends up in the timeout's message)."""
        raise NotImplementedError

    def _exited(self, process: subprocess.Popen[bytes]) -> Exception:
        """The error for a child that exited while starting."""
        return RuntimeError(f"{process.args!r} exited with code {process.returncode} while starting")

    def _timed_out(self, problem: str) -> Exception:
        """The error for children that were not ready within ``start_timeout_s``."""
        return RuntimeError(f"not ready within {self.start_timeout_s:.0f} s ({problem})")

    def stop_targets(self, name: str) -> list[StopTarget]:
        """This launcher's children for :func:`stop_stack`; call :meth:`forget` once it returned."""
        return [StopTarget(name if i == 0 else f"{name}-{i}", p) for i, p in enumerate(self.processes)]

    def forget(self) -> None:
        """After :func:`stop_stack` stopped :meth:`stop_targets`: no children any more; clean up."""
        self.processes = []
        self._stopped()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the children together, each with its tree; kill what outlives ``timeout_s`` (:func:`stop_stack`)."""
        grace_s = self.stop_timeout_s if timeout_s is None else timeout_s
        # All at once (a Spark master and its workers): one grace for the launcher, not one per child.
        stop_stack(self.stop_targets(type(self).__name__), clients_grace_s=grace_s)
        self.forget()

    def _stopped(self) -> None:
        """Clean up after the children are gone (also after a start that failed before any ran)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
