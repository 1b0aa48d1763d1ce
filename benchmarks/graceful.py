"""``exit_on_sigterm()``: a benchmark stopped by SIGTERM still stops what it started.

Python's default for SIGTERM ends the process at once, so the ``finally`` blocks that stop a
script's embedded broker, fetch shim, Kafka Connect worker or Airflow processes never run, and
those keep running (and keep a port and a core) after ``kill`` or a timeout. Turning the
signal into ``SystemExit`` unwinds the stack through those blocks instead.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in the main thread, as Ctrl-C raises ``KeyboardInterrupt``."""
    signal.signal(signal.SIGTERM, _exit)
