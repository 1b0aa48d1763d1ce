"""Where the embedded stack keeps its files: ``$KERR_HOME`` or ``./.kerr``.

One small module so that the servers in ``local/`` and the CLI agree on it
without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """The embedded stack's state directory: ``$KERR_HOME`` or ``./.kerr``."""
    return Path(os.environ.get("KERR_HOME") or Path.cwd() / ".kerr")
