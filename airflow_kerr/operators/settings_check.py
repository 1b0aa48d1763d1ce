"""Bad settings fail a task at once and readably: one log line per problem at the top of its log, no retries.

An on-call person who mistyped a form field reads the task log in a narrow pane. A
validation error raised as it is shows its message at the bottom of a traceback wider
than the pane, and a plain exception is retried first. So an operator that finds bad
settings before doing any work logs each problem as its own short line (the first lines
the task writes, before any client is opened), then raises
:class:`~airflow.sdk.exceptions.AirflowFailException` (no retry) without chaining the
validation error, so the only traceback left is the Task SDK's few frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn, Protocol

from airflow_kerr.compat import AirflowFailException

#: Each problem's log line starts with this, so a person (or a test) finds them in any log.
PROBLEM_PREFIX = "invalid setting: "


class ErrorLog(Protocol):
    """What the check logs through: a stdlib logger or an Airflow task logger."""

    def error(self, msg: str, /, *args: object) -> object: ...


def fail_on_invalid_settings(log: ErrorLog, what: str, problems: Sequence[str], message: str) -> NoReturn:
    """Log a header and one line per problem, then fail the task with ``message`` and no retry.

    ``what`` names the settings in the header (``DLQ replay settings``); ``message`` is the
    exception's (the validation error's own, which lists the problems too, so callers of
    ``execute`` see them all). The exception is raised ``from None``: the validator's frames
    would only widen the log.
    """
    count = len(problems)
    log.error(
        # Short enough to fit the task log pane beside its timestamp.
        "invalid %s: %d problem%s, one line each below; nothing read or written, no retry",
        what,
        count,
        "" if count == 1 else "s",
    )
    for problem in problems:
        log.error("%s%s", PROBLEM_PREFIX, problem)
    raise AirflowFailException(message) from None
