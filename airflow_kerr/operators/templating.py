"""Whether an operator argument still holds Jinja, so validation waits until it is rendered."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TEMPLATE_MARK = re.compile(r"{{|{%")


def is_templated(value: Any) -> bool:
    """True when a value, or any key or item nested in it, holds Jinja that only renders at run time.

    Operators validate their arguments when the DAG is parsed, so a mistake shows as an
    import error in the UI; a templated argument can only be checked once rendered.
    """
    if isinstance(value, str):
        return bool(_TEMPLATE_MARK.search(value))
    if isinstance(value, Mapping):
        return any(is_templated(k) or is_templated(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(is_templated(v) for v in value)
    return False
