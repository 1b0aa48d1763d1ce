"""Resolve a dotted path to a callable.

The Spark job's converters, transformations and callable sinks and the replay's fix
function share it. It imports nothing of ours, so every room may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def import_callable(path: str) -> Callable[..., Any]:
    """Import ``package.module.name`` (or ``package.module:name``) and return the callable."""
    module_name, sep, attr = path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise ImportError(f"{path!r} is not a dotted path: expected 'package.module.function'")
    target = getattr(importlib.import_module(module_name), attr, None)
    if not callable(target):
        raise ImportError(f"{path!r}: {module_name} has no callable named {attr!r}")
    return target
