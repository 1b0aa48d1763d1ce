"""Where the embedded stack keeps its files (``$KERR_HOME`` or ``./.kerr``) and finds the example DAGs.

One small module so that the servers in ``local/`` and the CLI agree on both
without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Names the folder of DAGs the demo and the local UI run.
DAGS_FOLDER_ENV = "KERR_DAGS_FOLDER"


def state_dir() -> Path:
    """The embedded stack's state directory: ``$KERR_HOME`` or ``./.kerr``."""
    return Path(os.environ.get("KERR_HOME") or Path.cwd() / ".kerr")


def dags_folder() -> Path:
    """The DAGs the demo and the local UI run: ``$KERR_DAGS_FOLDER``, else ``./dags``; an absolute path.

    Not found from this file's location: installed from a wheel the package sits in
    site-packages, and the example DAGs (which users copy and edit) are not part of it.
    A clone run from its root (``make demo``, ``make ui``) has ``./dags``; anywhere else,
    point ``$KERR_DAGS_FOLDER`` at a folder of DAGs. Raises ``FileNotFoundError`` naming
    both places when neither is a folder.
    """
    configured = os.environ.get(DAGS_FOLDER_ENV)
    folder = Path(configured) if configured else Path.cwd() / "dags"
    if not folder.is_dir():
        tried = f"${DAGS_FOLDER_ENV} is {configured!r}, not a folder" if configured else f"${DAGS_FOLDER_ENV} is unset"
        raise FileNotFoundError(
            f"no DAGs folder: {tried}, and the current directory has no dags/ folder ({Path.cwd() / 'dags'}). "
            f"Run from a clone's root, or set {DAGS_FOLDER_ENV} to the folder holding the example DAGs."
        )
    return folder.resolve()
